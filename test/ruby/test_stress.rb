# frozen_string_literal: true

# Stress (issue 18): many fibers, many exceptions at once, fork inside
# Weft.run with the child using Weft, Thread#kill of a thread in Weft.run
# with fibers waiting in every kind of hook; each case also under
# GC.stress, with counts bounded so that the whole file stays within a
# few seconds per backend.
require_relative "helper"

class TestStress < Minitest::Test
  include WeftTestHelper

  # Not an ArgumentError: Ruby 3.3's error_highlight would parse this file
  # for every report, which under GC.stress takes seconds each.
  class Boom < StandardError; end

  # Fibers alive at once: Ruby gives every fiber stack a guard page, two
  # map entries per fiber, and vm.max_map_count (65,530 by default) ends
  # at about 30,000 fibers whatever the scheduler.
  WAVE = 10_000

  def with_gc_stress
    GC.stress = true
    yield
  ensure
    GC.stress = false
  end

  # +total+ fibers in waves of +wave+: each yields once (sleep 0), then
  # takes a value from a Thread::Queue (block/unblock) that the main fiber
  # fills. Returns [fibers that ended, sum of what they took].
  def waves(total, wave, compact: false)
    ended = 0
    sum = 0
    weft do |s|
      q = Thread::Queue.new
      (total / wave).times do |n|
        wave.times do
          Fiber.schedule do
            sleep 0
            sum += q.pop
            ended += 1
          end
        end
        GC.compact if compact && GC.respond_to?(:compact) && n.odd?
        wave.times { |i| q << i }
        sleep 0 until ended == (n + 1) * wave
      end
      assert_quiet(s)
    end
    [ended, sum]
  end

  def test_100_000_fibers
    ended, sum = waves(100_000, WAVE, compact: true)
    assert_equal 100_000, ended
    assert_equal 10 * (WAVE * (WAVE - 1) / 2), sum
  end

  def test_fibers_under_gc_stress
    ended, sum = with_gc_stress { waves(120, 40) }
    assert_equal 120, ended
    assert_equal 3 * (40 * 39 / 2), sum
  end

  # Every fiber raises in the same loop iteration (one deadline), while
  # others still wait: each error is reported once, the first is raised by
  # Weft.run after every fiber has ended, no fiber is lost.
  def raise_many(raisers, others)
    ensured = 0
    finished = 0
    err = nil
    out = capture_stderr do
      Weft.run do
        t = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.005
        raisers.times do |i|
          Fiber.schedule do
            sleep [t - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max
            raise Boom, "fiber #{i}"
          ensure
            ensured += 1
          end
        end
        others.times do
          Fiber.schedule do
            sleep 0.02
            finished += 1
          end
        end
      end
    rescue Boom => e
      err = e
    end
    assert_nil Fiber.scheduler
    assert_kind_of Boom, err
    assert_match(/\Afiber \d+\z/, err.message)
    assert_equal raisers, ensured
    assert_equal others, finished
    assert_equal raisers, out.scan(/terminated with exception/).size
  end

  def capture_stderr
    saved = $stderr
    $stderr = StringIO.new
    yield
    $stderr.string
  ensure
    $stderr = saved
  end

  def test_exceptions_in_many_fibers_at_once
    raise_many(2_000, 200)
  end

  def test_exceptions_under_gc_stress
    with_gc_stress { raise_many(20, 5) }
  end

  # fork in a fiber of a running Weft.run, several at once: each child
  # runs fibers on the scheduler it inherited (its reactor is re-made),
  # a nested Weft.run, and a Weft.run of its own in a new thread; the
  # parent's fibers go on meanwhile and it reaps the children through the
  # scheduler.
  def fork_children(children, fibers)
    skip "no fork" unless Process.respond_to?(:fork)
    ticks = 0
    statuses = []
    weft do
      Fiber.schedule { (sleep 0.001; ticks += 1) until statuses.size == children }
      children.times do |c|
        Fiber.schedule do
          pid = fork do
            ok = false
            begin
              ok = child_uses_weft(c, fibers)
            ensure
              exit!(ok ? 0 : 1)
            end
          end
          statuses << Process.wait2(pid)[1]
        end
      end
    end
    assert_equal children, statuses.size
    statuses.each { |st| assert st.success?, "child: #{st.inspect}" }
    assert_operator ticks, :>, 0
  end

  # In a fork child, inside the parent's fiber: fibers on the inherited
  # scheduler, a nested Weft.run, and a Weft.run in a new thread.
  def child_uses_weft(_child, fibers)
    r, w = IO.pipe
    got = nil
    done = 0
    fibers.times do |i|
      Fiber.schedule do
        sleep 0.001
        w.write(format("%04d", i))
        done += 1
      end
    end
    reader = Fiber.schedule { got = r.read(4 * fibers) }
    nested = Weft.run { |s| s.backend }
    sleep 0.001 until done == fibers && !reader.alive?
    own = Thread.new do
      Weft.run do
        x = nil
        f = Fiber.schedule { sleep 0.001; x = :own }
        sleep 0.001 while f.alive?
        x
      end
    end.value
    got&.bytesize == 4 * fibers && nested.is_a?(String) && own == :own
  ensure
    r&.close
    w&.close
  end

  def test_fork_inside_weft_run
    fork_children(4, 100)
  end

  def test_fork_under_gc_stress
    with_gc_stress { fork_children(1, 10) }
  end

  # Thread#kill of a thread in Weft.run whose fibers wait in every kind of
  # hook (sleep, a pipe read, a Queue, io_wait, IO::Buffer ring reads,
  # IO.select, a timeout): every fiber's ensure runs, the thread ends, and
  # the next Weft.run in this thread is unaffected.
  def kill_running(fibers)
    ensured = Thread::Queue.new
    pipes = []
    started = 0
    t = Thread.new do
      Thread.current.report_on_exception = false
      Weft.run do
        fibers.times do |i|
          r, w = IO.pipe
          pipes << r << w
          Fiber.schedule do
            started += 1
            case i % 7
            when 0 then sleep 30
            when 1 then r.read(1)
            when 2 then Thread::Queue.new.pop
            when 3 then r.wait_readable
            when 4 then IO::Buffer.new(64).read(r, 1)
            when 5 then IO.select([r])
            else Timeout.timeout(30) { r.read(1) }
            end
          ensure
            ensured << i
          end
        end
        sleep 30
      end
    end
    # A guard against a hang, not a time limit: under GC.stress on a loaded
    # machine, starting 21 fibers took over 10 s (the first version's
    # bound, which then killed the thread early and failed on the count).
    deadline = now + 300
    Thread.pass until (started == fibers && t.status == "sleep") || now > deadline
    assert_equal fibers, started, "not every fiber started before the kill"
    t.kill
    refute_nil t.join(10), "the killed thread did not end"
    assert_equal fibers, ensured.size
    pipes.each(&:close)
    assert_equal :after, weft { Fiber.schedule { sleep 0.001 }; :after }
  end

  def test_thread_kill_with_fibers_in_every_hook
    kill_running(210)
  end

  def test_thread_kill_under_gc_stress
    with_gc_stress { kill_running(21) }
  end
end
