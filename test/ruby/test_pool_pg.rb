# frozen_string_literal: true

require_relative "helper"
require "tmpdir"

# Weft::Pool with Debian's ruby-pg against a real PostgreSQL under
# Weft::Scheduler: 100 fibers share 2 PG::Connections while fetching items
# with Net::HTTP from the example HTTP server. Needs WEFT_PG_CONNINFO
# (scripts/test.d/pg.sh starts a throw-away server and sets it); skipped
# otherwise, and in the plain Ruby suite.
class TestPoolPG < Minitest::Test
  include WeftTestHelper

  CONNINFO = ENV.fetch("WEFT_PG_CONNINFO", "")
  HTTP_SERVER = File.expand_path("../../build/examples/http_server", __dir__)

  def setup
    skip "WEFT_PG_CONNINFO not set: scripts/test.d/pg.sh runs this with a server" if CONNINFO.empty?
    require "pg"
    require "net/http"
    super
    @app = "weft_rb_#{Process.pid}_#{name}"[0, 40]
  end

  def connect(app = @app)
    conn = PG.connect("#{CONNINFO} application_name=#{app}")
    # A terminated idle backend announces itself with a FATAL notice
    # before closing: remember it instead of printing it.
    conn.set_notice_receiver do |r|
      conn.instance_variable_set(:@weft_fatal, true) if r.result_error_field(PG::PG_DIAG_SEVERITY) == "FATAL"
    end
    conn
  end

  # Validation of an idle connection, without blocking: read what the
  # server sent meanwhile (consume_input only reads; is_busy parses it, so
  # the notice receiver sees a FATAL), and once more if the end of the
  # stream is there too.
  def usable?(conn)
    2.times do
      break unless conn.socket_io.wait_readable(0)

      conn.consume_input
      conn.is_busy
      conn.notifies
    end
    conn.status == PG::CONNECTION_OK && !conn.instance_variable_get(:@weft_fatal)
  rescue PG::Error, IOError
    false
  end

  def make_pool(**options)
    Weft::Pool.new(max_size: 2, create: -> { connect }, destroy: ->(c) { c.close },
                   validate: ->(c) { usable?(c) },
                   broken_on: [PG::ConnectionBad, PG::UnableToSend, PG::AdminShutdown], **options)
  end

  def our_connections(admin)
    admin.exec_params("select count(*) from pg_stat_activity where application_name = $1",
                      [@app]).getvalue(0, 0).to_i
  end

  def kill_backend(admin, pid)
    assert_equal "t", admin.exec_params("select pg_terminate_backend($1)", [pid]).getvalue(0, 0)
    sleep 0.005 while admin.exec_params("select 1 from pg_stat_activity where pid = $1", [pid]).ntuples == 1
  end

  # The example server on a free port, serving ITEMS static files.
  def with_http_server(items)
    skip "#{HTTP_SERVER} not built" unless File.executable?(HTTP_SERVER)
    Dir.mktmpdir("weft-rb-pool") do |root|
      Dir.mkdir(File.join(root, "items"))
      1.upto(items) { |i| File.write(File.join(root, "items", "#{i}.txt"), "item #{i}\n") }
      out_r, out_w = IO.pipe
      pid = Process.spawn(HTTP_SERVER, "--port", "0", "--root", root, "--quiet",
                          out: out_w, err: File::NULL)
      out_w.close
      port = out_r.gets.to_s[/:(\d+)\//, 1].to_i
      begin
        refute_equal 0, port, "http_server did not start"
        yield port
      ensure
        Process.kill(:INT, pid)
        Process.wait(pid)
        out_r.close
      end
    end
  end

  def test_100_fibers_share_2_connections_with_net_http_fetches
    with_http_server(100) do |port|
      weft do
        admin = connect("#{@app}_admin")
        admin.exec("drop table if exists rb_pool_items; " \
                   "create table rb_pool_items(id int primary key, body text not null)")
        pool = make_pool
        peak_conns = 0
        fibers = 1.upto(100).map do |i|
          Fiber.schedule do
            body = Net::HTTP.get(URI("http://127.0.0.1:#{port}/items/#{i}.txt"))
            pool.acquire(timeout: 30) do |conn|
              conn.exec_params("insert into rb_pool_items(id, body) values ($1, $2)", [i, body])
            end
          end
        end
        while fibers.any?(&:alive?)
          peak_conns = [peak_conns, our_connections(admin)].max
          sleep 0.001
        end
        assert_operator peak_conns, :<=, 2
        st = pool.stats
        assert_equal 2, st[:peak_size]
        assert_equal 100, st[:acquired]
        assert_equal 100, admin.exec("select count(*) from rb_pool_items").getvalue(0, 0).to_i
        assert_equal 100, admin.exec("select count(distinct id) from rb_pool_items").getvalue(0, 0).to_i
        assert_equal 100, admin.exec("select count(*) from rb_pool_items " \
                                     "where body = 'item ' || id || E'\\n'").getvalue(0, 0).to_i
        # the loop keeps running while a query waits on the server
        ticks = 0
        stop = false
        Fiber.schedule { until stop; sleep 0.001; ticks += 1; end }
        pool.acquire { |c| c.exec("select pg_sleep(0.1)") }
        assert_operator ticks, :>, 0
        stop = true
        assert pool.close(timeout: 10)
        admin.close
      end
    end
  end

  def test_query_errors_raise_and_keep_the_connection
    weft do
      pool = make_pool
      assert_raises(PG::UndefinedTable) { pool.acquire { |c| c.exec("select * from no_such_table") } }
      assert_raises(PG::SyntaxError) { pool.acquire { |c| c.exec("selec 1") } }
      assert_equal "42", pool.acquire { |c| c.exec_params("select $1::int + 1", [41]).getvalue(0, 0) }
      st = pool.stats
      assert_equal 1, st[:created]
      assert_equal 0, st[:broken]
      assert pool.close(timeout: 10)
    end
  end

  def test_killed_backend_is_detected_and_replaced
    weft do
      admin = connect("#{@app}_admin")
      pool = make_pool(max_size: 1)
      pid1 = pool.acquire(&:backend_pid)
      kill_backend(admin, pid1) # idle: validate notices
      pid2 = pool.acquire(&:backend_pid)
      refute_equal pid1, pid2
      assert_equal 1, pool.stats[:invalid]
      # in use: the statement raises, the pool replaces the connection
      assert_raises(PG::ConnectionBad, PG::UnableToSend, PG::AdminShutdown) do
        pool.acquire do |c|
          kill_backend(admin, c.backend_pid)
          c.exec("select 1")
        end
      end
      pid3 = pool.acquire { |c| c.exec("select 1"); c.backend_pid }
      refute_includes [pid1, pid2], pid3
      assert_equal 1, pool.stats[:broken]
      assert pool.close(timeout: 10)
      admin.close
    end
  end
end
