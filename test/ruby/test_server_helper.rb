# frozen_string_literal: true

require_relative "helper"
require "weft/server"
require "stringio"
# Debian's rack is installed for its Ruby (3.1); a Ruby built beside it
# (3.3) finds the same pure-Ruby gem through this directory.
DEBIAN_RACK = Dir["/usr/share/rubygems-integration/all/gems/rack-2*/lib"].max
begin
  begin
    require "rack"
  rescue LoadError
    raise unless DEBIAN_RACK

    $LOAD_PATH << DEBIAN_RACK
    require "rack"
  end
  require "uri" # Rack 2.2's Lint uses URI without loading it
  require "rack/lint"
rescue LoadError
  nil # the server's tests skip (Debian: ruby-rack)
end

# Shared by the test_server*.rb files (no tests of its own): a
# Weft::Server on an ephemeral port in a thread of this process, with the
# app under Rack::Lint, and a raw HTTP client over plain blocking sockets
# (the client never shares the server's scheduler). Every wait of the
# client has a deadline, only as a hang guard.
module ServerTestHelper
  GUARD = 10 # seconds: a hang guard, never a measurement

  def setup
    skip "rack is not installed (Debian: ruby-rack)" unless defined?(Rack::Lint)
    super
  end

  # A thread-safe log the tests can read.
  class LogIO
    def initialize = (@mutex = Thread::Mutex.new; @s = +"")
    def write(*parts) = @mutex.synchronize { parts.each { |p| @s << p.to_s }; parts.sum { |p| p.to_s.bytesize } }
    def string = @mutex.synchronize { @s.dup }
    def flush = self
  end

  # Start a server for +app+ (wrapped in Rack::Lint unless lint: false),
  # yield its port, stop it and check it ended.
  def with_server(app, lint: true, bind: "tcp://127.0.0.1:0", **options)
    @errors = LogIO.new
    @access = LogIO.new
    app = Rack::Lint.new(app) if lint
    server = Weft::Server.new(app, bind: bind, log: @errors, access_log: @access, **options)
    server.open_listeners
    @server = server
    thread = run_on_thread(server)
    yield server.ports.first, server
    server.stop
    assert thread.join(GUARD), "the server did not stop"
    thread.value
  ensure
    kill_thread(thread)
  end

  # A thread running +server+ (#run), its exception kept for join.
  def run_on_thread(server)
    Thread.new do
      Thread.current.report_on_exception = false
      server.run
    end
  end

  # A server for +app+ on a port of its own, logs unread, running on a
  # thread the test ends itself: [server, thread].
  def server_on_thread(app)
    server = Weft::Server.new(app, bind: "tcp://127.0.0.1:0", log: LogIO.new, access_log: LogIO.new)
    server.open_listeners
    [server, run_on_thread(server)]
  end

  # The end of a test whose server thread may still run (it failed).
  def kill_thread(thread)
    return unless thread&.alive?
    thread.kill
    thread.join(1)
  end

  # RUBYLIB for a child Ruby: where this process found weft.so (lib/, or
  # build/ruby-VERSION/lib for another Ruby), lib/, and Debian's rack if
  # this Ruby needed it.
  def self.child_rubylib
    so = $LOADED_FEATURES.find { |f| f.end_with?("/weft/weft.so") }
    dirs = [so && File.dirname(so, 2), File.expand_path("../../lib", __dir__)]
    dirs << DEBIAN_RACK if DEBIAN_RACK && $LOAD_PATH.include?(DEBIAN_RACK)
    dirs.compact.uniq.join(File::PATH_SEPARATOR)
  end

  # Whatever happens to this process (the watchdog's exit!, a kill),
  # run +command+ (a shell line) once it has gone: a detached guardian
  # that polls for it. Children and clusters of the tests are cleaned up
  # that way even when teardown never runs.
  def self.after_death(command)
    pid = Process.spawn("bash", "-c", "while kill -0 #{Process.pid} 2>/dev/null; do sleep 0.5; done; #{command}",
                        in: File::NULL, out: File::NULL, err: File::NULL, pgroup: true)
    Process.detach(pid)
  end

  # Process.spawn in a process group of its own that is killed if this
  # process dies first.
  def self.spawn_guarded(*args, **options)
    pid = Process.spawn(*args, **options, pgroup: true)
    after_death("kill -KILL -- -#{pid} 2>/dev/null")
    pid
  end

  def errors_logged = @errors.string
  def access_logged = @access.string

  def connect(port) = TCPSocket.new("127.0.0.1", port)

  # Send +request+ on a new connection; return the first response.
  def request(port, request)
    sock = connect(port)
    sock.write(request)
    read_response(sock)
  ensure
    sock&.close
  end

  def get(port, path = "/", headers = "")
    request(port, "GET #{path} HTTP/1.1\r\nHost: test\r\n#{headers}\r\n")
  end

  Response = Struct.new(:status, :headers, :body, :raw_head) do
    def [](name) = headers[name.downcase]
    def close? = headers["connection"]&.casecmp?("close")
  end

  # Read bytes until +want+ (a Regexp or a count) is satisfied or EOF.
  def read_until(sock, buf, &done)
    deadline = now + GUARD
    until done.call
      left = deadline - now
      raise "read timed out (hang guard)" if left <= 0 || !sock.wait_readable(left)

      chunk = sock.read_nonblock(65_536, exception: false)
      next if chunk == :wait_readable
      return false if chunk.nil?

      buf << chunk
    end
    true
  end

  # One response from +sock+ (a buffer of bytes already read may be given
  # and is consumed). nil when the server closed without one.
  def read_response(sock, buf = +"".b, head_request: false)
    return nil unless read_until(sock, buf) { buf.include?("\r\n\r\n") }

    head, rest = buf.split("\r\n\r\n", 2)
    buf.replace(rest)
    lines = head.split("\r\n")
    status = lines.shift[/\AHTTP\/1\.1 (\d{3}) /, 1].to_i
    headers = {}
    lines.each do |l|
      k, v = l.split(": ", 2)
      k = k.downcase
      headers[k] = headers.key?(k) ? "#{headers[k]}\n#{v}" : v
    end
    body = +"".b
    if head_request || status == 204 || status == 304 || (100..199).cover?(status)
      nil
    elsif headers["content-length"]
      n = headers["content-length"].to_i
      read_until(sock, buf) { buf.bytesize >= n }
      body = buf.slice!(0, n)
    elsif headers["transfer-encoding"] == "chunked"
      loop do
        read_until(sock, buf) { buf.include?("\r\n") }
        size_line, rest = buf.split("\r\n", 2)
        size = size_line.to_i(16)
        buf.replace(rest)
        read_until(sock, buf) { buf.bytesize >= size + 2 }
        body << buf.slice!(0, size)
        buf.slice!(0, 2)
        break if size.zero?
      end
    else
      read_until(sock, buf) { false }
      body = buf.dup
      buf.clear
    end
    Response.new(status, headers, body, head)
  end

  # True when the server closed +sock+ (EOF or reset) within the guard.
  def closed_by_server?(sock)
    buf = +"".b
    read_until(sock, buf) { false } == false
  rescue Errno::ECONNRESET
    true
  end
end
