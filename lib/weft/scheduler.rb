# frozen_string_literal: true

require "rbconfig"
require "socket"

module Weft
  # The hooks written in Ruby: each hands a blocking call that has no
  # non-blocking kernel interface to a thread, or to a pidfd the reactor
  # can wait on. Everything else is in C (ext/weft/, see rsched.h).
  # Raised in waiting fibers by Scheduler#stop (Weft.run does on Interrupt,
  # SignalException and SystemExit). Not a StandardError, so `rescue => e`
  # does not swallow it; the fiber ends quietly once it unwinds.
  class Stop < Exception; end # rubocop:disable Lint/InheritException

  class Scheduler
    # fiber(*args) { |*args| ... } (Fiber.schedule) is in C: it starts a
    # non-blocking fiber now; a fiber ended by Weft::Stop ends quietly.

    # process_wait(pid, flags): a pidfd (Linux >= 5.3) waited on by the
    # reactor; a helper thread for pid <= 0, when pidfd_open fails, or for
    # flags beyond WNOHANG (WUNTRACED: a pidfd becomes readable when the
    # child exits, not when it stops, so a wait for a stop waited until
    # the child died).
    # When the fiber's wait ends early (Timeout, Weft::Stop, Fiber#raise)
    # the helper is killed and joined before the exception goes on: left
    # in waitpid it would reap the next child to exit (Process.wait with
    # no pid waits for any), and that child's own Process.wait raised
    # Errno::ECHILD, where a thread's interrupted wait reaps nothing.
    def process_wait(pid, flags)
      _child_waits! # from now on each wait keeps its fiber's $?
      fd = begin
        pid.positive? && (flags & ~Process::WNOHANG).zero? ? self.class.pidfd_open(pid) : nil
      rescue SystemCallError
        nil
      end
      unless fd
        waiter = Thread.new do
          Thread.current.name = "weft process_wait #{pid}" # named in #dump
          Thread.current.report_on_exception = false
          Process::Status.wait(pid, flags)
        end
        begin
          return waiter.value
        ensure
          if waiter.alive?
            waiter.kill
            begin
              waiter.join
            rescue StandardError
              nil # it ended with its own error (ECHILD) as it was killed
            end
          end
        end
      end

      io = IO.for_fd(fd, autoclose: true)
      (@process_waits ||= {})[fd] = pid # #dump names the wait
      begin
        loop do
          status = Process::Status.wait(pid, flags | Process::WNOHANG)
          return status if status

          io_wait(io, IO::READABLE, nil)
        end
      ensure
        @process_waits.delete(fd)
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

      Thread.new do
        Thread.current.name = "weft address_resolve" # named in #dump
        Addrinfo.getaddrinfo(host, nil, nil, :STREAM).map(&:ip_address).uniq
      rescue SocketError
        []
      end.value
    end

    # No blocking_operation_wait (Ruby 3.4): without it Ruby runs the
    # work (zlib, IO.copy_stream, big IO::Buffer copies) in place, as 3.1
    # and 3.3 do. Handed to a thread of its own, the work used data on the
    # calling fiber's stack and could not be stopped: IO.copy_stream looks
    # for interrupts on the caller's thread, not on the one running it, so
    # a timeout left the copy waiting on its pipe forever while the fiber
    # unwound (or crashed the process), and a thread per piece made
    # Zlib.deflate 2.4x slower. docs/design/ruby.md has the measurements.

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

