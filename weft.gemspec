# frozen_string_literal: true

require_relative "lib/weft/version"

Gem::Specification.new do |spec|
  spec.name = "weft"
  spec.version = Weft::VERSION
  spec.summary = "A Fiber::Scheduler for Ruby on weft's C event loop (io_uring, epoll, poll)"
  spec.description = <<~TEXT
    Weft::Scheduler implements every Fiber::Scheduler hook in C on weft's
    reactor, so sockets, pipes, sleep, Mutex, Queue, Process.wait,
    Timeout.timeout and DNS lookups run concurrently in fibers. The C core
    is compiled into the extension; no system library is needed.
  TEXT
  spec.authors = ["weft contributors"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.1"
  spec.platform = Gem::Platform::RUBY
  spec.files = Dir["lib/**/*.rb", "ext/weft/*.{c,h,rb}", "src/**/*.{c,h,S,map}",
                   "include/*.h", "README.md"].reject { |f| f.end_with?(".so") }
  spec.extensions = ["ext/weft/extconf.rb"]
  spec.require_paths = ["lib"]
end
