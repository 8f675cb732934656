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
# first read.
require_relative "helper"

class TestSignals < Minitest::Test
  include WeftTestHelper

  # Starts a fiber that raises +exc+ at once, then waits in a loop for up
  # to 2 s (an accept loop's stand-in). Returns [what Weft.run raised,
  # whether the loop got Weft::Stop, seconds until Weft.run returned].
  def starter_after(exc)
    stopped = nil
    t0 = now
    raised = nil
    begin
      Weft.run(report_on_exception: false) do
        Fiber.schedule { raise exc }
        begin
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
    assert_operator secs, :<, 1
  end

  def test_exit_in_a_new_fiber_stops_its_starter
    raised, stopped, secs = starter_after(SystemExit)
    assert_kind_of SystemExit, raised
    assert stopped, "the fiber that started it was not stopped: it went on for #{secs.round(2)} s"
    assert_operator secs, :<, 1
  end
end
