# frozen_string_literal: true

# The rackup gem (Rack 3) finds this file for `rackup -s weft` and
# `Rackup::Handler.get("weft")`.
require "weft/server/rack_handler"
require "rackup/handler"

module Rackup
  module Handler
    # Weft::Server::RackHandler under the name banners print.
    module Weft
      extend ::Weft::Server::RackHandler::Delegate
    end
  end
end

Rackup::Handler.register("weft", Rackup::Handler::Weft)
