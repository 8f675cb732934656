# frozen_string_literal: true

require_relative "helper"
require_relative "test_server_helper"
require "net/http"
require "openssl"
require "tmpdir"

# HTTPS binds (ssl://HOST:PORT?cert=...&key=...): TLS with Ruby's OpenSSL,
# the handshake in the connection's fiber. A throw-away self-signed
# certificate is made for each test in a temporary directory.
class TestServerTLS < Minitest::Test
  include WeftTestHelper
  include ServerTestHelper

  SCHEME = lambda do |env|
    body = "#{env["rack.url_scheme"]} #{env["HTTPS"]} #{env["REQUEST_METHOD"]} #{env["PATH_INFO"]} " \
           "#{env["rack.input"].read}"
    [200, { "content-type" => "text/plain" }, [body]]
  end

  def setup
    super
    @dir = Dir.mktmpdir("weft-tls")
    key = OpenSSL::PKey::RSA.new(2048)
    cert = OpenSSL::X509::Certificate.new
    cert.version = 2
    cert.serial = 1
    cert.subject = cert.issuer = OpenSSL::X509::Name.parse("/CN=localhost")
    cert.public_key = key.public_key
    cert.not_before = Time.now - 60
    cert.not_after = Time.now + 3600
    cert.sign(key, OpenSSL::Digest.new("SHA256"))
    @cert = File.join(@dir, "cert.pem")
    @key = File.join(@dir, "key.pem")
    File.write(@cert, cert.to_pem)
    File.write(@key, key.to_pem)
  end

  def teardown
    FileUtils.remove_entry(@dir) if @dir
    super
  end

  def bind = "ssl://127.0.0.1:0?cert=#{@cert}&key=#{@key}"

  def https(port)
    http = Net::HTTP.new("127.0.0.1", port)
    http.use_ssl = true
    http.verify_mode = OpenSSL::SSL::VERIFY_NONE
    http.open_timeout = http.read_timeout = GUARD
    http
  end

  def test_get_over_https
    with_server(SCHEME, bind: bind) do |port|
      r = https(port).request(Net::HTTP::Get.new("/hello"))
      assert_equal "200", r.code
      assert_equal "https on GET /hello ", r.body
    end
    assert_equal "", errors_logged.lines.grep(/ERROR/).join
  end

  def test_keep_alive_and_post
    with_server(SCHEME, bind: bind) do |port|
      https(port).start do |http|
        3.times do |i|
          r = http.request(Net::HTTP::Get.new("/#{i}"))
          assert_equal "https on GET /#{i} ", r.body
        end
        post = Net::HTTP::Post.new("/post")
        post.body = "x" * 100_000
        post["content-type"] = "application/octet-stream"
        r = http.request(post)
        assert_equal "https on POST /post #{"x" * 100_000}", r.body
      end
    end
    assert_equal 4, access_logged.lines.size
  end

  def test_chunked_and_file_bodies
    path = File.join(@dir, "big")
    File.binwrite(path, Random.new(1).bytes(300_000))
    app = lambda do |env|
      if env["PATH_INFO"] == "/file"
        body = Object.new
        body.define_singleton_method(:to_path) { path }
        body.define_singleton_method(:each) { |&b| b.call(File.binread(path)) }
        [200, { "content-type" => "application/octet-stream", "content-length" => File.size(path).to_s }, body]
      else
        [200, { "content-type" => "text/plain" }, Enumerator.new { |y| 3.times { |i| y << "part#{i} " } }]
      end
    end
    with_server(app, bind: bind) do |port|
      https(port).start do |http|
        r = http.request(Net::HTTP::Get.new("/chunked"))
        assert_equal "chunked", r["transfer-encoding"]
        assert_equal "part0 part1 part2 ", r.body
        r = http.request(Net::HTTP::Get.new("/file"))
        assert_equal File.binread(path), r.body
      end
    end
  end

  def test_plain_http_to_tls_port_then_https
    with_server(SCHEME, bind: bind) do |port|
      sock = connect(port)
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      answer = read_response(sock)
      assert_equal 400, answer.status, "a plain-HTTP answer says what is wrong"
      assert_match(/speaks HTTPS/, answer.body)
      assert closed_by_server?(sock), "the plain-HTTP connection is closed"
      sock.close
      r = https(port).request(Net::HTTP::Get.new("/after"))
      assert_equal "https on GET /after ", r.body
    end
    assert_equal 1, errors_logged.scan(/TLS handshake failed/).size, errors_logged
  end

  def test_silent_client_does_not_block_others
    with_server(SCHEME, bind: bind) do |port|
      silent = connect(port) # connects, never handshakes
      r = https(port).request(Net::HTTP::Get.new("/other"))
      assert_equal "https on GET /other ", r.body
      silent.close
    end
  end

  def test_hijack_gets_the_ssl_socket
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 200 OK\r\ncontent-length: #{io.class.ancestors.include?(OpenSSL::SSL::SSLSocket) ? 3 : 2}\r\n" \
               "connection: close\r\n\r\n#{io.is_a?(OpenSSL::SSL::SSLSocket) ? "ssl" : "no"}")
      io.close
      [200, {}, []]
    end
    with_server(app, bind: bind, lint: false) do |port| # Lint wraps the hijacked IO
      r = https(port).request(Net::HTTP::Get.new("/"))
      assert_equal "ssl", r.body
    end
  end

  def test_bad_cert_or_key
    missing = File.join(@dir, "missing.pem")
    e = assert_raises(Weft::Server::TLSConfigError) do
      Weft::Server.new(SCHEME, bind: "ssl://127.0.0.1:0?cert=#{missing}&key=#{@key}")
    end
    assert_includes e.message, missing
    e = assert_raises(Weft::Server::TLSConfigError) do
      Weft::Server.new(SCHEME, bind: "ssl://127.0.0.1:0", tls_cert: @key, tls_key: @key)
    end
    assert_includes e.message, @key
    e = assert_raises(Weft::Server::TLSConfigError) { Weft::Server.new(SCHEME, bind: "ssl://127.0.0.1:0") }
    assert_includes e.message, "--tls-cert"
    # --tls-cert / --tls-key apply to ssl:// binds without a query
    assert Weft::Server.new(SCHEME, bind: "ssl://127.0.0.1:0", tls_cert: @cert, tls_key: @key)
  end

  def test_cli_bad_cert_exits_non_zero
    require "weft/server/cli"
    out = StringIO.new
    err = StringIO.new
    ru = File.join(@dir, "config.ru")
    File.write(ru, "run ->(_) { [200, {}, []] }\n")
    status = Weft::Server::CLI.new(["serve", "-b", "ssl://127.0.0.1:0", "--tls-cert", File.join(@dir, "nope.pem"),
                                    "--tls-key", @key, ru], out: out, err: err).run
    refute_equal 0, status
    assert_includes err.string, "nope.pem"
  end
end
