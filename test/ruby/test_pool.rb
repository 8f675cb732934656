# frozen_string_literal: true

require_relative "helper"

# Weft::Pool semantics with plain objects as resources, under
# Weft::Scheduler: the limit under 1,000 fibers, FIFO hand-off, acquire
# timeout, idle expiry, max_uses, broken replacement, create failure,
# validation, use timeout, close with waiters and resources in use, and
# every resource destroyed exactly once.
class TestPool < Minitest::Test
  include WeftTestHelper

  Res = Struct.new(:id, :destroyed, :bad)

  # A pool whose callbacks count what they see.
  def make_pool(**options)
    @made = []
    @live = 0
    @live_peak = 0
    @fail_next = 0
    create = lambda do
      sleep 0 # let other fibers run while "connecting"
      if @fail_next.positive?
        @fail_next -= 1
        raise Errno::ECONNREFUSED, "test"
      end
      r = Res.new(@made.size, 0, false)
      @made << r
      @live += 1
      @live_peak = [@live_peak, @live].max
      r
    end
    destroy = lambda do |r|
      r.destroyed += 1
      @live -= 1
    end
    Weft::Pool.new(create: create, destroy: destroy, **options)
  end

  def assert_all_destroyed_once(pool)
    assert pool.close(timeout: 5)
    assert_equal 0, @live
    @made.each { |r| assert_equal 1, r.destroyed, "resource #{r.id}" }
    st = pool.stats
    assert_equal 0, st[:size]
    assert_equal @made.size, st[:created]
    assert_equal @made.size, st[:destroyed]
  end

  def test_limit_never_exceeded_by_1000_fibers
    weft do
      pool = make_pool(max_size: 4, max_uses: 20)
      using = peak = 0
      rng = Random.new(7)
      fibers = 1000.times.map do
        Fiber.schedule do
          3.times do
            pool.acquire do |r|
              refute_equal 1, r.destroyed
              using += 1
              peak = [peak, using].max
              assert_operator pool.stats[:size], :<=, 4
              k = rng.rand(8)
              sleep 0 if k < 3
              sleep 0.0005 if k == 3
              using -= 1
              pool.broken!(r) if k == 7
            end
          end
        end
      end
      sleep 0.001 while fibers.any?(&:alive?)
      st = pool.stats
      assert_equal 4, peak
      assert_equal 4, st[:peak_size]
      assert_operator @live_peak, :<=, 4
      assert_equal 3000, st[:acquired]
      assert_operator st[:broken], :>, 0
      assert_operator st[:recycled], :>, 0
      assert_all_destroyed_once(pool)
    end
  end

  def test_fifo_hand_off
    weft do
      pool = make_pool(max_size: 1)
      held = pool.acquire
      order = []
      10.times do |i|
        Fiber.schedule { pool.acquire { order << i; sleep 0 } }
      end
      assert_equal 10, pool.stats[:waiters]
      pool.release(held)
      # handed to the first waiter already: a late arrival cannot take it
      assert_raises(Weft::Pool::TimeoutError) { pool.acquire(timeout: 0) }
      sleep 0.001 until order.size == 10
      assert_equal (0..9).to_a, order
      assert_equal 1, @made.size
      assert_all_destroyed_once(pool)
    end
  end

  def test_acquire_timeout
    weft do
      pool = make_pool(max_size: 1)
      held = pool.acquire
      t0 = now
      err = assert_raises(Weft::Pool::TimeoutError) { pool.acquire(timeout: 0.02) }
      assert_kind_of Timeout::Error, err
      assert_operator now - t0, :>=, 0.02
      assert_equal 1, pool.stats[:timeouts]
      assert_equal 0, pool.stats[:waiters]
      pool.release(held)
      assert_raises(Weft::Pool::Error) { pool.release(held) }
      assert_all_destroyed_once(pool)
    end
  end

  def test_idle_resources_expire_in_the_background
    weft do
      pool = make_pool(max_size: 3, idle_timeout: 0.02)
      3.times.map { Fiber.schedule { pool.acquire { sleep 0 } } }
      sleep 0.001 until pool.stats[:idle] == 3
      assert_equal 3, @live
      sleep 0.2
      st = pool.stats
      assert_equal 0, st[:idle]
      assert_equal 3, st[:expired]
      assert_equal 0, @live
      pool.acquire { |r| assert_equal 3, r.id }
      assert_all_destroyed_once(pool) # also ends the new reaper fiber
    end
  end

  def test_max_uses_recycles
    weft do
      pool = make_pool(max_size: 1, max_uses: 3)
      ids = 7.times.map { pool.acquire(&:id) }
      assert_equal [0, 0, 0, 1, 1, 1, 2], ids
      assert_equal 2, pool.stats[:recycled]
      assert_all_destroyed_once(pool)
    end
  end

  def test_broken_resource_is_replaced
    weft do
      pool = make_pool(max_size: 1, broken_on: [IOError])
      assert_raises(IOError) { pool.acquire { raise IOError, "connection lost" } }
      assert_equal 1, @made[0].destroyed
      assert_equal 0, @live # replaced on demand only
      waiter = Fiber.schedule { pool.acquire(&:id) }
      r = pool.acquire
      pool.broken!(r)
      got = nil
      Fiber.schedule { got = pool.acquire(&:id) }
      pool.release(r)
      sleep 0.001 until got
      assert_equal 2, got
      refute waiter.alive?
      # an exception not listed in broken_on keeps the resource
      assert_raises(ArgumentError) { pool.acquire { raise ArgumentError } }
      assert_equal 2, pool.stats[:broken]
      assert_equal 1, pool.stats[:idle]
      assert_all_destroyed_once(pool)
    end
  end

  def test_validation_replaces_bad_idle_resources
    weft do
      pool = make_pool(max_size: 1, validate: ->(r) { !r.bad })
      pool.acquire { |r| r.bad = true }
      assert_equal 1, pool.acquire(&:id)
      assert_equal 1, pool.stats[:invalid]
      assert_equal 2, pool.stats[:acquired]
      assert_all_destroyed_once(pool)
    end
  end

  def test_create_failure_passes_through
    weft do
      pool = make_pool(max_size: 1)
      @fail_next = 1
      assert_raises(Errno::ECONNREFUSED) { pool.acquire { flunk } }
      assert_equal 0, pool.stats[:size]
      held = pool.acquire
      results = []
      2.times { Fiber.schedule { results << (pool.acquire(&:id) rescue $!.class) } }
      @fail_next = 1
      pool.broken!(held)
      pool.release(held)
      sleep 0.001 until results.size == 2
      assert_equal [Errno::ECONNREFUSED, 1], results
      assert_equal 2, pool.stats[:create_failed]
      assert_all_destroyed_once(pool)
    end
  end

  def test_use_timeout_breaks_the_resource
    weft do
      pool = make_pool(max_size: 1, use_timeout: 0.02)
      assert_raises(Timeout::Error) { pool.acquire { sleep 5 } }
      assert_equal 1, pool.stats[:broken]
      assert_equal :ok, pool.acquire { :ok }
      assert_all_destroyed_once(pool)
    end
  end

  def test_close_with_waiters_and_resources_in_use
    weft do
      pool = make_pool(max_size: 2)
      a = pool.acquire
      b = pool.acquire
      errors = []
      3.times { Fiber.schedule { pool.acquire { flunk } rescue errors << $!.class } }
      refute pool.close(timeout: 0.01) # still in use
      assert_equal [Weft::Pool::ClosedError] * 3, errors
      assert_raises(Weft::Pool::ClosedError) { pool.acquire }
      pool.release(b) # destroyed at once
      assert_equal 1, @live
      Fiber.schedule { sleep 0.01; pool.release(a) }
      assert pool.close
      assert_equal 0, @live
      assert_all_destroyed_once(pool)
    end
  end

  def test_works_with_threads_too
    pool = make_pool(max_size: 2)
    in_use = peak = 0
    lock = Mutex.new
    8.times.map do
      Thread.new do
        20.times do
          pool.acquire do
            lock.synchronize { in_use += 1; peak = [peak, in_use].max }
            sleep 0.0005
            lock.synchronize { in_use -= 1 }
          end
        end
      end
    end.each(&:join)
    assert_operator peak, :<=, 2
    assert_all_destroyed_once(pool)
  end
end