module Weft
  # IO#sysread waits for data on a thread, but under a scheduler Ruby
  # (3.1 to 3.4) hands it to the io_read hook as one attempt, the very
  # call IO#read_nonblock makes: the hook cannot tell the two apart and
  # must not wait for read_nonblock, so a sysread that found nothing
  # raised Errno::EAGAIN. From a non-blocking fiber under Weft, sysread
  # waits for the IO to become readable (through the scheduler, so
  # IO#timeout applies) and tries again, as on a thread.
  module SysreadWaits
    # After a sysread's or syswrite's Errno::EAGAIN: wait for +events+ on
    # +io+ and say true (try again) from a non-blocking fiber under Weft;
    # false elsewhere (the error stands).
    def self.waited?(io, events)
      scheduler = Fiber.scheduler
      return false unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

      scheduler.io_wait(io, events, nil)
      true
    end

    def sysread(*arguments)
      super
    rescue Errno::EAGAIN
      retry if SysreadWaits.waited?(self, IO::READABLE)
      raise
    end
  end
  private_constant :SysreadWaits
  IO.prepend(SysreadWaits)

  # IO#syswrite likewise: on a thread (Ruby >= 3.3; 3.1's raises
  # Errno::EAGAIN there too) it waits for room in a full pipe or socket
  # and writes; under a scheduler Ruby hands it to the io_write hook as
  # one attempt, the call IO#write_nonblock makes, and a syswrite to a
  # full pipe raised Errno::EAGAIN. From a non-blocking fiber under Weft
  # it waits for the IO to become writable and tries again.
  module SyswriteWaits
    def syswrite(*arguments)
      super
    rescue Errno::EAGAIN
      retry if SysreadWaits.waited?(self, IO::WRITABLE)
      raise
    end
  end
  private_constant :SyswriteWaits
  IO.prepend(SyswriteWaits) if RUBY_VERSION >= "3.3"

  # IO.copy_stream between descriptors that never make it wait (a file
  # to a file, to /dev/null, to a client that keeps up) is one loop of
  # sendfile(2), copy_file_range(2) or read and write in C, with no
  # scheduler hook in it. A thread's copy lets the other threads run (it
  # gives up the GVL); a fiber's held every other fiber, and its own
  # Timeout, for the whole copy: 2 GB to /dev/null took 2.6 s on 3.1, and
  # a file download from weft serve to a fast client kept the server from
  # answering anyone else for as long. From a non-blocking fiber under
  # Weft, a copy of PIECE bytes or more is made in pieces of PIECE, and
  # after each whole piece the other fibers get a turn (sleep(0)). Each
  # end is what Ruby makes of it (FairCopy.end_of): a Tempfile is copied
  # through its IO at its position, a path opened as Ruby opens it (the
  # source first, then the destination, created or truncated); objects
  # Ruby reads or writes through their methods, and smaller copies, are
  # Ruby's alone.
  module FairCopy
    PIECE = 1 << 20

    def self.applies?(copy_length, src_offset)
      (copy_length.nil? || (copy_length.is_a?(Integer) && copy_length >= PIECE)) &&
        (src_offset.nil? || src_offset.is_a?(Integer)) &&
        Fiber.scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?
    end

    # What Ruby copies from or to for +arg+: an IO (+arg+ or its to_io),
    # :path for a file it opens itself, or nil for an object it reads or
    # writes through its methods (left to Ruby). Ruby asks in this order.
    def self.end_of(arg)
      return arg if arg.is_a?(IO)
      return nil if arg.equal?(ARGF) || !(arg.is_a?(String) || arg.respond_to?(:to_path))

      IO.try_convert(arg) || :path
    end

    def copy_stream(src, dst, copy_length = nil, src_offset = nil)
      return super unless FairCopy.applies?(copy_length, src_offset)
      return super unless (from = FairCopy.end_of(src))
      return File.open(src, "rb") { |f| copy_stream(f, dst, copy_length, src_offset) } if from == :path
      return super unless (to = FairCopy.end_of(dst))
      return File.open(dst, "wb") { |f| copy_stream(from, f, copy_length, src_offset) } if to == :path

      total = 0
      loop do
        want = copy_length ? [copy_length - total, PIECE].min : PIECE
        break if want.zero?

        n = src_offset ? super(from, to, want, src_offset + total) : super(from, to, want)
        total += n
        break if n < want # the end of the source

        Kernel.sleep(0)
      end
      total
    end
  end
  private_constant :FairCopy
  IO.singleton_class.prepend(FairCopy)

  # IO#write with several objects (and IO#puts, which writes the text and
  # "\n" that way) is one writev(2) on a thread, but each piece reached the
  # io_write hook, and the socket, on its own: two datagrams for one
  # `puts`, and a Nagle wait of about 40 ms before a TCP peer saw the
  # newline. Scheduler::WholeWrites (in C, ext/weft/writer.c) joins the
  # pieces into one write from a non-blocking fiber under Weft. Sockets
  # only: pipes and terminals have no messages, and a larger write to a
  # blocking terminal could wait in write(2) holding the GVL.
  BasicSocket.prepend(Scheduler::WholeWrites)
  Scheduler.send(:private_constant, :WholeWrites)
end

