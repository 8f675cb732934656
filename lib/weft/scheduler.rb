# frozen_string_literal: true

require "rbconfig"

module Weft
  # The hooks written in Ruby: each hands a blocking call that has no
  # non-blocking kernel interface to a thread, or to a pidfd the reactor
  # can wait on. Everything else is in C (ext/weft/scheduler.c).
  # Raised in waiting fibers by Scheduler#stop (Weft.run does on Interrupt,
  # SignalException and SystemExit). Not a StandardError, so `rescue => e`
  # does not swallow it; the fiber ends quietly once it unwinds.
  class Stop < Exception; end # rubocop:disable Lint/InheritException

  class Scheduler
    # fiber(*args) { |*args| ... } (Fiber.schedule) is in C: it starts a
    # non-blocking fiber now; a fiber ended by Weft::Stop ends quietly.

    # process_wait(pid, flags): a pidfd (Linux >= 5.3) waited on by the
    # reactor; a helper thread for pid <= 0 or when pidfd_open fails.
    def process_wait(pid, flags)
      fd = begin
        pid.positive? ? self.class.pidfd_open(pid) : nil
      rescue SystemCallError
        nil
      end
      return Thread.new { Process::Status.wait(pid, flags) }.value unless fd

      io = IO.for_fd(fd, autoclose: true)
      begin
        loop do
          status = Process::Status.wait(pid, flags | Process::WNOHANG)
          return status if status

          io_wait(io, IO::READABLE, nil)
        end
      ensure
        io_close(io)
        io.close
      end
    end

    IP_LITERAL = /\A(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F:]*:[0-9a-fA-F:.]*)\z/.freeze
    private_constant :IP_LITERAL

    # address_resolve(hostname) -> [String]: getaddrinfo in a helper
    # thread, so the loop keeps running meanwhile.
    def address_resolve(hostname)
      host = hostname.to_s.sub(/%.*\z/, "")
      return [host] if IP_LITERAL.match?(host)

      require "socket"
      Thread.new do
        Addrinfo.getaddrinfo(host, nil, nil, :STREAM).map(&:ip_address).uniq
      rescue SocketError
        []
      end.value
    end

    # blocking_operation_wait(work) (Ruby >= 3.4)
    def blocking_operation_wait(work)
      Thread.new { work.call }.value
    end

    # Raise an exception in +fiber+ the next time it waits in (or wakes
    # from) this scheduler; safe where Fiber#raise would strand the caller.
    def raise_in(fiber, exception = RuntimeError, message = nil)
      exception = message ? exception.new(message) : exception.new if exception.is_a?(Class)
      fiber_interrupt(fiber, exception)
    end

    # Ruby 3.1's IO::Buffer#pread/#pwrite hand the scheduler a doubly
    # encoded file offset (2 * offset + 1). Probe once, at load time, with
    # a throw-away scheduler in a throw-away thread, so the C hooks undo it
    # exactly on the Rubies that have the bug.
    class OffsetProbe
      attr_reader :seen

      def initialize = @seen = {}
      def io_pread(_io, _buffer, length, offset) = (@seen[:pread] = offset; length)
      def io_pwrite(_io, _buffer, length, offset) = (@seen[:pwrite] = offset; length)
      def io_wait(_io, events, _timeout) = events
      def kernel_sleep(*) = nil
      def block(*) = nil
      def unblock(*) = nil
      def close = nil
      def fiber(&block) = Fiber.new(blocking: false, &block).tap(&:resume)
    end
    private_constant :OffsetProbe

    def self.probe_offset_encoding
      return [false, false] unless RUBY_VERSION < "3.2" && defined?(IO::Buffer)

      probe = OffsetProbe.new
      experimental = Warning[:experimental]
      Warning[:experimental] = false
      Thread.new do
        Fiber.set_scheduler(probe)
        Fiber.schedule do
          File.open(File::NULL, "r+") do |f|
            IO::Buffer.new(1).pread(f, 1, 1)
            IO::Buffer.for("x").pwrite(f, 1, 1)
          end
        end
      ensure
        Fiber.set_scheduler(nil)
      end.join
      [probe.seen[:pread] == 3, probe.seen[:pwrite] == 3]
    rescue StandardError
      [false, false]
    ensure
      Warning[:experimental] = experimental
    end

    _set_offset_encoding(*probe_offset_encoding)
  end

  # Ruby 3.1 has no io_select hook: IO.select (and Kernel#select) in a
  # non-blocking fiber would block the whole thread in select(2). Route
  # them to Scheduler#io_select, which waits on the reactor like every
  # other hook. Elsewhere (blocking fibers, other schedulers) nothing
  # changes. Ruby >= 3.2 calls the hook itself.
  module SelectThroughScheduler
    def select(*arguments)
      scheduler = Fiber.scheduler
      return super unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

      scheduler.io_select(*arguments)
    end
  end
  private_constant :SelectThroughScheduler

  if RUBY_VERSION < "3.2"
    IO.singleton_class.prepend(SelectThroughScheduler)
    Kernel.prepend(Module.new do
      private

      define_method(:select) do |*arguments|
        return super(*arguments) unless arguments.first.is_a?(Array) || arguments.first.nil?

        scheduler = Fiber.scheduler
        return super(*arguments) unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

        scheduler.io_select(*arguments)
      end
    end)
  end
end
