# frozen_string_literal: true

require_relative "helper"
require "stringio"
require "tempfile"

# Scheduler#dump, Weft.print_tasks, the dump signal, the stall watchdog
# and the loop's health in #stats.
class TestDump < Minitest::Test
  include WeftTestHelper

  # $stderr for the watchdog thread and the test alike.
  class Capture
    def initialize = (@mutex = Thread::Mutex.new; @s = +"")
    def write(*parts) = @mutex.synchronize { parts.each { |p| @s << p.to_s }; parts.sum { |p| p.to_s.bytesize } }
    def string = @mutex.synchronize { @s.dup }
    def flush = self
  end

  def capture_stderr
    old = $stderr
    cap = Capture.new
    $stderr = cap
    yield cap
  ensure
    $stderr = old
  end

  # Spins (never yields) for +seconds+, or until the block, if given, says
  # enough (then +seconds+ only guards against a hang).
  def spin_on_purpose(seconds, &enough)
    t = now
    x = 0
    x += 1 while now - t < seconds && !enough&.call
    x
  end

  # Wait, without a timing assumption, until +cond+ holds (hang guard).
  def eventually(what)
    deadline = now + 30
    until yield
      raise "never happened: #{what}" if now > deadline

      sleep 0.005
    end
  end

  def test_dump_names_every_wait_kind_and_object
    text = nil
    pid = fwfd = nil
    weft do |s|
      m = Thread::Mutex.new
      q = Thread::Queue.new
      sq = Thread::SizedQueue.new(1)
      sq << 0
      r, w = IO.pipe
      fr, fw = IO.pipe
      nil while fw.write_nonblock("x" * 65_536, exception: false) != :wait_writable
      fwfd = fw.fileno
      gate = Thread::Queue.new
      helper = Thread.new { gate.pop }
      pid = Process.spawn(RbConfig.ruby, "-e", "$stdin.read", in: r.dup)
      rr, ww = IO.pipe
      sleeper = Weft.spawn(name: "sleeper") { sleep 30 }
      Weft.spawn(name: "reader") { rr.read(1) }
      Weft.spawn(name: "writer") { fw.write("y") }
      m.lock
      Weft.spawn(name: "mutex") { m.synchronize { nil } }
      Weft.spawn(name: "queue") { q.pop }
      Weft.spawn(name: "sized") { sq << 1 }
      Weft.spawn(name: "join") { helper.join }
      Weft.spawn(name: "process") { Process.wait(pid) }
      Weft.spawn(name: "select") { IO.select([rr], nil, nil) }
      parent = Weft.spawn(name: "parent") { Weft.spawn(name: "child") { q.pop }.wait }
      text = s.dump
      assert_equal sleeper.fiber.backtrace, sleeper.backtrace
      assert_equal 2, parent.children.size + 1
      # let everything go
      w.write("!")
      w.close
      q << 1 << 2
      ww.write("ab")
      m.unlock
      sq.pop
      gate << :go
      fr.readpartial(1 << 20)
      sleeper.stop
    end
    lines = text.lines
    line = ->(name) { lines.find { |l| l.include?("(task #{name.inspect})") } or flunk("no #{name}:\n#{text}") }
    assert_match(/\Aweft dump: pid #{Process.pid}, .* (io_uring|epoll|poll), \d+ fiber\(s\), 11 task\(s\)$/, lines[0])
    assert_match(/waiting \S+ \S+ on sleep, deadline in (29|30)\.\d+ s$/, line["sleeper"])
    assert_match(/waiting \S+ \S+ on (io_wait readable|io_uring read) fd \d+ #<IO:fd \d+>/, line["reader"])
    assert_match(/waiting \S+ \S+ on io_wait writable fd #{fwfd} #<IO:fd #{fwfd}>/, line["writer"])
    assert_match(/on Mutex #<Thread::Mutex:0x\h+>$/, line["mutex"])
    assert_match(/on Queue #<Thread::Queue:0x\h+> \(size 0\)$/, line["queue"])
    assert_match(/on SizedQueue #<Thread::SizedQueue:0x\h+> \(size 1\/1\)$/, line["sized"])
    assert_match(/on join #<Thread:0x\h+ #{Regexp.escape(__FILE__)}:\d+ \w+>$/, line["join"])
    assert_match(/on process #{pid} \(pidfd \d+\)$/, line["process"])
    assert_match(/on IO\.select$/, line["select"])
    # the tree: the child is under its parent, indented
    i = lines.index(line["parent"])
    assert_match(/\A  fiber 0x\h+ \(task "child"\) waiting .* on Queue/, lines[i + 1..].find { |l| l.include?('"child"') })
    assert_includes lines[i + 1], "spawned at #{__FILE__}:"
    assert_includes lines[i + 1], "1 child task(s)"
    # each spawn site is this file, and each backtrace reaches this test
    assert_equal 11, text.scan(/spawned at #{Regexp.escape(__FILE__)}:\d+, task status running/).size
    assert_match(/^    #{Regexp.escape(__FILE__)}:\d+:in [`'].*sleep/, text)
    # the running fiber (Weft.run's block, begun in helper.rb): its frames
    assert_match(/^fiber 0x\h+ running\n  spawned at \S+helper\.rb:\d+\n    #{Regexp.escape(__FILE__)}:\d+:in /, text)
    assert_match(/\nend of dump \(\d+ fiber\(s\)\)\n\z/, text)
  end

  # A fiber in a sleep(0) loop sits on the ready queue only: the dump
  # still shows it ready, in sleep.
  def test_dump_lists_fibers_that_only_yield
    text = nil
    weft do |s|
      stop = false
      yielder = Weft.spawn(name: "yielder") { sleep 0 until stop }
      sleep 0 # let it begin
      text = s.dump
      stop = true
      yielder.wait
    end
    line = text.lines.find { |l| l.include?('(task "yielder")') } or flunk(text)
    assert_match(/ ready .*on sleep/, line)
  end

  def test_print_tasks_and_task_backtrace
    out = StringIO.new
    weft do
      t = Weft.spawn(name: "napper") { sleep 10 }
      Weft.annotate("the main fiber")
      assert_match(/:in [`'](Kernel#)?sleep'/, t.backtrace.join("\n"))
      assert_equal "#<Weft::Task \"napper\" running>", t.inspect
      Weft.print_tasks(out)
      t.stop
      t.wait
      assert_nil t.backtrace
    end
    assert_match(/^fiber 0x\h+ "the main fiber" running$/, out.string)
    assert_match(/^fiber 0x\h+ \(task "napper"\) waiting .* on sleep, deadline in/, out.string)
    assert_raises(Weft::Error) { Weft.print_tasks(out) }
  end

  def test_dump_of_10_000_fibers_lists_every_one
    text = nil
    n = 10_000
    weft do |s|
      q = Thread::Queue.new
      n.times { Fiber.schedule { q.pop } }
      text = s.dump(backtrace: 3)
      q.close
    end
    assert_equal n + 1, text.scan(/^fiber 0x\h+ /).size
    assert_equal n, text.scan(/^fiber 0x\h+ waiting \S+ \S+ on Queue #<Thread::Queue:0x\h+> \(size 0\)$/).size
    assert_includes text, "end of dump (#{n + 1} fiber(s))"
  end

  def test_stall_is_reported_once_with_name_site_and_backtrace
    spawn_line = nil
    stats = nil
    capture_stderr do |cap|
      weft(stall_ms: 50) do |s|
        assert_equal 50, s.stall_ms
        Fiber.schedule { 20.times { sleep 0.001 } } # a fiber that yields
        # It spins until reported: the watchdog, a Ruby thread, needs the
        # GVL to write, which a loaded machine may give it late.
        spawn_line = __LINE__ + 1
        Weft.spawn(name: "spinner") { spin_on_purpose(30) { cap.string.include?("weft: stall: ") } }
        eventually("the end of the stall noted") { cap.string.include?("weft: stall over:") }
        stats = s.stats
      end
      text = cap.string
      assert_equal 1, text.scan(/^weft: stall: /).size, text
      assert_equal 1, text.scan(/^weft: stall over: /).size, text
      # (how long it ran: milliseconds, or seconds on a loaded machine)
      ran = /\d+\.\d ms|\d+\.\d{3} s/
      assert_match(/^weft: stall: fiber 0x\h+ \(task "spinner"\) has run #{ran} without yielding \(stall_ms 50, pid #{Process.pid}\)$/, text)
      assert_includes text, "\n  spawned at #{__FILE__}:#{spawn_line}\n"
      assert_match(/^    #{Regexp.escape(__FILE__)}:\d+:in [`'](TestDump#)?spin_on_purpose'$/, text)
      assert_match(/^weft: stall over: fiber 0x\h+ \(task "spinner"\) ran about #{ran} without yielding$/, text)
    end
    assert_equal 1, stats[:stalls]
  end

  # A stall that ends before Ruby's time slice would hand the watchdog
  # the GVL (100 ms) is reported all the same, with the backtrace and the
  # name it had during the stall: the loop thread takes them itself when
  # the watchdog asks. Here the fiber stops as soon as the stall is
  # counted, after one system call (on whose way back its thread takes
  # the watchdog's signal) and a few loop turns.
  def test_a_stall_shorter_than_ruby_s_time_slice_is_reported_with_its_backtrace
    lines = nil
    capture_stderr do |cap|
      weft(stall_ms: 20) do |s|
        first = __LINE__ + 1
        Weft.spawn(name: "short") do
          spin_on_purpose(30) { s.stats[:stalls] == 1 }
          File.stat(__FILE__)
          i = 0
          i += 1 while i < 100
        end
        lines = first..(__LINE__ - 1)
        eventually("the end of the stall noted") { cap.string.include?("weft: stall over:") }
      end
      text = cap.string
      assert_equal 1, text.scan(/^weft: stall: /).size, text
      assert_match(/^weft: stall: fiber 0x\h+ \(task "short"\) has run [\d.]+ \S+ without yielding \(stall_ms 20, pid #{Process.pid}\)\n  spawned at #{Regexp.escape(__FILE__)}:#{lines.first}\n  backtrace during the stall:\n    #{Regexp.escape(__FILE__)}:(#{lines.to_a.join("|")}):in /, text)
      assert_match(/^weft: stall over: fiber 0x\h+ \(task "short"\) ran about /, text)
    end
  end

  def test_stall_detection_is_off_by_default_and_can_be_turned_off
    capture_stderr do |cap|
      weft do |s|
        assert_equal 0, s.stall_ms
        s.stall_ms = 50
        s.stall_ms = 0
        spin_on_purpose(0.1)
        sleep 0
      end
      assert_equal "", cap.string
    end
    assert_raises(ArgumentError) { Weft::Scheduler.new(stall_ms: -1) }
  end

  def test_stats_counts_are_exact_in_a_scripted_run
    stats = nil
    weft(backend: ENV["WEFT_BACKEND"] || "epoll") do |s|
      q = Thread::Queue.new
      m = Thread::Mutex.new
      r, w = IO.pipe
      Fiber.schedule { 3.times { sleep 0.001 } }         # 3 sleeps, 3 timers
      Fiber.schedule { q.pop }                           # 1 block
      Fiber.schedule { r.wait_readable }                 # 1 io_wait
      m.lock
      Fiber.schedule { m.synchronize { nil } }           # 1 block
      sleep 0.001                                        # 1 sleep, 1 timer
      q << 1
      m.unlock
      w.write("x")
      sleep 0 until s.stats[:fibers_alive] == 1          # sleep 0: no timer
      stats = s.stats
    end
    zeros = stats[:waits_begun][:sleep] - 4 # the sleep(0)s, however many
    assert_equal({ io_wait: 1, ring_op: 0, file_op: 0, select: 0, sleep: 4 + zeros, block: 2, writer: 0 },
                 stats[:waits_begun])
    assert_equal stats[:waits_begun], stats[:waits_ended]
    assert_equal 4, stats[:timers_fired]
    assert_equal 5, stats[:fibers_spawned] # the block of Weft.run and 4
    assert_equal 4, stats[:fibers_ended]
    assert_equal 1, stats[:fibers_alive]
    assert_equal 5, stats[:fibers_peak]
    assert_equal 0, stats[:stalls]
    assert_operator stats[:iterations], :>, 0
    d = stats[:ready_delay]
    assert_equal 7 + zeros, d[:count] # every wait that was resumed
    assert_operator d[:p50], :<=, d[:p99]
    assert_operator d[:p99], :<=, d[:max]
    assert_operator stats[:wait_seconds], :>=, 0
    assert_operator stats[:utilisation], :<=, 1.0
  end

  def test_dump_signal_prints_from_the_loop
    Tempfile.create("weft-dump") do |f|
      script = <<~RUBY
        require "weft"
        Weft.run do
          Weft.spawn(name: "stuck") { sleep 60 }
          $stdout.puts "ready"
          $stdout.flush
          Weft.spawn(name: "done") { $stdin.read; exit!(0) }
        end
      RUBY
      # where this process found weft.so first, then lib/
      so = $LOADED_FEATURES.find { |l| l.end_with?("/weft/weft.so") }
      env = { "RUBYLIB" => [File.dirname(so, 2), File.expand_path("../../lib", __dir__)].join(File::PATH_SEPARATOR),
              "WEFT_DUMP_SIGNAL" => "USR1" }
      IO.popen(env, [RbConfig.ruby, "-e", script], "r+", err: f.path) do |io|
        assert_equal "ready\n", io.gets
        Process.kill("USR1", io.pid)
        eventually("the dump") { File.read(f.path).include?("end of dump") }
        io.close_write
      end
      text = File.read(f.path)
      assert_match(/^weft dump: pid \d+, /, text)
      assert_match(/^fiber 0x\h+ \(task "stuck"\) waiting .* on sleep, deadline in/, text)
      assert_match(/^    -e:3:in /, text)
    end
  end
end