module Weft
  # A service given by name ("http", "https", "domain"), not by number,
  # failed under every scheduler (Ruby 3.1 to 3.4): Ruby resolves the host
  # through the address_resolve hook, which gets the host alone, and then
  # combines each address with the service by a numeric-only lookup, so
  # `Socket.tcp("example.com", "https")`, `Addrinfo.tcp("localhost",
  # "http")` and `TCPSocket.new(host, "http")` raised "Name or service not
  # known" where a thread connects. From a non-blocking fiber under Weft:
  # the lookups that return addresses run whole on a helper thread (as
  # address_resolve does, with no scheduler there, so the results and
  # errors are a thread's), and the sockets get the port number of the
  # service for their socket type, looked up without a host (no scheduler
  # hook, only the services database), which raises what a thread raises
  # for an unknown service.
  module ServiceNames
    NUMERIC = /\A\d+\z/.freeze

    def self.named?(host, service)
      !host.nil? && service.is_a?(String) && !NUMERIC.match?(service) &&
        Fiber.scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?
    end

    def self.port(service, socktype)
      Addrinfo.getaddrinfo(nil, service, nil, socktype).first.ip_port
    end

    def self.on_thread
      Thread.new do
        Thread.current.name = "weft address_resolve" # named in #dump
        Thread.current.report_on_exception = false
        yield
      end.value
    end

    # Socket.getaddrinfo and Addrinfo.getaddrinfo.
    module Lookups
      def getaddrinfo(host, service, *rest, **options)
        return super unless ServiceNames.named?(host, service)

        ServiceNames.on_thread { super(host, service, *rest, **options) }
      end
    end

    # Addrinfo.tcp and .udp.
    module AddrinfoTypes
      def tcp(host, service)
        return super unless ServiceNames.named?(host, service)

        ServiceNames.on_thread { super(host, service) }
      end

      def udp(host, service)
        return super unless ServiceNames.named?(host, service)

        ServiceNames.on_thread { super(host, service) }
      end
    end

    # Socket.sockaddr_in and .pack_sockaddr_in (port first).
    module SockaddrIn
      def sockaddr_in(service, host)
        service = ServiceNames.port(service, nil) if ServiceNames.named?(host, service)
        super
      end

      def pack_sockaddr_in(service, host)
        service = ServiceNames.port(service, nil) if ServiceNames.named?(host, service)
        super
      end
    end

    # TCPSocket.new(host, service, local_host, local_service, ...) and
    # TCPServer.new(host, service).
    module TCPServices
      def initialize(*arguments, **options)
        if arguments.size >= 2 && ServiceNames.named?(arguments[0], arguments[1])
          arguments[1] = ServiceNames.port(arguments[1], :STREAM)
        end
        if arguments.size >= 4 && ServiceNames.named?(arguments[2], arguments[3])
          arguments[3] = ServiceNames.port(arguments[3], :STREAM)
        end
        super
      end
    end

    # UDPSocket#bind(host, port), #connect(host, port), #send(msg, flags,
    # host, port).
    module UDPServices
      NONE = Object.new.freeze # an argument not given
      def bind(host, service)
        service = ServiceNames.port(service, :DGRAM) if ServiceNames.named?(host, service)
        super
      end

      def connect(host, service)
        service = ServiceNames.port(service, :DGRAM) if ServiceNames.named?(host, service)
        super
      end

      # Optional arguments, not a splat: no Array made on every send.
      def send(message, flags, host = NONE, service = NONE)
        return super(message, flags) if NONE.equal?(host)
        return super(message, flags, host) if NONE.equal?(service)

        service = ServiceNames.port(service, :DGRAM) if ServiceNames.named?(host, service)
        super(message, flags, host, service)
      end
    end
  end
  private_constant :ServiceNames

  Socket.singleton_class.prepend(ServiceNames::Lookups, ServiceNames::SockaddrIn)
  Addrinfo.singleton_class.prepend(ServiceNames::Lookups, ServiceNames::AddrinfoTypes)
  TCPSocket.prepend(ServiceNames::TCPServices)
  TCPServer.prepend(ServiceNames::TCPServices)
  UDPSocket.prepend(ServiceNames::UDPServices)

  # Reverse lookups, an address to a host name (Socket.getnameinfo,
  # Addrinfo#getnameinfo, IPSocket#addr and #peeraddr asked for names),
  # call getnameinfo(3), for which Ruby has no scheduler hook: a fiber
  # waited for the resolver with the whole thread, so a nameserver that
  # did not answer held every fiber for its timeout where a thread lets
  # the others run. From a non-blocking fiber under Weft they run on a
  # helper thread, as the forward lookups do.
  module ReverseLookups
    def self.off_loop?
      Fiber.scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?
    end

    def self.names?(flags)
      !flags.is_a?(Integer) || (flags & Socket::NI_NUMERICHOST).zero?
    end

    # Whether +sockaddr+ holds an address, not a host name: a name in
    # the array form is first resolved by Ruby through the scheduler's
    # address_resolve hook, which a helper thread has no scheduler for.
    def self.address?(sockaddr)
      return true unless sockaddr.is_a?(Array)
      return true if sockaddr.size >= 4 # [family, port, name, address]

      host = sockaddr[2]
      host.is_a?(String) && (host.include?(":") || host.match?(/\A\d+(\.\d+){3}\z/))
    end

    # Socket.getnameinfo(sockaddr, flags = 0).
    module Class
      def getnameinfo(sockaddr, flags = 0)
        return super unless ReverseLookups.off_loop? && ReverseLookups.names?(flags) &&
                            ReverseLookups.address?(sockaddr)

        ServiceNames.on_thread { super(sockaddr, flags) }
      end
    end

    # Addrinfo#getnameinfo(flags = 0).
    module Info
      def getnameinfo(flags = 0)
        return super unless ReverseLookups.off_loop? && ReverseLookups.names?(flags)

        ServiceNames.on_thread { super(flags) }
      end
    end

    # IPSocket#addr and #peeraddr: names for true or :hostname, or for no
    # argument when the socket does reverse lookups.
    module Addresses
      def addr(*arguments)
        return super unless ReverseLookups.off_loop? && ReverseLookups.asked?(self, arguments.first)

        ServiceNames.on_thread { super(*arguments) }
      end

      def peeraddr(*arguments)
        return super unless ReverseLookups.off_loop? && ReverseLookups.asked?(self, arguments.first)

        ServiceNames.on_thread { super(*arguments) }
      end
    end

    # Whether IPSocket#addr / #peeraddr(+flag+) looks names up, as Ruby
    # decides (nil: the socket's own do_not_reverse_lookup).
    def self.asked?(socket, flag)
      case flag
      when true, :hostname then true
      when nil then !socket.do_not_reverse_lookup
      else false
      end
    end
  end
  private_constant :ReverseLookups

  Socket.singleton_class.prepend(ReverseLookups::Class)
  Addrinfo.prepend(ReverseLookups::Info)
  IPSocket.prepend(ReverseLookups::Addresses)
