# frozen_string_literal: true

# churn_http.rb — the classic Fiber-scheduler HTTP benchmark server: accept
# a connection, read the request head line by line with gets, write a fixed
# response with "Connection: close", close. One connection = one request,
# so every request pays for an accept, a first read, a fiber (or thread)
# start and a close (connection churn, issue 15).
#
#   ruby -I lib bench/ruby/churn_http.rb [--port P] [--host ADDR]
#        [--mode weft|async|threads|blocking] [--latency MS]
#
#   weft      one fiber per connection under Weft::Scheduler
#             (WEFT_BACKEND=epoll|poll|io_uring picks the backend)
#   async     one task per connection under Async 1.x
#   threads   one Ruby Thread per connection
#   blocking  no concurrency: each connection handled inline, in turn
# --latency MS sleeps that long in the handler before answering (a stand-in
# for a database call). Prints "listening on http://HOST:PORT" once ready;
# SIGINT/SIGTERM stop it and print the connections served to stderr.
require "socket"

BODY = "Hello, World!"
RESPONSE = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n" \
           "Content-Length: #{BODY.bytesize}\r\n\r\n#{BODY}".b.freeze

opts = {host: "127.0.0.1", port: 8080, mode: "weft", latency: 0.0}
args = ARGV.dup
until args.empty?
  case (a = args.shift)
  when "--port" then opts[:port] = Integer(args.shift)
  when "--host" then opts[:host] = args.shift
  when "--mode" then opts[:mode] = args.shift
  when "--latency" then opts[:latency] = Float(args.shift) / 1000.0
  else abort "churn_http.rb: unknown argument #{a}"
  end
end
abort "churn_http.rb: unknown mode #{opts[:mode]}" unless %w[weft async threads blocking].include?(opts[:mode])

served = 0
latency = opts[:latency]
handle = lambda do |client|
  while (line = client.gets) # the head, up to its empty line
    break if line == "\r\n" || line == "\n"
  end
  sleep(latency) if latency.positive?
  client.write(RESPONSE) if line
  served += 1
rescue IOError, SystemCallError
  nil # the client went away: nothing to answer
ensure
  client.close
end

server = TCPServer.new(opts[:host], opts[:port])
server.listen(4096)
$stdout.puts "listening on http://#{opts[:host]}:#{server.local_address.ip_port}"
$stdout.flush
stop = lambda do
  warn "churn_http: #{served} connections served"
  exit!(0)
end
%w[INT TERM].each { |sig| trap(sig) { stop.call } }

accept_loop = lambda do |spawn|
  loop do
    client = server.accept
    spawn.call(client)
  rescue Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM
    sleep 0.01 # out of descriptors: let connections finish
  end
end

case opts[:mode]
when "weft"
  require "weft"
  Weft.run { accept_loop.call(->(c) { Fiber.schedule { handle.call(c) } }) }
when "async"
  require "async"
  Async { |task| accept_loop.call(->(c) { task.async { handle.call(c) } }) }
when "threads"
  accept_loop.call(->(c) { Thread.new { handle.call(c) } })
when "blocking"
  accept_loop.call(handle)
end
