# frozen_string_literal: true

require_relative "test_server_helper"
require "net/http"
require "tmpdir"
require "rbconfig"

# A Sinatra application that queries PostgreSQL on every request through
# a Weft::Pool of 5 connections, served by `weft serve` and by `rackup -s
# weft`, exercised with Net::HTTP and curl. The database is
# WEFT_PG_CONNINFO's, or a throw-away cluster this file starts
# (scripts/pg.sh) and stops; skipped when neither can be had.
class TestServerPG < Minitest::Test
  include WeftTestHelper
  include ServerTestHelper

  ROOT = File.expand_path("../..", __dir__)
  LIB = File.join(ROOT, "lib")

  CONFIG_RU = <<~'RUBY'
    require "sinatra/base"
    require "weft"
    require "pg"

    POOL = Weft::Pool.new(max_size: 5,
                          create: -> { PG.connect("#{ENV.fetch("WEFT_PG_CONNINFO")} application_name=weft_sinatra") },
                          destroy: ->(c) { c.close },
                          broken_on: [PG::ConnectionBad, PG::UnableToSend])

    class App < Sinatra::Base
      set :logging, false
      set :show_exceptions, false

      get "/double/:n" do
        POOL.acquire { |c| c.exec_params("select $1::int * 2", [params[:n]]).getvalue(0, 0) }
      end

      # Waits in PostgreSQL while the test holds the advisory lock.
      get "/locked" do
        POOL.acquire do |c|
          c.exec("select pg_advisory_lock_shared(4242)")
          c.exec("select pg_advisory_unlock_shared(4242)")
        end
        "unlocked"
      end
    end

    run App
  RUBY

  @conninfo = nil
  @cluster_dir = nil

  class << self
    # WEFT_PG_CONNINFO, or a cluster started once for this process.
    def conninfo
      return @conninfo if @conninfo
      return @conninfo = ENV["WEFT_PG_CONNINFO"] unless ENV.fetch("WEFT_PG_CONNINFO", "").empty?
      return @conninfo = "" if @tried

      @tried = true
      out = IO.popen(["bash", File.join(ROOT, "scripts/pg.sh"), "start"], err: File::NULL, &:read)
      return @conninfo = "" unless $?.success?

      vars = out.scan(/^export (\w+)=(.*)$/).to_h { |k, v| [k, v.gsub(/\\(.)/, '\1')] }
      @cluster_dir = vars["WEFT_PG_DIR"]
      stop = "bash #{File.join(ROOT, "scripts/pg.sh")} stop #{@cluster_dir}"
      Minitest.after_run { system(stop) }
      ServerTestHelper.after_death(stop) # also if this process is killed
      @conninfo = vars.fetch("WEFT_PG_CONNINFO", "")
    end
  end

  def setup
    super
    begin
      require "pg"
      require "sinatra/base"
    rescue LoadError => e
      skip "#{e.message} (ruby-pg, ruby-sinatra)"
    end
    @conninfo = self.class.conninfo
    skip "no PostgreSQL (scripts/pg.sh could not start one)" if @conninfo.empty?
    @dir = Dir.mktmpdir("weft-pg")
    File.write(File.join(@dir, "config.ru"), CONFIG_RU)
    @pid = nil
  end

  def teardown
    if @pid
      begin
        Process.kill("KILL", @pid)
        Process.wait(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
    end
    FileUtils.rm_rf(@dir) if @dir
    super
  end

  def start(*cmd)
    err = File.join(@dir, "err.log")
    @pid = ServerTestHelper.spawn_guarded({ "RUBYLIB" => ServerTestHelper.child_rubylib, "WEFT_PG_CONNINFO" => @conninfo },
                                          *cmd, out: File::NULL, err: err, chdir: @dir)
    deadline = now + 30
    until (port = File.read(err)[%r{serving on tcp://127\.0\.0\.1:(\d+)}, 1])
      raise "the server did not start:\n#{File.read(err)}" if now > deadline || Process.wait(@pid, Process::WNOHANG)

      sleep 0.02
    end
    port.to_i
  end

  def stop
    Process.kill("TERM", @pid)
    _, status = Process.wait2(@pid)
    @pid = nil
    status
  end

  def http_get(port, path)
    Net::HTTP.start("127.0.0.1", port, read_timeout: GUARD, open_timeout: GUARD) { |h| h.get(path) }
  end

  # Every pool connection waits in PostgreSQL at once (on an advisory
  # lock the test holds) while more requests queue for the pool: the
  # queries of one thread's fibers run concurrently. Then all finish.
  def exercise(port)
    assert_equal "42", http_get(port, "/double/21").body
    assert_equal "14", `curl -s http://127.0.0.1:#{port}/double/7`
    admin = PG.connect(@conninfo)
    admin.exec("select pg_advisory_lock(4242)")
    clients = Array.new(12) { Thread.new { http_get(port, "/locked") } }
    deadline = now + GUARD
    waiting = 0
    until waiting == 5
      raise "only #{waiting} queries waiting on the lock" if now > deadline

      sleep 0.02
      waiting = admin.exec("select count(*) from pg_stat_activity where application_name = 'weft_sinatra' " \
                           "and wait_event_type = 'Lock'").getvalue(0, 0).to_i
    end
    admin.exec("select pg_advisory_unlock(4242)")
    clients.each { |t| assert_equal "unlocked", t.value.body }
    assert_equal "200", http_get(port, "/double/1").code
  ensure
    admin&.close
  end

  def test_sinatra_and_postgresql_under_weft_serve
    port = start(RbConfig.ruby, File.join(ROOT, "bin/weft"), "serve", "-q", "-b", "tcp://127.0.0.1:0")
    exercise(port)
    assert_equal 0, stop.exitstatus
  end

  def test_sinatra_and_postgresql_under_rackup
    rackup = ["/usr/bin/rackup", File.join(Gem.bindir, "rackup")].find { |f| File.executable?(f) }
    skip "rackup not installed" unless rackup
    skip "rackup's gem is not installed for Ruby #{RUBY_VERSION}" if Gem::Specification.find_all_by_name("rack").empty?
    port = start(RbConfig.ruby, rackup, "-s", "weft", "-o", "127.0.0.1", "-p", "0", "-E", "deployment", "config.ru")
    exercise(port)
    assert_includes [0, nil], stop.exitstatus
  end
end