end

module Weft
  # Ruby 3.3 and 3.4's IO#pwrite call the io_pwrite hook from inside a
  # blocking region, with the GVL released, so a hook that waits would
  # switch fibers and run Ruby code without the GVL (the process then
  # hangs). From a non-blocking fiber under Weft, IO#pwrite is done by the
  # scheduler with the GVL held: the same single positioned write, the same
  # result and errors.
  module PwriteWithGVL
    def pwrite(object, offset)
      scheduler = Fiber.scheduler
      return super unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

      scheduler._io_pwrite_string(self, object, offset)
    end
  end
  private_constant :PwriteWithGVL
  IO.prepend(PwriteWithGVL) if RUBY_VERSION >= "3.3"
end

module Weft
  # Opening a FIFO (named pipe) waits in open(2) until the other end is
  # opened too, and Ruby has no scheduler hook for open: in a fiber that
  # wait held the whole thread, so the fiber that would open the other
  # end never ran, and
  #
  #   Weft.run do
  #     Fiber.schedule { File.read(fifo) }
  #     Fiber.schedule { File.write(fifo, "hello") }
  #   end
  #
  # hung where two threads pass "hello". From a non-blocking fiber under
  # Weft, File.new / File.open / Kernel#open and IO.read, .binread,
  # .readlines, .write, .binwrite and .sysopen of a FIFO open it (and for
  # the class methods do the whole call) on a helper thread while the
  # fiber waits for it, as do IO.foreach and IO.copy_stream for their
  # opens; the reads and writes of a File opened so go through the
  # scheduler as for any pipe. The helper is killed when the fiber's wait
  # ends early (a timeout), which interrupts its open.
  module FifoOpens
    # Checked first, so that an open outside a fiber of Weft costs one
    # call: a non-blocking fiber under Weft, then a path (not a descriptor
    # or a command), then the stat that finds a FIFO.
    def self.fifo?(path)
      return false if Fiber.blocking? || !Fiber.scheduler.is_a?(Weft::Scheduler)
      return false if path.is_a?(Integer)

      path = path.to_path if !path.is_a?(String) && path.respond_to?(:to_path)
      path.is_a?(String) && !path.start_with?("|") && File.pipe?(path)
    rescue StandardError
      false
    end

    # The block on a helper thread named +name+ (in #dump) while the
    # fiber waits for it; if that wait ends early (a timeout) the helper
    # is killed, which interrupts what it waits in, and with +join+
    # waited for until it has gone (RactorWaits).
    def self.on_thread(name = "weft open", join: false)
      thread = Thread.new do
        Thread.current.name = name
        Thread.current.report_on_exception = false
        yield
      end
      thread.value
    ensure
      if thread&.alive?
        thread.kill
        thread.join if join
      end
    end

    # File.new, File.open, Kernel#open of a path. The arguments go on as
    # they came (ruby2_keywords: no hash made for keywords on the way).
    module Initialize
      ruby2_keywords def initialize(*args, &block)
        return super unless FifoOpens.fifo?(args[0])

        FifoOpens.on_thread { super }
      end
    end

    # IO.read, .binread, .readlines, .write, .binwrite, .sysopen (File's
    # too).
    module Whole
      %i[read binread readlines write binwrite sysopen].each do |name|
        define_method(name) do |*args, &block|
          FifoOpens.fifo?(args[0]) ? FifoOpens.on_thread { super(*args, &block) } : super(*args, &block)
        end
        ruby2_keywords(name)
      end

      # IO.foreach (File.foreach, Pathname#each_line): the block runs in
      # the fiber, so only the open is on the helper thread (File.open).
      # Without a block the Enumerator comes back here when it runs.
      def foreach(path, *rest, **options, &block)
        return super unless block && FifoOpens.fifo?(path)

        line_options = options.key?(:chomp) ? { chomp: options.delete(:chomp) } : {}
        File.open(path, options.delete(:mode) || "r", **options) do |file|
          file.each_line(*rest, **line_options, &block)
        end
        nil
      end

      # IO.copy_stream with a FIFO's path for its source or destination
      # opens that end as a File (on the helper thread) and copies between
      # IOs, which go through the scheduler as any pipe does.
      def copy_stream(src, dst, *rest)
        src_fifo = FifoOpens.fifo?(src)
        dst_fifo = FifoOpens.fifo?(dst)
        return super unless src_fifo || dst_fifo

        src = File.open(src, "rb") if src_fifo
        begin
          dst = File.open(dst, "wb") if dst_fifo
          super(src, dst, *rest)
        ensure
          dst.close if dst_fifo && dst.is_a?(File)
        end
      ensure
        src.close if src_fifo && src.is_a?(File)
      end
    end
  end
  private_constant :FifoOpens

  File.prepend(FifoOpens::Initialize)
  IO.singleton_class.prepend(FifoOpens::Whole)

  # File#flock without LOCK_NB waits in flock(2) while another holder has
  # the lock: on a thread the others run meanwhile, but a fiber waited
  # with the whole thread, so when the holder was another fiber of that
  # thread the process hung. From a non-blocking fiber under Weft the lock
  # is tried without waiting first; only when that fails is the waiting
  # call made on a helper thread (killed if the fiber's wait ends early).
  module FlockWaits
    def flock(operation)
      return super if Fiber.blocking? || !Fiber.scheduler.is_a?(Weft::Scheduler)
      return super if !operation.is_a?(Integer) || operation.anybits?(File::LOCK_NB | File::LOCK_UN)

      got = super(operation | File::LOCK_NB)
      return got unless got == false

      FifoOpens.on_thread { super(operation) }
    end
  end
  private_constant :FlockWaits
  File.prepend(FlockWaits)

  # File#fsync and #fdatasync call no hook: the kernel's write-back of a
  # large file held the loop and every other fiber for as long as it took
  # (34 ms for 50 MB here), where a thread lets the others run. From a
  # non-blocking fiber under Weft, the File's buffer is flushed (through
  # the hooks) and the call runs on the offload pool while the fiber
  # waits (Scheduler#_fsync).
  module FsyncOffLoop
    def fsync
      __weft_sync(false) { super }
    end

    def fdatasync
      __weft_sync(true) { super }
    end

    private

    # The call off the loop, or the block (Ruby's own) where there is no
    # Weft scheduler or the fiber is blocking.
    def __weft_sync(data_only)
      scheduler = Fiber.scheduler
      return yield if Fiber.blocking? || !scheduler.is_a?(Weft::Scheduler)

      flush
      scheduler._fsync(self, data_only)
    end
  end
  private_constant :FsyncOffLoop
  File.prepend(FsyncOffLoop)
