# frozen_string_literal: true

require_relative "lib/weft/version"

Gem::Specification.new do |spec|
  spec.name = "weft"
  spec.version = Weft::VERSION
  spec.summary = "A Fiber::Scheduler for Ruby on weft's C event loop (io_uring, epoll, poll)"
  spec.description = <<~TEXT
    Weft::Scheduler implements every Fiber::Scheduler hook in C on weft's
    reactor, so sockets, pipes, sleep, Mutex, Queue, Process.wait,
    Timeout.timeout and DNS lookups run concurrently in fibers. weft's C
    core is compiled into the extension, so no libweft needs to be
    installed. When liburing's headers and library are present at build
    time (Debian: liburing-dev), the extension links liburing and uses the
    io_uring backend; without them it is built for epoll and poll only.
  TEXT
  spec.authors = ["weft contributors"]
  spec.license = "MIT"
  # weft has no public web address yet, so no homepage, source_code_uri or
  # other metadata links rather than ones that lead nowhere.
  spec.required_ruby_version = ">= 3.1"
  spec.platform = Gem::Platform::RUBY
  spec.files = Dir["lib/**/*.rb", "ext/weft/*.{c,h,rb}", "src/**/*.{c,h,S,map}",
                   "contrib/http/http_parse.{c,h}", "include/*.h", "bin/weft",
                   "README.md", "LICENSE"].reject { |f| f.end_with?(".so") }
  # `weft serve [config.ru]`: the Rack server (Weft::Server).
  spec.bindir = "bin"
  spec.executables = ["weft"]
  spec.extensions = ["ext/weft/extconf.rb"]
  spec.require_paths = ["lib"]
end
