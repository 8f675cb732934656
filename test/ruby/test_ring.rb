# frozen_string_literal: true

require_relative "helper"
require "tempfile"

# Transfer hooks with a minimum length (IO::Buffer#read/#write/#pread/
# #pwrite, or the hooks called directly) run as io_uring operations on the
# IO::Buffer's memory when the backend is io_uring. These tests end such
# operations early in every way a fiber can be stopped while the kernel
# owns the buffer, and check that nothing is lost, nothing stays locked and
# no operation outlives its hook. They run on every backend; on io_uring
# they also check that the ring was used.
class TestRing < Minitest::Test
  include WeftTestHelper

  def uring?(scheduler) = scheduler.backend == "io_uring"

  def assert_ring_used(scheduler, before = 0)
    return unless uring?(scheduler)

    assert_operator scheduler.stats[:ring_ops], :>, before, "no ring op was submitted"
  end

  def assert_no_ops(scheduler)
    assert_equal 0, scheduler.stats[:ops_inflight], "ops left in flight: #{scheduler.stats}"
  end

  def socket_pairs
    server = TCPServer.new("127.0.0.1", 0)
    client = TCPSocket.new("127.0.0.1", server.addr[1])
    peer = server.accept
    server.close
    [UNIXSocket.pair, [client, peer]]
  end

  def test_timeout_while_a_socket_read_is_in_flight_loses_nothing
    socket_pairs.each do |a, b|
      weft do |s|
        buf = IO::Buffer.new(64)
        3.times do |i|
          assert_raises(Timeout::Error) { Timeout.timeout(0.02) { buf.read(a, 5) } }
          refute buf.locked?, "buffer left locked"
          assert_no_ops(s)
          b.write("hello#{i}")
          assert_equal 6, buf.read(a, 6)
          assert_equal "hello#{i}", buf.get_string(0, 6)
        end
        assert_ring_used(s)
        assert_quiet(s)
      end
      [a, b].each(&:close)
    end
  end

  def test_timeout_on_a_pipe_read_in_flight
    r, w = IO.pipe
    weft do |s|
      buf = IO::Buffer.new(8)
      assert_raises(Timeout::Error) { Timeout.timeout(0.02) { s.io_read(r, buf, 4) } }
      w.write("abcd")
      assert_equal 4, s.io_read(r, buf, 4)
      assert_equal "abcd", buf.get_string(0, 4)
      assert_ring_used(s)
      assert_no_ops(s)
    end
    [r, w].each(&:close)
  end

  def test_raise_in_a_fiber_whose_read_is_in_flight
    a, b = UNIXSocket.pair
    caught = nil
    weft do |s|
      buf = IO::Buffer.new(16)
      f = Fiber.schedule do
        buf.read(a, 4)
      rescue ArgumentError => e
        caught = e.message
      end
      assert_equal 1, s.stats[:waiting_fibers]
      s.raise_in(f, ArgumentError, "go")
      sleep 0.01 until caught
      refute buf.locked?
      assert_no_ops(s)
      b.write("data")
      assert_equal 4, buf.read(a, 4)
      assert_equal "data", buf.get_string(0, 4)
      assert_ring_used(s)
    end
    assert_equal "go", caught
    [a, b].each(&:close)
  end

  # Fiber#raise unwinds the fiber inside its wait: the op must be over
  # before the fiber finishes unwinding (the caller may free the buffer).
  def test_fiber_raise_unwinds_a_read_in_flight
    a, b = UNIXSocket.pair
    s = Weft::Scheduler.new
    Fiber.set_scheduler(s)
    buf = IO::Buffer.new(16)
    rescued = nil
    f = Fiber.schedule do
      s.io_read(a, buf, 4)
    rescue RuntimeError => e
      rescued = e.message
    end
    assert_equal 1, s.stats[:ops_inflight] if uring?(s)
    f.raise("stop")
    assert_equal "stop", rescued
    assert_no_ops(s)
    refute buf.locked?
    buf.free # the memory the kernel would have written into
    assert_equal 0, s.stats[:waits]
    b.write("late")
    got = nil
    Fiber.schedule { got = a.read(4) }
    Fiber.set_scheduler(nil)
    assert_equal "late", got
    [a, b].each(&:close)
  end

  # Thread#raise (Interrupt) on a thread whose fibers have ring reads in
  # flight: Weft.run stops them, every ensure runs, the loop ends with no
  # op in flight and the data written afterwards is all still there.
  def test_thread_raise_with_reads_in_flight
    pairs = Array.new(4) { UNIXSocket.pair }
    cleaned = Queue.new
    started = Queue.new
    sched = nil
    runner = Thread.new do
      Thread.current.report_on_exception = false
      Weft.run do |s|
        sched = s
        pairs.each do |a, _|
          Fiber.schedule do
            started << true
            IO::Buffer.new(32).read(a, 8)
          ensure
            cleaned << :reader
          end
        end
        sleep
      end
    end
    4.times { started.pop }
    Thread.pass until runner.status == "sleep" || !runner.alive?
    sleep 0.05
    runner.raise(Interrupt)
    assert_raises(Interrupt) { runner.join }
    assert_equal 4, cleaned.size
    assert sched.closed?
    pairs.each_with_index do |(a, b), i|
      b.write("payload#{i}")
      assert_equal "payload#{i}", a.read(8)
      [a, b].each(&:close)
    end
  end

  # Thread#raise landing in the very fiber whose op is in flight (it runs
  # the loop itself: entered by transfer, it has no resumer to yield to,
  # and no loop runs yet): it unwinds through its wait.
  def test_thread_raise_lands_in_the_fiber_whose_read_is_in_flight
    a, b = UNIXSocket.pair
    state = Queue.new
    t = Thread.new do
      Thread.current.report_on_exception = false
      s = Weft::Scheduler.new
      Fiber.set_scheduler(s)
      buf = IO::Buffer.new(8)
      begin
        Fiber.new(blocking: false) do
          state << s.backend
          s.io_read(a, buf, 4)
        end.transfer
        state << :not_interrupted
      rescue Interrupt
        state << [:interrupted, buf.locked?, s.stats[:ops_inflight], s.stats[:waits]]
        buf.free
      ensure
        Fiber.set_scheduler(nil)
      end
    end
    backend = state.pop
    Thread.pass until t.status == "sleep" || !t.alive?
    sleep 0.05
    t.raise(Interrupt)
    t.join
    assert_equal [:interrupted, false, 0, 0], state.pop
    assert_operator backend.size, :>, 0
    b.write("next")
    assert_equal "next", a.read(4)
    [a, b].each(&:close)
  end

  def test_gc_compact_and_stress_during_reads_in_flight
    skip "GC.compact unavailable" unless GC.respond_to?(:compact)
    pairs = Array.new(8) { UNIXSocket.pair }
    results = {}
    weft do |s|
      pairs.each_with_index do |(a, _), i|
        Fiber.schedule do
          chunks = []
          5.times do
            buf = IO::Buffer.new(10)
            n = buf.read(a, 10)
            chunks << buf.get_string(0, n)
          end
          results[i] = chunks.join
        end
      end
      Fiber.schedule do
        5.times do |round|
          GC.compact
          GC.stress = true
          pairs.each_with_index { |(_, b), i| b.write(format("%02d-%06d.", i, round)) }
          GC.stress = false
          sleep 0.002
        end
      ensure
        GC.stress = false
      end
      assert_ring_used(s)
    end
    pairs.each_with_index do |(a, b), i|
      assert_equal Array.new(5) { |r| format("%02d-%06d.", i, r) }.join, results[i]
      [a, b].each(&:close)
    end
  end

  def digest(data) = Digest::SHA256.hexdigest(data)

  def test_1mb_through_buffers_on_sockets_and_pipes
    data = Random.new(7).bytes(1 << 20)
    [UNIXSocket.pair, IO.pipe].each do |reader, writer|
      out = nil
      weft do |s|
        Fiber.schedule do
          # A copy per round: on Ruby 3.1 a buffer for a string keeps it
          # locked until the buffer is garbage collected, so a second
          # IO::Buffer.for(data) would raise unless a GC ran in between.
          src = buffer_for(data.dup)
          assert_equal data.bytesize, src.write(writer, data.bytesize)
        ensure
          writer.close # a failed write must not leave the reader waiting
        end
        dst = IO::Buffer.new(data.bytesize)
        assert_equal data.bytesize, dst.read(reader, data.bytesize)
        out = dst.get_string
        assert_ring_used(s)
        assert_no_ops(s)
      end
      assert_equal digest(data), digest(out)
      reader.close
    end
  end

  def test_1mb_pwrite_and_pread_on_a_file
    data = Random.new(9).bytes(1 << 20)
    Tempfile.create("weft-ring") do |f|
      weft do |s|
        src = buffer_for(data)
        dst = IO::Buffer.new(data.bytesize)
        # 3.3: io_pwrite(io, buffer, from, length, offset)
        if RUBY_VERSION < "3.2"
          assert_equal data.bytesize, s.io_pwrite(f, src, data.bytesize, 4096)
          assert_equal data.bytesize, s.io_pread(f, dst, data.bytesize, 4096)
        else
          assert_equal data.bytesize, s.io_pwrite(f, src, 4096, data.bytesize, 0)
          assert_equal data.bytesize, s.io_pread(f, dst, 4096, data.bytesize, 0)
        end
        assert_equal digest(data), digest(dst.get_string)
        assert_ring_used(s)
        assert_no_ops(s)
      end
      assert_equal digest(data), digest(File.binread(f.path, data.bytesize, 4096))
    end
  end

  def test_length_zero_is_a_single_attempt
    a, b = UNIXSocket.pair
    weft do |s|
      buf = IO::Buffer.new(8)
      assert_equal(-Errno::EAGAIN::Errno, s.io_read(a, buf, 0))
      b.write("x")
      assert_equal 1, s.io_read(a, buf, 0)
      assert_quiet(s)
    end
    [a, b].each(&:close)
  end

  def test_buffer_is_locked_while_the_op_is_in_flight
    a, b = UNIXSocket.pair
    weft do |s|
      buf = IO::Buffer.new(8)
      reader = Fiber.schedule { buf.read(a, 2) }
      if uring?(s)
        assert buf.locked?
        assert_raises(IO::Buffer::LockedError) { buf.resize(4096) }
      end
      b.write("ok")
      sleep 0.01 while reader.alive?
      refute buf.locked?
      assert_equal "ok", buf.get_string(0, 2)
    end
    [a, b].each(&:close)
  end

  def test_closing_the_io_ends_a_read_in_flight
    a, b = UNIXSocket.pair
    result = nil
    weft do |s|
      buf = IO::Buffer.new(8)
      Fiber.schedule { result = s.io_read(a, buf, 4) }
      s.io_close(a)
      sleep 0.01 until result
      assert_no_ops(s)
    end
    assert_equal(-Errno::EBADF::Errno, result)
    [a, b].each(&:close)
  end
  # Ruby's own IO methods (readpartial, write, read_nonblock, gets) call
  # the hooks with length 0: one attempt. On io_uring, while other fibers
  # are ready, that attempt is a ring op (MSG_DONTWAIT), so that every
  # fiber's op goes out in one io_uring_enter. Many fibers talking at once
  # over TCP and Unix sockets: every byte arrives in order, and the ring
  # was used for the single attempts.
  def test_many_fibers_single_attempts_lose_nothing
    socket_pairs.each do |a0, b0|
      pairs = [[a0, b0]] + Array.new(15) { UNIXSocket.pair }
      weft do |s|
        before = s.stats[:ring_ops]
        got = Array.new(pairs.size) { +"" }
        barrier = Weft::Barrier.new
        pairs.each_with_index do |(a, b), i|
          barrier.spawn do
            200.times do |k|
              b.write("#{i}:#{k};")
              sleep 0 # the others get a turn: several fibers ready at once
            end
            b.close_write
          end
          barrier.spawn do
            while (chunk = a.readpartial(7) rescue nil)
              got[i] << chunk
            end
          end
        end
        barrier.wait
        pairs.each_index do |i|
          assert_equal Array.new(200) { |k| "#{i}:#{k};" }.join, got[i], "pair #{i}"
        end
        assert_ring_used(s, before)
        assert_no_ops(s)
      end
      pairs.flatten.each { |io| io.close unless io.closed? }
    end
  end

  # The single attempt stays one attempt on the ring: read_nonblock with
  # nothing there answers at once (IO::WaitReadable, :wait_readable) while
  # other fibers are ready, never waits for data.
  def test_read_nonblock_never_waits_while_others_are_ready
    socket_pairs.each do |a, b|
      weft do |s|
        answers = []
        barrier = Weft::Barrier.new
        3.times { barrier.spawn { 50.times { sleep 0 } } }
        barrier.spawn do
          answers << a.read_nonblock(10, exception: false)
          answers << (a.read_nonblock(10) rescue $!.class)
          b.write("x")
          sleep 0.01
          answers << a.read_nonblock(10, exception: false)
        end
        barrier.wait
        assert_equal [:wait_readable, IO::EAGAINWaitReadable, "x"], answers
        assert_no_ops(s)
      end
      [a, b].each(&:close)
    end
  end

  # A socket object is classified as a socket without asking the kernel;
  # every other IO still is. When a descriptor number goes from a socket to
  # a pipe to a file to a socket again within one scheduler, each new IO
  # object on that number must be treated as what it is (a pipe taken for
  # a socket would be read with recv: ENOTSOCK).
  def test_a_reused_descriptor_number_is_classified_again
    weft do
      tmp = Tempfile.new("weft-reuse")
      tmp.write("file data")
      tmp.close
      path = tmp.path
      begin
        got = []
        3.times do
          a, b = UNIXSocket.pair
          num = a.fileno
          Fiber.schedule { b.write("sock") }
          got << a.readpartial(10)
          a.close
          b.close
          r, w = IO.pipe
          r, w = w, r if w.fileno == num # the number on the read end
          Fiber.schedule { w.write("pipe"); w.close }
          got << r.read
          r.close
          File.open(path) { |f| got << f.read }
          c, d = UNIXSocket.pair
          Fiber.schedule { d.write("again") }
          got << c.readpartial(10)
          [c, d].each(&:close)
        end
        assert_equal (%w[sock pipe] + ["file data", "again"]) * 3, got
      ensure
        tmp.unlink
      end
    end
  end

  # The single attempt of Ruby's own IO methods goes to the ring only on an
  # IO that has been found not ready before: a fresh connection's request is
  # usually there already, and a ring op would only add two switches and a
  # loop round. Between the counter reads below no other fiber runs unless
  # the attempt itself switched, so a system call leaves the count alone.
  def test_single_attempts_use_the_ring_only_after_the_io_was_not_ready
    socket_pairs.each do |a, b|
      weft do |s|
        got = []
        deltas = []
        done = false
        barrier = Weft::Barrier.new
        2.times { barrier.spawn { sleep 0 until done } }
        barrier.spawn do
          b.write("first")
          before = s.stats[:ring_ops]
          got << a.readpartial(10)             # fresh: a system call
          deltas << s.stats[:ring_ops] - before
          Fiber.schedule { sleep 0.01; b.write("second") }
          got << a.readpartial(10)             # not ready: waits, remembered
          b.write("third")
          before = s.stats[:ring_ops]
          got << a.readpartial(10)             # others are ready: the ring
          deltas << s.stats[:ring_ops] - before
        ensure
          done = true
        end
        barrier.wait
        assert_equal %w[first second third], got
        if uring?(s)
          assert_equal 0, deltas[0], "a fresh socket's first attempt went to the ring"
          assert_operator deltas[1], :>, 0, "the attempt after a wait was not a ring op"
        end
        assert_no_ops(s)
      end
      [a, b].each(&:close)
    end
  end
end