end

module Weft
  # IO#reopen and IO#close end the waits on the descriptor number they
  # replace or close (Scheduler::Replaced, in C, ext/weft/wait.c): a
  # reopened IO, or one whose number another IO closed, left its waiting
  # fiber registered with a file that was gone.
  IO.prepend(Scheduler::Replaced)
  Scheduler.send(:private_constant, :Replaced)
end

module Weft
  # Ractor#take, Ractor.receive (.recv, .receive_if), Ractor.yield and
  # Ractor.select wait without calling any scheduler hook: in a fiber the
  # wait held the whole thread, so a message that another fiber of the
  # thread would send or take never came, and
  #
  #   Weft.run do
  #     Fiber.schedule { r.take }
  #     Fiber.schedule { r.send(21) }
  #   end
  #
  # hung where two threads finish. From a non-blocking fiber under Weft
  # these calls run on a helper thread of the same Ractor while the fiber
  # waits for it, as a FIFO's open does (FifoOpens). When the fiber's wait
  # ends early (a timeout) the helper is killed, which interrupts its
  # wait, and joined: until it has ended, a take of the same Ractor from
  # this one raises "Already another thread of same ractor is waiting".
  module RactorWaits
    def self.away?
      !Fiber.blocking? && Fiber.scheduler.is_a?(Weft::Scheduler)
    end

    def self.on_thread(&block)
      FifoOpens.on_thread("weft ractor wait", join: true, &block)
    end

    # Ractor#take.
    module Take
      def take
        RactorWaits.away? ? RactorWaits.on_thread { super } : super
      end
    end

    # Ractor.receive, .recv, .receive_if, .yield and .select.
    module Class
      def receive
        RactorWaits.away? ? RactorWaits.on_thread { super } : super
      end

      def recv
        RactorWaits.away? ? RactorWaits.on_thread { super } : super
      end

      def receive_if(&block)
        RactorWaits.away? ? RactorWaits.on_thread { super(&block) } : super(&block)
      end

      def yield(*args, **options)
        RactorWaits.away? ? RactorWaits.on_thread { super(*args, **options) } : super(*args, **options)
      end

      def select(*ractors, **options)
        RactorWaits.away? ? RactorWaits.on_thread { super(*ractors, **options) } : super(*ractors, **options)
      end
    end
  end
  private_constant :RactorWaits

  if defined?(Ractor)
    Ractor.prepend(RactorWaits::Take)
    Ractor.singleton_class.prepend(RactorWaits::Class)
  end
