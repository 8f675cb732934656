# frozen_string_literal: true

# What bench/crash_hunt.sh found (issue 18). A signal's exception
# (Interrupt from a trap, SystemExit) raised in a fiber that
# Fiber.schedule has just started, before its first wait, ends that fiber
# and is kept for Weft.run; the fibers waiting at that moment get
# Weft::Stop, but the fiber that called Fiber.schedule is not waiting —
# it is suspended in the resume — and goes on as if nothing happened. An
# accept loop then waits again, the loop never runs out of fibers, and
# Weft.run never raises the Interrupt: the Ruby HTTP server under load
# ignored SIGINT and SIGTERM (60 s and more), with GC.stress in about half
# of the runs, where a new connection's fiber spends longest before its
# first read. Now the starter is stopped as the resume returns: Weft::Stop
# comes out of its Fiber.schedule (the signal itself in a blocking fiber).
require_relative "helper"

class TestSignals < Minitest::Test
  include WeftTestHelper

  # Starts a fiber that raises +exc+ at once, then (if not stopped) waits
  # in a loop for up to 2 s (an accept loop's stand-in). Returns [what Weft.run raised,
  # whether the loop got Weft::Stop, seconds until Weft.run returned].
  def starter_after(exc)
    stopped = nil
    t0 = now
    raised = nil
    begin
      Weft.run(report_on_exception: false) do
        begin
          Fiber.schedule { raise exc } # Weft::Stop comes out of it
          200.times { sleep 0.01 }
          stopped = false
        rescue Weft::Stop
          stopped = true
          raise
        end
      end
    rescue Exception => e # rubocop:disable Lint/RescueException
      raised = e
    end
    [raised, stopped, now - t0]
  end

  def test_interrupt_in_a_new_fiber_stops_its_starter
    raised, stopped, secs = starter_after(Interrupt)
    assert_kind_of Interrupt, raised
    assert stopped, "the fiber that started it was not stopped: it went on for #{secs.round(2)} s"
  end

  def test_exit_in_a_new_fiber_stops_its_starter
    raised, stopped, secs = starter_after(SystemExit)
    assert_kind_of SystemExit, raised
    assert stopped, "the fiber that started it was not stopped: it went on for #{secs.round(2)} s"
  end
  # Without Weft.run: the thread's own fiber called Fiber.schedule, so it
  # gets the Interrupt itself at once (as with Ctrl-C), and the fiber that
  # waited is stopped; closing the scheduler then raises nothing more.
  def test_interrupt_in_a_new_fiber_reaches_a_blocking_starter
    waiter = nil
    got = nil
    Thread.new do
      s = Weft::Scheduler.new(report_on_exception: false)
      Fiber.set_scheduler(s)
      Fiber.schedule do
        sleep 5
        waiter = :finished
      rescue Weft::Stop
        waiter = :stopped
      end
      begin
        Fiber.schedule { raise Interrupt }
        got = :went_on
      rescue Interrupt => e
        got = e
      end
      Fiber.set_scheduler(nil)
    end.join
    assert_kind_of Interrupt, got
    assert_equal :stopped, waiter
  end
end
