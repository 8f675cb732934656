# frozen_string_literal: true

require_relative "helper"
require "stringio"

# Weft::Task, Weft::Barrier, with_timeout, Weft::Queue / LimitedQueue.
class TestTask < Minitest::Test
  include WeftTestHelper

  def test_value_and_error_propagation
    weft do
      t = Weft.spawn { sleep 0.001; 21 * 2 }
      assert_equal :running, t.status
      assert_predicate t, :alive?
      assert_equal 42, t.wait
      assert_equal 42, t.value
      assert_equal :completed, t.status

      bad = Weft::Task.new(report: false) { sleep 0.001; raise KeyError, "k" }
      e = assert_raises(KeyError) { bad.wait }
      assert_equal "k", e.message
      assert_equal :failed, bad.status
      assert_same e, bad.error
      assert_raises(KeyError) { bad.value } # every time
    end
  end

  def test_an_unwaited_failure_is_reported_once
    err = StringIO.new
    old = $stderr
    $stderr = err
    weft { Weft.spawn { raise IndexError, "nobody waits" } }
    assert_equal 1, err.string.scan("nobody waits (IndexError)").size
  ensure
    $stderr = old
  end

  def test_stop_during_io_wait_and_during_sleep
    r, w = IO.pipe
    ensures = []
    weft do
      reader = Weft.spawn do
        r.read(1)
      ensure
        ensures << :reader
      end
      sleeper = Weft.spawn do
        sleep 30
      ensure
        ensures << :sleeper
      end
      sleep 0.001
      reader.stop
      sleeper.stop
      assert_nil reader.wait
      assert_nil sleeper.wait
      assert_equal :stopped, reader.status
      assert_equal :stopped, sleeper.status
      assert_same sleeper, sleeper.stop, "stopping a finished task is a no-op"
    end
    assert_equal %i[reader sleeper], ensures.sort
    w.write("x") # the descriptor is still fine
    assert_equal "x", r.read(1)
    [r, w].each(&:close)
  end

  def test_stopping_a_parent_stops_its_children
    log = []
    weft do
      parent = Weft.spawn do
        2.times do |i|
          Weft.spawn do
            sleep 30
          ensure
            log << "child #{i}"
          end
        end
        sleep 30
      ensure
        log << "parent"
      end
      sleep 0.001
      assert_equal 2, parent.children.size
      assert_same parent, parent.children.first.parent
      parent.stop
      parent.wait
      assert_empty parent.children
    end
    assert_equal ["child 0", "child 1", "parent"], log.sort
  end

  def test_a_task_stopping_itself
    weft do
      t = Weft.spawn do |me|
        me.stop
        :not_reached
      end
      assert_nil t.wait
      assert_equal :stopped, t.status
    end
  end

  def test_barrier_first_failure_stops_the_siblings
    stopped = []
    weft do
      b = Weft::Barrier.new
      3.times do |i|
        b.spawn do
          sleep 30
        ensure
          stopped << i
        end
      end
      b.spawn { sleep 0.005; raise ArgumentError, "third-party failure" }
      e = assert_raises(ArgumentError) { b.wait }
      assert_equal "third-party failure", e.message
      assert_equal [false] * 4, b.tasks.map(&:alive?)
    end
    assert_equal [0, 1, 2], stopped.sort
  end

  def test_barrier_values_in_spawn_order
    weft do
      b = Weft::Barrier.new
      [0.003, 0.001, 0.002].each_with_index { |d, i| b.spawn { sleep d; i } }
      assert_equal [0, 1, 2], b.wait
    end
  end

  def test_barrier_timeout_stops_the_rest
    weft do
      b = Weft::Barrier.new
      t = b.spawn { sleep 30 }
      assert_raises(Weft::TimeoutError) { b.wait(timeout: 0.01) }
      assert_equal :stopped, t.status
    end
  end

  def test_timeouts_nested_inside_timeouts
    weft do
      # The inner one is shorter: it ends its block; the outer goes on.
      log = []
      Weft.with_timeout(5) do
        begin
          Weft.with_timeout(0.01) { sleep 30 }
        rescue Weft::TimeoutError
          log << :inner_expired
        end
        log << :outer_went_on
      end
      assert_equal %i[inner_expired outer_went_on], log

      # The outer one is shorter: it ends the inner block too.
      assert_raises(Weft::TimeoutError) do
        Weft.with_timeout(0.01) do
          Weft.with_timeout(30) { sleep 30 }
        end
      end

      # On a task; a Weft::TimeoutError is a Timeout::Error.
      t = Weft.spawn { |me| me.with_timeout(0.01) { sleep 30 } }
      assert_raises(Timeout::Error) { t.wait }
      assert_equal 7, Weft.with_timeout(1) { 7 }
    end
  end

  def test_wait_with_a_timeout_and_waiting_for_yourself
    weft do
      t = Weft.spawn { sleep 30 }
      assert_raises(Weft::TimeoutError) { t.wait(timeout: 0.005) }
      assert_predicate t, :alive?
      t.stop
      me = Weft::Task.new(report: false) { |task| task.wait }
      assert_raises(Weft::Error) { me.value }
    end
  end

  def test_task_limiter_wait
    weft do
      limiter = Weft::TaskLimiter.new(2)
      done = []
      5.times { |i| limiter.schedule { sleep 0.001 * (5 - i); done << i } }
      assert_equal false, limiter.wait(timeout: 0)
      assert_equal true, limiter.wait
      assert_equal [0, 1, 2, 3, 4], done.sort
      assert_equal 0, limiter.running
    end
  end

  def test_task_outside_a_weft_scheduler_is_refused
    assert_raises(Weft::Error) { Weft::Task.new { 1 } }
  end

  def test_queue_pop_with_timeout_across_fibers_and_threads
    q = Weft::Queue.new
    weft do
      assert_nil q.pop(timeout: 0.005)
      Fiber.schedule { sleep 0.002; q << :from_fiber }
      assert_equal :from_fiber, q.pop(timeout: 5)
      Thread.new { sleep 0.002; q.push(:from_thread) }
      assert_equal :from_thread, q.pop
      q.close
      assert_nil q.pop
      assert_raises(Weft::Queue::ClosedError) { q << 1 }
    end
    # and from a thread with no scheduler at all
    q2 = Weft::Queue.new
    t = Thread.new { q2.pop(timeout: 5) }
    weft { Fiber.schedule { q2 << :to_a_thread } }
    assert_equal :to_a_thread, t.value
  end

  def test_limited_queue_push_waits_for_room
    q = Weft::LimitedQueue.new(2)
    log = []
    weft do
      producer = Weft.spawn do
        5.times do |i|
          q.push(i)
          log << [:pushed, i]
        end
      end
      sleep 0.002
      assert_equal [[:pushed, 0], [:pushed, 1]], log, "the third push waits"
      assert_equal false, q.push(:x, timeout: 0.001)
      got = Array.new(5) { q.pop }
      producer.wait
      assert_equal [0, 1, 2, 3, 4], got
    end
    assert_raises(ArgumentError) { Weft::LimitedQueue.new(0) }
  end

  def test_ruby_queues_interoperate_across_fibers_and_threads
    q = Thread::Queue.new
    sq = Thread::SizedQueue.new(1)
    got = []
    weft do
      Fiber.schedule { got << q.pop }
      Thread.new { q << :thread_to_fiber }.join
      Fiber.schedule { 3.times { |i| sq.push(i) } }
      consumer = Thread.new { Array.new(3) { sq.pop } }
      got << consumer.value
    end
    assert_equal [:thread_to_fiber, [0, 1, 2]], got
  end
end