end

module Weft
  # Ruby 3.1's Mutex#sleep under a scheduler unlocks the mutex, calls the
  # kernel_sleep hook and locks it again only when the hook returns: an
  # exception raised in the wait (a Timeout, Weft::Stop, Fiber#raise) left
  # the mutex unlocked, so the `synchronize` around it raised ThreadError
  # ("Attempt to unlock a mutex which is not locked") in place of the
  # timeout, and ConditionVariable#wait and Monitor's wait (which sleep
  # through Mutex#sleep) did the same. Ruby >= 3.2 locks it again on every
  # path; from a non-blocking fiber under Weft so does 3.1.
  module MutexSleepRelocks
    def sleep(*arguments)
      held = owned?
      super
    rescue Exception # rubocop:disable Lint/RescueException
      scheduler = Fiber.scheduler
      lock if held && !owned? && scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?
      raise
    end
  end
  private_constant :MutexSleepRelocks

  Thread::Mutex.prepend(MutexSleepRelocks) if RUBY_VERSION < "3.2"

  # Ruby's Mutex#sleep(timeout) returns nil when the timeout passed and the
  # seconds slept when it was woken; under a scheduler it ignores what the
  # kernel_sleep hook returns and always gave the seconds, so
  # ConditionVariable#wait(mutex, timeout) never returned nil and Monitor's
  # wait(timeout) (MonitorMixin::ConditionVariable#wait) returned true
  # where a thread gets false. The hook marks a sleep its timeout ended in
  # the fiber-local set to false here, and the sleep returns nil.
  module MutexSleepTimesOut
    def sleep(timeout = nil)
      return super if timeout.nil? || Fiber.blocking? || !Fiber.scheduler.is_a?(Weft::Scheduler)

      fiber = Thread.current
      fiber[:__weft_sleep_timed_out] = false
      slept = super
      fiber[:__weft_sleep_timed_out] ? nil : slept
    ensure
      fiber[:__weft_sleep_timed_out] = nil if fiber
    end
  end
  private_constant :MutexSleepTimesOut

  Thread::Mutex.prepend(MutexSleepTimesOut)
