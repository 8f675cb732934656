# frozen_string_literal: true

# Would `weft serve -t N` (N threads per process, each with its own
# Weft::Scheduler) be worth having? N threads in one process, each running
# a Weft::Server on the same listening socket, hello-world app.
#   ruby -I lib bench/ruby/rack_threads.rb N PORT
# bench/rack_threads.sh runs it for N = 1 and 2 under wrk and prints the
# ratios.
require "weft/server"
n = Integer(ARGV[0]); port = Integer(ARGV[1])
app = ->(_env) { [200, { "content-type" => "text/plain" }, ["Hello, world!\n"]] }
first = Weft::Server.new(app, bind: "tcp://127.0.0.1:#{port}", quiet: true)
ls = first.open_listeners
servers = [first] + Array.new(n - 1) { Weft::Server.new(app, listeners: ls, quiet: true) }
threads = servers.map { |s| Thread.new { s.run } }
trap("TERM") { servers.each(&:stop) }
threads.each(&:join)
