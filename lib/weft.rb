# frozen_string_literal: true

# weft — a fiber scheduler whose event loop is written in C.
#
#   require "weft"
#   Weft.run do
#     Fiber.schedule { sleep 0.1; puts "a" }
#     Fiber.schedule { puts Net::HTTP.get(URI("http://example.com/")) }
#   end
#
# Weft::Scheduler implements Ruby's Fiber::Scheduler interface on weft's
# reactor (epoll or poll; WEFT_BACKEND selects). See ext/weft/scheduler.c.
require "weft/weft"
require "weft/version"
require "weft/scheduler"
require "weft/notification"
require "weft/semaphore"
require "weft/task_limiter"
require "weft/future"
require "weft/pool"

module Weft
  # Run the block in a fiber under a new Weft::Scheduler, run every fiber it
  # starts to completion, restore the previous scheduler and return the
  # block's value (or raise its exception). Options go to Scheduler.new.
  # Interrupt (Ctrl-C), another signal or exit while the loop runs raises
  # Weft::Stop in every waiting fiber (their ensure clauses run), then
  # propagates.
  def self.run(**options)
    raise ArgumentError, "Weft.run needs a block" unless block_given?

    previous = Fiber.scheduler
    scheduler = Scheduler.new(**options)
    Fiber.set_scheduler(scheduler)
    result = error = nil
    begin
      Fiber.schedule do
        result = yield(scheduler)
      rescue Exception => e # rubocop:disable Lint/RescueException
        error = e
      end
      scheduler.run
    rescue SignalException, SystemExit
      scheduler.stop(Stop.new("stopped by #{$!.class}")) unless scheduler.closed?
      raise
    ensure
      Fiber.set_scheduler(previous) # closes ours: runs what is left
    end
    raise error if error

    result
  end
end