end

module Weft
  # Thread.pass hands the GVL to another thread but calls no scheduler
  # hook, so a fiber that waits for another fiber by looping on it
  # (`Thread.pass until done`, as code written for threads does) never let
  # that fiber run: the loop spun forever where two threads finish. From
  # a non-blocking fiber under Weft, Thread.pass also yields to the other
  # fibers, as sleep(0) does.
  module PassYields
    def pass
      super
      scheduler = Fiber.scheduler
      scheduler.kernel_sleep(0) if scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?
      nil
    end
  end
  private_constant :PassYields

  Thread.singleton_class.prepend(PassYields)
end

module Weft
  # Thread#wakeup and Thread#run end a thread's sleep. They call no hook:
  # a fiber that slept (`waiter = Thread.current; sleep`) until another
  # fiber or thread called `waiter.wakeup` slept on, and Thread.stop,
  # which has no hook either, held the whole thread. A wakeup names a
  # thread, not a fiber, so every fiber of that thread's scheduler that
  # sleeps without a duration (sleep, Thread.stop, a ConditionVariable
  # wait without a timeout) wakes up; a sleep with a duration runs to its
  # end, as the other fibers' timed sleeps would otherwise end early.
  module WakeupEndsSleeps
    def wakeup
      super
      Weft::Scheduler._wakeup(self)
      self
    end

    # Thread#run is wakeup and Thread.pass, and calls neither method.
    def run
      wakeup
      Thread.pass
      self
    end
  end
  private_constant :WakeupEndsSleeps

  Thread.prepend(WakeupEndsSleeps)

  # Thread.stop in a non-blocking fiber under Weft sleeps through the
  # scheduler, as `sleep` does, so the other fibers run meanwhile.
  module StopSleeps
    def stop
      scheduler = Fiber.scheduler
      return super unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

      scheduler.kernel_sleep
      nil
    end
  end
  private_constant :StopSleeps

  Thread.singleton_class.prepend(StopSleeps)
end

module Weft
  # Ruby 3.1's Thread#join(limit) under a scheduler calls the block hook
  # with the limit in a loop until the thread has ended and never looks at
  # the clock: a join with a limit waited for the whole thread (and a
  # limit of 0 or below spun until it ended), where a thread gets nil once
  # the limit has passed. Ruby 3.2 returns after the first block. From a
  # non-blocking fiber under Weft, 3.1's join with a limit waits without
  # one, for at most the limit (timeout_after), and returns nil then.
  module JoinTimesOut
    class TimedOut < Exception; end # rubocop:disable Lint/InheritException

    def join(*limit)
      return super if limit.size != 1 || !limit[0].is_a?(Numeric) || !limit[0].real? || Fiber.blocking? ||
                      !(scheduler = Fiber.scheduler).is_a?(Weft::Scheduler) ||
                      limit[0].to_f.infinite? || !alive?
      return nil unless limit[0].positive?

      scheduler.timeout_after(limit[0], TimedOut) { super(nil) }
    rescue TimedOut
      alive? ? nil : join
    end
  end
  private_constant :JoinTimesOut

  Thread.prepend(JoinTimesOut) if RUBY_VERSION < "3.2"
end

