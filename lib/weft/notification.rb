# frozen_string_literal: true

module Weft
  # A broadcast signal: #wait blocks until the next #signal and returns the
  # value signalled. Works across fibers (through the scheduler's
  # block/unblock hooks) and across threads.
  class Notification
    def initialize
      @mutex = Thread::Mutex.new
      @condition = Thread::ConditionVariable.new
      @generation = 0
      @value = nil
    end

    # Wait for the next signal; returns its value, or nil after +timeout+
    # seconds.
    def wait(timeout: nil)
      deadline = timeout && Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      @mutex.synchronize do
        generation = @generation
        while generation == @generation
          if deadline
            left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            return nil if left <= 0

            @condition.wait(@mutex, left)
          else
            @condition.wait(@mutex)
          end
        end
        @value
      end
    end

    # Wake every current waiter with +value+.
    def signal(value = true)
      @mutex.synchronize do
        @value = value
        @generation += 1
        @condition.broadcast
      end
      self
    end
  end
end
