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
# reactor (io_uring, epoll or poll; WEFT_BACKEND selects). See
# ext/weft/ (rsched.h lists the files).
require "weft/weft"
require "weft/version"
require "weft/scheduler"
require "weft/task"
require "weft/dump"
require "weft/queue"
require "weft/notification"
require "weft/semaphore"
require "weft/task_limiter"
require "weft/future"
require "weft/pool"

module Weft
  # Run the block in a fiber under a new Weft::Scheduler, run every fiber it
  # starts to completion, restore the previous scheduler and return the
  # block's value. Options go to Scheduler.new (backend:,
  # report_on_exception:).
  #
  # Errors: a fiber that dies with an exception is reported on $stderr
  # (with its backtrace; report_on_exception: false turns that off) and
  # does not disturb the others; once every fiber has ended, Weft.run
  # raises the first such exception (the block's own counts, and is not
  # reported since it is raised). Interrupt (Ctrl-C), another signal,
  # exit, Thread#kill or an error out of the loop raises Weft::Stop in
  # every waiting fiber (their ensure clauses run) before it propagates; a
  # second Ctrl-C while they unwind gives up on them. On every path the
  # previous scheduler is restored and nothing carries into a later run.
  #
  # Nested: inside a fiber of an open Weft::Scheduler (Weft.run within
  # Weft.run), the block runs as a task of that scheduler; Weft.run waits
  # for it and returns its value (or raises its error), as Async's Sync
  # does. From a blocking fiber of a thread whose Weft::Scheduler was set
  # with Fiber.set_scheduler, the block runs in a fiber of it and that
  # scheduler's loop runs until the block has finished.
  def self.run(**options, &block)
    raise ArgumentError, "Weft.run needs a block" unless block

    current = Fiber.scheduler
    return run_nested(current, &block) if current.is_a?(Scheduler) && !current.closed?
    if current && !current.is_a?(Scheduler)
      raise Weft::Error, "another Fiber scheduler (#{current.class}) is installed in this thread"
    end

    run_new(current, Scheduler.new(**options), &block)
  end

  def self.run_new(previous, scheduler, &block) # :nodoc:
    result = nil
    completed = false
    begin
      Fiber.set_scheduler(scheduler)
      scheduler._fiber_quiet do
        Fiber.current.instance_variable_set(:@__weft_block, block) # where #dump says it began
        result = block.call(scheduler)
      end
      scheduler.run # raises the first fiber's exception once all have ended
      completed = true
    ensure
      # Not completed: an exception, a signal, exit or Thread#kill is on
      # its way out. Stop the fibers so that their ensure clauses run now.
      scheduler.stop(Stop.new("stopped by #{$!&.class || "an abnormal exit"}")) unless completed || scheduler.closed?
      restore(previous, scheduler)
    end
    result
  end

  # Put +previous+ back, which closes +scheduler+ (running what is left).
  # A close interrupted by an exception (a second Ctrl-C) is tried again:
  # Scheduler#close stops the fibers on its second attempt and gives up on
  # them on its third, so the previous scheduler is restored on every path.
  def self.restore(previous, scheduler) # :nodoc:
    error = nil
    3.times do
      begin
        Fiber.set_scheduler(previous)
      rescue Exception => e # rubocop:disable Lint/RescueException
        error ||= e
      end
      break if Fiber.scheduler.equal?(previous)
    end
    raise error if error && !$!
  end

  def self.run_nested(scheduler, &block) # :nodoc:
    unless Fiber.blocking?
      task = Task.new(report: false) { block.call(scheduler) }
      return task.wait
    end
    result = error = nil
    fiber = scheduler._fiber_quiet do
      result = block.call(scheduler)
    rescue Exception => e # rubocop:disable Lint/RescueException
      error = e
    end
    scheduler._run_until(fiber)
    raise error if error

    result
  end

  private_class_method :run_new, :restore, :run_nested
end