module Weft
  # Thread.handle_interrupt(Exception => :never) { ... } keeps a thread's
  # Timeout from cutting the block short (connection_pool checks a
  # connection in so, a transaction commits so): Timeout raises with
  # Thread#raise, which the mask defers until the block ends. A fiber's
  # timeout is raised by the scheduler in a hook instead, and ignored the
  # mask. From a non-blocking fiber under Weft the masks are also kept in
  # a fiber-local stack that timeout_after consults (Scheduler#_remask).
  module HandleInterruptMasks
    def handle_interrupt(masks)
      scheduler = Fiber.scheduler
      return super unless block_given? && scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

      super do
        stack = (Thread.current[:__weft_interrupt_masks] ||= [])
        stack.push(masks)
        scheduler._remask
        begin
          yield
        ensure
          stack.pop
          scheduler._remask
        end
      end
    end
  end
  private_constant :HandleInterruptMasks

  Thread.singleton_class.prepend(HandleInterruptMasks)
end

module Weft
  # Ruby 3.1 keeps its "this file is being loaded" and "this constant is
  # being autoloaded" marks per thread, not per fiber: while one fiber is
  # inside `require "x"` (or an autoload's require), another fiber of the
  # same thread that requires "x" gets false at once, and one that touches
  # the autoloaded constant gets NameError, both before the file has been
  # run. A fiber that waits inside a load (the file read itself is a
  # scheduler hook, so is a sleep or a socket at load time) must therefore
  # not let the others run: each load runs under Scheduler#exclusive, and
  # the event loop runs on the loading fiber until the load is done. Ruby
  # >= 3.2 tracks loads per fiber, so this is 3.1 only.
  #
  # Kernel#require, #load and #require_relative are wrapped in Kernel
  # itself (alias and redefine), and so are the module functions
  # Kernel.require, Kernel.load and Kernel.require_relative, which are
  # methods of their own (Rails 6.1's classic autoloader loads each file
  # with `Kernel.load path`). Not by a prepended module: libraries that
  # wrap require themselves after weft is loaded (Zeitwerk, Bootsnap)
  # alias and redefine Kernel#require, and Ruby 3.1's `super` from a
  # module prepended to Kernel keeps calling the method Kernel had when it
  # was first called (RubyGems'): Zeitwerk's require was never run, so
  # its namespaces of a directory alone raised LoadError and its
  # callbacks after a file's autoload were lost. Wrapped in place, each
  # later wrapper calls this one, which calls the one before it.
  module LoadExclusive
    # Wrap +owner+'s require, load and require_relative (Kernel's, made
    # private; or Kernel's singleton class's, public).
    def self.install(owner, visibility)
      owner.class_eval do
        alias_method :__weft_plain_require, :require
        alias_method :__weft_plain_load, :load
        # (kept, unused: redefining it would warn under -w otherwise)
        alias_method :__weft_plain_require_relative, :require_relative
        private :__weft_plain_require, :__weft_plain_load, :__weft_plain_require_relative

        def require(path)
          scheduler = Fiber.scheduler
          return __weft_plain_require(path) unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

          scheduler.exclusive { __weft_plain_require(path) }
        end

        def load(path, wrap = false)
          scheduler = Fiber.scheduler
          return __weft_plain_load(path, wrap) unless scheduler.is_a?(Weft::Scheduler) && !Fiber.blocking?

          scheduler.exclusive { __weft_plain_load(path, wrap) }
        end

        # require_relative resolves @path against the file of its caller,
        # which would be this one if it called Ruby's: resolve it here, as
        # Ruby does (against the caller's real path), and require the
        # result. Code evaluated with a file name (a rackup file:
        # Rack::Builder evals config.ru so) has no real path: Ruby 3.1
        # then takes the name given to eval, as given; only an eval
        # without one ("(eval)") has no base.
        def require_relative(path)
          location = caller_locations(1, 1).first
          base = location&.absolute_path
          if base
            base = File.realpath(base)
          else
            base = location&.path
            raise LoadError, "cannot infer basepath" if base.nil? || base == "(eval)"
          end
          require(File.expand_path(path, File.dirname(base)))
        end

        send(visibility, :require, :load, :require_relative)
      end
    end
  end
  private_constant :LoadExclusive

  if RUBY_VERSION < "3.2" && !Kernel.private_method_defined?(:__weft_plain_require)
    LoadExclusive.install(Kernel, :private)
    LoadExclusive.install(Kernel.singleton_class, :public)
  end
end
