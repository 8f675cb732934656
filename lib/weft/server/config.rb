# frozen_string_literal: true

module Weft
  class Server
    # Every option of Weft::Server and `weft serve`, with its default and
    # what it means (`weft serve --help` prints this table).
    OPTIONS = [
      # name, default, command-line flag, help
      [:bind, ["tcp://127.0.0.1:9292"], "-b, --bind URI",
       "where to listen: tcp://HOST:PORT, unix:PATH or ssl://HOST:PORT[?cert=PATH&key=PATH] (HTTPS); repeat for several; " \
       "HOST localhost: every loopback address (127.0.0.1 and ::1)"],
      [:tls_cert, nil, "--tls-cert PATH",
       "TLS certificate (PEM, chain after it) of ssl:// binds that give no ?cert="],
      [:tls_key, nil, "--tls-key PATH", "TLS private key (PEM) of ssl:// binds that give no &key="],
      [:workers, 0, "-w, --workers N",
       "worker processes (0: serve in this process; N: preload the app, fork N)"],
      [:max_concurrency, 1024, "--max-concurrency N",
       "connections served at once per process (idle keep-alive ones beyond 256 wait without a fiber and take no slot); at the cap the longest idle one is closed, else new ones wait in the kernel's accept queue"],
      [:max_request_line, 8192, "--max-request-line BYTES", "request line limit (414 beyond)"],
      [:max_header_line, 8192, "--max-header-line BYTES", "one header field line limit (431 beyond)"],
      [:max_head, 16_384, "--max-head BYTES", "request head limit: line + fields (431 beyond)"],
      [:max_headers, 64, "--max-headers N", "header fields per request, at most 100 (431 beyond)"],
      [:max_body, 128 * 1024 * 1024, "--max-body BYTES", "request body limit (413 beyond)"],
      [:input_memory, 64 * 1024, "--input-memory BYTES",
       "request bodies up to this size stay in memory; larger go to a Tempfile"],
      [:head_timeout, 10.0, "--head-timeout SECONDS",
       "time to receive a request head once it has begun (408 and close); also how long a new connection may stay silent (closed)"],
      [:body_timeout, 30.0, "--body-timeout SECONDS",
       "time without progress while receiving a request body (408 and close)"],
      [:idle_timeout, 20.0, "--idle-timeout SECONDS",
       "keep-alive: a connection idle this long between requests is closed"],
      [:write_timeout, 60.0, "--write-timeout SECONDS",
       "time one write of a response may go without progress (a client that stopped reading) before the connection is closed"],
      [:max_requests, 1000, "--max-requests N", "requests per connection, then Connection: close"],
      [:shutdown_timeout, 30.0, "--shutdown-timeout SECONDS",
       "graceful stop: time for requests in flight, then their fibers are stopped"],
      [:backlog, 1024, "--backlog N", "listen(2) backlog"],
      [:quiet, false, "-q, --quiet", "no access log"],
      [:preload, true, "--[no-]preload",
       "with workers: load the app in the master before forking (--no-preload: in each worker)"],
      [:backend, nil, "--backend NAME", "Weft::Scheduler backend: io_uring, epoll or poll (default: WEFT_BACKEND or the best)"],
      [:stall_ms, 0, "--stall-ms MS",
       "report (on stderr, with its backtrace) a request or fiber that runs longer than MS milliseconds without letting the others run; 0: off (default: WEFT_STALL_MS)"],
      [:dump_signal, nil, "--dump-signal SIGNAL",
       "on SIGNAL (e.g. QUIT) a process writes every fiber it runs, what each waits on and its backtrace to stderr; sent to the master of -w N, it is passed to every worker (default: WEFT_DUMP_SIGNAL)"],
    ].freeze

    DEFAULTS = OPTIONS.to_h { |name, default, *| [name, default] }.freeze

    # The options of one server, checked once.
    class Config
      attr_reader(*OPTIONS.map(&:first))
      # Where logs go (IO-like, #write): errors and the startup line, and
      # the access log (nil with quiet).
      attr_reader :log, :access_log, :server_software
      # The SSLContext of each bind (nil for tcp:// and unix:), in order.
      attr_reader :tls_contexts
      # Set in a cluster's worker: its index (the master logs the startup).
      attr_accessor :worker_index

      INTEGERS = %i[workers max_concurrency max_request_line max_header_line max_head
                    max_headers max_body input_memory max_requests backlog stall_ms].freeze
      # Signals the server itself answers (Cluster): not for --dump-signal.
      SERVER_SIGNALS = %w[TERM INT USR2 HUP].freeze
      SECONDS = %i[head_timeout body_timeout idle_timeout write_timeout shutdown_timeout].freeze

      def initialize(options)
        options = options.dup
        @log = options.delete(:log) || $stderr
        @access_log = options.delete(:access_log) || $stdout
        unknown = options.keys - DEFAULTS.keys
        raise ArgumentError, "Weft::Server: unknown option(s) #{unknown.join(", ")}" unless unknown.empty?

        DEFAULTS.merge(options).each { |k, v| instance_variable_set(:"@#{k}", v) }
        @bind = Array(@bind).map(&:to_s)
        raise ArgumentError, "Weft::Server: bind is empty" if @bind.empty?

        INTEGERS.each do |k|
          v = send(k)
          raise ArgumentError, "Weft::Server: #{k} must be an Integer >= 0 (got #{v.inspect})" unless v.is_a?(Integer) && v >= 0
        end
        SECONDS.each do |k|
          v = send(k)
          raise ArgumentError, "Weft::Server: #{k} must be a positive number (got #{v.inspect})" unless v.is_a?(Numeric) && v.positive?
        end
        raise ArgumentError, "Weft::Server: max_headers must be at most 100" if @max_headers > 100
        raise ArgumentError, "Weft::Server: max_concurrency must be positive" unless @max_concurrency.positive?

        env_signal = ENV.fetch("WEFT_DUMP_SIGNAL", "")
        @dump_signal = env_signal if @dump_signal.nil? && !env_signal.empty?
        @dump_signal = check_signal(@dump_signal) if @dump_signal

        @tls_contexts = @bind.map { |uri| uri.start_with?("ssl://") ? TLS.context_for(uri, @tls_cert, @tls_key) : nil }
        @access_log = nil if @quiet
        @server_software = "weft/#{Weft::VERSION}"
      end

      private

      # "QUIT", "SIGQUIT" or "quit" -> "QUIT"
      def check_signal(sig)
        name = sig.to_s.upcase.delete_prefix("SIG")
        raise ArgumentError, "Weft::Server: dump_signal: unknown signal #{sig.inspect}" unless Signal.list.key?(name)
        if SERVER_SIGNALS.include?(name)
          raise ArgumentError, "Weft::Server: dump_signal: SIG#{name} is the server's own (#{SERVER_SIGNALS.join(", ")})"
        end

        name
      end
    end
  end
end
