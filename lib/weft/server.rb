# frozen_string_literal: true

require "socket"
require "weft"
require "weft/server/config"
require "weft/server/binder"
require "weft/server/log"
require "weft/server/connection"
require "weft/server/tls"

module Weft
  # A Rack server on Weft::Scheduler: one fiber per connection, so an app
  # that waits (sleep, Net::HTTP, pg, Weft::Pool, files, child processes)
  # lets the other requests run meanwhile.
  #
  #   server = Weft::Server.new(app, bind: "tcp://127.0.0.1:9292")
  #   server.run        # serves until #stop (from a signal trap, another
  #                     # thread or a fiber of the server)
  #
  # Options (Weft::Server::DEFAULTS has them all, with their defaults;
  # `weft serve --help` explains each): bind (a String or an Array of
  # tcp://HOST:PORT and unix:PATH), workers, max_concurrency, the request
  # limits (max_request_line, max_header_line, max_head, max_headers,
  # max_body), the timeouts (head_timeout, body_timeout, idle_timeout,
  # shutdown_timeout), max_requests, input_memory, backlog, quiet,
  # backend, log, access_log, preload, stall_ms, dump_signal.
  #
  # With workers: 0 (the default) #run serves in the calling process; with
  # workers: N it preloads the app and forks N worker processes
  # (Weft::Server::Cluster).
  class Server
    attr_reader :app, :config, :listeners

    # +app+: a Rack application (#call(env) -> [status, headers, body]).
    # +listeners+: already open listening sockets to serve instead of
    # opening the binds. +loader+: a Proc that returns the app, called in
    # each worker after the fork (preload: false) instead of passing +app+.
    def initialize(app = nil, listeners: nil, loader: nil, **options)
      raise ArgumentError, "Weft::Server needs an app or a loader" unless app || loader

      @app = app
      @loader = loader
      @config = Config.new(options)
      @log = Log.new(@config)
      @listeners = listeners
      @own_listeners = listeners.nil?
      @stop_requested = false
      @running = false
      @stopping = false
      @connections = {} # fiber => Connection
      @active = 0
      @served = 0
    end

    # Requests answered so far by this process.
    attr_reader :served

    def running? = @running
    def stopping? = @stopping

    # The ports bound (of the TCP listeners), in bind order: handy with
    # port 0.
    def ports = open_listeners.filter_map { |l| l.local_address.ip_port if l.local_address.ip? }

    # The SSLContext of +listener+ (an ssl:// bind), or nil.
    def tls_context(listener)
      i = open_listeners.index(listener)
      i && (@listener_tls || @config.tls_contexts)[i]
    end

    # Open the listeners now (run does it otherwise) and return them. (A
    # bind may give several: localhost's, one per loopback address.)
    def open_listeners
      @listeners ||= begin
        groups = Binder.open_each(@config.bind, backlog: @config.backlog)
        @listener_tls = groups.each_with_index.flat_map { |g, i| [@config.tls_contexts[i]] * g.size }
        groups.flatten
      end
    end

    # Serve until #stop. With workers, the cluster's master runs here.
    # Returns once every connection has been answered or stopped.
    def run
      open_listeners
      return Cluster.new(self).run if @config.workers.positive?

      _load_app
      run_worker
    ensure
      close_listeners if @own_listeners
    end

    # :nodoc: the app from the loader, once (in a worker with preload off).
    def _load_app
      @app ||= @loader.call
    end

    # Stop gracefully: stop accepting, close idle keep-alive connections,
    # let requests in flight finish (shutdown_timeout, then Weft::Stop in
    # their fibers, so their ensure clauses run); #run then returns.
    # Safe from a signal trap, from another thread and from a fiber of the
    # server; calling it again does nothing more.
    def stop
      @stop_requested = true
      w = @stop_w
      w.write_nonblock(".", exception: false) if w && !w.closed?
      self
    rescue IOError
      self
    end
    alias stop! stop
    alias shutdown stop

    # The single-process server (also what a cluster's worker runs).
    # +on_ready+ is called once the accept loops wait for connections.
    # +master+: an IO whose end of stream means the master process is gone
    # (a worker then stops as on SIGTERM rather than live on orphaned);
    # +master_pid+: the master's pid (a parent other than it means the same).
    def run_worker(on_ready: nil, master: nil, master_pid: nil)
      @running = true
      # The pipe #stop writes to: made here, so that every worker forked
      # from a master has its own.
      @stop_r, @stop_w = IO.pipe
      # A scheduler of its own (not a task of an enclosing Weft.run): then
      # every fiber left in it is the server's or its app's.
      @own_scheduler = !Fiber.scheduler.is_a?(Weft::Scheduler)
      options = @config.backend ? { backend: @config.backend } : {}
      options[:stall_ms] = @config.stall_ms if @config.stall_ms.positive?
      # This process answers the dump signal itself (a cluster's master
      # passes it on to each worker).
      Weft.dump_on_signal(@config.dump_signal) if @config.dump_signal
      Weft.run(**options) do |scheduler|
        @scheduler = scheduler
        @log.startup(self, scheduler.backend) unless @config.worker_index
        @read_buffer = String.new(capacity: Connection::READ_SIZE, encoding: Encoding::BINARY)
        @handoff = Thread::Queue.new
        @spare = 0 # fibers waiting in @handoff.pop and not yet handed one
        @parked = {} # fileno => Connection, oldest first
        @conn_fibers = {}.compare_by_identity # the fibers serving connections (also spare ones)
        if PARK_ABOVE && defined?(Weft::HTTP::Poller)
          @poller = Weft::HTTP::Poller.new
          @poll_watcher = Fiber.schedule { watch_parked }
        end
        @accepters = @listeners.map { |l| Fiber.schedule { accept_loop(Endpoint.new(self, l)) } }
        @watcher = Fiber.schedule { watch_master(master, master_pid || Process.ppid) } if master
        @write_watcher = Fiber.schedule { watch_writes }
        on_ready&.call
        control
      end
    ensure
      @running = false
    end

    def log = @log
    def scheduler = @scheduler

    # :nodoc: one read buffer for every connection of the process: a read
    # is appended to the connection's own buffer before any fiber switch.
    attr_reader :read_buffer

    # :nodoc: "date: ...\r\n", made once a second.
    def date_line
      now = Process.clock_gettime(Process::CLOCK_REALTIME, :second)
      return @date_line if now == @date_second

      @date_second = now
      @date_line = "date: #{Time.at(now).utc.strftime("%a, %d %b %Y %H:%M:%S GMT")}\r\n".b.freeze
    end

    # :nodoc: "server: weft/VERSION\r\n"
    def server_line = @server_line ||= "server: #{@config.server_software}\r\n".b.freeze

    # :nodoc: what the connections of one listener share: the parser (its
    # defaults for SERVER_NAME/PORT) and the env template.
    class Endpoint
      attr_reader :listener, :tcp, :parser, :template, :tls

      def initialize(server, listener)
        @listener = listener
        addr = listener.local_address
        @tcp = addr.ip?
        @tls = server.tls_context(listener) # an SSLContext for HTTPS
        config = server.config
        @parser_options = {
          max_request_line: config.max_request_line, max_header_line: config.max_header_line,
          max_head: config.max_head, max_headers: config.max_headers, max_body: config.max_body,
          server_name: Endpoint.server_name(addr), server_port: (@tcp ? addr.ip_port : 80).to_s,
          default_port: @tls ? "443" : "80"
        }
        @parser = new_parser
        @template = {
          "rack.version" => [1, 3],
          "rack.errors" => $stderr,
          "rack.multithread" => true,
          "rack.multiprocess" => config.workers.positive?,
          "rack.run_once" => false,
          "rack.url_scheme" => @tls ? "https" : "http",
          "rack.hijack?" => true,
          "SCRIPT_NAME" => "",
          "SERVER_SOFTWARE" => config.server_software,
          "GATEWAY_INTERFACE" => "CGI/1.2", # Puma's value; CGI's is "CGI/1.1"
        }
        @template["HTTPS"] = "on" if @tls
        @template.freeze
      end

      def new_parser = Weft::HTTP::Parser.new(**@parser_options)

      # SERVER_NAME of a request without Host (HTTP/1.0): the listener's
      # address as a URL's host ("[::1]" for IPv6), but "localhost" for a
      # unix socket or a wildcard bind (0.0.0.0, ::), as under Puma: an
      # app that builds URLs from it must not send clients to 0.0.0.0.
      def self.server_name(addr)
        return "localhost" if !addr.ip? || addr.ip_address == "0.0.0.0" || addr.ipv6_unspecified?

        addr.ipv6? ? "[#{addr.ip_address}]" : addr.ip_address
      end
    end

    # :nodoc: park +conn+ (idle, keep-alive) now rather than keep a fiber
    # waiting on it? Only with more than PARK_ABOVE connections held:
    # below, waiting in the fiber costs less per request.
    # (Never a TLS one: data OpenSSL has decrypted and buffered would not
    # wake the poller.)
    def _park?(conn) = @poller && !@stopping && @active > PARK_ABOVE && !conn.tls?

    # :nodoc: +conn+ waits in the poller; its fiber ends or is reused.
    def _park(conn)
      @parked[conn.fileno] = conn
      @poller.add(conn.fileno)
    end

    # :nodoc: a connection's fiber starts (Connection#run).
    def _started(fiber, conn) = @connections[fiber] = conn

    # :nodoc: a connection's fiber ends (Connection#run's ensure).
    def _finished(fiber)
      @connections.delete(fiber)
      @active -= 1
      @slot_free&.signal if @waiting_for_slot
      @drained&.signal if @stopping && @connections.empty?
    end

    # :nodoc: count a request answered.
    def _served = @served += 1

    private

    # Idle keep-alive connections beyond this many held by a process wait
    # in a Weft::HTTP::Poller (an epoll set) instead of each in a fiber of
    # its own: a Ruby fiber keeps ~25 KB resident (10,000 idle connections
    # cost 278 MiB that way). WEFT_SERVER_PARK_ABOVE overrides it; "off"
    # turns parking off.
    PARK_ABOVE = ENV["WEFT_SERVER_PARK_ABOVE"] == "off" ? nil : Integer(ENV.fetch("WEFT_SERVER_PARK_ABOVE", "256"))

    # WEFT_SERVER_INLINE=1, for benchmarks only: the accept loop serves each
    # connection itself, one at a time, with no fiber of its own: the floor
    # against which the cost of a fiber per connection is measured.
    INLINE = ENV["WEFT_SERVER_INLINE"] == "1"

    # Out of descriptors (or kernel memory): the connection stays in the
    # accept queue; back off and try again once others have closed.
    ACCEPT_BACKOFF = [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM].freeze

    def accept_loop(endpoint)
      listener = endpoint.listener
      Weft.annotate("accept loop on #{Binder.describe(listener, tls: !endpoint.tls.nil?)}")
      tcp = endpoint.tcp
      backoff_logged = false
      loop do
        make_room if @active >= @config.max_concurrency
        begin
          sock, addr = listener.accept_nonblock(exception: false)
        rescue *ACCEPT_BACKOFF => e
          @log.error("accept: #{e.message}; backing off") unless backoff_logged
          backoff_logged = true
          sleep 0.01
          next
        end
        if sock == :wait_readable
          listener.wait_readable
          next
        end
        backoff_logged = false
        conn = Connection.new(self, endpoint, sock, tcp ? addr.ip_address : nil)
        if INLINE
          @active += 1
          conn.run # benchmark floor: no fiber of its own (see INLINE)
        else
          dispatch(conn)
        end
      end
    rescue Weft::Stop, IOError
      nil
    end

    # Fibers are reused across connections: creating and releasing a Ruby
    # fiber per connection cost more than serving a short one (a
    # connection per request). A fiber done with its connection waits for
    # the next one the accept loop hands over, while fewer than
    # SPARE_FIBERS wait; otherwise it ends.
    SPARE_FIBERS = 64

    # Serve +conn+ in a spare fiber, or a new one.
    def dispatch(conn)
      @active += 1
      if !@stopping && @spare.positive?
        # A fiber that has served a connection waits in #pop: hand it this
        # one. (Counted here, not with Queue#num_waiting, which still
        # counts a waiter that has been woken but has not run yet: the
        # accept loop pushed more connections than fibers were waiting,
        # and the extra ones waited for a fiber to finish a keep-alive
        # connection — an idle_timeout.)
        @spare -= 1
        @handoff << conn
      else
        # (also once stopping: a connection accepted is always served)
        fiber = Fiber.schedule { serve_connections(conn) }
        @conn_fibers[fiber] = true if fiber.alive?
      end
    end

    def serve_connections(conn)
      while conn
        conn.run
        return if @stopping || @spare >= SPARE_FIBERS

        @spare += 1
        conn = @handoff.pop # nil once closed (stop)
      end
    ensure
      @conn_fibers.delete(Fiber.current)
    end

    # The fiber that takes parked connections back when they have input
    # (or hung up), and closes those idle longer than idle_timeout.
    def watch_parked
      Weft.annotate("parked keep-alive connections")
      io = IO.for_fd(@poller.fileno, autoclose: false)
      loop do
        io.wait_readable(1.0)
        @poller.ready(256).each do |fd|
          conn = @parked.delete(fd)
          dispatch(conn) if conn
        end
        expire_parked
      end
    rescue Weft::Stop, IOError
      nil
    ensure
      @poller.close
    end

    def expire_parked
      horizon = Weft.clock - @config.idle_timeout
      expired = []
      @parked.each_value do |conn|
        break if conn.parked_at > horizon

        expired << conn
      end
      expired.each do |conn|
        @parked.delete(conn.fileno)
        conn.close
      end
    end

    # The fiber that ends connections whose response write has made no
    # progress for write_timeout: a write counts as stuck when it is under
    # way and no new one has begun since it was first seen.
    def watch_writes
      Weft.annotate("write timeouts")
      period = [@config.write_timeout / 4.0, 1.0].min
      seen = {} # Connection => [writes, since]
      loop do
        sleep period
        now = Weft.clock
        seen.delete_if { |conn, _| !conn.writing? }
        @connections.each_value do |conn|
          next unless conn.writing?

          count, since = seen[conn]
          if count != conn.writes
            seen[conn] = [conn.writes, now]
          elsif now - since >= @config.write_timeout
            seen.delete(conn)
            conn.write_timed_out
          end
        end
      end
    rescue Weft::Stop
      nil
    end

    # The master is gone when its pipe reaches end of stream, or when this
    # process has a parent other than +master_pid+ (looked at every
    # second: a process the master started before it died may still hold
    # the pipe's other end).
    def watch_master(io, master_pid)
      Weft.annotate("master watch")
      loop do
        break if Process.ppid != master_pid
        break if io.wait_readable(1) && io.read_nonblock(4096, exception: false).nil?
      end
      @log.error("worker #{@config.worker_index} (pid #{Process.pid}): the master is gone; stopping")
      stop
    rescue Weft::Stop, IOError
      nil
    end

    # At the cap: close the longest-held idle keep-alive connection (an
    # idle client reconnects when it needs to; a new one would otherwise
    # wait for an idle_timeout), or wait for a busy one to finish.
    def make_room
      idle = @connections.each_value.find(&:idle?)
      if idle
        idle.stop_if_idle
      end
      wait_for_slot
    end

    def wait_for_slot
      @slot_free ||= Thread::ConditionVariable.new
      @slot_mutex ||= Thread::Mutex.new
      @slot_mutex.synchronize do
        @waiting_for_slot = true
        @slot_free.wait(@slot_mutex) while @active >= @config.max_concurrency
      ensure
        @waiting_for_slot = false
      end
    end

    # The server's own fiber: waits for #stop, then shuts down.
    def control
      Weft.annotate("server control (waits for stop)")
      @stop_r.wait_readable unless @stop_requested
      @stopping = true
      @accepters.each { |f| @scheduler.raise_in(f, Weft::Stop) if f.alive? }
      @handoff.close # spare fibers end
      @scheduler.raise_in(@watcher, Weft::Stop) if @watcher&.alive?
      @scheduler.raise_in(@poll_watcher, Weft::Stop) if @poll_watcher&.alive?
      @parked.each_value(&:close)
      @parked.clear
      # Idle keep-alive connections go now; busy ones answer their request
      # (with Connection: close) and go.
      @connections.each_value(&:stop_if_idle)
      drain
      stop_app_fibers
    ensure
      # Also when an exception ends the loop (a signal without a trap):
      # the scheduler then stops every waiting fiber, and a connection's
      # fiber that ends must not go on to wait for a next connection.
      @stopping = true
      @handoff.close
      @scheduler.raise_in(@write_watcher, Weft::Stop) if @write_watcher&.alive?
      @stop_r.close
      @stop_w.close
    end

    def drain
      @drained = Thread::ConditionVariable.new
      mutex = Thread::Mutex.new
      deadline = Weft.clock + @config.shutdown_timeout
      mutex.synchronize do
        until @connections.empty?
          left = deadline - Weft.clock
          break if left <= 0

          @drained.wait(mutex, left)
        end
      end
      return if @connections.empty?

      @log.error("shutdown: #{@connections.size} connection(s) still busy after " \
                 "#{@config.shutdown_timeout}s: stopping them")
      @connections.each_key { |f| @scheduler.raise_in(f, Weft::Stop.new("server shutdown")) if f.alive? }
    end

    # Fibers the app started and left running (the handler of a hijacked
    # WebSocket, work scheduled after an answer) would keep #run from ever
    # returning: once the requests in flight are done, they get Weft::Stop
    # (their ensure clauses run). Not when the server runs inside an
    # enclosing Weft.run: that program's fibers are not the server's.
    def stop_app_fibers
      return unless @own_scheduler

      own = {}.compare_by_identity
      [Fiber.current, @write_watcher, @watcher, @poll_watcher, *@accepters].each { |f| own[f] = true }
      @scheduler._fibers.each do |entry|
        fiber = entry[0]
        # (a connection's fiber may not have begun its connection yet: a
        # spare one just handed it, not yet run, is in no other list)
        next if own.key?(fiber) || @conn_fibers.key?(fiber) || @connections.key?(fiber) || !fiber.alive?

        @scheduler.raise_in(fiber, Weft::Stop.new("server stopped"))
      end
    end

    def close_listeners
      Binder.close(@listeners, unlink: true) if @listeners
    end
  end
end

require "weft/server/cluster"
