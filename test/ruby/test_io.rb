# frozen_string_literal: true

require_relative "helper"

# io_wait, io_read, io_write (through IO's own methods) on pipes and sockets.
class TestIO < Minitest::Test
  include WeftTestHelper

  def test_pipe_partial_reads_and_eof
    got = []
    weft do
      r, w = IO.pipe
      Fiber.schedule do
        %w[ab cde f].each { |s| w.write(s); sleep 0.01 }
        w.close
      end
      got << r.readpartial(100) << r.readpartial(100)
      got << r.read
      got << r.read(10)
      r.close
    end
    assert_equal ["ab", "cde", "f", nil], got
  end

  def test_socket_pair_partial_io_and_eof
    weft do
      a, b = UNIXSocket.pair
      Fiber.schedule do
        b.write("x" * 10)
        sleep 0.01
        b.write("y" * 5)
        b.close_write
      end
      assert_equal "x" * 10, a.readpartial(64)
      assert_equal "y" * 5, a.read
      assert_nil a.read(1)
      [a, b].each(&:close)
    end
  end

  def transfer_1mb(reader, writer)
    data = Random.new(42).bytes(1 << 20)
    received = +""
    weft do |s|
      Fiber.schedule do
        writer.write(data)
        writer.close
      end
      Fiber.schedule do
        loop { received << reader.readpartial(65_536) }
      rescue EOFError
        nil
      end
    end
    assert_equal data.bytesize, received.bytesize
    assert_equal Digest::SHA256.hexdigest(data), Digest::SHA256.hexdigest(received)
  end

  def test_1mb_through_a_pipe
    r, w = IO.pipe
    transfer_1mb(r, w)
    r.close
  end

  def test_1mb_through_tcp
    server = TCPServer.new("127.0.0.1", 0)
    client = TCPSocket.new("127.0.0.1", server.addr[1])
    peer = server.accept
    transfer_1mb(peer, client)
    [server, peer].each(&:close)
  end

  def test_write_to_closed_pipe_raises_epipe
    weft do
      r, w = IO.pipe
      r.close
      assert_raises(Errno::EPIPE) { w.write("x" * 100_000) }
      w.close
    end
  end

  def test_wait_readable_times_out_then_sees_data
    weft do |s|
      r, w = IO.pipe
      t0 = now
      assert_nil r.wait_readable(0.05)
      assert_operator now - t0, :>=, 0.05
      Fiber.schedule { sleep 0.01; w.write("z") }
      assert_equal r, r.wait_readable(5)
      assert_equal "z", r.read_nonblock(1)
      assert_equal w, w.wait_writable(0)
      [r, w].each(&:close)
      assert_quiet(s)
    end
  end

  def test_tcp_accept_connect_echo
    replies = []
    weft do
      server = TCPServer.new("127.0.0.1", 0)
      port = server.addr[1]
      Fiber.schedule do
        3.times do
          conn = server.accept
          Fiber.schedule do
            while (line = conn.gets)
              conn.write(line.upcase)
            end
            conn.close
          end
        end
        server.close
      end
      3.times.map do |i|
        Fiber.schedule do
          sock = TCPSocket.new("127.0.0.1", port)
          sock.write("hello #{i}\n")
          replies << sock.gets
          sock.close
        end
      end
    end
    assert_equal ["HELLO 0\n", "HELLO 1\n", "HELLO 2\n"], replies.sort
  end

  def test_io_select_under_the_scheduler
    weft do |s|
      r, w = IO.pipe
      Fiber.schedule { sleep 0.01; w.write("!") }
      ready = s.io_select([r], nil, nil, 5) # the hook itself (3.1 does not call it)
      assert_equal [[r], [], []], ready
      assert_equal [[r], [], []], IO.select([r], nil, nil, 5) # the hook on 3.3+
      assert_nil s.io_select([r.dup.tap { |d| d.read_nonblock(1) }], nil, nil, 0.01)
      [r, w].each(&:close)
    end
  end

  def test_hooks_wait_concurrently
    order = []
    weft do
      r1, w1 = IO.pipe
      r2, w2 = IO.pipe
      Fiber.schedule { order << r1.read(3) }
      Fiber.schedule { order << r2.read(3) }
      w2.write("two")
      sleep 0.01
      w1.write("one")
      [w1, w2].each(&:close)
    end
    assert_equal %w[two one], order
  end

  def test_close_while_waiting_through_io_close
    weft do |s|
      r, w = IO.pipe
      error = nil
      Fiber.schedule do
        s.io_wait(r, IO::READABLE, nil)
      rescue IOError => e
        error = e
      end
      s.io_close(r) # what Ruby 4.0 calls before closing
      sleep 0
      r.close
      w.close
      assert_kind_of IOError, error
      assert_quiet(s)
    end
  end

  # Ruby < 4.0 has no io_close hook: the scheduler notices the close itself.
  def test_plain_close_while_another_fiber_waits
    weft do |s|
      r, w = IO.pipe
      error = nil
      Fiber.schedule do
        r.read(1)
      rescue IOError, SystemCallError => e
        error = e
      end
      r.close
      w.close
      sleep 0.01 until error
      assert_kind_of StandardError, error
      assert_quiet(s)
    end
  end

  def test_server_close_stops_an_accept_loop
    weft do
      server = TCPServer.new("127.0.0.1", 0)
      stopped = false
      Fiber.schedule do
        loop { server.accept.close }
      rescue IOError, SystemCallError
        stopped = true
      end
      TCPSocket.new("127.0.0.1", server.addr[1]).close
      server.close
      sleep 0.01 until stopped
      # the number may be reused at once by a new descriptor that must work
      r, w = IO.pipe
      Fiber.schedule { sleep 0.01; w.write("!") }
      assert_equal "!", r.read(1)
      [r, w].each(&:close)
    end
  end

  def test_fd_number_reused_by_another_io
    weft do
      r, w = IO.pipe
      Fiber.schedule { sleep 0.01; w.write("1") }
      assert_equal "1", r.read(1)
      [r, w].each(&:close)
      r2, w2 = IO.pipe # most likely the same numbers
      Fiber.schedule { sleep 0.01; w2.write("2") }
      assert_equal "2", r2.read(1)
      [r2, w2].each(&:close)
    end
  end
end
