# frozen_string_literal: true

# crash_server.rb — the server bench/crash_hunt.sh starts and interrupts:
# examples/ruby/http_server.rb in weft mode, run the way that program runs
# it (INT and TERM raise Interrupt, which Weft.run and the program
# rescue), under one of the GC variants of the hunt:
#
#   WEFT_HUNT_GC=none      as it is
#   WEFT_HUNT_GC=stress    GC.stress from the moment the server starts
#   WEFT_HUNT_GC=compact   GC.auto_compact, and a thread that runs
#                          GC.compact every 20 ms while fibers wait
#
#   ruby -I EXTDIR -I lib bench/ruby/crash_server.rb [--backend B]
#
# WEFT_HUNT_ASAN=1 (the hunt's ASan build, its runtime preloaded into
# Debian's Ruby 3.1): a thread that starts and joins a short-lived thread
# every 0.5 s. Ruby 3.1 keeps the native thread of an ended Ruby thread
# for reuse and lets it exit about 3 s later; when it does, the preloaded
# ASan runtime fails its own check ("failed to deallocate 0x4000 bytes",
# "unable to unmap") and ends the process, with or without weft: plain
# `Thread.new {}.join` followed by 5 s of work is enough. weft starts such
# a thread at load time (lib/weft/scheduler.rb's offset probe). Reusing the
# cached thread keeps it from exiting while the server runs.
#
# SIGQUIT prints every thread's backtrace and the scheduler's #stats.
#
# Prints "listening on http://127.0.0.1:PORT ..." once ready and, on its
# way out, "served N requests on M connections" to stderr; exits 0 after a
# signal, like the example.
require_relative "../../examples/ruby/http_server"
require "weft"

backend = nil
args = ARGV.dup
until args.empty?
  flag = args.shift
  case flag
  when "--backend" then backend = args.shift
  else abort "usage: crash_server.rb [--backend B]"
  end
end

%w[INT TERM].each { |sig| Signal.trap(sig) { raise Interrupt } }
# SIGQUIT (sent by the hunt to a server that does not stop): where every
# thread is and what the scheduler holds, then on to the core.
Signal.trap("QUIT") do
  Thread.list.each { |t| warn "#{t.inspect}\n  #{(t.backtrace || []).first(20).join("\n  ")}" }
  s = Fiber.scheduler
  warn "scheduler: #{s.stats}" if s.respond_to?(:stats)
end
if ENV["WEFT_HUNT_ASAN"] == "1"
  Thread.new do
    loop do
      Thread.new {}.join
      sleep 0.5
    end
  end
end
$stdout.sync = true
case ENV.fetch("WEFT_HUNT_GC", "none")
when "none" then nil
when "stress" then GC.stress = true
when "compact"
  GC.auto_compact = true if GC.respond_to?(:auto_compact=)
  Thread.new do
    loop do
      sleep 0.02
      GC.compact
    end
  end
else abort "crash_server.rb: WEFT_HUNT_GC is none, stress or compact"
end

begin
  HelloServer.run(mode: "weft", host: "127.0.0.1", port: 0, backend: backend)
rescue Interrupt, SignalException
  nil
ensure
  GC.stress = false
  warn "served #{HelloServer.requests} requests on #{HelloServer.connections} connections"
end
