# frozen_string_literal: true

# Pipe and socket round trips between two fibers under Weft::Scheduler
# (or Async with ASYNC=1): one byte each way, N times; prints ns per round
# trip.  Usage: ruby -I lib bench/ruby/roundtrip.rb pipe|unix|tcp [N] [io|buffer]
# "io" (default) uses IO#write/#readpartial: Ruby calls the io_read/io_write
# hooks with length 0 (one attempt; a readiness wait on EAGAIN). "buffer"
# uses IO::Buffer#read/#write with a minimum length of 1, which Weft runs as
# io_uring operations on that backend.
require "socket"
kind = ARGV[0] || "pipe"
n = Integer(ARGV[1] || 20_000)
$mode = ARGV[2] || "io"

def pair(kind)
  case kind
  when "pipe"
    a_r, b_w = IO.pipe
    b_r, a_w = IO.pipe
    [[a_r, a_w], [b_r, b_w]]
  when "unix"
    a, b = UNIXSocket.pair
    [[a, a], [b, b]]
  else
    server = TCPServer.new("127.0.0.1", 0)
    c = TCPSocket.new("127.0.0.1", server.addr[1])
    s = server.accept
    server.close
    [c, s].each { |x| x.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1) }
    [[c, c], [s, s]]
  end
end

def run(kind, n)
  (ar, aw), (br, bw) = pair(kind)
  t0 = nil
  if $mode == "buffer"
    Fiber.schedule do
      buf = IO::Buffer.new(1)
      n.times { buf.read(br, 1); buf.write(bw, 1) }
    end
    Fiber.schedule do
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      buf = IO::Buffer.new(1)
      n.times { buf.write(aw, 1); buf.read(ar, 1) }
    end
  else
    Fiber.schedule do
      n.times { bw.write(br.readpartial(1)) }
    end
    Fiber.schedule do
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      n.times do
        aw.write("x")
        ar.readpartial(1)
      end
    end
  end
  -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t0 }
end

elapsed = nil
if ENV["ASYNC"] == "1"
  require "async"
  Async { elapsed = run(kind, n) }
else
  require "weft"
  Weft.run { elapsed = run(kind, n) }
end
printf("%.0f\n", elapsed.call.to_f / n)
