# frozen_string_literal: true

require "weft/server"

module Weft
  class Server
    # The Rack handler: `rackup -s weft`, `Rack::Handler.get("weft")`,
    # Sinatra's `set :server, :weft`, `rails server -u weft`. Registered
    # with Rack 2's Rack::Handler (lib/rack/handler/weft.rb) and with the
    # rackup gem's Rackup::Handler (lib/rackup/handler/weft.rb).
    module RackHandler
      # Options rackup and Sinatra pass: Host, Port; the rest are
      # Weft::Server's options by name (Workers: or workers:, ...).
      def self.run(app, **options)
        host = options.delete(:Host) || options.delete(:host) || "127.0.0.1"
        port = options.delete(:Port) || options.delete(:port) || 9292
        host = "[#{host}]" if host.to_s.include?(":")
        server_options = {}
        options.each do |key, value|
          name = key.to_s.gsub(/(?<!^)([A-Z])/, '_\1').downcase.to_sym
          server_options[name] = value if Weft::Server::DEFAULTS.key?(name)
        end
        server_options[:bind] ||= "tcp://#{host}:#{port}"
        server_options[:quiet] = true if options[:Silent] || options[:quiet]
        @server = Weft::Server.new(app, **server_options)
        @server.open_listeners
        yield @server if block_given?
        # SIGTERM stops gracefully, as under `weft serve` (rackup traps only
        # INT): left to Ruby's default, it raised in the middle of the loop
        # and a run of the PostgreSQL test waited for the process forever.
        # A handler the program installed itself is left alone.
        previous = trap("TERM") { @server&.stop }
        ours = %w[DEFAULT SYSTEM_DEFAULT].include?(previous)
        trap("TERM", previous) unless ours
        @server.run
      ensure
        trap("TERM", previous) if ours
        @server = nil
      end

      # rackup's Ctrl-C and Sinatra's quit! (through the server's #stop).
      def self.shutdown
        @server&.stop
      end

      def self.valid_options
        {
          "Host=HOST" => "Hostname to listen on (default: 127.0.0.1)",
          "Port=PORT" => "Port to listen on (default: 9292)",
          "Workers=N" => "worker processes (default: 0)",
          "MaxConcurrency=N" => "connections served at once per process (default: 1024)",
        }
      end

      # The handler as registered with Rack 2 and with the rackup gem: a
      # module named Weft in their namespace (Sinatra's banner, "with
      # backup from Weft", takes the last part of the handler's name) that
      # extends Delegate, which hands its calls on to this one.
      module Delegate
        def run(app, **options, &block) = RackHandler.run(app, **options, &block)
        def shutdown = RackHandler.shutdown
        def valid_options = RackHandler.valid_options
      end
    end
  end
end
