# frozen_string_literal: true

# Rack 2's handler registry finds this file for `rackup -s weft` and
# `Rack::Handler.get("weft")`.
require "weft/server/rack_handler"
require "rack/handler"

Rack::Handler.register("weft", "Weft::Server::RackHandler")
