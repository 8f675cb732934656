# frozen_string_literal: true

# Resident memory per parked fiber that holds an idle connection.
#   ruby -I lib bench/ruby/idle_rss.rb weft|async|floor [N]
# Makes N socket pairs first, then N fibers, each waiting to read from one
# end: under weft or Async, a fiber of the scheduler blocked in
# IO#read_nonblock's wait (what a server's idle keep-alive connection is);
# "floor", the same N fibers with no scheduler, each parked in Fiber.yield
# after its first step. Prints the growth of VmRSS from before the fibers
# to when all are parked, in bytes per fiber (the sockets are made before
# and are not counted).
require "socket"

mode = ARGV[0] || "weft"
n = Integer(ARGV[1] || 5000)
soft, hard = Process.getrlimit(:NOFILE)
Process.setrlimit(:NOFILE, [hard, 2 * n + 100].max, [hard, 2 * n + 100].max) if soft < 2 * n + 100

def rss_bytes
  File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i * 1024
end

pairs = Array.new(n) { UNIXSocket.pair }
GC.start
GC.disable # what the fibers take, not what a collection gives back
before = nil
parked = 0
wait = lambda do |sock|
  parked += 1
  sock.read_nonblock(1, exception: false) == :wait_readable && sock.wait_readable
end

case mode
when "floor"
  before = rss_bytes
  fibers = pairs.map { |a, _| Fiber.new { parked += 1; Fiber.yield; a.close } }
  fibers.each(&:resume)
  after = rss_bytes
when "async", "weft"
  if mode == "async"
    require "async"
    runner = ->(&blk) { Async(&blk) }
  else
    require "weft"
    runner = ->(&blk) { Weft.run(&blk) }
  end
  after = nil
  runner.call do
    before = rss_bytes
    pairs.each { |a, _| Fiber.schedule { wait.call(a) } }
    sleep 0.05 until parked == n
    after = rss_bytes
    pairs.each { |_, b| b.write("x") } # let every fiber finish
  end
else
  abort "idle_rss.rb: weft|async|floor"
end
abort "idle_rss.rb: #{parked} of #{n} fibers parked" unless parked == n
printf("%.0f\n", (after - before).to_f / n)
