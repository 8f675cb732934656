# frozen_string_literal: true

module Weft
  # A FIFO queue for fibers and threads alike, whose #pop can give up after
  # a timeout (Ruby 3.1's Thread::Queue cannot), and which can be closed.
  # Waiting goes through the Mutex and ConditionVariable that every
  # Fiber::Scheduler makes fiber-aware, so a waiting fiber never blocks
  # its thread.
  #
  #   q = Weft::Queue.new
  #   Fiber.schedule { q.push(:job) }
  #   q.pop(timeout: 1)    # => :job, or nil after a second
  class Queue
    # Raised by #push on a closed queue.
    class ClosedError < Weft::Error; end

    def initialize
      @items = []
      @mutex = Thread::Mutex.new
      @readable = Thread::ConditionVariable.new
      @closed = false
    end

    def size = @mutex.synchronize { @items.size }
    alias length size
    def empty? = size.zero?
    def closed? = @mutex.synchronize { @closed }

    # Append +item+ and wake one waiting #pop. Raises ClosedError once the
    # queue is closed.
    def push(item)
      @mutex.synchronize do
        raise ClosedError, "queue closed" if @closed

        @items << item
        @readable.signal
      end
      self
    end
    alias << push

    # Take the oldest item, waiting for one. With +timeout+ (seconds),
    # return nil if none came in time; on a closed, empty queue return nil.
    def pop(timeout: nil)
      deadline = timeout && Weft.clock + timeout
      @mutex.synchronize do
        loop do
          return @items.shift unless @items.empty?
          return nil if @closed

          if deadline
            left = deadline - Weft.clock
            return nil if left <= 0

            @readable.wait(@mutex, left)
          else
            @readable.wait(@mutex)
          end
        end
      end
    end
    alias shift pop

    # No more pushes; waiting pops return what is left, then nil.
    def close
      @mutex.synchronize do
        @closed = true
        @readable.broadcast
      end
      self
    end
  end

  # A Queue that holds at most +limit+ items: #push waits for room (with an
  # optional timeout, then it returns false).
  class LimitedQueue < Queue
    attr_reader :limit

    def initialize(limit)
      raise ArgumentError, "limit must be a positive Integer" unless limit.is_a?(Integer) && limit.positive?

      super()
      @limit = limit
      @writable = Thread::ConditionVariable.new
    end

    # Append +item+, waiting while the queue is full. Returns self, or
    # false when +timeout+ passed first. Raises ClosedError on a closed
    # queue (also when it is closed while waiting).
    def push(item, timeout: nil)
      deadline = timeout && Weft.clock + timeout
      @mutex.synchronize do
        loop do
          raise ClosedError, "queue closed" if @closed
          break if @items.size < @limit

          if deadline
            left = deadline - Weft.clock
            return false if left <= 0

            @writable.wait(@mutex, left)
          else
            @writable.wait(@mutex)
          end
        end
        @items << item
        @readable.signal
      end
      self
    end

    def <<(item)
      push(item)
    end

    def pop(timeout: nil)
      item = super
      @mutex.synchronize { @writable.signal }
      item
    end
    alias shift pop

    def close
      super
      @mutex.synchronize { @writable.broadcast }
      self
    end
  end
end
