# frozen_string_literal: true

require_relative "helper"

# kernel_sleep, block/unblock: sleep, Mutex, ConditionVariable, Queue,
# Thread#join, and wake-ups that come from other threads.
class TestSync < Minitest::Test
  include WeftTestHelper

  def test_sleep_zero_yields_to_other_fibers
    order = []
    weft do
      Fiber.schedule { 3.times { |i| order << "a#{i}"; sleep 0 } }
      Fiber.schedule { 3.times { |i| order << "b#{i}"; sleep 0 } }
    end
    assert_equal %w[a0 b0 a1 b1 a2 b2], order
  end

  def test_fractional_sleep_lasts_at_least_its_duration
    weft do
      t0 = now
      sleep 0.05
      assert_operator now - t0, :>=, 0.05
      t0 = now
      sleep Rational(1, 50)
      assert_operator now - t0, :>=, 0.02
    end
  end

  def test_sleeps_run_concurrently_and_finish_in_deadline_order
    order = []
    weft do
      [0.03, 0.01, 0.02].each { |d| Fiber.schedule { sleep d; order << d } }
    end
    assert_equal [0.01, 0.02, 0.03], order
  end

  def test_sleep_without_duration_until_woken
    woke = false
    weft do |s|
      sleeper = Fiber.schedule { sleep; woke = true }
      refute woke
      s.unblock(nil, sleeper)
    end
    assert woke
  end

  def test_mutex_between_fibers
    log = []
    weft do
      m = Mutex.new
      2.times do |i|
        Fiber.schedule do
          m.synchronize do
            log << "in#{i}"
            sleep 0.01
            log << "out#{i}"
          end
        end
      end
    end
    assert_equal %w[in0 out0 in1 out1], log
  end

  def test_mutex_between_a_fiber_and_a_thread
    weft do
      m = Mutex.new
      q = Thread::Queue.new
      t = Thread.new { m.synchronize { q << :locked; sleep 0.05 } }
      q.pop
      got = nil
      m.synchronize { got = :mine } # the thread holds it: block, then unblock from the thread
      assert_equal :mine, got
      t.join
    end
  end

  def test_condition_variable_across_fibers_and_threads
    weft do
      m = Mutex.new
      cv = ConditionVariable.new
      ready = []
      waiter = lambda do |name|
        m.synchronize do
          cv.wait(m) until ready.include?(name)
        end
        name
      end
      f1 = Weft::Future.spawn { waiter.call(:f1) }
      th = Thread.new { waiter.call(:t1) }
      sleep 0.01
      m.synchronize { ready << :f1 << :t1; cv.broadcast }
      assert_equal :f1, f1.value
      assert_equal :t1, th.value
      # ConditionVariable#wait with a timeout that expires
      m.synchronize { cv.wait(m, 0.01) }
    end
  end

  def test_queue_between_fibers_and_from_a_thread
    got = []
    weft do
      q = Thread::Queue.new
      Fiber.schedule { 3.times { got << q.pop } }
      q << 1
      Fiber.schedule { q << 2 }
      Thread.new { sleep 0.01; q << 3 }.join
    end
    assert_equal [1, 2, 3], got
  end

  def test_sized_queue_backpressure
    got = []
    weft do
      q = Thread::SizedQueue.new(2)
      Fiber.schedule { 10.times { |i| q << i }; q.close }
      Fiber.schedule { while (v = q.pop); got << v; end }
    end
    assert_equal (0...10).to_a, got
  end

  def test_thread_join_from_a_fiber_while_others_run
    ticks = 0
    weft do
      t = Thread.new { sleep 0.05; :thread_done }
      Fiber.schedule { 5.times { sleep 0.005; ticks += 1 } }
      assert_equal :thread_done, t.value
      # Ruby 3.1's Thread#join(timeout) re-blocks after the scheduler's
      # timeout until the thread ends (fixed in 3.2), so only check there.
      if RUBY_VERSION >= "3.2"
        tt = Thread.new { sleep 1 }
        assert_nil tt.join(0.01)
        tt.kill
      end
    end
    assert_equal 5, ticks
  end

  def test_unblock_from_another_thread_while_the_loop_sleeps_in_the_kernel
    weft do |s|
      q = Thread::Queue.new
      pusher = Thread.new do
        # wait until the loop thread is blocked in the kernel
        Thread.pass until s.stats[:waiting_fibers] == 1
        sleep 0.02
        q << :from_thread
      end
      assert_equal :from_thread, q.pop
      pusher.join
    end
  end

  def test_thread_raise_reaches_a_loop_blocked_in_the_kernel
    interrupted = Class.new(StandardError)
    r, w = IO.pipe
    loop_thread = Thread.new do
      Thread.current.report_on_exception = false
      s = Weft::Scheduler.new
      Fiber.set_scheduler(s)
      Fiber.schedule { r.read(1) } # waits until the ensure below writes
      begin
        s.run # blocks in the kernel: nothing else can wake it but the raise
        :not_interrupted
      rescue interrupted
        :interrupted
      ensure
        w.write("x")
        Fiber.set_scheduler(nil)
      end
    end
    Thread.pass until loop_thread.status == "sleep" || !loop_thread.alive?
    sleep 0.02
    loop_thread.raise(interrupted)
    assert_equal :interrupted, loop_thread.value
    [r, w].each(&:close)
  end

  def test_many_cross_thread_wakeups
    n = 2_000
    weft do
      q = Thread::Queue.new
      back = Thread::Queue.new
      t = Thread.new { n.times { |i| q << i; back.pop } }
      sum = 0
      n.times do
        sum += q.pop
        back << true
      end
      t.join
      assert_equal n * (n - 1) / 2, sum
    end
  end

  def test_block_and_unblock_directly
    weft do |s|
      fiber = Fiber.current
      result = nil
      Fiber.schedule { sleep 0; s.unblock(:me, fiber) }
      result = s.block(:me, nil)
      assert_equal true, result
      assert_equal false, s.block(:me, 0.01)
    end
  end
end
