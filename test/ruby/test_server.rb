# frozen_string_literal: true

require_relative "test_server_helper"
require "tmpdir"

# Weft::Server's HTTP/1.1 and Rack behaviour, against a raw client. Every
# app runs under Rack::Lint (a few tests of the server's own response
# checks are marked: Lint would refuse those responses first).
class TestServer < Minitest::Test
  include WeftTestHelper
  include ServerTestHelper

  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["Hello, World!"]] }
  ECHO = lambda do |env|
    body = env["rack.input"].read
    env["rack.input"].rewind
    again = env["rack.input"].read
    raise "rack.input did not rewind" unless again == body

    [200, { "content-type" => "application/octet-stream", "x-length" => env["CONTENT_LENGTH"].to_s }, [body]]
  end
  PATH = ->(env) { [200, { "content-type" => "text/plain" }, ["#{env["REQUEST_METHOD"]} #{env["PATH_INFO"]}?#{env["QUERY_STRING"]}"]] }

  def test_get_has_length_date_and_server
    with_server(HELLO, lint: false) do |port| # Lint's body has no to_ary: it would be chunked
      r = get(port)
      assert_equal 200, r.status
      assert_equal "Hello, World!", r.body
      assert_equal "13", r["content-length"]
      assert_match(/\A\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\z/, r["date"])
      assert_equal "weft/#{Weft::VERSION}", r["server"]
      assert_nil r["connection"]
    end
    assert_match(%r{"GET / HTTP/1.1" 200 13\n\z}, access_logged)
  end

  # The access log and the error log name the request as received. Rails'
  # error pages (ShowExceptions) rewrite the env before they answer: a
  # "POST /orders?x=1" that fails becomes "GET /404" there, and the logs
  # used to say so, losing which request had failed.
  def test_logs_name_the_request_as_received_when_the_app_rewrites_the_env
    app = lambda do |env|
      env["REQUEST_METHOD"] = "GET"
      env["PATH_INFO"] = "/404"
      env["QUERY_STRING"] = ""
      raise "kaboom" if env["HTTP_X_RAISE"]

      [404, { "content-type" => "text/plain" }, ["not found"]]
    end
    with_server(app) do |port|
      assert_equal 404, request(port, "POST /orders?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").status
      assert_equal 500, request(port, "PUT /items/7 HTTP/1.1\r\nHost: t\r\nX-Raise: 1\r\nContent-Length: 0\r\n\r\n").status
    end
    lines = access_logged.lines
    assert_match(%r{"POST /orders\?x=1 HTTP/1.1" 404 9\n\z}, lines[0])
    assert_match(%r{"PUT /items/7 HTTP/1.1" 500 21\n\z}, lines[1])
    assert_match(%r{ERROR PUT /items/7: RuntimeError: kaboom}, @errors.string)
  end

  # rack.after_reply (Puma's) and rack.response_finished (Rack 3.1's): run
  # after the answer went out and the body was closed, the first in order
  # with no arguments, the second in reverse order with env, status,
  # headers and the error; one that raises is logged, the rest still run
  # and the connection serves its next request.
  def test_after_reply_and_response_finished_run_once_the_answer_is_out
    events = []
    body = Class.new do
      define_method(:initialize) { |ev| @ev = ev }
      define_method(:each) { |&b| b.call("ok") }
      define_method(:close) { @ev << :body_closed }
    end
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/events"
        [200, { "content-type" => "text/plain" }, [events.inspect]]
      when "/raise"
        env["rack.response_finished"] << ->(_e, st, hd, err) { events << [:finished, st, hd, err&.message] }
        raise "kaboom"
      else
        env["rack.after_reply"] << -> { events << :after1 } << -> { raise "after2 fails" } << -> { events << :after3 }
        env["rack.response_finished"] << ->(e, st, hd, err) { events << [:finished1, e["PATH_INFO"], st, hd["x-k"], err] }
        env["rack.response_finished"] << ->(_e, st, _h, _r) { events << [:finished2, st] }
        [201, { "content-type" => "text/plain", "x-k" => "v" }, body.new(events)]
      end
    end
    with_server(app) do |port|
      sock = connect(port)
      sock.write("GET /one HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal 201, read_response(sock).status
      sock.write("GET /raise HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal 500, read_response(sock).status
      sock.write("GET /events HTTP/1.1\r\nHost: t\r\n\r\n")
      got = read_response(sock).body
      want = [:body_closed, :after1, :after3, [:finished2, 201], [:finished1, "/one", 201, "v", nil],
              [:finished, nil, nil, "kaboom"]]
      assert_equal want.inspect, got
    ensure
      sock&.close
    end
    assert_match(/a response-finished callback: RuntimeError: after2 fails/, errors_logged)
  end

  def test_status_lines_carry_the_standard_reason_phrase
    app = ->(env) { [env["PATH_INFO"][1..].to_i, { "content-type" => "text/plain" }, []] }
    with_server(app) do |port|
      { 201 => "Created", 206 => "Partial Content", 301 => "Moved Permanently", 302 => "Found",
        303 => "See Other", 307 => "Temporary Redirect", 308 => "Permanent Redirect",
        401 => "Unauthorized", 409 => "Conflict", 410 => "Gone", 422 => "Unprocessable Content",
        429 => "Too Many Requests", 502 => "Bad Gateway", 503 => "Service Unavailable" }.each do |code, reason|
        r = get(port, "/#{code}")
        assert_equal "HTTP/1.1 #{code} #{reason}", r.raw_head.lines.first.chomp
      end
    end
  end

  # Rack 2.2's SPEC takes a status "parsed as integer (to_i)": a String
  # such as "404" or "404 Not Found" passes its Lint.
  def test_status_given_as_a_string
    app = ->(env) { [env["PATH_INFO"] == "/full" ? "404 Not Found" : "201", { "content-type" => "text/plain" }, ["s"]] }
    with_server(app) do |port|
      r = get(port, "/")
      assert_equal "HTTP/1.1 201 Created", r.raw_head.lines.first.chomp
      assert_equal "s", r.body
      r = get(port, "/full")
      assert_equal "HTTP/1.1 404 Not Found", r.raw_head.lines.first.chomp
    end
  end

  def test_env_from_request
    seen = nil
    app = lambda do |env|
      seen = env.dup
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app) do |port|
      get(port, "/a/b%20c?x=1&y=2", "X-Multi: 1\r\nX-Multi: 2\r\nCookie: a=1\r\nCookie: b=2\r\nX_Evil: 1\r\n" \
                                    "Content-Type: text/x\r\n")
    end
    assert_equal "GET", seen["REQUEST_METHOD"]
    assert_equal "", seen["SCRIPT_NAME"]
    assert_equal "/a/b%20c", seen["PATH_INFO"]
    assert_equal "x=1&y=2", seen["QUERY_STRING"]
    assert_equal "HTTP/1.1", seen["SERVER_PROTOCOL"]
    assert_equal "test", seen["SERVER_NAME"]
    assert_equal "80", seen["SERVER_PORT"]
    assert_equal "1, 2", seen["HTTP_X_MULTI"]
    assert_equal "a=1; b=2", seen["HTTP_COOKIE"]
    assert_equal "text/x", seen["CONTENT_TYPE"]
    refute seen.key?("HTTP_CONTENT_TYPE")
    refute seen.key?("HTTP_X_EVIL"), "a name with '_' is dropped"
    assert_equal "127.0.0.1", seen["REMOTE_ADDR"]
    assert_equal "http", seen["rack.url_scheme"]
  end

  # The keys Puma sets beside Rack's, which apps and middleware read
  # (Rails' and Sinatra's HTTP/1.0 checks read HTTP_VERSION, loggers
  # REQUEST_PATH): HTTP_VERSION is the request's protocol whatever a
  # Version field says, REQUEST_PATH is PATH_INFO as received, for each
  # form of target.
  def test_env_has_http_version_request_path_and_gateway_interface
    seen = []
    app = lambda do |env|
      seen << env.values_at("HTTP_VERSION", "REQUEST_PATH", "PATH_INFO", "GATEWAY_INTERFACE")
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app) do |port|
      get(port, "/a/b%20c?x=1", "Version: 9.9\r\n")
      request(port, "GET /c HTTP/1.0\r\n\r\n")
      request(port, "GET http://other.example:9000/z?q HTTP/1.1\r\nHost: ignored\r\n\r\n")
    end
    # Rack 2's Lint wants PATH_INFO to start with "/": "*" is served without it.
    with_server(app, lint: false) do |port|
      request(port, "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
    end
    assert_equal [["HTTP/1.1", "/a/b%20c", "/a/b%20c", "CGI/1.2"], ["HTTP/1.0", "/c", "/c", "CGI/1.2"],
                  ["HTTP/1.1", "/z", "/z", "CGI/1.2"], ["HTTP/1.1", "*", "*", "CGI/1.2"]], seen
  end

  # A client that sends a path's UTF-8 raw (not percent-encoded) gets an
  # answer, and the app sees the bytes as sent (binary, as Rack's other
  # request strings), where the parser used to answer 400.
  def test_raw_utf8_in_the_target_reaches_the_app
    seen = nil
    app = lambda do |env|
      seen = [env["PATH_INFO"], env["QUERY_STRING"]]
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app) do |port|
      assert_equal 200, get(port, "/caf\xC3\xA9/x?q=\xE2\x82\xAC".b).status
      assert_equal ["/caf\xC3\xA9/x".b, "q=\xE2\x82\xAC".b], seen
      assert_equal 400, get(port, "/a\x01b").status, "a control byte is still refused"
    end
  end

  # tcp://localhost:PORT (`rails server`'s bind in development) listens on
  # every loopback address, as Puma does: a client that resolves
  # localhost to ::1 used to be refused (only 127.0.0.1 was bound).
  def test_localhost_binds_every_loopback_address
    ipv6 = Socket.ip_address_list.any?(&:ipv6_loopback?)
    with_server(PATH, bind: "tcp://localhost:0") do |port, server|
      addresses = server.listeners.map { |l| l.local_address.ip_address }
      assert_equal(ipv6 ? ["127.0.0.1", "::1"] : ["127.0.0.1"], addresses)
      assert_equal [port], server.listeners.map { |l| l.local_address.ip_port }.uniq, "one port for all"
      assert_equal "GET /v4?", get(port, "/v4").body
      next unless ipv6

      sock = TCPSocket.new("::1", port)
      sock.write("GET /v6 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      assert_equal "GET /v6?", read_response(sock).body
      sock.close
    end
    assert_match(%r{serving on tcp://127\.0\.0\.1:\d+#{", tcp://\\[::1\\]:\\d+" if ipv6},}, errors_logged)
  end

  # A request over a unix socket has REMOTE_ADDR too (the loopback's, as
  # other Rack servers give); the access log shows no peer.
  def test_remote_addr_over_a_unix_socket
    seen = nil
    app = lambda do |env|
      seen = env["REMOTE_ADDR"]
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    Dir.mktmpdir("weft-unix") do |dir|
      path = File.join(dir, "s.sock")
      with_server(app, bind: "unix:#{path}") do
        sock = UNIXSocket.new(path)
        sock.write("GET /u HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert_equal 200, read_response(sock).status
        sock.close
      end
    end
    assert_equal "127.0.0.1", seen
    assert_match(/\A- - - /, access_logged)
  end

  def test_host_with_port_and_absolute_form
    seen = []
    app = ->(env) { seen << [env["SERVER_NAME"], env["SERVER_PORT"], env["PATH_INFO"]]; [204, {}, []] }
    with_server(app) do |port|
      request(port, "GET /x HTTP/1.1\r\nHost: example.org:8080\r\n\r\n")
      request(port, "GET /y HTTP/1.1\r\nHost: [::1]:81\r\n\r\n")
      request(port, "GET http://other.example:9000/z?q HTTP/1.1\r\nHost: ignored\r\n\r\n")
    end
    assert_equal [%w[example.org 8080 /x], ["[::1]", "81", "/y"], %w[other.example 9000 /z]], seen
  end

  # Without a Host field (HTTP/1.0), SERVER_NAME is the listener's
  # address, but "localhost" for a wildcard bind (as under Puma), where it
  # used to be "0.0.0.0", a host no URL an app builds should point to.
  def test_server_name_without_host
    seen = []
    app = ->(env) { seen << [env["SERVER_NAME"], env["SERVER_PORT"]]; [204, {}, []] }
    with_server(app, bind: "tcp://0.0.0.0:0") do |port|
      request(port, "GET / HTTP/1.0\r\n\r\n")
      assert_equal [["localhost", port.to_s]], seen
    end
    seen.clear
    with_server(app) do |port|
      request(port, "GET / HTTP/1.0\r\n\r\n")
      assert_equal [["127.0.0.1", port.to_s]], seen
    end
    v6_bind = Socket.ip_address_list.any?(&:ipv6_loopback?) ? "tcp://[::1]:0" : nil
    return unless v6_bind

    seen.clear
    with_server(app, bind: v6_bind) do |port|
      sock = TCPSocket.new("::1", port)
      sock.write("GET / HTTP/1.0\r\n\r\n")
      read_response(sock)
      sock.close
      assert_equal [["[::1]", port.to_s]], seen
    end
  end

  def test_extension_methods_reach_the_app
    with_server(PATH) do |port|
      %w[PURGE PROPFIND PATCH OPTIONS DELETE].each do |m|
        r = request(port, "#{m} /m HTTP/1.1\r\nHost: t\r\n\r\n")
        assert_equal 200, r.status
        assert_equal "#{m} /m?", r.body
      end
    end
  end

  def test_keep_alive_and_pipelining_in_order
    with_server(PATH) do |port|
      sock = connect(port)
      sock.write("GET /1 HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      assert_equal "GET /1?", read_response(sock, buf).body
      sock.write((2..6).map { |i| "GET /#{i} HTTP/1.1\r\nHost: t\r\n\r\n" }.join)
      (2..6).each { |i| assert_equal "GET /#{i}?", read_response(sock, buf).body }
      sock.write("GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      r = read_response(sock, buf)
      assert r.close?
      assert closed_by_server?(sock)
      sock.close
    end
  end

  def test_pipelined_posts_with_bodies
    with_server(ECHO) do |port|
      sock = connect(port)
      sock.write("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc" \
                 "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n" \
                 "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nf")
      buf = +"".b
      assert_equal %w[abc de f], Array.new(3) { read_response(sock, buf).body }
      sock.close
    end
  end

  def test_no_content_answer_has_no_length_and_no_body
    app = lambda do |env|
      return [200, { "content-type" => "text/plain" }, ["after"]] if env["PATH_INFO"] == "/after"

      [204, { "content-length" => "3", "transfer-encoding" => "chunked" }, ["abc"]]
    end
    with_server(app, lint: false) do |port| # Lint refuses these fields on a 204
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /after HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      r = read_response(sock, buf)
      assert_equal 204, r.status
      assert_nil r["content-length"]
      assert_nil r["transfer-encoding"]
      assert_equal "after", read_response(sock, buf).body, "nothing of the 204's body on the wire"
      sock.close
    end
  end

  # Without Rack::Head in front, an app answers HEAD with its GET's body:
  # the server sends none, and does not iterate it (Rack::Lint, which
  # rackup puts in front in development, raises for parts yielded to a
  # HEAD), but closes it.
  def test_head_without_rack_head_is_answered_without_iterating_the_body
    calls = Thread::Queue.new
    app = lambda do |_env|
      body = Object.new
      body.define_singleton_method(:each) { |&b| calls << :each; b.call("Hello") }
      body.define_singleton_method(:close) { calls << :close }
      [200, { "content-type" => "text/plain" }, body]
    end
    with_server(app) do |port|
      sock = connect(port)
      sock.write("HEAD / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      r = read_response(sock, buf, head_request: true)
      assert_equal 200, r.status
      assert_equal "Hello", read_response(sock, buf).body, "HEAD's answer had a body"
      sock.close
    end
    assert_equal %i[close each close], Array.new(calls.size) { calls.pop }
  end

  def test_head_sends_no_body
    with_server(Rack::Head.new(Rack::ContentLength.new(HELLO))) do |port|
      sock = connect(port)
      sock.write("HEAD / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      r = read_response(sock, buf, head_request: true)
      assert_equal "13", r["content-length"]
      assert_equal "Hello, World!", read_response(sock, buf).body, "HEAD's answer had a body"
      sock.close
    end
  end

  def test_http10_closes_unless_keep_alive
    with_server(Rack::ContentLength.new(HELLO)) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.0\r\n\r\n")
      r = read_response(sock)
      assert_equal "Hello, World!", r.body
      assert closed_by_server?(sock)
      sock.close

      sock = connect(port)
      sock.write("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      buf = +"".b
      r = read_response(sock, buf)
      assert_equal "keep-alive", r["connection"]
      sock.write("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      assert_equal "Hello, World!", read_response(sock, buf).body
      sock.close
    end
    # Without a length, an HTTP/1.0 answer ends with the connection.
    with_server(HELLO) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      r = read_response(sock)
      assert_equal ["close", "Hello, World!"], [r["connection"], r.body]
      sock.close
    end
  end

  def test_chunked_response_without_length
    app = lambda do |_env|
      body = Object.new
      def body.each = %w[a bb ccc].each { |s| yield s }
      [200, { "content-type" => "text/plain" }, body]
    end
    with_server(app) do |port|
      r = get(port)
      assert_equal "chunked", r["transfer-encoding"]
      assert_equal "abbccc", r.body
      # HTTP/1.0 has no chunked coding: the end of the body is the close.
      r = request(port, "GET / HTTP/1.0\r\n\r\n")
      assert_nil r["transfer-encoding"]
      assert r.close?
      assert_equal "abbccc", r.body
    end
  end

  def test_connection_close_from_the_app
    app = ->(_env) { [200, { "content-type" => "text/plain", "connection" => "close" }, ["bye"]] }
    with_server(app) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      assert read_response(sock).close?
      assert closed_by_server?(sock)
      sock.close
    end
  end

  def test_post_bodies_in_memory_and_in_a_tempfile
    with_server(ECHO, input_memory: 1024) do |port|
      small = "x" * 100
      big = (0..200_000).map { |i| (i % 251).chr }.join.b
      [small, big].each do |data|
        r = request(port, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: #{data.bytesize}\r\n\r\n#{data}")
        assert_equal data.bytesize, r.body.bytesize
        assert_equal data, r.body
      end
    end
  end

  # Rack 3 lets an app close rack.input; an empty one closed by one
  # request must not be closed for the next.
  def test_rack_input_closed_by_the_app_is_not_closed_for_the_next_request
    app = lambda do |env|
      input = env["rack.input"]
      body = input.read
      input.close if env["PATH_INFO"] == "/close"
      [200, { "content-type" => "text/plain" }, ["read #{body.inspect}"]]
    end
    with_server(app, lint: false) do |port| # Rack 2.2's Lint forbids the close
      assert_equal 'read ""', get(port, "/close").body
      r = get(port, "/")
      assert_equal 200, r.status
      assert_equal 'read ""', r.body
      assert_equal 'read "abc"', request(port, "POST /close HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc").body
      assert_equal 'read ""', get(port, "/").body
    end
  end

  def test_repeated_content_length_gives_one_value
    with_server(ECHO) do |port| # Lint checks CONTENT_LENGTH is digits only
      r = request(port, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
      assert_equal 200, r.status
      assert_equal "abc", r.body
      assert_equal "3", r["x-length"]
    end
  end

  def test_chunked_request_body
    with_server(ECHO) do |port|
      r = request(port, "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" \
                        "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n")
      assert_equal 200, r.status
      assert_equal "hello world", r.body
      assert_equal "11", r["x-length"]
    end
  end

  def test_expect_100_continue
    with_server(ECHO) do |port|
      sock = connect(port)
      sock.write("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
      buf = +"".b
      interim = read_response(sock, buf)
      assert_equal 100, interim.status
      sock.write("hello")
      r = read_response(sock, buf)
      assert_equal [200, "hello"], [r.status, r.body]
      sock.close
    end
  end

  # A body with to_path is sent with IO.copy_stream (sendfile), never
  # through each (no Lint here: Rack 2.2's Lint body hides to_path).
  class FileBody
    def initialize(path) = @path = path
    def to_path = @path
    def each = raise("each must not be called for a file body")
  end

  def test_file_body_is_sent_without_each
    Dir.mktmpdir do |dir|
      path = File.join(dir, "f.bin")
      data = Random.new(1).bytes(300_000)
      File.binwrite(path, data)
      with_server(->(_env) { [200, { "content-type" => "application/octet-stream" }, FileBody.new(path)] }, lint: false) do |port|
        r = get(port)
        assert_equal 200, r.status
        assert_equal data.bytesize.to_s, r["content-length"]
        assert_equal data, r.body
      end
      with_server(Rack::Files.new(dir)) do |port| # and through Lint
        r = get(port, "/f.bin")
        assert_equal [200, data], [r.status, r.body]
      end
    end
  end

  def test_rack3_streaming_body
    app = lambda do |_env|
      body = lambda do |stream|
        stream.write("one,")
        stream.write("two")
      ensure
        stream.close
      end
      [200, { "content-type" => "text/plain" }, body]
    end
    with_server(app, lint: false) do |port| # Rack 2.2's Lint knows no streaming bodies
      r = get(port)
      assert_equal "one,two", r.body
      assert r.close?
    end
  end

  def test_app_exception_is_a_500_without_the_message
    app = ->(env) { env["PATH_INFO"] == "/boom" ? raise("secret detail") : [200, { "content-type" => "text/plain" }, ["fine"]] }
    with_server(app) do |port|
      sock = connect(port)
      sock.write("GET /boom HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      r = read_response(sock, buf)
      assert_equal 500, r.status
      refute_includes r.body, "secret"
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal "fine", read_response(sock, buf).body, "the connection goes on after a 500"
      sock.close
    end
    assert_match(/ERROR GET \/boom: RuntimeError: secret detail\n    .*test_server\.rb:\d+/, errors_logged)
  end

  # exit or abort in a request (SystemExit) is the app's error like any
  # other, as under Puma: a 500, logged, and the server goes on, where it
  # used to end #run (and a single-process `weft serve`). It is so while
  # the body is iterated too. An Interrupt still ends #run: Ctrl-C
  # without a trap raises it in whatever fiber runs.
  def test_exit_in_a_request_is_a_500_and_interrupt_still_ends_run
    body = Object.new
    def body.each = exit(4)
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/exit" then exit(3)
      when "/abort" then abort("leaving")
      when "/each" then [200, {}, body]
      when "/int" then raise Interrupt
      else [200, { "content-type" => "text/plain" }, ["still here"]]
      end
    end
    with_server(app, lint: false) do |port|
      sock = connect(port)
      buf = +"".b
      %w[/exit /abort /each].each do |path|
        sock.write("GET #{path} HTTP/1.1\r\nHost: t\r\n\r\n")
        r = read_response(sock, buf)
        assert_equal 500, r.status, path
        assert_equal "Internal Server Error", r.body
      end
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal "still here", read_response(sock, buf).body
      sock.close
    end
    assert_match(%r{ERROR GET /exit: SystemExit: exit\n    .*test_server\.rb:\d+}, errors_logged)
    assert_match(%r{ERROR GET /abort: SystemExit: leaving\n}, errors_logged)
    assert_match(%r{ERROR GET /each: sending the response: SystemExit: exit\n}, errors_logged)

    server, thread = server_on_thread(app)
    sock = connect(server.ports.first)
    sock.write("GET /int HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_raises(Interrupt, "#run did not return") { thread.join(GUARD) }
    assert closed_by_server?(sock)
  ensure
    sock&.close
    kill_thread(thread)
  end

  # The app's code that runs while its response is sent (headers#each,
  # body#to_ary, an #each raising a SystemCallError of its own, a
  # streaming body, a hijack callback) can fail too: a 500 when nothing
  # was sent, the error logged, the connection closed when it cannot go
  # on, and the server unharmed.
  def test_app_errors_while_the_response_is_sent
    raising_headers = Object.new
    def raising_headers.each = raise("headers each failed")
    raising_ary = Object.new
    def raising_ary.to_ary = raise("to_ary failed")
    def raising_ary.each = nil
    upstream_gone = Object.new
    def upstream_gone.each = raise(Errno::ECONNREFUSED, "upstream")
    stream = Object.new
    def stream.call(out) = (out.write("partial"); raise("stream failed"))
    hijacked = Thread::Queue.new
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/headers" then [200, raising_headers, ["x"]]
      when "/to_ary" then [200, {}, raising_ary]
      when "/each" then [200, {}, upstream_gone]
      when "/stream" then [200, {}, stream]
      when "/partial" then [200, { "rack.hijack" => ->(_io) { raise "callback failed" } }, []]
      when "/full"
        io = env["rack.hijack"].call
        io.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        hijacked << io # the app keeps the socket, closed by /close-it
        raise "after the hijack"
      when "/close-it"
        hijacked.pop.close
        [200, { "content-type" => "text/plain" }, ["closed"]]
      else [200, { "content-type" => "text/plain" }, ["fine"]]
      end
    end
    with_server(app, lint: false) do |port|
      %w[/headers /to_ary /each].each do |path|
        sock = connect(port)
        sock.write("GET #{path} HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
        buf = +"".b
        assert_equal 500, read_response(sock, buf).status, path
        assert_equal "fine", read_response(sock, buf).body, "#{path}: the connection goes on"
        sock.close
      end
      %w[/stream /partial].each do |path|
        sock = connect(port)
        sock.write("GET #{path} HTTP/1.1\r\nHost: t\r\n\r\n")
        r = read_response(sock) # read to the end of stream: the server closed it
        assert_equal 200, r.status, path
        sock.close
      end
      sock = connect(port)
      sock.write("GET /full HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      assert_equal "ok", read_response(sock, buf).body
      assert_equal "closed", get(port, "/close-it").body
      read_until(sock, buf) { false } # to the end of stream
      assert_equal "", buf, "no 500 into a socket the app has hijacked"
      sock.close
      assert_equal "fine", get(port, "/").body
    end
    log = errors_logged
    ["headers each failed", "to_ary failed", "upstream", "stream failed", "callback failed", "after the hijack"].each do |text|
      assert_includes log, text
    end
  end

  # An app whose Content-Length is not its body's size (String#length
  # taken for bytesize): the answer goes as framed, then the connection
  # closes, so that no byte of one answer is read as part of the next.
  def test_content_length_not_the_body_size_closes_the_connection
    dir = Dir.mktmpdir
    File.write(file = File.join(dir, "f"), "12345")
    file_body = Object.new
    file_body.define_singleton_method(:to_path) { file }
    file_body.define_singleton_method(:each) { |&b| b.call(File.read(file)) }
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/long" then [200, { "content-length" => "2" }, ["abcdef"]]
      when "/short" then [200, { "content-length" => "10" }, ["abc"]]
      when "/each" then [200, { "content-length" => "10" }, %w[a b c].each]
      when "/file" then [200, { "content-length" => "10" }, file_body]
      else [200, { "content-type" => "text/plain" }, ["next"]]
      end
    end
    with_server(app, lint: false) do |port| # Lint refuses such a body
      { "/long" => "ab", "/short" => "abc", "/each" => "abc", "/file" => "12345" }.each do |path, seen|
        sock = connect(port)
        sock.write("GET #{path} HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n")
        buf = +"".b
        read_until(sock, buf) { false } # to the end of stream: the server closes
        head, body = buf.split("\r\n\r\n", 2)
        assert_match(/\AHTTP\/1\.1 200 OK\r\n/, head, path)
        assert body.start_with?(seen), "#{path}: #{body.inspect}"
        refute_includes body, "next", "#{path}: the pipelined request is not answered on this connection"
        sock.close
      end
    end
    assert_includes errors_logged, "the app's content-length is 10, its body 3 bytes"
  ensure
    FileUtils.rm_rf(dir) if dir
  end

  def test_body_each_raising_after_the_head_closes_the_connection
    app = lambda do |env|
      return [200, { "content-type" => "text/plain" }, ["fine"]] if env["PATH_INFO"] == "/fine"

      body = Object.new
      def body.each
        yield "part"
        raise "mid-body"
      end
      [200, { "content-type" => "text/plain" }, body]
    end
    with_server(app) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      read_until(sock, buf) { false }
      refute_includes buf, "0\r\n\r\n", "a truncated body must not look complete"
      sock.close
      assert_equal "fine", get(port, "/fine").body
    end
    assert_includes errors_logged, "mid-body"
  end

  # The server's own checks of the response (Lint would refuse these
  # responses before the server sees them, so no Lint here).
  def test_header_injection_is_refused
    closed = []
    make_body = -> { Rack::BodyProxy.new(["x"]) { closed << true } }
    apps = {
      "/crlf" => ->(_e) { [200, { "x-a" => "ok\r\nSet-Cookie: evil=1" }, make_body.call] },
      "/cr" => ->(_e) { [200, { "x-a" => "ok\rx" }, make_body.call] },
      "/nul" => ->(_e) { [200, { "x-a" => "a\0b" }, make_body.call] },
      "/name" => ->(_e) { [200, { "x a" => "v" }, make_body.call] },
      "/status" => ->(_e) { ["abc", {}, make_body.call] },
      "/value" => ->(_e) { [200, { "x-a" => ["ok", :"a\nb"] }, make_body.call] },
    }
    app = ->(env) { apps.fetch(env["PATH_INFO"]).call(env) }
    with_server(app, lint: false) do |port|
      apps.each_key do |path|
        r = get(port, path)
        assert_equal 500, r.status, path
        refute_includes r.raw_head, "evil"
      end
    end
    assert_equal apps.size, closed.size, "body.close on every path"
    assert_includes errors_logged, "header x-a value \"ok\\r\" has CR, LF or NUL"
    assert_includes errors_logged, "status \"abc\" is not an Integer"
    assert_includes errors_logged, "header x-a value \"a\\nb\" has CR, LF or NUL"
  end

  # A value that is not a String (an Integer content-length from a sloppy
  # app; Lint would refuse it) is sent as its to_s, as Puma sends it,
  # where it used to be a 500; nil is an empty value.
  def test_header_values_that_are_not_strings_are_sent_as_text
    app = lambda do |_env|
      [200, { "content-type" => "text/plain", "Content-Length" => 5, "x-sym" => :abc, "x-nil" => nil,
              "x-list" => [1, "two"] }, ["hello"]]
    end
    with_server(app, lint: false) do |port|
      r = get(port)
      assert_equal 200, r.status
      assert_equal "hello", r.body
      assert_equal "5", r["content-length"]
      assert_equal 1, r.raw_head.scan(/^content-length: /i).size, "the app's length, none added"
      assert_equal "abc", r["x-sym"]
      assert_includes r.raw_head.split("\r\n"), "x-nil: "
      assert_equal "1\ntwo", r["x-list"]
    end
    assert_equal "", errors_logged.lines.grep(/ERROR/).join
  end

  def test_rack2_multiline_header_values_become_fields
    app = ->(_env) { [200, { "content-type" => "text/plain", "set-cookie" => "a=1\nb=2" }, ["x"]] }
    with_server(app) do |port|
      r = get(port)
      assert_equal "a=1\nb=2", r["set-cookie"]
      assert_equal 2, r.raw_head.scan(/^set-cookie: /).size
    end
  end

  def test_requests_run_concurrently
    n = 20
    arrived = Thread::Queue.new
    release = Thread::Queue.new
    app = lambda do |_env|
      arrived << 1
      release.pop # every request waits here at once
      [200, { "content-type" => "text/plain" }, ["done"]]
    end
    with_server(app) do |port|
      socks = Array.new(n) { connect(port).tap { |s| s.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n") } }
      n.times { arrived.pop } # all n are in the app at the same time
      n.times { release << 1 }
      socks.each { |s| assert_equal "done", read_response(s).body; s.close }
    end
  end

  def test_max_concurrency_bounds_connections_in_flight
    in_flight = max_seen = 0
    app = lambda do |_env|
      in_flight += 1
      max_seen = [max_seen, in_flight].max
      sleep 0.01 # a wait, so that others could run meanwhile
      in_flight -= 1
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app, max_concurrency: 2) do |port|
      socks = Array.new(8) { connect(port).tap { |s| s.write("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n") } }
      socks.each { |s| assert_equal "ok", read_response(s).body; s.close }
    end
    assert_equal 2, max_seen
  end

  def test_at_the_cap_an_idle_keep_alive_connection_makes_room
    park = Weft::Server::PARK_ABOVE
    skip "idle connections are parked without a fiber here: they take no slot" if park && park < 2
    with_server(HELLO, max_concurrency: 2) do |port|
      idle = Array.new(2) do
        s = connect(port)
        s.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        assert_equal 200, read_response(s).status
        s
      end
      # Both slots are held by idle keep-alive connections: a third client
      # is still served, and the oldest idle connection was closed for it.
      assert_equal "Hello, World!", get(port).body
      assert closed_by_server?(idle[0])
      idle.each(&:close)
    end
  end

  # Requests pipelined after a Connection: close one are not answered,
  # and the answers already sent are not lost to a reset.
  def test_pipelined_input_after_close_is_drained_not_reset
    with_server(PATH) do |port|
      sock = connect(port)
      sock.write("GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" + "GET /b HTTP/1.1\r\nHost: t\r\n\r\n" * 50)
      r = read_response(sock)
      assert_equal "GET /a?", r.body
      assert closed_by_server?(sock)
      sock.close
    end
  end

  # Many idle keep-alive connections: beyond PARK_ABOVE they wait in the
  # poller without a fiber, and each is served again when it sends.
  def test_parked_connections_are_served_again
    park = Weft::Server::PARK_ABOVE
    skip "parking is off" unless park && defined?(Weft::HTTP::Poller)
    n = park + 20
    with_server(PATH, max_concurrency: n + 10) do |port, server|
      socks = Array.new(n) do |i|
        s = connect(port)
        s.write("GET /first#{i} HTTP/1.1\r\nHost: t\r\n\r\n")
        assert_equal "GET /first#{i}?", read_response(s).body
        s
      end
      assert_operator server.instance_variable_get(:@parked).size, :>=, 1, "none parked"
      socks.each_with_index do |s, i|
        s.write("GET /again#{i} HTTP/1.1\r\nHost: t\r\n\r\n")
        assert_equal "GET /again#{i}?", read_response(s).body
      end
      socks.each(&:close)
    end
  end

  # Regression: fibers are reused across connections. Handing a burst of
  # new connections to spare fibers by Queue#num_waiting (which still
  # counts woken waiters) queued more connections than fibers were free;
  # the extra ones waited until a keep-alive connection ended (an
  # idle_timeout; here beyond the hang guard).
  def test_a_burst_of_connections_after_a_burst_is_served_at_once
    app = ->(_env) { sleep 0.001; [200, { "content-type" => "text/plain" }, ["ok"]] }
    with_server(app, idle_timeout: 60, max_concurrency: 1000) do |port|
      3.times do
        socks = Array.new(Weft::Server::SPARE_FIBERS + 60) do
          connect(port).tap { |s| s.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n") }
        end
        socks.each { |s| assert_equal "ok", read_response(s).body }
        socks.each(&:close)
      end
    end
  end

  def test_max_requests_per_connection
    with_server(HELLO, max_requests: 3) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n" * 3)
      buf = +"".b
      2.times { refute read_response(sock, buf).close? }
      assert read_response(sock, buf).close?
      assert closed_by_server?(sock)
      sock.close
    end
  end

  def test_idle_keep_alive_connection_is_closed
    with_server(HELLO, idle_timeout: 0.2) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      buf = +"".b
      assert_equal 200, read_response(sock, buf).status
      assert closed_by_server?(sock)
      sock.close
    end
  end

  def test_client_gone_mid_response_does_not_disturb_others
    big = "x" * (4 << 20)
    app = lambda do |env|
      body = env["PATH_INFO"] == "/big" ? [big] : ["small"]
      [200, { "content-type" => "text/plain" }, body]
    end
    with_server(app) do |port|
      sock = connect(port)
      sock.write("GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
      sock.read(1000)
      sock.close # mid-response
      assert_equal "small", get(port, "/s").body
    end
  end

  def test_graceful_stop_answers_requests_in_flight
    arrived = Thread::Queue.new
    release = Thread::Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/wait"
        arrived << 1
        release.pop
      end
      [200, { "content-type" => "text/plain" }, ["finished"]]
    end
    errors = LogIO.new
    server = Weft::Server.new(Rack::Lint.new(app), bind: "tcp://127.0.0.1:0", quiet: true, log: errors)
    server.open_listeners
    port = server.ports.first
    thread = Thread.new { server.run }
    idle = connect(port)
    idle.write("GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
    buf = +"".b
    assert_equal "finished", read_response(idle, buf).body # now idle, kept alive
    busy = Array.new(3) { connect(port).tap { |s| s.write("GET /wait HTTP/1.1\r\nHost: t\r\n\r\n") } }
    3.times { arrived.pop }
    server.stop
    assert closed_by_server?(idle), "an idle keep-alive connection is closed at once"
    3.times { release << 1 }
    busy.each do |s|
      r = read_response(s)
      assert_equal "finished", r.body
      assert r.close?
      s.close
    end
    assert thread.join(GUARD)
    idle.close
    assert_raises(Errno::ECONNREFUSED) { connect(port) }
  end

  # An exception out of #run (a signal Ruby turns into SignalException,
  # such as HUP or USR2 with no trap, or Thread#raise) while a request is
  # in flight: the fibers stop and #run raises it, rather than hang on a
  # fiber that waits for a next connection that will never come.
  def test_an_exception_out_of_run_with_a_request_in_flight_ends_it
    entered = Thread::Queue.new
    release = Thread::Queue.new
    app = lambda do |_env|
      entered << true
      release.pop
      [200, { "content-type" => "text/plain" }, ["late"]]
    end
    server, thread = server_on_thread(app)
    sock = connect(server.ports.first)
    sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    entered.pop
    thread.raise(SignalException.new("HUP"))
    # (join raises what ended the thread; nothing when it did not end)
    error = assert_raises(SignalException, "#run did not return") { thread.join(GUARD) }
    assert_equal "SIGHUP", error.message
    assert closed_by_server?(sock)
  ensure
    sock&.close
    kill_thread(thread)
  end

  def test_shutdown_timeout_stops_fibers_and_runs_ensure
    ensured = Thread::Queue.new
    arrived = Thread::Queue.new
    app = lambda do |_env|
      arrived << 1
      sleep
    ensure
      ensured << :ran
    end
    errors = LogIO.new
    server = Weft::Server.new(Rack::Lint.new(app), bind: "tcp://127.0.0.1:0", quiet: true, log: errors, shutdown_timeout: 0.2)
    server.open_listeners
    thread = Thread.new { server.run }
    sock = connect(server.ports.first)
    sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    arrived.pop
    server.stop
    assert thread.join(GUARD)
    assert_equal :ran, ensured.pop
    assert_includes errors.string, "still busy after 0.2s"
    sock.close
  end

  # A WebSocket-style handler in a fiber of its own, left running by the
  # app after a full hijack, must not keep a graceful stop from ending.
  def test_stop_ends_fibers_the_app_left_running
    ended = Thread::Queue.new
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n")
      Fiber.schedule do
        while (line = io.gets)
          io.write("echo #{line}")
        end
      ensure
        io.close
        ended << :handler
      end
      [200, {}, []]
    end
    sock = nil
    with_server(app) do |port| # stopped at the end of the block: it must return
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: t\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n")
      buf = +"".b
      read_until(sock, buf) { buf.include?("\r\n\r\n") }
      sock.write("hi\n")
      read_until(sock, buf) { buf.include?("echo hi\n") }
    end
    assert_equal 1, ended.size, "the handler's ensure ran before #run returned"
    assert closed_by_server?(sock)
  ensure
    sock&.close
  end

  def test_full_hijack_echo
    app = lambda do |env|
      return [200, { "content-type" => "text/plain" }, ["plain"]] unless env["HTTP_UPGRADE"] == "echo"

      io = env["rack.hijack"].call
      io.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
      while (line = io.gets)
        break if line == "bye\n"

        io.write("echo: #{line}")
      end
      io.close
      [-1, {}, []]
    end
    with_server(app) do |port|
      ws = connect(port)
      ws.write("GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
      buf = +"".b
      read_until(ws, buf) { buf.include?("\r\n\r\n") }
      assert buf.start_with?("HTTP/1.1 101 ")
      buf.clear
      ws.write("hello\n")
      read_until(ws, buf) { buf.end_with?("\n") }
      assert_equal "echo: hello\n", buf
      # Meanwhile the server serves others: the hijacked socket waits in
      # the scheduler, not in a blocking read.
      assert_equal "plain", get(port).body
      buf.clear
      ws.write("again\n")
      read_until(ws, buf) { buf.end_with?("\n") }
      assert_equal "echo: again\n", buf
      ws.write("bye\n")
      assert closed_by_server?(ws)
      ws.close
    end
  end

  def test_partial_hijack
    app = lambda do |_env|
      hijack = lambda do |io|
        io.write("streamed by the app")
        io.close
      end
      [200, { "content-type" => "text/plain", "rack.hijack" => hijack }, []]
    end
    with_server(app) do |port|
      r = get(port)
      assert_equal 200, r.status
      assert_equal "streamed by the app", r.body
    end
  end
end
