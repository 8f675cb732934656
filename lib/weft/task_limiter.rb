# frozen_string_literal: true

module Weft
  # Runs at most +limit+ tasks (scheduled fibers) at a time: #schedule waits
  # while the limit is reached, then starts the block in a new fiber.
  class TaskLimiter
    def initialize(limit)
      @semaphore = Semaphore.new(limit)
    end

    def limit = @semaphore.limit

    # Tasks running now.
    def running = @semaphore.count

    # Start +block+ in a fiber once fewer than +limit+ tasks run; returns
    # the fiber.
    def schedule(&block)
      raise ArgumentError, "TaskLimiter#schedule needs a block" unless block

      @semaphore.acquire
      started = false
      begin
        Fiber.schedule do
          started = true
          block.call
        ensure
          @semaphore.release
        end
      rescue Exception # rubocop:disable Lint/RescueException
        @semaphore.release unless started
        raise
      end
    end
  end
end
