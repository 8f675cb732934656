# frozen_string_literal: true

# soak_server.rb — the Ruby side of bench/soak.sh: the example HTTP server
# (examples/ruby/http_server.rb, one fiber per connection under
# Weft::Scheduler) plus a fiber that prints, every --interval seconds, one
# line of Weft::Scheduler#stats and Ruby's own counters:
#   stats T waits W fd_waits D timers T waiting_fibers F ready R
#         ops_inflight O requests Q connections C live_slots L fibers_alive A
#
#   ruby -I lib bench/ruby/soak_server.rb --port P [--interval S] [--backend B]
#
# Prints "listening on http://127.0.0.1:PORT ..." once ready; SIGINT or
# SIGTERM stops it (exit 0).
require_relative "../../examples/ruby/http_server"
require "weft"

port = 0
interval = 10.0
backend = nil
args = ARGV.dup
until args.empty?
  flag = args.shift
  value = args.shift or abort "soak_server.rb: #{flag} needs a value"
  case flag
  when "--port" then port = Integer(value)
  when "--interval" then interval = Float(value)
  when "--backend" then backend = value
  else abort "usage: soak_server.rb --port P [--interval S] [--backend B]"
  end
end

%w[INT TERM].each { |sig| Signal.trap(sig) { raise Interrupt } }
$stdout.sync = true
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
line = lambda do |s|
  st = s.stats
  format("stats %.1f waits %d fd_waits %d timers %d waiting_fibers %d ready %d " \
         "ops_inflight %d requests %d connections %d live_slots %d fibers_alive %d",
         Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, st[:waits], st[:fd_waits],
         st[:timers], st[:waiting_fibers], st[:ready], st[:ops_inflight],
         HelloServer.requests, HelloServer.connections, GC.stat(:heap_live_slots),
         ObjectSpace.each_object(Fiber).count(&:alive?))
end
begin
  opts = backend ? { backend: backend } : {}
  Weft.run(**opts) do |s|
    server = HelloServer.listen("127.0.0.1", port) { "Weft::Scheduler on #{s.backend}, soak" }
    Fiber.schedule do
      loop do
        sleep interval
        $stdout.puts line.call(s)
      end
    end
    HelloServer.accept_loop(server) { |conn| Fiber.schedule { HelloServer.serve(conn) } }
  end
rescue Interrupt, SignalException
  nil
ensure
  warn "served #{HelloServer.requests} requests on #{HelloServer.connections} connections"
end
