# frozen_string_literal: true

module Weft
  # A counting semaphore for fibers and threads.
  class Semaphore
    attr_reader :limit

    def initialize(limit)
      raise ArgumentError, "limit must be a positive Integer" unless limit.is_a?(Integer) && limit.positive?

      @limit = limit
      @count = 0
      @mutex = Thread::Mutex.new
      @condition = Thread::ConditionVariable.new
    end

    # Number of permits held.
    def count = @mutex.synchronize { @count }

    def blocking? = count >= @limit

    # Take a permit, waiting while none is free. Returns true, or false
    # after +timeout+ seconds without one.
    def acquire(timeout: nil)
      deadline = timeout && Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      @mutex.synchronize do
        while @count >= @limit
          if deadline
            left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            return false if left <= 0

            @condition.wait(@mutex, left)
          else
            @condition.wait(@mutex)
          end
        end
        @count += 1
      end
      true
    end

    def release
      @mutex.synchronize do
        raise Weft::Error, "release without acquire" if @count.zero?

        @count -= 1
        @condition.signal
      end
      self
    end

    def synchronize
      acquire
      begin
        yield
      ensure
        release
      end
    end
  end
end
