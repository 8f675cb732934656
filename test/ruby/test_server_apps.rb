# frozen_string_literal: true

require_relative "test_server_helper"
require "tempfile"
require "tmpdir"
require "rbconfig"
require "net/http"

# Ordinary Rack apps under Weft::Server, each checked against what the
# same app does on a thread per request (WEBrick, Puma): the holes found
# by serving such apps, not by the protocol tests of test_server.rb.
class TestServerApps < Minitest::Test
  include WeftTestHelper
  include ServerTestHelper

  WEFT = File.expand_path("../../bin/weft", __dir__)

  def teardown
    @children&.each do |pid|
      Process.kill("KILL", pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
    FileUtils.rm_rf(@dir) if @dir
    super
  end

  # `weft serve ARGS config.ru` in a directory of its own holding
  # +config_ru+, with +env+ (nil values unset) and stderr in a file; waits
  # (hang guard) for the startup line: [pid, port, stderr's path].
  def serve(config_ru, *args, env: {})
    @dir ||= Dir.mktmpdir("weft-apps")
    @children ||= []
    File.write(File.join(@dir, "config.ru"), config_ru)
    err = File.join(@dir, "err#{@children.size}.log")
    pid = ServerTestHelper.spawn_guarded({ "RUBYLIB" => ServerTestHelper.child_rubylib }.merge(env),
                                         RbConfig.ruby, WEFT, "serve", "-q", "-p", "0", *args, "config.ru",
                                         out: File::NULL, err: err, chdir: @dir)
    @children << pid
    deadline = now + GUARD
    until (port = File.read(err)[/serving on tcp:\/\/[\d.]+:(\d+)/, 1])
      raise "weft serve did not start:\n#{File.read(err)}" if now > deadline || Process.wait(pid, Process::WNOHANG)

      sleep 0.02
    end
    [pid, port.to_i, err]
  end

  def http_get(port, path = "/")
    Net::HTTP.start("127.0.0.1", port, read_timeout: GUARD, open_timeout: GUARD) { |h| h.get(path) }
  end

  # An app that picks its settings by RACK_ENV, as apps with a database
  # per environment do. rackup and Puma set RACK_ENV to "development"
  # when nothing else says which; weft serve left it unset, and the app
  # died at boot (KeyError) where it ran under both.
  def test_weft_serve_sets_rack_env_as_rackup_and_puma_do
    app = <<~'RUBY'
      DATABASE = { "development" => "dev.sqlite3", "production" => "prod.sqlite3" }.fetch(ENV["RACK_ENV"])
      run ->(_env) { [200, { "content-type" => "text/plain" }, ["#{DATABASE} #{ENV["APP_ENV"].inspect}"]] }
    RUBY
    unset = { "RACK_ENV" => nil, "APP_ENV" => nil, "RAILS_ENV" => nil }
    _, port, = serve(app, env: unset)
    assert_equal "dev.sqlite3 nil", http_get(port).body
    _, port, = serve(app, env: unset.merge("RAILS_ENV" => "production"))
    assert_equal "prod.sqlite3 nil", http_get(port).body
    _, port, = serve(app, "-E", "production", env: unset.merge("RACK_ENV" => "development"))
    assert_equal "prod.sqlite3 \"production\"", http_get(port).body
  end

  # Rows a report writes at most: only so that a run in which the other
  # requests never get a turn ends at all (the hang guard fails the test
  # long before); never reached when the server is fair.
  ROWS_AT_MOST = 50_000_000

  # A report written row by row to a file: a write to a regular file, like
  # one to a client that keeps up, never has to wait. On threads the
  # other requests run meanwhile (a thread is preempted); a fiber whose
  # writes never waited never let the loop look at the listener, so a
  # request that asked the report to stop was not even accepted until
  # the report had written every row.
  def test_a_request_whose_writes_never_wait_lets_the_others_run
    started = Thread::Queue.new
    stop = false
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/report"
        rows = 0
        Tempfile.create("weft-report") do |f|
          f.sync = true
          started << true
          until stop || rows == ROWS_AT_MOST
            f.write("row #{rows},alpha,beta,gamma\n")
            rows += 1
          end
        end
        [200, { "content-type" => "text/plain" }, [stop ? "stopped" : "all rows"]]
      when "/stop"
        stop = true
        [200, { "content-type" => "text/plain" }, ["ok"]]
      end
    end
    with_server(app) do |port|
      report = connect(port)
      report.write("GET /report HTTP/1.1\r\nHost: t\r\n\r\n")
      started.pop
      assert_equal "ok", get(port, "/stop").body
      assert_equal "stopped", read_response(report).body
    ensure
      report&.close
    end
  end

  # Timeout.timeout around the same kind of work (a request with a time
  # budget): on a thread it fires; it never did in a fiber whose writes
  # never waited, since its timer was only looked at when the fiber waited.
  def test_a_timeout_reaches_a_request_whose_writes_never_wait
    app = lambda do |_env|
      rows = 0
      outcome =
        begin
          Timeout.timeout(0.05) do
            Tempfile.create("weft-report") do |f|
              f.sync = true
              while rows < ROWS_AT_MOST
                f.write("row #{rows},alpha,beta,gamma\n")
                rows += 1
              end
            end
          end
          "all rows"
        rescue Timeout::Error
          "timed out"
        end
      [200, { "content-type" => "text/plain" }, [outcome]]
    end
    with_server(app) do |port|
      assert_equal "timed out", get(port, "/report").body
    end
  end
end
