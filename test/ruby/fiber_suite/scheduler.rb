# frozen_string_literal: true

# The adapter that runs Ruby's own test/fiber suite against Weft::Scheduler.
#
# scripts/fetch-ruby-fiber-suite.sh extracts the suite from Debian's Ruby source
# package into build/ruby-fiber-suite/<version>/ (nothing of Ruby's is kept
# in this repository), renames the suite's test/fiber/scheduler.rb to
# scheduler.reference.rb and copies this file in its place, so both
# `require_relative 'scheduler'` (the tests) and `require 'scheduler'`
# with -I test/fiber (their child processes) load it.
#
# At load time:
#   - `Scheduler` is `class Scheduler < Weft::Scheduler`, nothing added;
#   - the rest of the suite's own file (its requires and the subclasses
#     IOBufferScheduler, BrokenUnblockScheduler, SleepingUnblockScheduler,
#     SleepingBlockingScheduler, ...) is evaluated unchanged from
#     scheduler.reference.rb, with only the lines of its base
#     `class Scheduler ... end` blanked out, so line numbers match the
#     original in backtraces.
#
# WEFT_FIBER_SUITE_SCHEDULER=reference loads the suite's file untouched
# (Ruby's own reference scheduler): a baseline, to tell a failure of weft
# from a test that fails under any scheduler on this interpreter.
#
# Tests that read the reference scheduler's private state are excluded in
# excludes/<TestClass>.rb (Ruby's test framework's own exclude format),
# each with its reason.

reference = File.expand_path("scheduler.reference.rb", __dir__)
unless File.exist?(reference)
  abort "fiber_suite adapter: #{reference} missing (run scripts/fetch-ruby-fiber-suite.sh)"
end

if ENV["WEFT_FIBER_SUITE_SCHEDULER"] == "reference"
  load reference
else
  require "weft"

  source = File.read(reference)
  lines = source.lines
  first = lines.index { |l| l.match?(/\Aclass Scheduler\s*(#.*)?\n?\z/) }
  last = first && (first + 1...lines.size).find { |i| lines[i].match?(/\Aend\s*(#.*)?\n?\z/) }
  unless first && last && lines.count { |l| l.start_with?("class Scheduler") } == 1
    abort "fiber_suite adapter: cannot find the base `class Scheduler ... end` in #{reference}; " \
          "the suite's scheduler.rb changed shape, update test/ruby/fiber_suite/scheduler.rb"
  end
  (first..last).each { |i| lines[i] = "\n" }

  # The suite's base class body also touches IO::Buffer once with
  # experimental warnings off, which spends IO::Buffer's one-time
  # "experimental" warning; child processes whose stderr the suite checks
  # rely on that, so the adapter does the same before defining the class.
  if defined?(IO::Buffer)
    experimental = Warning[:experimental]
    begin
      Warning[:experimental] = false
      IO::Buffer.new(0)
    ensure
      Warning[:experimental] = experimental
    end
  end

  class Scheduler < Weft::Scheduler
  end

  TOPLEVEL_BINDING.eval(lines.join, reference, 1)
end
