# frozen_string_literal: true

# http_server.rb — a small HTTP/1.1 hello-world server in plain Ruby: an
# accept loop and one fiber per connection under Weft::Scheduler. Keep-alive
# and pipelined requests; every request gets "Hello, World!".
#
#   ruby -I lib examples/ruby/http_server.rb [--port P] [--host ADDR]
#        [--mode weft|async|threads|blocking] [--backend epoll|poll|io_uring]
#
# The connection code is the same in every mode; only what runs it changes
# (the benchmarks in bench/parts/ruby.sh compare them):
#   weft      one fiber per connection under Weft::Scheduler (the default)
#   async     one task per connection under Async 1.x (Debian's ruby-async,
#             nio4r selector)
#   threads   one Ruby Thread per connection, blocking I/O
#   blocking  one connection at a time, blocking I/O
# Prints "listening on http://HOST:PORT" once ready; SIGINT/SIGTERM stop it
# and print the number of requests and connections served to stderr.
require "socket"

module HelloServer
  BODY = "Hello, World!"
  RESPONSE = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" \
             "Content-Length: #{BODY.bytesize}\r\n\r\n#{BODY}".b.freeze
  CLOSING = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n" \
            "Content-Length: #{BODY.bytesize}\r\n\r\n#{BODY}".b.freeze
  BAD = "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n" \
        "Content-Length: 0\r\n\r\n".b.freeze
  MAX_HEAD = 16_384
  END_OF_HEAD = "\r\n\r\n".b.freeze
  CLOSE_RE = /^connection:[ \t]*close/i.freeze
  LENGTH_RE = /^content-length:[ \t]*(\d+)/i.freeze
  HTTP10_RE = %r{\A[^\r\n]* HTTP/1\.0\r?$}.freeze
  KEEP_RE = /^connection:[ \t]*keep-alive/i.freeze

  @requests = 0
  @connections = 0
  class << self
    attr_accessor :requests, :connections
  end

  # Serve one connection until the peer closes it or asks to.
  def self.serve(conn)
    HelloServer.connections += 1
    pending = +"".b
    chunk = String.new(capacity: 16_384, encoding: Encoding::BINARY)
    skip = 0 # request body bytes still to discard
    loop do
      pending << conn.readpartial(16_384, chunk)
      out = nil
      until pending.empty?
        if skip.positive?
          n = [skip, pending.bytesize].min
          pending = pending.byteslice(n, pending.bytesize - n)
          skip -= n
          next
        end
        i = pending.index(END_OF_HEAD)
        unless i
          if pending.bytesize > MAX_HEAD
            conn.write(BAD)
            return
          end
          break
        end
        head = pending.byteslice(0, i)
        pending = pending.byteslice(i + 4, pending.bytesize - i - 4)
        skip = head[LENGTH_RE, 1].to_i
        HelloServer.requests += 1
        close = CLOSE_RE.match?(head) || (HTTP10_RE.match?(head) && !KEEP_RE.match?(head))
        (out ||= +"".b) << (close ? CLOSING : RESPONSE)
        if close
          conn.write(out)
          return
        end
      end
      conn.write(out) if out
    end
  rescue EOFError, IOError, SystemCallError
    nil
  ensure
    conn.close unless conn.closed?
  end

  # Out of descriptors (or kernel memory): the connection stays in the
  # accept queue; back off and try again once others have closed.
  ACCEPT_BACKOFF = [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM].freeze

  def self.accept_loop(server)
    loop do
      begin
        conn = server.accept
      rescue *ACCEPT_BACKOFF
        sleep 0.01
        next
      end
      conn.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
      yield conn
    end
  end

  def self.listen(host, port)
    server = TCPServer.new(host, port)
    server.listen(1024)
    $stdout.puts "listening on http://#{host}:#{server.addr[1]} (#{yield})"
    $stdout.flush
    server
  end

  def self.run(mode:, host:, port:, backend: nil)
    case mode
    when "weft"
      require "weft"
      opts = backend ? { backend: backend } : {}
      Weft.run(**opts) do |s|
        server = listen(host, port) { "Weft::Scheduler on #{s.backend}, one fiber per connection" }
        accept_loop(server) { |conn| Fiber.schedule { serve(conn) } }
      end
    when "async"
      require "async"
      Async do |task|
        server = listen(host, port) { "Async #{Async::VERSION}, one task per connection" }
        accept_loop(server) { |conn| task.async { serve(conn) } }
      end
    when "threads"
      server = listen(host, port) { "one Thread per connection" }
      accept_loop(server) { |conn| Thread.new { serve(conn) } }
    when "blocking"
      server = listen(host, port) { "one connection at a time" }
      accept_loop(server) { |conn| serve(conn) }
    else
      abort "http_server.rb: unknown --mode #{mode}"
    end
  end
end

if $PROGRAM_NAME == __FILE__
  opts = { mode: "weft", host: "127.0.0.1", port: 8080, backend: nil }
  args = ARGV.dup
  until args.empty?
    flag = args.shift
    value = args.shift or abort "http_server.rb: #{flag} needs a value"
    case flag
    when "--port" then opts[:port] = Integer(value)
    when "--host" then opts[:host] = value
    when "--mode" then opts[:mode] = value
    when "--backend" then opts[:backend] = value
    else abort "usage: http_server.rb [--port P] [--host ADDR] [--mode weft|async|threads|blocking] [--backend B]"
    end
  end
  # (also INT: a shell starts background jobs with SIGINT ignored)
  %w[INT TERM].each { |sig| Signal.trap(sig) { raise Interrupt } }
  begin
    HelloServer.run(**opts)
  rescue Interrupt, SignalException
    nil
  ensure
    warn "served #{HelloServer.requests} requests on #{HelloServer.connections} connections"
  end
end
