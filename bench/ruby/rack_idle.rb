# frozen_string_literal: true

# rack_idle.rb PORT SERVER_PID N — bench/parts/rack.sh's idle row: open N
# keep-alive connections to the server, one request on each (so each is
# an idle keep-alive connection the server holds), then print the
# server's resident memory in MiB and the median and worst latency in ms
# of 50 requests on one more connection meanwhile.
require "socket"

port = Integer(ARGV.fetch(0))
pid = Integer(ARGV.fetch(1))
n = Integer(ARGV.fetch(2))
soft, hard = Process.getrlimit(:NOFILE)
Process.setrlimit(:NOFILE, hard, hard) if soft < hard
REQ = "GET / HTTP/1.1\r\nHost: b\r\n\r\n"

def read_answer(sock)
  buf = +""
  buf << sock.readpartial(4096) until buf.include?("\r\n\r\n") && buf.end_with?("Hello, World!")
end

conns = []
n.times do
  s = TCPSocket.new("127.0.0.1", port)
  s.write(REQ)
  conns << s
  read_answer(s)
end
rss = File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i / 1024.0
probe = TCPSocket.new("127.0.0.1", port)
times = Array.new(50) do
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  probe.write(REQ)
  read_answer(probe)
  (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t) * 1000
end.sort
printf "%.1f %.3f %.3f\n", rss, times[times.size / 2], times.last
conns.each(&:close)
