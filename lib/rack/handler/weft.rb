# frozen_string_literal: true

# Rack 2's handler registry finds this file for `rackup -s weft` and
# `Rack::Handler.get("weft")`.
require "weft/server/rack_handler"
require "rack/handler"

module Rack
  module Handler
    # Weft::Server::RackHandler under the name banners print: Sinatra's
    # "with backup from Weft" takes the last part of the handler's name.
    module Weft
      def self.run(app, **options, &block) = ::Weft::Server::RackHandler.run(app, **options, &block)
      def self.shutdown = ::Weft::Server::RackHandler.shutdown
      def self.valid_options = ::Weft::Server::RackHandler.valid_options
    end
  end
end

Rack::Handler.register("weft", "Rack::Handler::Weft")
