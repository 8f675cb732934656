# frozen_string_literal: true

module Weft
  class Server
    class Cluster
      def initialize(server) = @server = server
      def run = raise(NotImplementedError, "workers")
    end
  end
end
