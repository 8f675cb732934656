# The hello-world Rack app of bench/parts/rack.sh (every server runs it).
run ->(_env) { [200, { "content-type" => "text/plain" }, ["Hello, World!"]] }
