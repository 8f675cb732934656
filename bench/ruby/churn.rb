# frozen_string_literal: true

# Fiber churn under a fiber scheduler: FIBERS fibers started with
# Fiber.schedule, each calling sleep(0) ROUNDS times (every sleep(0) is a
# trip through the scheduler: park the fiber, run the others, resume it).
#   ruby -I lib bench/ruby/churn.rb weft|async|minimal|hook|floor sleep0|spawn [FIBERS] [ROUNDS]
# Prints ns per sleep(0) ("sleep0", among FIBERS fibers that all exist:
# see the laps below) or ns per fiber started and finished with an empty
# body ("spawn"). "async" runs the same code under Async 1.x, "minimal"
# under the smallest scheduler that can run it (MinimalScheduler below),
# "hook" under one that does not switch at all (HookScheduler).
# "floor" is the same round-robin with no scheduler: FIBERS live fibers,
# each passing control to the next with Fiber#transfer (what a sleep(0)
# among FIBERS fibers cannot beat); ns per transfer.
mode = ARGV[0] || "weft"
what = ARGV[1] || "sleep0"
fibers = Integer(ARGV[2] || 10_000)
rounds = Integer(ARGV[3] || 10)
clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }

# sleep0: the clock runs from the end of the first lap (every fiber
# started and parked once) to the end of lap ROUNDS + 1, both read by the
# first fiber, so the window holds FIBERS x ROUNDS hand-offs and neither
# the fibers' start (the "spawn" figure) nor their end.
t0 = t1 = nil
work = lambda do
  if what == "spawn"
    fibers.times { Fiber.schedule {} }
  else
    fibers.times do |i|
      Fiber.schedule do
        (rounds + 1).times do |j|
          sleep 0
          next unless i == 0
          t0 = clock.call if j == 0
          t1 = clock.call if j == rounds
        end
      end
    end
  end
end

# "minimal": the least a Fiber::Scheduler can do for sleep(0): queue the
# caller, transfer to the next queued fiber. No timers, no I/O, no
# errors; what Ruby's own path from Kernel#sleep to a scheduler hook and
# back costs, the floor for any scheduler.
class MinimalScheduler
  def initialize
    @ready = []
  end

  def fiber(&block)
    f = Fiber.new(blocking: false, &block)
    @ready << f
    f
  end

  def kernel_sleep(_duration = nil)
    @ready << Fiber.current
    @ready.shift.transfer
  end

  def block(*) = raise(NotImplementedError)
  def unblock(*) = raise(NotImplementedError)
  def io_wait(*) = raise(NotImplementedError)

  def close
    while (f = @ready.shift)
      f.transfer
    end
  end
end

# "hook": a scheduler whose kernel_sleep returns at once. Its sleep(0)
# is the cost of reaching a scheduler from Kernel#sleep and back, with no
# switch; the floor plus this is what no scheduler can go below.
class HookScheduler < MinimalScheduler
  def fiber(&block)
    Fiber.new(blocking: false, &block).tap(&:resume)
  end

  def kernel_sleep(_duration = nil) = nil
end

s0 = clock.call
case mode
when "floor"
  abort "churn.rb: floor measures sleep0 only" unless what == "sleep0"
  ring = Array.new(fibers)
  fibers.times do |i|
    nxt = (i + 1) % fibers
    # The first fiber ends after its last turn (back to the main fiber);
    # the others stay parked in their last transfer, as parked fibers do.
    # The laps are written out as in `work`, not shared through a block or
    # a lambda: a call per hand-off would be inside the measured window
    # (a lambda there added more than a sleep(0) costs).
    ring[i] = Fiber.new do
      (rounds + 1).times do |j|
        ring[nxt].transfer
        next unless i == 0
        t0 = clock.call if j == 0
        t1 = clock.call if j == rounds
      end
    end
  end
  ring[0].transfer
when "minimal", "hook"
  abort "churn.rb: #{mode} measures sleep0 only" unless what == "sleep0"
  Thread.new do
    Fiber.set_scheduler(mode == "hook" ? HookScheduler.new : MinimalScheduler.new)
    work.call
  end.join
when "async"
  require "async"
  Async { work.call }
else
  require "weft"
  Weft.run { work.call }
end
if what == "spawn"
  printf("%.0f\n", (clock.call - s0).to_f / fibers)
else
  # Under "hook" nothing switches: the first fiber's laps are its own.
  printf("%.0f\n", (t1 - t0).to_f / (mode == "hook" ? rounds : fibers * rounds))
end
