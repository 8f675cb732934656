# frozen_string_literal: true

require_relative "helper"

# lib/weft/*: Notification, Semaphore, TaskLimiter, Promise/Future.
class TestHelpers < Minitest::Test
  include WeftTestHelper

  def test_notification_wakes_every_waiter
    got = []
    weft do
      n = Weft::Notification.new
      3.times { Fiber.schedule { got << n.wait } }
      Fiber.schedule { got << n.wait(timeout: 0.01) } .tap {} # times out first
      sleep 0.02
      n.signal(:go)
    end
    assert_equal [nil, :go, :go, :go], got
  end

  def test_notification_from_a_thread
    weft do
      n = Weft::Notification.new
      Thread.new { sleep 0.01; n.signal(7) }
      assert_equal 7, n.wait
    end
  end

  def test_task_limiter_caps_concurrency
    peak = 0
    running = 0
    done = 0
    weft do
      limiter = Weft::TaskLimiter.new(3)
      10.times do
        limiter.schedule do
          running += 1
          peak = [peak, running].max
          sleep 0.005
          running -= 1
          done += 1
        end
      end
    end
    assert_equal 10, done
    assert_equal 3, peak
  end

  def test_semaphore
    weft do
      sem = Weft::Semaphore.new(1)
      assert sem.acquire
      refute sem.acquire(timeout: 0.01)
      Fiber.schedule { sleep 0.01; sem.release }
      assert sem.acquire(timeout: 5)
      sem.release
      assert_equal 0, sem.count
      assert_raises(Weft::Error) { sem.release }
      assert_raises(ArgumentError) { Weft::Semaphore.new(0) }
    end
  end

  def test_promise_future_then
    weft do
      p1 = Weft::Promise.new
      doubled = p1.future.then { |v| v * 2 }.then { |v| v + 1 }
      Fiber.schedule { sleep 0.01; p1.fulfill(20) }
      assert_equal 41, doubled.value
      assert_raises(Weft::Error) { p1.fulfill(1) }
      failing = Weft::Future.spawn { raise KeyError, "nope" }
      assert_raises(KeyError) { failing.then { |v| v }.value }
      assert_raises(ZeroDivisionError) { Weft::Future.spawn { 1 }.then { |v| v / 0 }.value }
    end
  end

  def test_future_value_timeout
    weft do
      never = Weft::Promise.new.future
      assert_raises(Weft::TimeoutError) { never.value(timeout: 0.01) }
      assert_raises(Timeout::Error) { never.value(timeout: 0) }
    end
  end

  def test_future_any_and_all
    weft do
      slow = Weft::Future.spawn { sleep 0.03; :slow }
      fast = Weft::Future.spawn { sleep 0.01; :fast }
      assert_equal :fast, Weft::Future.any(slow, fast).value
      assert_equal %i[slow fast], Weft::Future.all(slow, fast).value
      assert_equal [], Weft::Future.all.value
      bad = Weft::Future.spawn { raise IOError, "x" }
      assert_raises(IOError) { Weft::Future.all([slow, bad]).value }
    end
  end

  def test_future_across_threads
    weft do
      promise = Weft::Promise.new
      Thread.new { sleep 0.01; promise.fulfill(:from_thread) }
      assert_equal :from_thread, promise.future.value(timeout: 5)
    end
  end
end
