# frozen_string_literal: true

# The rackup gem (Rack 3) finds this file for `rackup -s weft` and
# `Rackup::Handler.get("weft")`.
require "weft/server/rack_handler"
require "rackup/handler"

module Rackup
  module Handler
    # Weft::Server::RackHandler under the name banners print (see
    # lib/rack/handler/weft.rb).
    module Weft
      def self.run(app, **options, &block) = ::Weft::Server::RackHandler.run(app, **options, &block)
      def self.shutdown = ::Weft::Server::RackHandler.shutdown
      def self.valid_options = ::Weft::Server::RackHandler.valid_options
    end
  end
end

Rackup::Handler.register("weft", Rackup::Handler::Weft)
