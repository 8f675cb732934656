# frozen_string_literal: true

require "timeout"

module Weft
  # Raised by Task#with_timeout, Weft.with_timeout and Future#value when
  # the time runs out (defined in future.rb as well; both open the class).
  class TimeoutError < Timeout::Error; end

  # A handle on a scheduled fiber: wait for its value, stop it, and tie the
  # lifetime of the tasks it starts (its children) to it.
  #
  #   Weft.run do
  #     task = Weft.spawn { fetch(url) }
  #     task.wait            # => the block's value (re-raises its error)
  #     task.stop            # Weft::Stop inside it; its ensure clauses run
  #   end
  #
  # A task runs in a fiber of the current Weft::Scheduler (Fiber.schedule):
  # it starts at once and runs until it first waits. Everything is plain
  # Ruby on the scheduler's hooks (a Mutex and a ConditionVariable per
  # task), so #wait also works from another fiber or from another thread.
  class Task
    # The task whose fiber is running now, or nil.
    def self.current
      Fiber.current.instance_variable_get(:@__weft_task)
    end

    attr_reader :parent, :fiber

    # A name for #dump, stall reports and #inspect (nil: none).
    attr_accessor :name

    # Start +block+ (called with the task) in a new fiber of the current
    # scheduler. +parent+: the task whose children this one joins (default:
    # the current task, if any).
    # +report+: false when the caller raises the task's error itself
    # (otherwise a failure nobody waits for is reported on $stderr).
    # +name+: what Scheduler#dump and stall reports call it.
    def initialize(parent: Task.current, report: true, name: nil, &block)
      raise ArgumentError, "Weft::Task needs a block" unless block

      scheduler = Fiber.scheduler
      raise Weft::Error, "Weft::Task needs a Weft::Scheduler (Weft.run or Fiber.set_scheduler)" unless scheduler.is_a?(Scheduler)

      @scheduler = scheduler
      @parent = parent
      @children = []
      @mutex = Thread::Mutex.new
      @done = Thread::ConditionVariable.new
      @status = :running
      @value = @error = nil
      @waiting = 0
      @report = report
      @name = name
      @block = block # where it was spawned (#spawned_at)
      parent&._adopt(self)
      @fiber = scheduler._fiber_quiet { run(block) }
    end

    # :running, :completed, :failed or :stopped.
    def status = @mutex.synchronize { @status }

    def alive? = status == :running

    def completed? = status == :completed
    def failed? = status == :failed
    def stopped? = status == :stopped

    # The exception the task failed with (nil unless #failed?).
    def error = @mutex.synchronize { @status == :failed ? @error : nil }

    # Tasks started from this one that are still running.
    def children = @mutex.synchronize { @children.dup }

    # Wait until the task has ended; return its value, re-raise its error.
    # A stopped task returns nil. With +timeout+ (seconds), raise
    # Weft::TimeoutError if it is still running then. Waiting for yourself
    # raises Weft::Error (it could never end).
    def wait(timeout: nil)
      raise Weft::Error, "a task cannot wait for itself" if Fiber.current.equal?(@fiber) && alive?

      deadline = timeout && Weft.clock + timeout
      @mutex.synchronize do
        @waiting += 1
        begin
          while @status == :running
            if deadline
              left = deadline - Weft.clock
              raise TimeoutError, "task still running after #{timeout}s" if left <= 0

              @done.wait(@mutex, left)
            else
              @done.wait(@mutex)
            end
          end
        ensure
          @waiting -= 1
        end
      end
      raise @error if @status == :failed

      @value
    end

    alias value wait

    # Stop the task: its children first, then Weft::Stop (or +exception+)
    # is raised in its fiber where it waits (at once if it waits now), so
    # its ensure clauses run. Stopping a finished task does nothing; from
    # inside the task itself it raises right here. Returns self.
    def stop(exception = nil)
      children.each { |c| c.stop(exception) }
      exception ||= Stop.new("task stopped")
      return self unless alive?

      raise exception if Fiber.current.equal?(@fiber)

      @scheduler.raise_in(@fiber, exception)
      self
    end

    # Run the block; if it takes longer than +seconds+, raise
    # Weft::TimeoutError in it (from the scheduler's own timers, not a
    # thread). Timeouts nest: each ends its own block.
    def with_timeout(seconds, &block)
      Weft.with_timeout(seconds, &block)
    end

    def inspect = @name ? "#<#{self.class} #{@name.inspect} #{status}>" : "#<#{self.class} #{status}>"

    # Where the task was spawned: "file:line" of its block.
    def spawned_at = @block.source_location&.join(":")

    # The task's Ruby backtrace now (Array of Strings): where it waits, or
    # the frames of the running code when called from the task itself;
    # nil once it has ended.
    def backtrace
      return nil unless @fiber&.alive?

      Fiber.current.equal?(@fiber) ? caller : @fiber.backtrace
    end

    # :nodoc: used by children on creation and when they end.
    def _adopt(child) = @mutex.synchronize { @children << child }
    def _orphan(child) = @mutex.synchronize { @children.delete(child) }

    private

    def run(block)
      @fiber = Fiber.current # before Fiber.schedule returns: the block may wait on us
      @fiber.instance_variable_set(:@__weft_task, self)
      value = block.call(self)
      finish(:completed, value, nil)
    rescue Stop => e
      finish(:stopped, nil, e)
    rescue Exception => e # rubocop:disable Lint/RescueException
      finish(:failed, nil, e)
      # Nobody waits for it now: say so, as an unjoined thread would.
      report(e) if @report && @waiting.zero? && @scheduler.report_on_exception
    ensure
      @parent&._orphan(self)
    end

    def finish(status, value, error)
      @mutex.synchronize do
        @status = status
        @value = value
        @error = error
        @done.broadcast
      end
    end

    def report(error)
      # $stderr.write, not warn: -W0 must not hide a lost error.
      $stderr.write("#{inspect} (in #{@fiber.inspect}) terminated with exception " \
                    "(report_on_exception is true):\n#{error.full_message(highlight: false)}")
    rescue StandardError
      nil
    end
  end

  # Start many tasks and wait for all of them; the first failure stops the
  # others and is raised by #wait.
  #
  #   barrier = Weft::Barrier.new
  #   urls.each { |u| barrier.spawn { fetch(u) } }
  #   bodies = barrier.wait          # values in spawn order
  class Barrier
    def initialize
      @tasks = []
      @ended = Thread::Queue.new
      @seen = 0
    end

    # Start +block+ as a task of this barrier; returns the task.
    def spawn(&block)
      ended = @ended
      task = Task.new(report: false) do |t| # #wait raises it
        block.call(t)
      ensure
        ended << t
      end
      @tasks << task
      task
    end

    alias async spawn

    def tasks = @tasks.dup
    def size = @tasks.size
    def empty? = @tasks.empty?

    # Wait for every task (those spawned meanwhile too); returns their
    # values in spawn order. When one fails, the others are stopped (and
    # waited for) and its error is raised; with +timeout+, a
    # Weft::TimeoutError stops them the same way.
    def wait(timeout: nil)
      deadline = timeout && Weft.clock + timeout
      while @seen < @tasks.size
        t = deadline ? pop_within(deadline - Weft.clock) : @ended.pop
        unless t
          stop
          raise TimeoutError, "barrier tasks still running after #{timeout}s"
        end
        @seen += 1
        if t.failed?
          stop
          raise t.error
        end
      end
      @tasks.map(&:value)
    end

    # Stop every task still running and wait until they have ended.
    def stop
      running = @tasks.select(&:alive?)
      running.each(&:stop)
      running.each do |t|
        t.wait
      rescue Exception # rubocop:disable Lint/RescueException
        nil
      end
      self
    end

    private

    def pop_within(seconds)
      return nil if seconds <= 0

      Weft.with_timeout(seconds) { @ended.pop }
    rescue TimeoutError
      nil
    end
  end

  # Monotonic seconds.
  def self.clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Start +block+ as a Task of the current scheduler (see Task.new);
  # +name+ names it in Scheduler#dump and stall reports.
  def self.spawn(name: nil, &block) = Task.new(name: name, &block)

  # Run the block; if it has not finished within +seconds+, raise
  # Weft::TimeoutError inside it (from the current Weft::Scheduler's timers;
  # Timeout.timeout, which schedulers implement the same way, also works).
  def self.with_timeout(seconds, &block)
    raise ArgumentError, "with_timeout needs a block" unless block

    scheduler = Fiber.scheduler
    return Timeout.timeout(seconds, TimeoutError, &block) unless scheduler.is_a?(Scheduler) && !Fiber.blocking?

    scheduler.timeout_after(seconds, TimeoutError, "execution expired (#{seconds}s)", &block)
  end
end
