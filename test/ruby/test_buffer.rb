# frozen_string_literal: true

require_relative "helper"
require "tempfile"

# IO::Buffer through io_read/io_write/io_pread/io_pwrite, with every
# argument list Ruby versions use (called directly where this Ruby's IO
# would not).
class TestBuffer < Minitest::Test
  include WeftTestHelper

  def test_buffer_read_and_write_on_a_pipe
    weft do
      r, w = IO.pipe
      out = buffer_for(+"hello buffer")
      Fiber.schedule { sleep 0.01; out.write(w, out.size) }
      inb = IO::Buffer.new(12)
      assert_equal 12, inb.read(r, 12)
      assert_equal "hello buffer", inb.get_string
      [r, w].each(&:close)
    end
  end

  # What the file holds after buffer.pwrite(file, length, offset), with or
  # without the scheduler (Ruby 3.1.2's mis-encoded offset must not show).
  def pwrite_result(with_scheduler, offset)
    Tempfile.create("weft") do |f|
      f.write("." * 16)
      f.flush
      # 3.1: pwrite(io, length, offset); 3.2+: pwrite(io, from, length)
      write = if RUBY_VERSION < "3.2"
                -> { buffer_for(+"AB").pwrite(f, 2, offset) }
              else
                -> { buffer_for(+"AB").pwrite(f, offset, 2) }
              end
      with_scheduler ? weft { write.call } : write.call
      File.binread(f.path)
    end
  end

  def test_pwrite_lands_at_the_same_offset_as_without_the_scheduler
    [0, 1, 4, 7].each do |offset|
      assert_equal pwrite_result(false, offset), pwrite_result(true, offset), "offset #{offset}"
    end
    assert_equal "....AB..........", pwrite_result(true, 4)
  end

  def test_pread_reads_the_same_bytes_as_without_the_scheduler
    Tempfile.create("weft") do |f|
      f.write("0123456789")
      f.flush
      read = lambda do
        b = IO::Buffer.new(3)
        RUBY_VERSION < "3.2" ? b.pread(f, 3, 5) : b.pread(f, 5, 3)
        b.get_string
      end
      plain = read.call
      assert_equal plain, weft { read.call }
    end
  end

  # A length shorter than the buffer: Ruby 3.1 writes that many bytes of
  # it (write and pwrite) and fills what the buffer holds on a read; 3.2
  # and later move the whole buffer. Under weft 3.1's write and pwrite
  # wrote the whole buffer: 5 bytes too many in the file, on the pipe.
  def test_a_short_length_moves_what_it_does_without_the_scheduler
    Tempfile.create("weft") do |f|
      probe = lambda do
        f.truncate(0)
        f.pwrite("." * 10, 0)
        rd, wr = IO.pipe
        wrote = buffer_for(+"ABCDEFGH").write(wr, 3)
        wr.close
        piped = rd.read
        rd.close
        put = buffer_for(+"ABCDEFGH").pwrite(f, 3, 2) # 3.1: length, offset
        rd, wr = IO.pipe
        wr.write("0123456789")
        wr.close
        got = IO::Buffer.new(8).read(rd, 3)
        rest = rd.read
        rd.close
        [wrote, piped, put, File.binread(f.path), got, rest]
      end
      plain = probe.call
      assert_equal plain, weft { probe.call }
      assert_equal [3, "ABC", 3, "..ABC....."], plain.first(4) if RUBY_VERSION < "3.2"
    end
  end

  def test_every_signature_directly
    weft do |s|
      Tempfile.create("weft") do |f|
        f.write("abcdefghij")
        f.flush
        buf = IO::Buffer.new(8)
        # 3.3: io_pread(io, buffer, from, length, offset)
        # at least length bytes, up to the rest of the buffer
        assert_equal 7, s.io_pread(f, buf, 2, 4, 1)
        assert_equal "cdef", buf.get_string(1, 4)
        # 3.3: io_pwrite(io, buffer, from, length, offset)
        src = buffer_for(+"XYZ")
        assert_equal 2, s.io_pwrite(f, src, 8, 2, 1)
        assert_equal "abcdefghYZ", File.binread(f.path)
      end
      r, w = IO.pipe
      # 3.2+: io_write(io, buffer, length, offset) / io_read(..., offset)
      assert_equal 3, s.io_write(w, buffer_for(+"--abc"), 3, 2)
      buf = IO::Buffer.new(6)
      assert_equal 3, s.io_read(r, buf, 3, 3)
      assert_equal "abc", buf.get_string(3, 3)
      # length 0: one attempt; -EAGAIN when nothing is there
      assert_equal(-Errno::EAGAIN::Errno, s.io_read(r, buf, 0))
      # 3.1: io_read(io, buffer, length) waits for at least length bytes
      Fiber.schedule { w.write("1"); sleep 0.01; w.write("23") }
      assert_equal 3, s.io_read(r, IO::Buffer.new(3), 3)
      w.close
      assert_equal 0, s.io_read(r, IO::Buffer.new(3), 1) # EOF
      r.close
    end
  end

  def test_io_write_returns_negative_errno
    weft do |s|
      r, w = IO.pipe
      r.close
      assert_equal(-Errno::EPIPE::Errno, s.io_write(w, buffer_for(+"x"), 1))
      w.close
    end
  end
end
