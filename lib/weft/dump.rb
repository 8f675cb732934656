# frozen_string_literal: true

module Weft
  # What every fiber is doing (Scheduler#dump, Weft.print_tasks, the dump
  # signal) and which one stalls the loop (Scheduler#stall_ms=, the
  # WEFT_STALL_MS environment variable). The data comes from the
  # extension (ext/weft/dump.c): what each wait is for is stored when the
  # fiber parks, so this costs nothing until it is asked for.
  class Scheduler
    EVENT_NAMES = { IO::READABLE => "readable", IO::PRIORITY => "priority", IO::WRITABLE => "writable" }.freeze
    STALL_REPORT_INTERVAL = 1.0 # seconds between two stall reports, at least
    private_constant :EVENT_NAMES

    alias _initialize initialize
    private :_initialize

    # Scheduler.new(backend: nil, report_on_exception: true, stall_ms: nil)
    # +stall_ms+: report a fiber that runs longer than this many
    # milliseconds without letting the others run (see #stall_ms=);
    # default WEFT_STALL_MS, else off.
    def initialize(stall_ms: nil, **options)
      _initialize(**options)
      env = ENV.fetch("WEFT_STALL_MS", "")
      stall_ms = env if stall_ms.nil? && !env.empty?
      self.stall_ms = stall_ms if stall_ms
    end

    # The stall threshold in milliseconds (0: off, the default).
    def stall_ms = @stall_ms || 0

    # Turn stall detection on (+ms+ > 0) or off (0 or nil). A watchdog
    # thread samples the loop without the GVL; when the same fiber has run
    # longer than +ms+ without switching, it takes the loop thread's
    # backtrace while the stall goes on and writes one report to $stderr:
    # the fiber, its task's name, where it was spawned, how long it has
    # run and where it is. When the stall ends a one-line note says how
    # long it lasted. At most one report a second (the others are counted,
    # in the next report and in stats[:stalls]).
    def stall_ms=(ms)
      ms = ms.nil? ? 0 : Float(ms)
      raise ArgumentError, "stall_ms must be >= 0" if ms.negative?

      @stall_ms = ms == ms.to_i ? ms.to_i : ms
      _stall_set((ms * 1_000_000).to_i)
      return unless ms.positive? && !@stall_watch&.alive? && !closed?

      @stall_watch = Thread.new { _stall_watch }
      # Sampling before this returns: a fiber that spins at once must not
      # keep the new thread from starting (it needs the GVL for that).
      Thread.pass until _stall_watching? || !@stall_watch.alive?
    end

    # A report of every fiber this scheduler knows: its state, what it
    # waits on and for how long, its deadline, where it was spawned, its
    # task (name, status, children under it) and its backtrace. Returns
    # the report as a String, or writes it to +io+ and returns +io+.
    # +backtrace+: frames per fiber (0: none; nil: all).
    def dump(io = nil, backtrace: 20)
      text = Dump.new(self, backtrace).to_s
      return text unless io

      io.write(text)
      io
    end

    # :nodoc: the loop answers a dump request (Weft._request_dump) with it.
    def _signal_dump = dump

    # :nodoc: the name of a pidfd waited on by #process_wait (for #dump).
    def _process_wait_pid(fd) = @process_waits&.[](fd)

    private

    # The watchdog thread's body (see #stall_ms=).
    def _stall_watch
      Thread.current.name = "weft stall watchdog"
      reported = nil
      quiet_until = 0.0
      suppressed = 0
      while (event = _stall_wait)
        kind, seq, ran = event
        if kind == :ended
          $stderr.write("weft: stall over: #{@stall_label} ran about #{Dump.duration(ran)} without yielding\n") if reported == seq
          next
        end
        # Taken in the stall by the loop thread itself (stall.c), or, when
        # the loop let the GVL go without that, from here while it lasts.
        fiber, trace, label = _stall_taken(seq)
        if trace.nil?
          fiber = _stall_fiber(seq) # false: the loop's own code
          next if fiber.nil? # it switched meanwhile: no stall any more

          trace = _thread.backtrace
          trace = nil unless _stall_fiber(seq) # taken after the stall ended
        end
        if Weft.clock < quiet_until
          suppressed += 1
          next
        end
        quiet_until = Weft.clock + STALL_REPORT_INTERVAL
        reported = seq
        @stall_label = label || _stall_label(fiber)
        $stderr.write(stall_report(fiber, ran, trace, suppressed))
        suppressed = 0
      end
    rescue Exception # rubocop:disable Lint/RescueException
      nil # killed, or the process is exiting
    end

    # What a stall report calls +fiber+ (false: the loop's own code).
    def _stall_label(fiber) = fiber ? Dump.label(self, fiber) : "the loop"

    def stall_report(fiber, ran, trace, suppressed)
      head = "weft: stall: #{@stall_label} has run #{Dump.duration(ran)} without yielding " \
             "(stall_ms #{stall_ms}, pid #{Process.pid})"
      head += "; #{suppressed} stall(s) not reported since the last report" if suppressed.positive?
      site = fiber && Dump.spawned_at(self, fiber)
      lines = [head]
      lines << "  spawned at #{site}" if site
      if trace
        lines << "  backtrace during the stall:"
        trace.first(30).each { |l| lines << "    #{l}" }
      else
        lines << "  (it switched before its backtrace was taken)"
      end
      "#{lines.join("\n")}\n"
    end

    # Formats a dump (Scheduler#dump).
    class Dump
      def initialize(scheduler, frames)
        @s = scheduler
        @frames = frames
      end

      def self.duration(ns)
        return "?" unless ns

        s = ns / 1e9
        if s >= 1 then format("%.3f s", s)
        elsif s >= 0.001 then format("%.1f ms", s * 1e3)
        else format("%.1f us", s * 1e6)
        end
      end

      def self.task_of(fiber) = fiber.instance_variable_get(:@__weft_task)

      # "fiber 0x... task \"name\"" — how a fiber is called in reports.
      def self.label(_scheduler, fiber)
        task = task_of(fiber)
        name = task&.name || fiber.instance_variable_get(:@__weft_name)
        name = name.weft_annotation if name.respond_to?(:weft_annotation)
        text = "fiber #{format("0x%x", fiber.object_id)}"
        text += task ? " (task #{name ? name.inspect : "unnamed"})" : " #{name.inspect}" if task || name
        text
      end

      def self.spawned_at(scheduler, fiber)
        task = task_of(fiber)
        return task.spawned_at if task

        block = fiber.instance_variable_get(:@__weft_block) || scheduler._spawn_block(fiber)
        block&.source_location&.join(":")
      end

      def to_s
        entries = @s._fibers
        stats = @s.stats
        by_fiber = entries.to_h { |e| [e[0], e] }
        tasks = entries.count { |e| Dump.task_of(e[0]) }
        out = +"weft dump: pid #{Process.pid}, #{Time.now.utc.strftime("%Y-%m-%d %H:%M:%S")} UTC, " \
                "#{@s.backend}, #{entries.size} fiber(s), #{tasks} task(s)\n"
        out << loop_line(stats)
        printed = {}
        # A task whose parent is listed is printed under it.
        nested = {}
        entries.each do |e|
          Dump.task_of(e[0])&.instance_variable_get(:@children)&.each { |c| nested[c.fiber] = true }
        end
        entries.each do |e|
          print_tree(out, e, by_fiber, printed, 0) unless printed[e[0]] || nested[e[0]]
        end
        # (a cycle or a child whose parent's list changed meanwhile)
        entries.each { |e| print_tree(out, e, by_fiber, printed, 0) unless printed[e[0]] }
        out << "end of dump (#{printed.size} fiber(s))\n"
      end

      private

      def loop_line(st)
        d = st[:ready_delay]
        "loop: #{st[:iterations]} polls, busy #{format("%.3f", st[:busy_seconds])} s, waiting " \
          "#{format("%.3f", st[:wait_seconds])} s in the backend; ready->resume p50 #{secs(d[:p50])} " \
          "p99 #{secs(d[:p99])} max #{secs(d[:max])}; fibers alive #{st[:fibers_alive]} (peak " \
          "#{st[:fibers_peak]}); stalls #{st[:stalls]}\n"
      end

      def secs(v) = Dump.duration((v * 1e9).round)

      def print_tree(out, entry, by_fiber, printed, depth)
        printed[entry[0]] = true
        print_entry(out, entry, "  " * depth)
        task = Dump.task_of(entry[0])
        return unless task

        task.instance_variable_get(:@children).dup.each do |child|
          e = by_fiber[child.fiber]
          print_tree(out, e, by_fiber, printed, depth + 1) if e && !printed[child.fiber]
        end
      end

      def print_entry(out, entry, pad)
        fiber, state, wait, obj, detail, waited, deadline, = entry
        task = Dump.task_of(fiber)
        line = +"#{pad}#{Dump.label(@s, fiber)} #{state}"
        line << " #{Dump.duration(waited)}" if waited && state != :running
        line << " on #{describe(wait, obj, detail)}" if wait
        line << (deadline.negative? ? ", deadline passed" : ", deadline in #{Dump.duration(deadline)}") if deadline
        out << line << "\n"
        site = Dump.spawned_at(@s, fiber)
        extra = []
        extra << "spawned at #{site}" if site
        if task
          extra << "task status #{task.instance_variable_get(:@status)}"
          n = task.instance_variable_get(:@children).size
          extra << "#{n} child task(s)" if n.positive?
        end
        out << "#{pad}  #{extra.join(", ")}\n" unless extra.empty?
        trace(fiber, state).each { |l| out << "#{pad}    #{l}\n" }
      end

      def trace(fiber, state)
        return [] if @frames&.zero?

        bt = fiber.backtrace || []
        bt = bt.drop_while { |l| l.start_with?(__FILE__) } if fiber.equal?(Fiber.current)
        @frames ? bt.first(@frames) : bt
      rescue StandardError
        []
      end

      def short(obj)
        text = obj.inspect
        text = text.size > 120 ? "#{text[0, 117]}..." : text
        defined?(BasicSocket) && obj.is_a?(BasicSocket) ? "#{text}#{addresses(obj)}" : text
      end

      # " to 10.0.0.2:5432" (a connected socket) or " on 0.0.0.0:80"
      def addresses(sock)
        peer = begin
          sock.remote_address.inspect_sockaddr
        rescue StandardError
          nil
        end
        return " to #{peer}" if peer

        " on #{sock.local_address.inspect_sockaddr}"
      rescue StandardError
        ""
      end

      def events(mask) = EVENT_NAMES.filter_map { |bit, name| name if mask.anybits?(bit) }.join("|")

      def describe(wait, obj, detail)
        case wait
        when :io
          fd, ev = detail
          pid = @s._process_wait_pid(fd)
          return "process #{pid} (pidfd #{fd})" if pid

          "io_wait #{events(ev)} fd #{fd}#{" #{short(obj)}" if obj}"
        when :io_op then "io_uring #{detail[1]} fd #{detail[0]}#{" #{short(obj)}" if obj}"
        when :file_op then "file #{detail[1]} fd #{detail[0]} (offload pool)#{" #{short(obj)}" if obj}"
        when :select then "IO.select"
        when :sleep then "sleep"
        when :block then block_name(obj)
        when :writer then "another fiber's write to fd #{detail[0]}"
        else wait.to_s
        end
      end

      def block_name(obj)
        case obj
        when Thread::Mutex then "Mutex #{short(obj)}"
        when Thread::SizedQueue then "SizedQueue #{short(obj)} (size #{obj.size}/#{obj.max})"
        when Thread::Queue then "Queue #{short(obj)} (size #{obj.size})"
        when Thread::ConditionVariable then "ConditionVariable #{short(obj)}"
        when Thread then "join #{short(obj)}"
        else "block #{short(obj)}"
        end
      end
    end
  end

  # Print what every fiber of the current thread's Weft::Scheduler is doing
  # (Scheduler#dump) to +io+ ($stderr by default).
  def self.print_tasks(io = $stderr, **options)
    scheduler = Fiber.scheduler
    raise Weft::Error, "no Weft::Scheduler in this thread" unless scheduler.is_a?(Scheduler)

    scheduler.dump(io, **options)
  end

  # On +signal+ ("QUIT", "USR1", ...), every Weft::Scheduler of the
  # process writes its dump to stderr, from its own loop (a loop blocked in
  # the kernel is woken; one held by a fiber that never yields prints once
  # it does). Returns the previous handler. WEFT_DUMP_SIGNAL=QUIT does this
  # when weft is loaded.
  def self.dump_on_signal(signal = "QUIT")
    trap(signal) { Weft._request_dump }
  end

  # Name the current fiber in Scheduler#dump and stall reports (a task's
  # fiber is named by Task#name). +name+: a String, or an object whose
  # #weft_annotation says it when a report is made (so that naming costs
  # nothing per request: Weft::Server's connections do that).
  def self.annotate(name)
    Fiber.current.instance_variable_set(:@__weft_name, name)
  end
end

if (sig = ENV.fetch("WEFT_DUMP_SIGNAL", "")) && !sig.empty?
  Weft.dump_on_signal(sig)
end
