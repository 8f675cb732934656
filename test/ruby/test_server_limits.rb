# frozen_string_literal: true

require_relative "test_server_helper"

# Bad input loses nothing: every malformed, smuggling-prone, oversized or
# slow request gets its status and the connection closed, and the server
# goes on answering the next client (checked after each case).
class TestServerLimits < Minitest::Test
  include WeftTestHelper
  include ServerTestHelper

  ECHO = lambda do |env|
    [200, { "content-type" => "text/plain" }, [env["rack.input"].read]]
  end

  H = "Host: t\r\n"

  # [name, request bytes, expected status]
  REFUSED = [
    ["CL and TE together", "POST / HTTP/1.1\r\n#{H}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400],
    ["two different Content-Lengths", "POST / HTTP/1.1\r\n#{H}Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400],
    ["a Content-Length list", "POST / HTTP/1.1\r\n#{H}Content-Length: 3, 3\r\n\r\nabc", 400],
    ["a signed Content-Length", "POST / HTTP/1.1\r\n#{H}Content-Length: +3\r\n\r\nabc", 400],
    ["obs-fold", "GET / HTTP/1.1\r\n#{H}X-A: 1\r\n  folded\r\n\r\n", 400],
    ["a bare LF", "GET / HTTP/1.1\n#{H}\r\n", 400],
    ["a bare CR in a value", "GET / HTTP/1.1\r\n#{H}X-A: a\rb\r\n\r\n", 400],
    ["a NUL in a value", "GET / HTTP/1.1\r\n#{H}X-A: a\0b\r\n\r\n", 400],
    ["space before the colon", "GET / HTTP/1.1\r\n#{H}X-A : 1\r\n\r\n", 400],
    ["no Host in HTTP/1.1", "GET / HTTP/1.1\r\n\r\n", 400],
    ["two Hosts", "GET / HTTP/1.1\r\n#{H}#{H}\r\n", 400],
    ["chunked not last", "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: chunked, gzip\r\n\r\n", 400],
    ["gzip, chunked", "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: gzip, chunked\r\n\r\n", 501],
    ["TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400],
    ["a bad chunk size", "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400],
    ["a chunk size overflowing", "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: chunked\r\n\r\n#{"f" * 17}\r\n", 400],
    ["a chunk without its CRLF", "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 400],
    ["a bare LF in chunked framing", "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n", 400],
    ["HTTP/2.0", "GET / HTTP/2.0\r\n#{H}\r\n", 505],
    ["a bad request line", "GET /\r\n#{H}\r\n", 400],
    ["a bad method token", "G(T / HTTP/1.1\r\n#{H}\r\n", 400],
    ["a target with a space", "GET /a b HTTP/1.1\r\n#{H}\r\n", 400],
    ["a request line too long", "GET /#{"a" * 9000} HTTP/1.1\r\n#{H}\r\n", 414],
    ["a header line too long", "GET / HTTP/1.1\r\n#{H}X-A: #{"a" * 9000}\r\n\r\n", 431],
    ["a head too large", "GET / HTTP/1.1\r\n#{H}#{(1..60).map { |i| "X-#{i}: #{"a" * 300}\r\n" }.join}\r\n", 431],
    ["too many fields", "GET / HTTP/1.1\r\n#{H}#{(1..70).map { |i| "X-#{i}: 1\r\n" }.join}\r\n", 431],
    ["a Content-Length over the limit", "POST / HTTP/1.1\r\n#{H}Content-Length: #{(128 << 20) + 1}\r\n\r\n", 413],
  ].freeze

  def test_each_refused_request_gets_its_status_and_the_server_goes_on
    with_server(ECHO) do |port|
      REFUSED.each do |name, bytes, status|
        sock = connect(port)
        sock.write(bytes)
        r = read_response(sock)
        refute_nil r, "#{name}: no answer"
        assert_equal status, r.status, name
        assert r.close?, "#{name}: the connection must close"
        assert closed_by_server?(sock), "#{name}: still open"
        sock.close
        assert_equal "ok", request(port, "POST / HTTP/1.1\r\n#{H}Content-Length: 2\r\n\r\nok").body, "after #{name}"
      end
    end
    REFUSED.each { |_, _, status| assert_includes errors_logged, " #{status} " unless status == 408 }
  end

  def test_a_smuggled_request_is_never_served
    served = Thread::Queue.new
    app = ->(env) { served << env["PATH_INFO"]; [200, { "content-type" => "text/plain" }, ["x"]] }
    with_server(app) do |port|
      # A front end reading Content-Length would see one request; one
      # reading chunked, two. Either way the server must refuse it whole.
      smuggle = "POST / HTTP/1.1\r\n#{H}Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n" \
                "0\r\n\r\nGET /smuggled HTTP/1.1\r\n#{H}\r\n"
      r = request(port, smuggle)
      assert_equal 400, r.status
      get(port, "/after")
    end
    paths = []
    paths << served.pop until served.empty?
    assert_equal ["/after"], paths
  end

  def test_chunked_body_over_the_limit
    with_server(ECHO, max_body: 10) do |port|
      r = request(port, "POST / HTTP/1.1\r\n#{H}Transfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n")
      assert_equal 413, r.status
      assert_equal 413, request(port, "POST / HTTP/1.1\r\n#{H}Content-Length: 11\r\n\r\n12345678901").status
      assert_equal "1234567890", request(port, "POST / HTTP/1.1\r\n#{H}Content-Length: 10\r\n\r\n1234567890").body
    end
  end

  def test_a_slow_head_gets_408
    with_server(ECHO, head_timeout: 0.3) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHo") # and nothing more
      r = read_response(sock)
      assert_equal 408, r.status
      assert closed_by_server?(sock)
      sock.close
      assert_equal "", get(port).body
    end
  end

  def test_a_silent_connection_is_closed_without_an_answer
    with_server(ECHO, head_timeout: 0.2) do |port|
      sock = connect(port)
      assert closed_by_server?(sock)
      sock.close
    end
  end

  def test_a_slow_body_gets_408
    with_server(ECHO, body_timeout: 0.3) do |port|
      sock = connect(port)
      sock.write("POST / HTTP/1.1\r\n#{H}Content-Length: 10\r\n\r\nabc")
      r = read_response(sock)
      assert_equal 408, r.status
      sock.close
      assert_equal "ok", request(port, "POST / HTTP/1.1\r\n#{H}Content-Length: 2\r\n\r\nok").body
    end
  end

  # A client that stops reading a large answer: once a write has made no
  # progress for write_timeout, the connection is closed (logged), and
  # others are served meanwhile and after.
  def test_a_client_that_stops_reading_is_closed
    big = "x" * (32 * 1024 * 1024)
    app = ->(env) { [200, {}, [env["PATH_INFO"] == "/big" ? big : "small"]] }
    with_server(app, write_timeout: 0.3) do |port|
      sock = connect(port)
      sock.write("GET /big HTTP/1.1\r\n#{H}\r\n")
      assert_equal "small", get(port).body
      deadline = now + GUARD
      sleep 0.02 until errors_logged.include?("stopped reading") || now > deadline
      assert_match(/the client stopped reading/, errors_logged)
      got = 0
      begin
        while (chunk = sock.readpartial(1 << 20))
          got += chunk.bytesize
        end
      rescue EOFError, Errno::ECONNRESET
        nil
      end
      assert_operator got, :<, big.bytesize, "the answer was cut off"
      sock.close
      assert_equal "small", get(port).body
    end
  end

  def test_a_client_that_leaves_mid_body_disturbs_nobody
    with_server(ECHO) do |port|
      sock = connect(port)
      sock.write("POST / HTTP/1.1\r\n#{H}Content-Length: 100000\r\n\r\nabc")
      sock.close
      assert_equal "ok", request(port, "POST / HTTP/1.1\r\n#{H}Content-Length: 2\r\n\r\nok").body
    end
  end

  # Weft::HTTP::Chunked against a plain Ruby encoder, on random bodies cut
  # into random chunks, with extensions and trailers, fed in random
  # pieces; a prefix of a valid body is incomplete (never done, never an
  # error); a bad size, or a chunk longer than its size, is refused.
  def test_chunked_decoder_against_an_encoder
    rng = Random.new(23)
    300.times do
      body = rng.bytes(rng.rand(0..3000))
      wire = +"".b
      rest = body.dup
      until rest.empty?
        n = rng.rand(1..[rest.bytesize, 700].min)
        ext = rng.rand(4).zero? ? ";name=value" : ""
        wire << n.to_s(16).then { |h| rng.rand(2).zero? ? h.upcase : h } << ext << "\r\n" << rest.slice!(0, n) << "\r\n"
      end
      wire << "0\r\n" << (rng.rand(3).zero? ? "X-Trailer: t\r\n" : "") << "\r\n"
      after = "GET / HTTP/1.1\r\n".b
      decoder = Weft::HTTP::Chunked.new
      out = +"".b
      input = wire + after
      used = 0
      until decoder.done?
        piece = input.byteslice(used, rng.rand(1..64))
        n = decoder.feed(piece, out)
        assert_operator n, :>=, 0
        used += n
      end
      assert_equal body, out
      assert_equal wire.bytesize, used, "the body ends where the encoder ended it"

      d2 = Weft::HTTP::Chunked.new
      cut = rng.rand(0...wire.bytesize)
      assert_equal cut, d2.feed(wire.byteslice(0, cut), +"".b)
      refute d2.done?

      # A size that is not hex, or data longer than its size: refused.
      assert_equal(-400, Weft::HTTP::Chunked.new.feed("g#{wire}", +"".b))
      first = wire[/\A\h+/].to_i(16)
      if first > 1
        long = wire.sub(/\A\h+/, (first - 1).to_s(16))
        assert_equal(-400, Weft::HTTP::Chunked.new.feed(long, +"".b))
      end
    end
  end

  def test_bytes_one_at_a_time
    with_server(ECHO) do |port|
      sock = connect(port)
      req = "POST /x HTTP/1.1\r\n#{H}Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
      req.each_char { |c| sock.write(c); sock.flush }
      assert_equal "abc", read_response(sock).body
      sock.close
    end
  end

  # Out of descriptors: accept backs off, says so once, and serves once
  # some are free (in a child process, so the limit does not touch the
  # test runner). The app's /hog request takes every free descriptor.
  def test_emfile_on_accept_backs_off_and_recovers
    script = <<~RUBY
      require "weft/server"
      $stdout.sync = true
      hog = []
      Thread.new { $stdin.read; hog.each(&:close); hog.clear }
      app = lambda do |env|
        if env["PATH_INFO"] == "/hog"
          loop { hog << File.open(File::NULL) } rescue Errno::EMFILE
        end
        [200, { "content-type" => "text/plain" }, ["up"]]
      end
      server = Weft::Server.new(app, bind: "tcp://127.0.0.1:0", quiet: true, log: $stdout)
      server.open_listeners
      puts "port \#{server.ports.first}"
      trap("TERM") { server.stop }
      server.run
    RUBY
    IO.popen([{ "RUBYLIB" => ServerTestHelper.child_rubylib }, RbConfig.ruby, "-e", "Process.setrlimit(:NOFILE, 64); #{script}"], "r+", err: %i[child out]) do |child|
      port = nil
      port = child.gets[/\Aport (\d+)/, 1]&.to_i until port
      hogger = connect(port) # stays open: closing it would free a descriptor
      hogger.write("GET /hog HTTP/1.1\r\n#{H}\r\n")
      assert_equal "up", read_response(hogger).body
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\n#{H}\r\n")
      line = nil
      loop do
        line = child.gets
        break if line.nil? || line.include?("backing off")
      end
      assert_match(/accept: Too many open files.*backing off/, line)
      child.close_write # the child frees its descriptors
      assert_equal "up", read_response(sock).body
      sock.close
      hogger.close
      Process.kill("TERM", child.pid)
      child.read
    ensure
      Process.kill("KILL", child.pid) if $! && child
    end
  end
end
