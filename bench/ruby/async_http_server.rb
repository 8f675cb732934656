# frozen_string_literal: true

# async_http_server.rb PORT [hello|sleep] — the async-http peer of
# bench/parts/rack.sh: async-http 0.59 on Async 1.30 (Debian 12), its
# native handler (0.59 has no Rack adapter). "sleep" waits 50 ms per
# request in the task, as the Rack apps do.
require "async"
require "async/http/server"
require "async/http/endpoint"
require "protocol/http/response"

port = Integer(ARGV.fetch(0))
slow = ARGV[1] == "sleep"
endpoint = Async::HTTP::Endpoint.parse("http://127.0.0.1:#{port}")
app = lambda do |_request|
  Async::Task.current.sleep(0.05) if slow
  Protocol::HTTP::Response[200, { "content-type" => "text/plain" }, ["Hello, World!"]]
end
Async do
  Async::HTTP::Server.new(app, endpoint).run
end
