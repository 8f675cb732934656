# frozen_string_literal: true

# Rack 2's handler registry finds this file for `rackup -s weft` and
# `Rack::Handler.get("weft")`.
require "weft/server/rack_handler"
require "rack/handler"

module Rack
  module Handler
    # Weft::Server::RackHandler under the name banners print.
    module Weft
      extend ::Weft::Server::RackHandler::Delegate
    end
  end
end

Rack::Handler.register("weft", "Rack::Handler::Weft")
