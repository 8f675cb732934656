# frozen_string_literal: true

require_relative "helper"

# The scheduler object itself: run/close, Weft.run, exceptions, bad input,
# threads, GC and fork.
class TestScheduler < Minitest::Test
  include WeftTestHelper

  def test_explicit_run_and_close
    s = Weft::Scheduler.new
    Fiber.set_scheduler(s)
    done = []
    Fiber.schedule { sleep 0.01; done << 1 }
    Fiber.schedule { done << 2 }
    assert_equal [2], done
    s.run
    assert_equal [2, 1], done
    Fiber.schedule { sleep 0.01; done << 3 }
    Fiber.set_scheduler(nil) # close runs it to completion
    assert_equal [2, 1, 3], done
    assert s.closed?
    assert_raises(Weft::Error) { s.run }
  end

  def test_weft_run_returns_the_value_and_restores_the_scheduler
    assert_nil Fiber.scheduler
    assert_equal 42, Weft.run { sleep 0; 42 }
    assert_nil Fiber.scheduler
    assert_includes %w[epoll poll io_uring], Weft.run(&:backend)
    assert_equal "poll", Weft.run(backend: :poll, &:backend)
    assert_raises(ArgumentError) { Weft::Scheduler.new(backend: :nope) }
  end

  def test_a_fiber_raising_while_others_wait
    finished = []
    boom = Class.new(StandardError)
    assert_raises(boom) do
      Weft.run do
        r, w = IO.pipe
        Fiber.schedule { finished << r.read(2) }
        Fiber.schedule { sleep 0.02; finished << :sleeper }
        Fiber.schedule { sleep 0.01; w.write("ok"); raise boom }
      end
    end
    assert_nil Fiber.scheduler
    assert_equal ["ok", :sleeper], finished
  end

  def test_fiber_raise_unwinds_a_waiting_fiber
    s = Weft::Scheduler.new
    Fiber.set_scheduler(s)
    r, w = IO.pipe
    rescued = nil
    f = Fiber.schedule do
      r.read(1)
    rescue RuntimeError => e
      rescued = e.message
    end
    assert_equal 1, s.stats[:waiting_fibers]
    f.raise("stop") # transfers into f, which unwinds and finishes
    assert_equal "stop", rescued
    assert_equal 0, s.stats[:waits]
    assert_equal 0, s.stats[:waiting_fibers]
    # the descriptor is still usable afterwards
    Fiber.schedule { assert_equal "x", r.read(1) }
    w.write("x")
    Fiber.set_scheduler(nil)
    [r, w].each(&:close)
  end

  def test_raise_in_and_fiber_interrupt
    weft do |s|
      caught = []
      f = Fiber.schedule do
        sleep 10
      rescue Interrupt, StandardError => e
        caught << e.class
      end
      s.raise_in(f, ArgumentError, "go")
      g = Fiber.schedule do
        IO.pipe.first.read(1)
      rescue StandardError => e
        caught << e.message
      end
      s.fiber_interrupt(g, RuntimeError.new("closed underneath"))
      sleep 0.01
      assert_equal [ArgumentError, "closed underneath"], caught
      assert_quiet(s)
    end
  end

  def test_interrupt_stops_every_waiting_fiber
    cleaned = []
    r, w = IO.pipe
    server = TCPServer.new("127.0.0.1", 0)
    runner = Thread.new do
      Thread.current.report_on_exception = false
      Weft.run do
        Fiber.schedule do
          r.read(1)
        ensure
          cleaned << :reader
        end
        Fiber.schedule do
          loop { server.accept.close }
        ensure
          cleaned << :acceptor
        end
        begin
          sleep
        ensure
          cleaned << :main
        end
      end
    end
    Thread.pass until runner.status == "sleep" || !runner.alive?
    sleep 0.02
    runner.raise(Interrupt)
    assert_raises(Interrupt) { runner.join }
    assert_equal %i[acceptor main reader], cleaned.sort
    [r, w, server].each(&:close)
  end

  # Fibers that only yield (sleep 0) sit on the ready queue, not among
  # the waits: an interrupt must stop them too.
  def test_interrupt_stops_fibers_that_only_yield
    cleaned = Thread::Queue.new
    started = Thread::Queue.new
    runner = Thread.new do
      Thread.current.report_on_exception = false
      Weft.run do
        3.times do |i|
          Fiber.schedule do
            started << i
            loop { sleep 0 }
          ensure
            cleaned << i
          end
        end
        begin
          sleep
        ensure
          cleaned << :main
        end
      end
    end
    3.times { started.pop }
    runner.raise(Interrupt)
    assert_raises(Interrupt) { runner.join(30) || flunk("the yielding fibers kept running") }
    got = []
    got << cleaned.pop until cleaned.empty?
    assert_equal [0, 1, 2, :main], got.sort_by(&:to_s)
  ensure
    runner&.kill
  end

  def test_bad_input_raises_ruby_exceptions
    weft do |s|
      r, w = IO.pipe
      assert_raises(TypeError) { s.io_wait(42, IO::READABLE, nil) }
      assert_raises(TypeError) { s.io_wait(Object.new, IO::READABLE, nil) }
      assert_raises(ArgumentError) { s.io_wait(r, IO::READABLE, -1) }
      assert_raises(TypeError) { s.io_wait(r, IO::READABLE, "soon") }
      assert_raises(ArgumentError) { s.io_wait(r, 0, nil) }
      assert_raises(ArgumentError) { s.kernel_sleep(-1) }
      assert_raises(TypeError) { s.kernel_sleep("1") }
      assert_equal false, s.block(:x, -0.5) # Thread#join(-0.5): no wait
      assert_raises(ArgumentError) { s.timeout_after(-1, RuntimeError, "x") { 1 } }
      assert_raises(TypeError) { s.io_read(r, "not a buffer", 1) }
      assert_raises(ArgumentError) { s.io_read(r) }
      assert_raises(ArgumentError) { s.io_read(r, IO::Buffer.new(4), 1, 9) }
      assert_raises(TypeError) { s.fiber_interrupt(:nope, RuntimeError.new) }
      r.close
      assert_raises(IOError) { s.io_wait(r, IO::READABLE, 0) }
      assert_raises(IOError) { s.io_read(r, IO::Buffer.new(4), 1) }
      w.close
      assert_raises(ThreadError) do
        Thread.new { Thread.current.report_on_exception = false; s.kernel_sleep(0) }.join
      end
      assert_raises(ArgumentError) { s.fiber }
    end
  end

  def test_gc_stress_during_io
    got = +""
    weft do
      r, w = IO.pipe
      GC.stress = true
      begin
        Fiber.schedule { 20.times { |i| w.write("#{i},"); sleep 0 }; w.close }
        Fiber.schedule { got << r.read }
      ensure
        GC.stress = false
      end
    end
    assert_equal 20.times.map { |i| "#{i}," }.join, got
  end

  def test_gc_stress_across_hooks
    got = []
    weft do
      GC.stress = true
      begin
        q = Thread::Queue.new
        Fiber.schedule { got << q.pop }
        Fiber.schedule { sleep 0.001; q << :queued }
        Fiber.schedule { got << (Timeout.timeout(0.001) { sleep 1 } rescue :timed_out) }
        Thread.new { q << :thread }.join
        got << q.pop
      ensure
        GC.stress = false
      end
    end
    assert_equal %i[queued thread timed_out], got.sort
  end

  def test_gc_compact_while_fibers_wait
    skip "GC.compact not supported" unless GC.respond_to?(:compact)
    results = []
    weft do
      pipes = 20.times.map { IO.pipe }
      pipes.each_with_index do |(r, _), i|
        Fiber.schedule { results << [i, r.read(5)] }
      end
      Fiber.schedule { q = Thread::Queue.new; Fiber.schedule { q << :x }; results << [:q, q.pop] }
      GC.start
      GC.compact
      GC.verify_compaction_references(double_heap: true, toward: :empty) if GC.respond_to?(:verify_compaction_references)
      pipes.each_with_index { |(_, w), i| w.write(format("%05d", i)) }
      GC.compact
    end
    assert_equal 21, results.size
    results.each { |i, v| assert_equal(i == :q ? :x : format("%05d", i), v) }
  end

  def test_fork_child_gets_its_own_reactor
    skip "no fork" unless Process.respond_to?(:fork)
    weft do |s|
      r, w = IO.pipe
      cr, cw = IO.pipe
      parent_got = nil
      Fiber.schedule { parent_got = r.read(6) } # registered with the parent's reactor
      pid = fork do
        status = 1
        begin
          sleep 0.01 # first hook in the child: the reactor is re-created
          cw.write(s.stats[:pid] == Process.pid ? "fresh" : "stale")
          # The child's copy of the waiting fiber's wait is gone; closing
          # the descriptor through the child's reactor must not touch the
          # parent's registration.
          s.io_close(r)
          status = 0
        ensure
          exit!(status)
        end
      end
      _, st = Process.wait2(pid)
      assert st.success?
      cw.close
      assert_equal "fresh", cr.read
      w.write("parent")
      sleep 0.01
      assert_equal "parent", parent_got
      assert_equal Process.pid, s.stats[:pid]
      [r, w, cr].each(&:close)
    end
  end

  def test_schedule_from_inside_a_fiber
    order = []
    weft do
      Fiber.schedule do
        order << :outer_start
        Fiber.schedule { order << :inner; sleep 0.001; order << :inner_end }
        order << :outer_continues
      end
    end
    assert_equal %i[outer_start inner outer_continues inner_end], order
  end

  def test_schedule_passes_arguments_and_stop_ends_a_fiber_quietly
    got = []
    weft do |s|
      Fiber.schedule(1, :two) { |a, b| got << a << b }
      f = Fiber.schedule do
        sleep
      ensure
        got << :ensured
      end
      s.raise_in(f, Weft::Stop)
      sleep 0.01
      got << f.alive?
    end
    assert_equal [1, :two, :ensured, false], got
  end

  # Starting a fiber makes nothing for the collector beyond what Fiber.new
  # and its block do: every object more per fiber brings the next
  # collection nearer, and each one marks the stack of every live fiber.
  def test_schedule_allocates_what_fiber_new_does
    n = 1000
    per_fiber = lambda do |start|
      GC.disable
      a0 = GC.stat(:total_allocated_objects)
      n.times(&start)
      (GC.stat(:total_allocated_objects) - a0).fdiv(n)
    ensure
      GC.enable
    end
    plain = per_fiber.call(proc { Fiber.new(blocking: false) {}.resume })
    scheduled = nil
    weft { scheduled = per_fiber.call(proc { Fiber.schedule {} }) }
    assert_operator scheduled, :<=, plain + 0.1, "objects per Fiber.schedule"
  end

  def test_ten_thousand_fibers_sleep_zero
    count = 0
    weft do
      10_000.times { Fiber.schedule { sleep 0; count += 1 } }
    end
    assert_equal 10_000, count
  end

  def test_scheduler_in_another_thread
    value = Thread.new { Weft.run { sleep 0.01; :threaded } }.value
    assert_equal :threaded, value
  end
end
