# Tests of TestFiberSleep (Ruby's test/fiber/test_sleep.rb) not run against
# Weft::Scheduler; the format is that of Ruby's test framework (-X DIR).
# Only tests that read the reference scheduler's private state belong here.
exclude(:test_sleep, "reads the reference scheduler's private wait table (scheduler.waiting.size == 5), which Weft::Scheduler does not have")
