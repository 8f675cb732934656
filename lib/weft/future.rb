# frozen_string_literal: true

require "timeout"

module Weft
  # The read side of a Promise: a value (or an error) that arrives later,
  # from a fiber or another thread.
  class Future
    # A future resolved by running the block in a new task (Weft::Task) of
    # the current scheduler; Future#stop stops that task.
    def self.spawn(&block)
      promise = Promise.new
      future = promise.future
      future._task = Task.new do
        promise.try_fulfill(block.call)
      rescue Exception => e # rubocop:disable Lint/RescueException
        promise.try_reject(e)
        raise if e.is_a?(Stop) # the task ends as stopped
      end
      future
    end

    # A future resolved by whichever of +futures+ resolves first (value or
    # error). With +cancel_rest: true+, the others are stopped as soon as
    # one has resolved (Future#stop: their tasks get Weft::Stop, their
    # ensure clauses run), so that nobody waits for results nobody can
    # observe any more.
    def self.any(*futures, cancel_rest: false)
      futures = futures.flatten
      raise ArgumentError, "Future.any needs at least one future" if futures.empty?

      promise = Promise.new
      futures.each do |f|
        f.on_resolve do |ok, v|
          won = ok ? promise.try_fulfill(v) : promise.try_reject(v)
          futures.each { |other| other.stop unless other.equal?(f) } if won && cancel_rest
        end
      end
      promise.future
    end

    # A future of the array of every value, in order; rejected by the first
    # error.
    def self.all(*futures)
      futures = futures.flatten
      promise = Promise.new
      return promise.fulfill([]).future if futures.empty?

      values = Array.new(futures.size)
      left = futures.size
      lock = Thread::Mutex.new
      futures.each_with_index do |f, i|
        f.on_resolve do |ok, v|
          next promise.try_reject(v) unless ok

          done = lock.synchronize do
            values[i] = v
            (left -= 1).zero?
          end
          promise.try_fulfill(values) if done
        end
      end
      promise.future
    end

    # :nodoc: the task that resolves this future (Future.spawn), or the
    # future a #then step waits on.
    attr_writer :_task, :_source

    def initialize
      @_task = @_source = nil
      @mutex = Thread::Mutex.new
      @condition = Thread::ConditionVariable.new
      @state = :pending
      @value = nil
      @callbacks = []
    end

    def resolved? = @mutex.synchronize { @state != :pending }
    def fulfilled? = @mutex.synchronize { @state == :fulfilled }
    def rejected? = @mutex.synchronize { @state == :rejected }

    # Wait for the value; raise the rejection error. With +timeout+
    # (seconds), raise Weft::TimeoutError if it has not arrived by then.
    def value(timeout: nil)
      deadline = timeout && Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      @mutex.synchronize do
        while @state == :pending
          if deadline
            left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            raise TimeoutError, "future not resolved within #{timeout}s" if left <= 0

            @condition.wait(@mutex, left)
          else
            @condition.wait(@mutex)
          end
        end
      end
      raise @value if @state == :rejected

      @value
    end

    alias wait value

    # Stop the work that would resolve this future: the task of
    # Future.spawn, or for a #then step the future it waits on. A resolved
    # future, or one resolved by a Promise, is left alone. Returns self.
    def stop
      return self if resolved?

      @_task&.stop
      @_source&.stop
      self
    end

    # A future of the block's result applied to this value (errors pass
    # through, and an error raised by the block rejects the new future).
    def then(&block)
      raise ArgumentError, "Future#then needs a block" unless block

      promise = Promise.new
      promise.future._source = self
      on_resolve do |ok, v|
        if ok
          begin
            promise.fulfill(block.call(v))
          rescue Exception => e # rubocop:disable Lint/RescueException
            promise.reject(e)
          end
        else
          promise.reject(v)
        end
      end
      promise.future
    end

    # Call +callback+ with (fulfilled?, value_or_error) once resolved (now,
    # if it already is).
    def on_resolve(&callback)
      now = @mutex.synchronize do
        next true unless @state == :pending

        @callbacks << callback
        false
      end
      callback.call(@state == :fulfilled, @value) if now
      self
    end

    # Used by Promise.
    def _resolve(state, value) # :nodoc:
      callbacks = @mutex.synchronize do
        return false unless @state == :pending

        @state = state
        @value = value
        @condition.broadcast
        cbs = @callbacks
        @callbacks = nil
        cbs
      end
      callbacks.each { |cb| cb.call(state == :fulfilled, value) }
      true
    end
  end

  # The write side: fulfil or reject once; #future is what readers wait on.
  class Promise
    attr_reader :future

    def initialize
      @future = Future.new
    end

    def fulfill(value = nil)
      raise Weft::Error, "promise already resolved" unless @future._resolve(:fulfilled, value)

      self
    end

    def reject(error)
      error = RuntimeError.new(error.to_s) unless error.is_a?(Exception)
      raise Weft::Error, "promise already resolved" unless @future._resolve(:rejected, error)

      self
    end

    def try_fulfill(value = nil) = @future._resolve(:fulfilled, value)

    def try_reject(error) = @future._resolve(:rejected, error)
  end
end
