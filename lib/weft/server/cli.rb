# frozen_string_literal: true

require "optparse"
require "weft/server"

module Weft
  class Server
    # `weft serve [options] [config.ru]` (bin/weft).
    class CLI
      USAGE = "Usage: weft serve [options] [config.ru]   (default: ./config.ru)\n" \
              "       weft version"

      def initialize(argv, out: $stdout, err: $stderr)
        @argv = argv.dup
        @out = out
        @err = err
      end

      # Run the command; returns the exit status.
      def run
        command = @argv.shift
        case command
        when "serve" then serve
        when "version", "--version", "-v" then @out.puts("weft #{Weft::VERSION}") || 0
        when nil, "help", "-h", "--help" then @out.puts(USAGE, "", parser({}).summarize) || 0
        else
          @err.puts("weft: unknown command #{command.inspect}\n#{USAGE}")
          2
        end
      rescue OptionParser::ParseError, ArgumentError => e
        @err.puts("weft: #{e.message}")
        2
      rescue BindError => e
        @err.puts("weft: #{e.message}")
        1
      end

      private

      def parser(options)
        OptionParser.new do |o|
          o.banner = USAGE
          o.separator ""
          o.separator "Options (defaults in brackets):"
          OPTIONS.each do |name, default, flag, help|
            text = "#{help} [#{default.is_a?(Array) ? default.join(" ") : default.inspect}]"
            case name
            when :bind
              o.on(*flag.split(", "), text) { |v| (options[:bind] ||= []) << v }
            when :quiet
              o.on(*flag.split(", "), text) { options[:quiet] = true }
            when :preload
              o.on(flag, text) { |v| options[:preload] = v }
            when :backend, :tls_cert, :tls_key, :dump_signal
              o.on(flag, text) { |v| options[name] = v }
            else
              kind = default.is_a?(Float) ? Float : Integer
              o.on(*flag.split(", "), kind, text) { |v| options[name] = v }
            end
          end
          o.on("-o", "--host HOST", "with -p: listen on tcp://HOST:PORT (instead of -b)") { |v| options[:host] = v }
          o.on("-p", "--port PORT", Integer, "listen on tcp://HOST:PORT (HOST: -o or 127.0.0.1)") { |v| options[:port] = v }
          o.on("-E", "--env ENVIRONMENT", "set RACK_ENV (and APP_ENV) [#{ENV.fetch("RACK_ENV", "development")}]") do |v|
            options[:env] = v
          end
          o.on("-r", "--require LIBRARY", "require LIBRARY before loading the app") { |v| (options[:require] ||= []) << v }
          o.on("-h", "--help", "this help") { options[:help] = true }
        end
      end

      def serve
        options = {}
        parser(options).parse!(@argv)
        if options.delete(:help)
          @out.puts(parser({}).help)
          return 0
        end
        config_ru = @argv.shift || "config.ru"
        raise ArgumentError, "unexpected arguments: #{@argv.join(" ")}" unless @argv.empty?
        raise ArgumentError, "#{config_ru} not found" unless File.file?(config_ru)

        env = options.delete(:env)
        if env
          ENV["RACK_ENV"] = ENV["APP_ENV"] = env
        else
          # As rackup and Puma do: an app that reads RACK_ENV (a database
          # config by environment) finds the one it runs in.
          ENV["RACK_ENV"] ||= ENV["APP_ENV"] || ENV["RAILS_ENV"] || "development"
        end
        Array(options.delete(:require)).each { |lib| require lib }
        host = options.delete(:host)
        port = options.delete(:port)
        if port || host
          host ||= "127.0.0.1"
          host = "[#{host}]" if host.include?(":")
          (options[:bind] ||= []) << "tcp://#{host}:#{port || 9292}"
        end
        $stdout.sync = true
        raise_descriptor_limit
        preload = options.fetch(:preload, true) || options.fetch(:workers, 0).zero?
        server =
          if preload
            Weft::Server.new(CLI.load_app(config_ru), **options)
          else
            Weft::Server.new(loader: -> { CLI.load_app(config_ru) }, **options)
          end
        server.open_listeners
        trap_signals(server) if options.fetch(:workers, 0).zero?
        server.run
        0
      end

      # A server holds a descriptor per connection: take the hard limit
      # (Debian's default soft limit, 1024, would cap connections there).
      def raise_descriptor_limit
        soft, hard = Process.getrlimit(:NOFILE)
        Process.setrlimit(:NOFILE, hard, hard) if soft < hard
      rescue SystemCallError, NotImplementedError
        nil
      end

      # A single process stops gracefully on INT and TERM, and on HUP (its
      # terminal went away: requests in flight still get their answers),
      # unless HUP was ignored when it started (nohup), which it keeps.
      def trap_signals(server)
        %w[INT TERM].each { |sig| trap(sig) { server.stop } }
        trap("HUP", "IGNORE") if trap("HUP") { server.stop } == "IGNORE"
      end

      # The app of a rackup file (Rack 2's parse_file returns [app,
      # options]; Rack 3's the app).
      def self.load_app(path)
        require "rack"
        require "rack/builder"
        app = Rack::Builder.parse_file(File.expand_path(path))
        app.is_a?(Array) ? app.first : app
      end
    end
  end
end
