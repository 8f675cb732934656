# frozen_string_literal: true

# Fiber churn under a fiber scheduler: FIBERS fibers started with
# Fiber.schedule, each calling sleep(0) ROUNDS times (every sleep(0) is a
# trip through the scheduler: park the fiber, run the others, resume it).
#   ruby -I lib bench/ruby/churn.rb weft|async|floor sleep0|spawn [FIBERS] [ROUNDS]
# Prints ns per sleep(0) ("sleep0") or ns per fiber started and finished
# with an empty body ("spawn"). "async" runs the same code under Async 1.x.
# "floor" is the same round-robin with no scheduler: FIBERS live fibers,
# each passing control to the next with Fiber#transfer ROUNDS times (what
# a sleep(0) among FIBERS fibers cannot beat); ns per transfer.
mode = ARGV[0] || "weft"
what = ARGV[1] || "sleep0"
fibers = Integer(ARGV[2] || 10_000)
rounds = Integer(ARGV[3] || 10)

work = lambda do
  if what == "spawn"
    fibers.times { Fiber.schedule {} }
  else
    fibers.times { Fiber.schedule { rounds.times { sleep 0 } } }
  end
end

clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
t0 = nil
if mode == "floor"
  abort "churn.rb: floor measures sleep0 only" unless what == "sleep0"
  ring = Array.new(fibers)
  fibers.times do |i|
    nxt = (i + 1) % fibers
    # The first fiber ends after its last turn (back to the main fiber);
    # the others stay parked in their last transfer, as parked fibers do.
    ring[i] = Fiber.new { rounds.times { ring[nxt].transfer } }
  end
  t0 = clock.call
  ring[0].transfer
elsif mode == "async"
  require "async"
  t0 = clock.call
  Async { work.call }
else
  require "weft"
  t0 = clock.call
  Weft.run { work.call }
end
elapsed = clock.call - t0
ops = what == "spawn" ? fibers : fibers * rounds
printf("%.0f\n", elapsed.to_f / ops)
