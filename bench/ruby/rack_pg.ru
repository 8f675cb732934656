# The PostgreSQL app of bench/parts/rack.sh: one query per request, five
# connections. RACK_PG_POOL=weft: a Weft::Pool of 5 shared by the fibers
# (weft serve); otherwise one connection per thread (Puma -t 5:5: five).
require "pg"

conninfo = ENV.fetch("WEFT_PG_CONNINFO")
if ENV["RACK_PG_POOL"] == "weft"
  require "weft"
  pool = Weft::Pool.new(max_size: 5, create: -> { PG.connect(conninfo) }, destroy: ->(c) { c.close })
  run lambda { |env|
    v = pool.acquire { |c| c.exec_params("select $1::int + 1", [env["PATH_INFO"].size]).getvalue(0, 0) }
    [200, { "content-type" => "text/plain" }, [v]]
  }
else
  run lambda { |env|
    c = (Thread.current[:rack_pg] ||= PG.connect(conninfo))
    v = c.exec_params("select $1::int + 1", [env["PATH_INFO"].size]).getvalue(0, 0)
    [200, { "content-type" => "text/plain" }, [v]]
  }
end
