# frozen_string_literal: true

# The loop's blocking poll and Ruby 3.1 (found by the crash hunt, issue 18).
# The loop sleeps in rb_thread_call_without_gvl with an unblocking function
# that posts to the reactor (a malloc and a mutex: not async-signal-safe).
# When the calling thread is the process's only Ruby thread, Ruby 3.1's
# rb_nogvl then starts a helper Ruby thread for the call (so that a signal
# can reach the unblocking function from a thread, not from the signal
# handler) and kills and joins it afterwards: a Ruby thread started and joined
# every time the loop goes to sleep (a 10 us sleep took 33 us here against
# 27 us on Ruby 3.3, which no longer does this), and when a signal's trap
# raises on the way out of the poll, the kill and join are skipped and the
# helper sleeps for the rest of the process (the extra sleeping thread in
# the thread lists of the crash hunt's hung servers). An unblocking function
# that only writes to the reactor's eventfd is async-signal-safe and can
# say so (rb_nogvl with RB_NOGVL_UBF_ASYNC_SAFE): no helper thread.
require_relative "helper"
require "rbconfig"

class TestBlockingPoll < Minitest::Test
  include WeftTestHelper

  # In a child process: this suite's watchdog thread would make the main
  # thread not the only one, and Ruby 3.1 starts no helper then.
  SCRIPT = <<~'RUBY'
    require "weft"
    started = 0
    TracePoint.new(:thread_begin) { started += 1 }.enable
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Weft.run { 200.times { sleep 0.00001 } }
    us = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t) * 1e6 / 200
    puts "#{started} #{us.round(1)}"
  RUBY

  def test_a_blocking_poll_starts_no_thread
    dirs = $LOAD_PATH.select { |d| File.exist?(File.join(d, "weft", "weft.so")) || File.exist?(File.join(d, "weft.rb")) }
    args = dirs.flat_map { |d| ["-I", d] }
    out = IO.popen([RbConfig.ruby, *args, "-e", SCRIPT], err: %i[child out], &:read)
    started, us = out.split.map(&:to_f)
    assert_equal 0, started.to_i,
                 "200 blocking polls started #{started.to_i} Ruby threads (#{us} us a poll): #{out}"
  end
end
