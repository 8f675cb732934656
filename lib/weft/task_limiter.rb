# frozen_string_literal: true

module Weft
  # Runs at most +limit+ tasks (scheduled fibers) at a time: #schedule waits
  # while the limit is reached, then starts the block in a new fiber; #wait
  # waits until every task it started has finished.
  class TaskLimiter
    def initialize(limit)
      @semaphore = Semaphore.new(limit)
      @mutex = Thread::Mutex.new
      @idle = Thread::ConditionVariable.new
      @running = 0
    end

    def limit = @semaphore.limit

    # Tasks running now.
    def running = @mutex.synchronize { @running }

    # Start +block+ in a fiber once fewer than +limit+ tasks run; returns
    # the fiber.
    def schedule(&block)
      raise ArgumentError, "TaskLimiter#schedule needs a block" unless block

      @semaphore.acquire
      @mutex.synchronize { @running += 1 }
      started = false
      begin
        Fiber.schedule do
          started = true
          block.call
        ensure
          finished
        end
      rescue Exception # rubocop:disable Lint/RescueException
        finished unless started
        raise
      end
    end

    # Wait until no task started here is running. With +timeout+ (seconds),
    # return false if some still run then; true otherwise.
    def wait(timeout: nil)
      deadline = timeout && Weft.clock + timeout
      @mutex.synchronize do
        while @running.positive?
          if deadline
            left = deadline - Weft.clock
            return false if left <= 0

            @idle.wait(@mutex, left)
          else
            @idle.wait(@mutex)
          end
        end
      end
      true
    end

    private

    def finished
      @semaphore.release
      @mutex.synchronize do
        @running -= 1
        @idle.broadcast if @running.zero?
      end
    end
  end
end
