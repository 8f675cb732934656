#!/usr/bin/env bash
# Ruby's own test/fiber suite against Weft::Scheduler (scripts/ruby_fiber_suite.sh).
exec bash "$(dirname "$0")/../ruby_fiber_suite.sh" "$@"
