# frozen_string_literal: true

module Weft
  class Server
    # Worker processes (`weft serve -w N`): the master opens the
    # listeners (and, with preload, loads the app), forks N workers that
    # share the listening sockets, restarts a worker that dies and never
    # serves a request itself.
    #
    # Signals to the master:
    #   TERM, INT   graceful stop: each worker stops accepting, finishes the
    #               requests in flight (shutdown_timeout), exits; the master
    #               exits 0 once they have.
    #   USR2, HUP   rolling restart: a new worker is started and ready
    #               before an old one is told to stop, one at a time, so
    #               the listeners are never without a worker accepting
    #               (the kernel queues what arrives meanwhile; the
    #               listening sockets stay open in the master throughout).
    #               With --no-preload each new worker loads the app again.
    #   the dump signal (--dump-signal SIG)
    #               passed on to every worker, each of which writes its own
    #               dump (every fiber, what it waits on, its backtrace) to
    #               stderr; the master has no fibers to show.
    class Cluster
      Worker = Struct.new(:index, :pid, :started, :ready, :retiring)

      def initialize(server)
        @server = server
        @config = server.config
        @log = server.log
        @workers = {} # pid => Worker
        @events = Thread::Queue.new
      end

      def run
        backend = probe_backend
        @log.startup(@server, backend)
        @ready_r, @ready_w = IO.pipe
        @sig_r, @sig_w = IO.pipe
        # Workers read the other end: its end of stream tells them the
        # master has died (killed with -9, say) and they stop.
        @alive_r, @alive_w = IO.pipe
        install_traps
        @config.workers.times { |i| spawn_worker(i) }
        loop do
          event = next_event
          case event
          when :stop then break
          when :restart then rolling_restart
          when :dump then forward_dump
          end
        end
        stop_workers
        0
      ensure
        restore_traps
      end

      private

      SIGNALS = { "TERM" => :stop, "INT" => :stop, "USR2" => :restart, "HUP" => :restart }.freeze

      def install_traps
        signals = SIGNALS.dup
        signals[@config.dump_signal] = :dump if @config.dump_signal
        @old_traps = signals.to_h do |sig, event|
          [sig, trap(sig) { @sig_w.write_nonblock("#{event}\n", exception: false) }]
        end
      end

      def forward_dump
        @log.info("#{@config.dump_signal}: dumping #{@workers.size} worker(s)")
        @workers.each_key do |pid|
          Process.kill(@config.dump_signal, pid)
        rescue Errno::ESRCH
          nil
        end
      end

      def restore_traps
        @old_traps&.each { |sig, handler| trap(sig, handler || "DEFAULT") }
      end

      def probe_backend
        scheduler = @config.backend ? Weft::Scheduler.new(backend: @config.backend) : Weft::Scheduler.new
        scheduler.backend.tap { scheduler.close }
      rescue StandardError => e
        "unknown (#{e.message})"
      end

      # The next signal event, reaping and replacing dead workers and
      # noting ready ones meanwhile (at most every half second).
      def next_event(timeout: 0.5)
        loop do
          event = poll_event(timeout)
          return event if event
        end
      end

      def note_ready
        while (line = @ready_r.read_nonblock(4096, exception: false)).is_a?(String)
          line.split("\n").each do |pid|
            w = @workers[pid.to_i]
            next unless w

            w.ready = true
            @log.info("worker #{w.index} ready (pid #{w.pid})")
          end
        end
      end

      def spawn_worker(index)
        ready_w = @ready_w
        master_pid = Process.pid
        pid = fork do
          SIGNALS.each_key { |sig| trap(sig, "DEFAULT") }
          # Ignored until the worker's loop answers it (Server#run_worker).
          trap(@config.dump_signal, "IGNORE") if @config.dump_signal
          [@ready_r, @sig_r, @sig_w, @alive_w].each(&:close)
          run_worker(index, ready_w, master_pid)
        end
        @workers[pid] = Worker.new(index, pid, Weft.clock, false, false)
        pid
      end

      # In the child: serve until TERM/INT, then exit without running the
      # master's at_exit handlers a second time.
      def run_worker(index, ready_w, master_pid)
        @config.worker_index = index
        %w[TERM INT].each { |sig| trap(sig) { @server.stop } }
        trap("USR2", "IGNORE")
        trap("HUP", "IGNORE")
        @server._load_app
        @server.run_worker(on_ready: -> { ready_w.write("#{Process.pid}\n") }, master: @alive_r,
                           master_pid: master_pid)
        status = 0
      rescue Exception => e # rubocop:disable Lint/RescueException
        @log.exception("worker #{index} (pid #{Process.pid})", e)
        status = 1
      ensure
        $stdout.flush
        $stderr.flush
        exit!(status || 1)
      end

      # Collect exited workers; replace those that were not told to go.
      def reap
        loop do
          pid, status = Process.wait2(-1, Process::WNOHANG)
          return unless pid

          w = @workers.delete(pid)
          next unless w
          next if w.retiring

          why = status.signaled? ? "was killed by signal #{Signal.signame(status.termsig)}" : "exited with status #{status.exitstatus}"
          @log.error("worker #{w.index} (pid #{pid}) #{why}; starting another")
          # A worker that dies at once would be restarted in a tight loop.
          sleep 1 if Weft.clock - w.started < 1
          spawn_worker(w.index)
        end
      rescue Errno::ECHILD
        nil
      end

      def rolling_restart
        @log.info("rolling restart of #{@workers.size} worker(s)")
        @workers.values.sort_by(&:index).each do |old|
          next unless @workers.key?(old.pid)

          fresh = @workers[spawn_worker(old.index)]
          deadline = Weft.clock + 60
          until fresh.ready || Weft.clock > deadline || !@workers.key?(fresh.pid)
            event = next_event_nonblocking
            return stop_requested if event == :stop
          end
          unless fresh.ready
            @log.error("rolling restart: the new worker #{fresh.index} did not become ready; keeping the old one")
            next
          end
          old.retiring = true
          begin
            Process.kill("TERM", old.pid)
          rescue Errno::ESRCH
            nil
          end
          wait_for_exit([old], @config.shutdown_timeout + 5)
        end
        @log.info("rolling restart done")
      end

      def stop_requested
        @sig_w.write_nonblock("stop\n", exception: false)
        nil
      end

      def next_event_nonblocking = poll_event(0.1)

      # One look, at most +timeout+ seconds: a signal event (Symbol) or
      # nil; ready workers noted and exited ones reaped on the way.
      def poll_event(timeout)
        readable, = IO.select([@sig_r, @ready_r], nil, nil, timeout)
        note_ready if readable&.include?(@ready_r)
        if readable&.include?(@sig_r)
          line = @sig_r.gets
          return line.strip.to_sym if line
        end
        reap
        nil
      end

      def stop_workers
        @log.info("stopping #{@workers.size} worker(s)")
        workers = @workers.values
        workers.each do |w|
          w.retiring = true
          Process.kill("TERM", w.pid)
        rescue Errno::ESRCH
          nil
        end
        wait_for_exit(workers, @config.shutdown_timeout + 5)
      end

      # Wait for +workers+ to exit; KILL those still there after +seconds+.
      def wait_for_exit(workers, seconds)
        deadline = Weft.clock + seconds
        workers.each do |w|
          loop do
            pid, = Process.wait2(w.pid, Process::WNOHANG)
            break if pid

            if Weft.clock > deadline
              @log.error("worker #{w.index} (pid #{w.pid}) did not stop in time: killing it")
              Process.kill("KILL", w.pid)
              Process.wait2(w.pid)
              break
            end
            sleep 0.05
          end
          @workers.delete(w.pid)
        rescue Errno::ECHILD, Errno::ESRCH
          @workers.delete(w.pid)
        end
      end
    end
  end
end
