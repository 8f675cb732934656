# Tests of Ruby 3.4's test/fiber/test_mutex.rb not run against
# Weft::Scheduler: they call methods that only the suite's reference
# scheduler has (not part of the Fiber::Scheduler interface). The behaviour
# they check is covered by test/ruby/test_ordinary.rb on every Ruby.
exclude(:test_mutex_deadlock, "calls scheduler.transfer, a method of the reference scheduler only, to leave a fiber holding the mutex (test_ordinary.rb's test_mutex_deadlock_with_a_yielded_fiber_is_ruby_s_error checks the deadlock with Fiber.yield)")
