# frozen_string_literal: true

# Shared setup for the Ruby suite: minitest, weft, and a watchdog so that a
# hung test fails with a message instead of stalling the run.
require "minitest/autorun"
require "weft"
require "socket"
require "timeout"
require "digest"

Warning[:experimental] = false

module WeftTestHelper
  WATCHDOG_SECONDS = Integer(ENV.fetch("WEFT_RUBY_TEST_WATCHDOG", "60"))

  # IO::Buffer.for(+string+), with +string+ kept alive for good on Ruby
  # 3.1: its IO::Buffer unlocks the string from the collector's free
  # function, and when both become garbage in one collection the string
  # may be freed first, which ends the process with "[BUG] object
  # allocation during garbage collection phase" (fixed in Ruby 3.2; seen
  # once in a make test run, in test_ring).
  PINNED_SOURCES = []
  def buffer_for(string)
    PINNED_SOURCES << string if RUBY_VERSION < "3.2"
    IO::Buffer.for(string)
  end

  def setup
    super
    name = "#{self.class}##{@NAME}"
    main = Thread.current
    @watchdog = Thread.new do
      sleep WATCHDOG_SECONDS
      warn "\nweft watchdog: #{name} still running after #{WATCHDOG_SECONDS}s"
      Thread.list.each { |t| warn t.backtrace&.first(12)&.join("\n  ") }
      # A failure of the test by name (minitest counts Assertion itself,
      # not subclasses); the file's other tests still run.
      main.raise(Minitest::Assertion, "#{name} hung: still running after #{WATCHDOG_SECONDS}s")
      # A test that does not unwind ends the process; the runner
      # (scripts/test.d/ruby.sh) counts it as failed and runs the file's
      # remaining tests in a new process.
      sleep Integer(ENV.fetch("WEFT_RUBY_TEST_UNWIND", "20"))
      warn "weft watchdog: #{name} did not unwind; exiting"
      exit!(3)
    end
  end

  def teardown
    @watchdog&.kill
    assert_nil Fiber.scheduler, "a test left a scheduler installed"
    super
  end

  # Run the block under a fresh scheduler (in a scheduled fiber), run to
  # completion, and check the scheduler left no wait behind.
  def weft(**options, &block)
    scheduler = nil
    result = Weft.run(**options) do |s|
      scheduler = s
      block.arity.zero? ? block.call : block.call(s)
    end
    assert scheduler.closed?, "scheduler not closed"
    result
  end

  def assert_quiet(scheduler)
    stats = scheduler.stats
    assert_equal 0, stats[:waits], "waits left: #{stats}"
    assert_equal 0, stats[:waiting_fibers], "fibers still linked: #{stats}"
    assert_equal 0, stats[:ready], "ready left: #{stats}"
  end

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
