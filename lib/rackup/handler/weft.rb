# frozen_string_literal: true

# The rackup gem (Rack 3) finds this file for `rackup -s weft` and
# `Rackup::Handler.get("weft")`.
require "weft/server/rack_handler"
require "rackup/handler"

Rackup::Handler.register("weft", Weft::Server::RackHandler)
