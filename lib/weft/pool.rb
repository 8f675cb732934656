# frozen_string_literal: true

require "timeout"

module Weft
  # A bounded pool of resources (database connections, upstream sockets):
  # the Ruby counterpart of weft_pool (include/weft.h), with the same
  # semantics.
  #
  #   pool = Weft::Pool.new(max_size: 2, create: -> { PG.connect(conninfo) },
  #                         destroy: ->(c) { c.close },
  #                         validate: ->(c) { c.status == PG::CONNECTION_OK },
  #                         broken_on: [PG::ConnectionBad, PG::UnableToSend])
  #   pool.acquire(timeout: 5) { |conn| conn.exec("select 1") }
  #
  # * At most +max_size+ resources exist at once — idle, in use, or being
  #   created or destroyed — however many fibers (or threads) ask.
  # * Waiters are served first come, first served: a released resource is
  #   handed straight to the longest waiter, so a late arrival cannot take
  #   it first. When a resource is destroyed, the first waiter gets its
  #   place and creates a new one.
  # * acquire(timeout:) raises Weft::Pool::TimeoutError when no resource
  #   came in time; errors raised by +create+ pass through unchanged.
  # * A resource is released as broken (destroyed, replaced on demand) when
  #   the block raises one of the +broken_on+ exception classes, when the
  #   block calls #broken!(resource), or when it overruns +use_timeout+
  #   (seconds each use may take, enforced with Timeout.timeout, which a
  #   fiber scheduler implements without threads).
  # * +max_uses+: destroy a resource after that many uses (recycling).
  # * +idle_timeout+: idle resources older than that are destroyed in the
  #   background by a fiber of the pool (under a fiber scheduler; by a
  #   thread otherwise), which exists only while idle resources do.
  # * close(timeout:) stops new acquires (Weft::Pool::ClosedError), wakes
  #   the waiters with that error, destroys idle resources and waits for
  #   the ones in use to come back; returns false if some are still out at
  #   the timeout.
  # * +create+, +destroy+ and +validate+ run outside the pool's lock, in the
  #   fiber that caused them; they may block.
  class Pool
    class Error < Weft::Error; end
    class TimeoutError < Weft::TimeoutError; end
    class ClosedError < Error; end

    Slot = Struct.new(:resource, :uses, :idle_since)
    Waiter = Struct.new(:condition, :result)
    private_constant :Slot, :Waiter

    attr_reader :max_size

    def initialize(max_size:, create: nil, destroy: nil, validate: nil, idle_timeout: nil,
                   max_uses: nil, use_timeout: nil, broken_on: [], &block)
      create ||= block
      raise ArgumentError, "Weft::Pool needs a create callable (or a block)" unless create
      raise ArgumentError, "max_size must be a positive Integer" unless max_size.is_a?(Integer) && max_size.positive?

      @max_size = max_size
      @create = create
      @destroy = destroy
      @validate = validate
      @idle_timeout = idle_timeout
      @max_uses = max_uses
      @use_timeout = use_timeout
      @broken_on = Array(broken_on)
      @mutex = Thread::Mutex.new
      @idle = []          # Slots, most recently released last
      @out = {}.compare_by_identity # resource => Slot, while in use
      @broken = {}.compare_by_identity
      @waiters = []       # Waiters, FIFO
      @closers = Thread::ConditionVariable.new
      @reaper_wake = Thread::ConditionVariable.new
      @reaper = nil
      @creating = @destroying = @nwaiters = 0
      @closed = false
      @counters = Hash.new(0)
      @peak = 0
    end

    # With a block: acquire, yield the resource, release it (as broken on a
    # +broken_on+ exception, #broken!, or a use timeout) and return the
    # block's value. Without a block: return the resource, to be given back
    # with #release.
    def acquire(timeout: nil)
      resource = checkout(timeout)
      return resource unless block_given?

      broken = false
      begin
        if @use_timeout
          Timeout.timeout(@use_timeout) { yield resource }
        else
          yield resource
        end
      rescue *@broken_on
        broken = true
        raise
      rescue Timeout::Error => e
        broken = use_cut_short?(e)
        raise
      ensure
        release(resource, broken: broken)
      end
    end

    # Mark +resource+ (in use) as unusable: #release destroys it.
    def broken!(resource)
      @mutex.synchronize { @broken[resource] = true if @out.key?(resource) }
      self
    end

    # Give back a resource from #acquire (without a block).
    def release(resource, broken: false)
      slot = nil
      destroy_it = reaper = false
      @mutex.synchronize do
        slot = @out.delete(resource) or raise Error, "release of a resource not acquired from this pool"
        broken ||= @broken.delete(resource)
        if broken
          @counters[:broken] += 1
          destroy_it = true
        elsif @closed
          destroy_it = true
        elsif @max_uses && slot.uses >= @max_uses
          @counters[:recycled] += 1
          destroy_it = true
        else
          reaper = hand_over_or_idle(slot)
        end
        @destroying += 1 if destroy_it
      end
      destroy_slot(slot) if destroy_it
      start_reaper if reaper
      nil
    end

    # Stop the pool (see the class comment). Returns true once nothing is
    # in use, false if resources are still out after +timeout+ seconds.
    def close(timeout: nil)
      deadline = timeout && clock + timeout
      idle = nil
      @mutex.synchronize do
        @closed = true
        @waiters.each { |w| w.result = [:closed]; w.condition.signal }
        @waiters.clear
        @reaper_wake.broadcast
        idle = @idle.dup
        @idle.clear
        @destroying += idle.size
      end
      idle.each { |slot| destroy_slot(slot) }
      @mutex.synchronize do
        until drained?
          left = deadline && deadline - clock
          return false if left && left <= 0

          @closers.wait(@mutex, left)
        end
      end
      true
    end

    def closed? = @mutex.synchronize { @closed }

    # Counters, as weft_pool_stats(): size (idle + in use + being created
    # or destroyed, never above max_size), idle, in_use, creating, waiters,
    # peak_size, created, destroyed, create_failed, acquired, timeouts,
    # broken, recycled, expired, invalid.
    def stats
      @mutex.synchronize do
        { size: size, idle: @idle.size, in_use: @out.size, creating: @creating,
          waiters: @nwaiters, peak_size: @peak }.merge(
            %i[created destroyed create_failed acquired timeouts broken recycled expired
               invalid].to_h { |k| [k, @counters[k]] })
      end
    end

    private

    def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def size = @idle.size + @out.size + @creating + @destroying

    def note_peak = (@peak = size if size > @peak)

    def drained? = @out.empty? && @creating.zero? && @destroying.zero? && @nwaiters.zero? && @reaper.nil?

    # A use that ran into the use timeout leaves the resource in an unknown
    # state (a query half done); another pool's acquire timeout inside the
    # block says nothing about this resource.
    def use_cut_short?(error) = !@use_timeout.nil? && !error.is_a?(Pool::TimeoutError)

    def checkout(timeout)
      deadline = timeout && clock + timeout
      loop do
        action, slot = @mutex.synchronize { take_or_wait(deadline) }
        case action
        when :resource then return slot.resource
        when :create then return create_in_place
        when :check
          return slot.resource if valid?(slot)

          @mutex.synchronize do
            @counters[:invalid] += 1
            @counters[:acquired] -= 1 # counted again when created
          end
          destroy_slot(slot, keep_place: true)
          return create_in_place
        end
      end
    end

    # Under the lock: an idle slot to check, a place to create in, a
    # hand-over from a release; or wait.
    def take_or_wait(deadline)
      raise ClosedError, "the pool is closed" if @closed

      if @waiters.empty?
        if (slot = @idle.pop)
          @out[slot.resource] = slot
          slot.uses += 1
          @counters[:acquired] += 1
          return [@validate ? :check : :resource, slot]
        end
        if size < @max_size
          @creating += 1
          note_peak
          return [:create]
        end
      end
      waiter = Waiter.new(Thread::ConditionVariable.new, nil)
      @waiters << waiter
      @nwaiters += 1
      begin
        until waiter.result
          left = deadline && deadline - clock
          break if left && left <= 0

          waiter.condition.wait(@mutex, left)
        end
      rescue Exception # rubocop:disable Lint/RescueException
        # Interrupted (Timeout, Thread#raise) after something was handed
        # to us: pass it on, or it would be lost.
        give_back(waiter.result) if waiter.result
        raise
      ensure
        @nwaiters -= 1
        @waiters.delete(waiter) unless waiter.result
        @closers.broadcast if @closed
      end
      case waiter.result&.first
      when :resource
        slot = waiter.result[1]
        slot.uses += 1
        @counters[:acquired] += 1
        [:resource, slot]
      when :create then [:create]
      when :closed then raise ClosedError, "the pool was closed"
      else
        @counters[:timeouts] += 1
        raise TimeoutError, "no resource within the timeout (pool of #{@max_size}, all in use)"
      end
    end

    def valid?(slot)
      @validate.call(slot.resource)
    rescue StandardError
      false
    end

    # Create in the place reserved for us (@creating counted).
    def create_in_place
      resource = begin
        @create.call
      rescue Exception # rubocop:disable Lint/RescueException
        @mutex.synchronize do
          @creating -= 1
          @counters[:create_failed] += 1
          place_freed
        end
        raise
      end
      closed = @mutex.synchronize do
        @creating -= 1
        @counters[:created] += 1
        if @closed
          @destroying += 1
          true
        else
          @out[resource] = Slot.new(resource, 1, nil)
          @counters[:acquired] += 1
          false
        end
      end
      if closed
        destroy_slot(Slot.new(resource, 1, nil))
        raise ClosedError, "the pool was closed"
      end
      resource
    end

    # Destroy outside the lock; @destroying (or, with keep_place, the
    # caller's claim on the place) was counted by the caller.
    def destroy_slot(slot, keep_place: false)
      @mutex.synchronize do
        @out.delete(slot.resource)
        @destroying += 1 if keep_place
      end
      begin
        @destroy&.call(slot.resource)
      ensure
        @mutex.synchronize do
          @destroying -= 1
          @counters[:destroyed] += 1
          if keep_place
            @creating += 1 # the same place, now to create in
          else
            place_freed
          end
        end
      end
    end

    # Under the lock: a healthy slot goes to the first waiter, else idle.
    # Returns true if the reaper should be started (outside the lock).
    def hand_over_or_idle(slot)
      if (w = @waiters.shift)
        @out[slot.resource] = slot
        w.result = [:resource, slot]
        w.condition.signal
        false
      else
        slot.idle_since = clock
        @idle.push(slot)
        return false unless @idle_timeout && @reaper.nil? && !@closed

        @reaper = true
      end
    end

    # Under the lock: what a waiter was given but cannot use.
    def give_back(result)
      case result.first
      when :resource
        slot = result[1]
        @out.delete(slot.resource)
        # (No fiber may be started under the lock: an idle slot then waits
        # for the next release to start the reaper.)
        @reaper = nil if hand_over_or_idle(slot)
      when :create
        @creating -= 1
        place_freed
      end
    end

    # Under the lock: a place became free.
    def place_freed
      if !@closed && size < @max_size && (w = @waiters.shift)
        @creating += 1
        note_peak
        w.result = [:create]
        w.condition.signal
      end
      @closers.broadcast if @closed
    end

    # Outside the lock (a scheduled fiber starts running at once); @reaper
    # was claimed under it.
    def start_reaper
      if Fiber.scheduler
        Fiber.schedule { reap }
      else
        Thread.new { reap }
      end
    end

    def reap
      loop do
        slot = @mutex.synchronize do
          break nil if @closed || @idle.empty?

          oldest = @idle.first
          left = oldest.idle_since + @idle_timeout - clock
          if left <= 0
            @idle.shift
            @counters[:expired] += 1
            @destroying += 1
            oldest
          else
            @reaper_wake.wait(@mutex, left)
            :again
          end
        end
        break if slot.nil?
        next if slot == :again

        destroy_slot(slot)
      end
    ensure
      @mutex.synchronize do
        @reaper = nil
        @closers.broadcast
      end
    end
  end
end
