# frozen_string_literal: true

require_relative "helper"
require "net/http"

# process_wait, timeout_after, address_resolve and a real protocol client.
class TestProcess < Minitest::Test
  include WeftTestHelper

  def test_process_wait_lets_other_fibers_run
    ticks = 0
    status = nil
    weft do
      Fiber.schedule { 10.times { sleep 0.005; ticks += 1 } }
      pid = spawn("sleep 0.1")
      _, status = Process.wait2(pid)
    end
    assert status.success?
    assert_equal 10, ticks
  end

  def test_process_wait_reports_exit_status_and_system_works
    weft do
      pid = spawn("exit 3")
      Process.wait(pid)
      assert_equal 3, $?.exitstatus
      assert system("true")
      refute system("false")
      assert_equal "hi\n", `echo hi`
    end
  end

  def test_process_wait_any_child_uses_the_thread_fallback
    weft do |s|
      pid = spawn("true")
      status = s.process_wait(-1, 0)
      assert_equal pid, status.pid
    end
  end

  def test_timeout_around_a_read
    weft do |s|
      r, w = IO.pipe
      assert_raises(Timeout::Error) { Timeout.timeout(0.02) { r.read(1) } }
      assert_quiet(s)
      w.write("k")
      assert_equal "k", Timeout.timeout(5) { r.read(1) }
      custom = Class.new(StandardError)
      e = assert_raises(custom) { Timeout.timeout(0.01, custom, "slow") { sleep 5 } }
      assert_equal "slow", e.message
      [r, w].each(&:close)
    end
  end

  def test_nested_timeouts
    weft do
      inner = Class.new(StandardError)
      assert_raises(Timeout::Error) do
        Timeout.timeout(0.02) do
          Timeout.timeout(5, inner) { sleep 1 }
        end
      end
    end
  end

  def test_getaddrinfo_localhost
    weft do |s|
      addrs = Addrinfo.getaddrinfo("localhost", 80, nil, :STREAM).map(&:ip_address)
      refute_empty addrs
      assert(addrs.all? { |a| a == "::1" || a.start_with?("127.") }, addrs.inspect)
      assert_equal ["127.0.0.1"], s.address_resolve("127.0.0.1")
      assert_includes s.address_resolve("localhost") & ["127.0.0.1", "::1"], addrs.first
      assert_raises(SocketError) { Addrinfo.getaddrinfo("no-such-host.invalid", 80) }
    end
  end

  # A tiny HTTP/1.1 responder: one fiber per connection, keep-alive.
  def serve_http(server, count)
    served = 0
    loop do
      conn = server.accept
      Fiber.schedule do
        while (line = conn.gets)
          path = line.split[1]
          nil while (h = conn.gets) && h != "\r\n"
          body = "hello #{path}"
          conn.write("HTTP/1.1 200 OK\r\nContent-Length: #{body.bytesize}\r\nContent-Type: text/plain\r\n\r\n#{body}")
          served += 1
        end
        conn.close
      end
    end
  rescue IOError, Errno::EBADF
    served
  end

  def test_net_http_from_200_fibers
    bodies = []
    weft do |s|
      server = TCPServer.new("127.0.0.1", 0)
      port = server.addr[1]
      Fiber.schedule { serve_http(server, 200) }
      gets = 200.times.map do |i|
        Weft::Future.spawn { Net::HTTP.get(URI("http://127.0.0.1:#{port}/#{i}")) }
      end
      bodies.concat(Weft::Future.all(gets).value)
      s.io_close(server) # wakes the accept loop (Ruby >= 4.0 does this in IO#close)
      server.close
    end
    assert_equal 200, bodies.size
    assert_equal (0...200).map { |i| "hello /#{i}" }.sort, bodies.sort
  end
end
