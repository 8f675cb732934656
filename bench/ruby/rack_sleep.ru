# The 50 ms handler of bench/parts/rack.sh: an upstream call's wait.
run ->(_env) { sleep 0.05; [200, { "content-type" => "text/plain" }, ["Hello, World!"]] }
