# frozen_string_literal: true

require_relative "helper"
require "openssl"

# Ruby's own openssl (OpenSSL::SSL::SSLSocket over TCPSocket) under
# Weft::Scheduler: its non-blocking handshake, reads and writes wait
# through the scheduler's io_wait, so TLS connections in fibers run
# concurrently. A throw-away CA and a "localhost" certificate are made
# here; the suite runner runs this file on every backend.
class TestTLS < Minitest::Test
  include WeftTestHelper

  CONNECTIONS = 50
  DELAY = 0.2 # seconds each response is held back by the server

  def self.cert(key, subject, issuer, issuer_key, ca: false, san: nil)
    c = OpenSSL::X509::Certificate.new
    c.version = 2
    c.serial = rand(1 << 60)
    c.subject = OpenSSL::X509::Name.parse(subject)
    c.issuer = issuer ? issuer.subject : c.subject
    c.public_key = key
    c.not_before = Time.now - 3600
    c.not_after = Time.now + 86_400
    ef = OpenSSL::X509::ExtensionFactory.new(issuer || c, c)
    c.add_extension(ef.create_extension("basicConstraints", ca ? "CA:TRUE" : "CA:FALSE", true))
    c.add_extension(ef.create_extension("keyUsage", ca ? "keyCertSign,cRLSign" : "digitalSignature", true))
    c.add_extension(ef.create_extension("subjectKeyIdentifier", "hash"))
    c.add_extension(ef.create_extension("subjectAltName", san)) if san
    c.sign(issuer_key, OpenSSL::Digest.new("SHA256"))
    c
  end

  def self.pki
    @pki ||= begin
      ca_key = OpenSSL::PKey::EC.generate("prime256v1")
      ca = cert(ca_key, "/CN=weft ruby test CA", nil, ca_key, ca: true)
      key = OpenSSL::PKey::EC.generate("prime256v1")
      leaf = cert(key, "/CN=localhost", ca, ca_key, san: "DNS:localhost,IP:127.0.0.1")
      store = OpenSSL::X509::Store.new
      store.add_cert(ca)
      { cert: leaf, key: key, store: store }
    end
  end

  def server_ctx
    ctx = OpenSSL::SSL::SSLContext.new
    ctx.cert = self.class.pki[:cert]
    ctx.key = self.class.pki[:key]
    ctx
  end

  def client_ctx
    ctx = OpenSSL::SSL::SSLContext.new
    # VERIFY_PEER with the test CA; set_params turns on verify_hostname.
    ctx.set_params(verify_mode: OpenSSL::SSL::VERIFY_PEER, cert_store: self.class.pki[:store])
    ctx
  end

  # One request on its own connection; returns the body.
  def https_get(port, path, hostname: "localhost")
    tcp = TCPSocket.new("127.0.0.1", port)
    ssl = OpenSSL::SSL::SSLSocket.new(tcp, client_ctx)
    ssl.hostname = hostname
    ssl.sync_close = true
    begin
      ssl.connect
      ssl.write("GET #{path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
      ssl.read.split("\r\n\r\n", 2)[1]
    ensure
      ssl.close
    end
  end

  # Answers "hello PATH" after DELAY; called on the server side of a
  # connection whose handshake is done. Counts the requests held back at
  # once: @peak is how many the clients had in flight together.
  def answer(ssl)
    head = +""
    head << ssl.readpartial(4096) until head.include?("\r\n\r\n")
    path = head[/\AGET (\S+)/, 1]
    held(+1)
    sleep DELAY
    held(-1)
    body = "hello #{path}"
    ssl.write("HTTP/1.1 200 OK\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
  ensure
    ssl.close
  end

  # A server on plain Ruby threads (no scheduler), one thread per connection.
  def with_thread_server
    tcp = TCPServer.new("127.0.0.1", 0)
    ctx = server_ctx
    conns = []
    acceptor = Thread.new do
      loop do
        sock = tcp.accept
        conns << Thread.new(sock) do |s|
          ssl = OpenSSL::SSL::SSLSocket.new(s, ctx)
          ssl.sync_close = true
          ssl.accept
          answer(ssl)
        rescue OpenSSL::SSL::SSLError, IOError, SystemCallError
          s.close
        end
      end
    rescue IOError, SystemCallError
      nil
    end
    yield tcp.addr[1]
  ensure
    tcp&.close
    acceptor&.join(5)
    conns.each { |t| t.join(5) }
  end

  def held(delta)
    (@held_lock ||= Mutex.new).synchronize do
      @held = (@held || 0) + delta
      @peak = [@peak || 0, @held].max
    end
  end

  # Every answer arrived, and the clients had several requests in flight at
  # once (one after another, the server would never hold two). No time is
  # asked of them: a loaded machine may take any.
  def check_concurrent(results)
    assert_equal CONNECTIONS, results.size
    CONNECTIONS.times { |i| assert_equal "hello /#{i}", results[i] }
    assert_operator @peak, :>, 1, "the #{CONNECTIONS} HTTPS requests were served one at a time"
  end

  def test_50_concurrent_https_requests_to_a_threaded_server
    with_thread_server do |port|
      results = {}
      weft do |s|
        CONNECTIONS.times { |i| Fiber.schedule { results[i] = https_get(port, "/#{i}") } }
        assert_kind_of Weft::Scheduler, s
      end
      check_concurrent(results)
    end
  end

  # Server and clients as fibers of one scheduler: SSLSocket#accept,
  # #connect, reads and writes all wait through it.
  def test_50_concurrent_https_requests_to_a_fiber_server
    results = {}
    weft do |s|
      tcp = TCPServer.new("127.0.0.1", 0)
      port = tcp.addr[1]
      ctx = server_ctx
      Fiber.schedule do
        CONNECTIONS.times do
          sock = tcp.accept
          Fiber.schedule do
            ssl = OpenSSL::SSL::SSLSocket.new(sock, ctx)
            ssl.sync_close = true
            ssl.accept
            answer(ssl)
          end
        end
        tcp.close
      end
      CONNECTIONS.times { |i| Fiber.schedule { results[i] = https_get(port, "/#{i}") } }
      assert_kind_of Weft::Scheduler, s
    end
    check_concurrent(results)
  end

  def test_wrong_host_name_is_refused
    with_thread_server do |port|
      error = nil
      weft do
        Fiber.schedule do
          https_get(port, "/", hostname: "wrong.example")
        rescue OpenSSL::SSL::SSLError => e
          error = e
        end
      end
      refute_nil error, "a certificate for localhost was accepted for wrong.example"
      assert_match(/certificate verify failed/, error.message)
    end
  end

  # A server that accepts TCP and never answers: the handshake waits in
  # io_wait, and a timeout around it ends it on time.
  def test_stalled_handshake_times_out
    tcp = TCPServer.new("127.0.0.1", 0)
    error = nil
    t0 = now
    weft do
      Fiber.schedule do
        Timeout.timeout(0.3) { https_get(tcp.addr[1], "/") }
      rescue Timeout::Error => e
        error = e
      end
    end
    assert_kind_of Timeout::Error, error
    assert_operator now - t0, :>=, 0.3
  ensure
    tcp&.close
  end
end
