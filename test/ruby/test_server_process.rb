# frozen_string_literal: true

require_relative "test_server_helper"
require "net/http"
require "tmpdir"
require "rbconfig"

# weft serve, rackup -s weft and Sinatra as child processes, driven with
# Net::HTTP and curl: logs, signals, worker processes, graceful stop with
# requests in flight and a rolling restart under load.
class TestServerProcess < Minitest::Test
  include WeftTestHelper
  include ServerTestHelper

  LIB = File.expand_path("../../lib", __dir__)
  WEFT = File.expand_path("../../bin/weft", __dir__)

  # An app for the cluster tests: /wait blocks until the file named by
  # WAIT_FILE exists (a cross-process barrier, no timing); every request
  # that reaches /wait says so on stderr.
  CONFIG_RU = <<~'RUBY'
    run lambda { |env|
      if env["PATH_INFO"] == "/wait"
        $stderr.write("arrived #{Process.pid}\n")
        sleep 0.005 until File.exist?(ENV.fetch("WAIT_FILE"))
      end
      [200, { "content-type" => "text/plain" }, ["pid #{Process.pid}"]]
    }
  RUBY

  def setup
    super
    @dir = Dir.mktmpdir("weft-serve")
    @children = []
  end

  def teardown
    @children.each do |pid|
      Process.kill("KILL", pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
    FileUtils.rm_rf(@dir)
    super
  end

  # Start a command with stdout and stderr in files; wait (hang guard)
  # for the startup line and return [pid, port].
  def spawn_server(*cmd, env: {}, ready: /serving on tcp:\/\/[\d.]+:(\d+)/)
    @out = File.join(@dir, "out.log")
    @err = File.join(@dir, "err.log")
    pid = ServerTestHelper.spawn_guarded({ "RUBYLIB" => ServerTestHelper.child_rubylib, "WAIT_FILE" => File.join(@dir, "go") }.merge(env),
                                         *cmd, out: @out, err: @err, chdir: @dir)
    @children << pid
    port = wait_for_log(ready)[1].to_i
    [pid, port]
  end

  def log_out = File.exist?(@out) ? File.read(@out) : ""
  def log_err = File.exist?(@err) ? File.read(@err) : ""

  # Poll the error log until +pattern+ matches (hang guard only).
  def wait_for_log(pattern, count: 1)
    deadline = now + 30
    loop do
      matches = log_err.to_enum(:scan, pattern).map { Regexp.last_match }
      return matches[count - 1] if matches.size >= count
      raise "not seen in the log: #{pattern.inspect}\n#{log_err}" if now > deadline

      sleep 0.02
    end
  end

  def wait_exit(pid)
    deadline = now + 60
    loop do
      done, status = Process.wait2(pid, Process::WNOHANG)
      if done
        @children.delete(pid)
        return status
      end
      raise "pid #{pid} did not exit" if now > deadline

      sleep 0.02
    end
  end

  def write_config(text = CONFIG_RU, name = "config.ru")
    File.write(File.join(@dir, name), text)
  end

  def http_get(port, path = "/")
    Net::HTTP.start("127.0.0.1", port, read_timeout: GUARD, open_timeout: GUARD) { |h| h.get(path) }
  end

  def test_weft_serve_with_logs_and_sigterm
    write_config
    sock = File.join(@dir, "weft.sock")
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-b", "tcp://127.0.0.1:0", "-b", "unix:#{sock}")
    assert_match(/weft #{Regexp.escape(Weft::VERSION)} \(Ruby [\d.]+, (io_uring|epoll|poll)\) serving on tcp:\/\/127\.0\.0\.1:\d+, unix:#{Regexp.escape(sock)}, single process \(pid #{pid}\)/, log_err)
    r = http_get(port, "/a?b=1")
    assert_equal ["200", "pid #{pid}"], [r.code, r.body]
    assert_equal "pid #{pid}", `curl -s --unix-socket #{sock} http://x/u`
    Process.kill("TERM", pid)
    assert_equal 0, wait_exit(pid).exitstatus
    lines = log_out.lines
    assert_match(%r{\A127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] "GET /a\?b=1 HTTP/1\.1" 200 \d+\n\z}, lines[0])
    assert_match(%r{\A- - - \[.*\] "GET /u HTTP/1\.1" 200 \d+\n\z}, lines[1])
    refute File.exist?(sock), "the socket file is removed at exit"
  end

  def test_weft_serve_help_lists_every_option
    out = IO.popen([{ "RUBYLIB" => ServerTestHelper.child_rubylib }, RbConfig.ruby, WEFT, "serve", "--help"], &:read)
    Weft::Server::OPTIONS.each { |_, _, flag, _| assert_includes out, flag.split(", ").last.split(" ").first }
    assert_includes out, "[tcp://127.0.0.1:9292]"
    assert_includes out, "[1024]"
  end

  # The dump signal makes the process print its fibers: a request stuck
  # in the app shows where it waits; sent to a cluster's master, each
  # worker prints its own.
  def test_weft_serve_dump_signal
    write_config
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "--dump-signal", "USR1", "-b", "tcp://127.0.0.1:0")
    request = Thread.new { http_get(port, "/wait") }
    wait_for_log(/arrived #{pid}/)
    Process.kill("USR1", pid)
    # The app sleeps 5 ms at a time: the dump may come before, just after
    # (its timer not fired yet: "deadline passed") or once it is ready.
    dump = wait_for_log(/^weft dump: pid #{pid}, .*?^end of dump \(\d+ fiber\(s\)\)$/m)[0]
    assert_match(/^fiber 0x\h+ "connection from 127\.0\.0\.1, request 1 GET \/wait" (waiting \S+ \S+ on sleep, deadline (in \S+ \S+|passed)|ready \S+ \S+ on sleep)\n  spawned at .*\n    .*config\.ru:4:in /, dump)
    assert_match(/^fiber 0x\h+ "accept loop on tcp:\/\/127\.0\.0\.1:#{port}" waiting \S+ \S+ on (io_wait readable|io_uring accept) fd \d+ #<Socket:fd \d+/, dump)
    File.write(File.join(@dir, "go"), "")
    assert_equal "200", request.value.code
    Process.kill("TERM", pid)
    assert_equal 0, wait_exit(pid).exitstatus

    @err = nil
    pid, = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-w", "2", "--dump-signal", "USR1", "-b", "tcp://127.0.0.1:0")
    workers = 2.times.map { |i| wait_for_log(/worker \d ready \(pid (\d+)\)/, count: i + 1)[1].to_i }
    Process.kill("USR1", pid)
    wait_for_log(/USR1: dumping 2 worker\(s\)/)
    workers.each { |w| wait_for_log(/^weft dump: pid #{w}, /) }
    wait_for_log(/^end of dump/, count: 2)
    refute_match(/^weft dump: pid #{pid}, /, log_err)
    Process.kill("TERM", pid)
    assert_equal 0, wait_exit(pid).exitstatus
  end

  # The README's observability example, run as the README tells: its
  # config.ru (the block after "A small app (`config.ru`)"), served with
  # the command its text gives, an upstream that accepts and stays
  # silent, the three requests, then the dump signal. Only the two ports
  # change (any free one). What the README says of the output must hold:
  # the checksum's stall is reported with its name and the app's lines,
  # and the dump shows the slow report asleep at config.ru:9 and the
  # quote waiting on its upstream socket at config.ru:12.
  def test_the_readme_observability_example_as_written
    readme = File.read(File.expand_path("../../README.md", __dir__))
    app = readme[/A small app \(`config\.ru`\).*?\n```\n(.*?)\n```\n/m, 1]
    command = readme[/Served with `(weft serve [^`]*)`/, 1]
    refute_nil app, "README: the observability example's config.ru"
    refute_nil command, "README: the command that serves it"
    assert_includes app, "127.0.0.1:9400"
    assert_includes command, "-p 9292"
    upstream = TCPServer.new("127.0.0.1", 0) # accepts (in the kernel) and never answers
    write_config(app.sub("127.0.0.1:9400", "127.0.0.1:#{upstream.addr[1]}") + "\n")
    args = command.split.drop(2).map { |a| a == "9292" ? "0" : a }
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", *args)
    slow = %w[/report /quote].map { |path| Thread.new { http_get(port, path) rescue $! } }
    checksum = http_get(port, "/checksum")
    assert_equal ["200", "#{(1..3_000_000).reduce(0) { |sum, i| (sum * 31 + i) % 1_000_003 }}\n"],
                 [checksum.code, checksum.body]
    stall = wait_for_log(/^weft: stall: .*?^weft: stall over: .*?\n/m)[0]
    assert_match(/\Aweft: stall: fiber 0x\h+ "connection from 127\.0\.0\.1, request 1 GET \/checksum" has run [\d.]+ ms without yielding \(stall_ms 50, pid #{pid}\)\n  spawned at \S+\/lib\/weft\/server\.rb:\d+\n  backtrace during the stall:\n/, stall)
    assert_match(/^    \S*config\.ru:4:in .*reduce'\n/, stall)
    assert_match(/^    \S*config\.ru:15:in /, stall)
    # Until both slow requests are waiting where the README says (they
    # may still be on their way in when the first dump is taken).
    dump = nil
    10.times do |i|
      Process.kill("QUIT", pid)
      dump = wait_for_log(/^weft dump: pid #{pid}, .*?^end of dump \(\d+ fiber\(s\)\)$/m, count: i + 1)[0]
      break if dump.include?("GET /report") && dump.include?("GET /quote") && dump =~ /GET \/quote" waiting .* on io_wait/
      sleep 0.1
    end
    assert_match(/^fiber 0x\h+ "connection from 127\.0\.0\.1, request 1 GET \/report" waiting \S+ \S+ on sleep, deadline in \S+ \S+\n  spawned at .*\n(    .*\n)*?    \S*config\.ru:9:in /, dump)
    assert_match(/^fiber 0x\h+ "connection from 127\.0\.0\.1, request 1 GET \/quote" waiting \S+ \S+ on io_wait readable fd \d+ #<\w*Socket:fd \d+[^>]*> to 127\.0\.0\.1:#{upstream.addr[1]}, deadline in \S+ \S+\n  spawned at .*\n(    .*\n)*?    \S*config\.ru:12:in /, dump)
    assert_match(/^fiber 0x\h+ "accept loop on tcp:\/\/127\.0\.0\.1:#{port}" waiting /, dump)
    assert_match(/^loop: \d+ polls, busy [\d.]+ s, waiting [\d.]+ s in the backend; .* stalls 1$/, dump)
    Process.kill("KILL", pid)
    wait_exit(pid)
    slow.each(&:join)
  ensure
    upstream&.close
  end

  def test_weft_serve_quiet_and_bad_bind
    write_config
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-p", "0")
    http_get(port)
    Process.kill("INT", pid)
    assert_equal 0, wait_exit(pid).exitstatus
    assert_equal "", log_out

    err = IO.popen([{ "RUBYLIB" => ServerTestHelper.child_rubylib }, RbConfig.ruby, WEFT, "serve", "-b", "unix:#{@dir}/no/such/dir.sock", File.join(@dir, "config.ru")],
                   err: %i[child out], &:read)
    assert_match(/\Aweft: cannot listen on unix:.*No such file or directory/, err)
    refute_includes err, ".rb:", "no backtrace for a bind error"
  end

  def test_rackup_s_weft
    write_config
    rackup = ["/usr/bin/rackup", Gem.bindir && File.join(Gem.bindir, "rackup")].compact.find { |f| File.executable?(f) }
    skip "rackup not installed" unless rackup
    skip "rackup's gem is not installed for Ruby #{RUBY_VERSION}" if Gem::Specification.find_all_by_name("rack").empty?
    pid, port = spawn_server(RbConfig.ruby, rackup, "-s", "weft", "-o", "127.0.0.1", "-p", "0", "config.ru")
    r = http_get(port)
    assert_equal "200", r.code
    assert_equal "pid #{pid}", r.body
    assert_equal "pid #{pid}", `curl -s http://127.0.0.1:#{port}/`
    Process.kill("INT", pid)
    assert_equal 0, wait_exit(pid).exitstatus
  end

  def test_sinatra_set_server_weft
    begin
      require "sinatra/base"
    rescue LoadError
      skip "sinatra not installed"
    end
    File.write(File.join(@dir, "app.rb"), <<~'RUBY')
      require "sinatra/base"
      class App < Sinatra::Base
        set :server, :weft
        set :bind, "127.0.0.1"
        set :port, 0
        set :logging, false
        get("/") { "sinatra #{Process.pid}" }
        get("/sleep") { sleep 0.01; "slept" }
      end
      App.run!
    RUBY
    pid, port = spawn_server(RbConfig.ruby, "app.rb")
    assert_includes log_err, "with backup from Weft\n", "the banner names the server"
    assert_equal "sinatra #{pid}", http_get(port).body
    threads = Array.new(10) { Thread.new { http_get(port, "/sleep").body } }
    assert_equal ["slept"] * 10, threads.map(&:value)
    Process.kill("INT", pid) # Sinatra's quit! calls the server's stop
    assert_equal 0, wait_exit(pid).exitstatus
    assert_includes log_err, "Sinatra has ended his set"
  end

  def test_workers_restart_a_dead_worker
    write_config
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-w", "2", "-b", "tcp://127.0.0.1:0")
    assert_match(/2 workers \(master pid #{pid}\)/, log_err)
    workers = 2.times.map { |i| wait_for_log(/worker \d ready \(pid (\d+)\)/, count: i + 1)[1].to_i }
    Process.kill("KILL", workers[0])
    wait_for_log(/worker \d \(pid #{workers[0]}\) was killed by signal KILL; starting another/)
    fresh = wait_for_log(/worker \d ready \(pid (\d+)\)/, count: 3)[1].to_i
    refute_includes workers, fresh
    assert_equal "200", http_get(port).code
    Process.kill("TERM", pid)
    assert_equal 0, wait_exit(pid).exitstatus
  end

  # A master killed with SIGKILL leaves no worker behind.
  def test_workers_stop_when_the_master_dies
    write_config
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-w", "2", "-b", "tcp://127.0.0.1:0")
    workers = 2.times.map { |i| wait_for_log(/worker \d ready \(pid (\d+)\)/, count: i + 1)[1].to_i }
    assert_equal "200", http_get(port).code
    Process.kill("KILL", pid)
    wait_exit(pid)
    wait_for_log(/the master is gone; stopping/, count: 2)
    deadline = now + GUARD
    workers.each do |w|
      sleep 0.02 while process_alive?(w) && now < deadline
      refute process_alive?(w), "worker #{w} outlived its master"
    end
  end

  def process_alive?(pid)
    Process.kill(0, pid)
    !File.read("/proc/#{pid}/stat").split(") ").last.start_with?("Z")
  rescue Errno::ESRCH, Errno::ENOENT
    false
  end

  # A single process takes HUP (its terminal went away) as TERM: the
  # request in flight is answered and it exits 0. Started with HUP
  # ignored (nohup), it leaves it ignored.
  def test_single_process_stops_gracefully_on_hup_unless_nohup
    write_config
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-b", "tcp://127.0.0.1:0")
    client = Thread.new { http_get(port, "/wait") }
    wait_for_log(/arrived/)
    Process.kill("HUP", pid)
    File.write(File.join(@dir, "go"), "")
    assert_equal "200", client.value.code
    assert_equal 0, wait_exit(pid).exitstatus

    pid, port = spawn_server("bash", "-c", 'trap "" HUP; exec "$@"', "nohup", RbConfig.ruby, WEFT, "serve", "-q",
                             "-b", "tcp://127.0.0.1:0")
    ignored = File.read("/proc/#{pid}/status")[/^SigIgn:\s*(\h+)/, 1].to_i(16)
    assert_equal 1, ignored[Signal.list.fetch("HUP") - 1], "HUP stays ignored"
    assert_equal "200", http_get(port, "/").code
    Process.kill("TERM", pid)
    assert_equal 0, wait_exit(pid).exitstatus
  end

  # SIGTERM with requests in flight: every one is answered, then the
  # master exits 0.
  def test_graceful_stop_of_workers_answers_requests_in_flight
    write_config
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-w", "2", "-b", "tcp://127.0.0.1:0")
    2.times { |i| wait_for_log(/worker \d ready/, count: i + 1) }
    clients = Array.new(6) { Thread.new { http_get(port, "/wait") } }
    wait_for_log(/arrived/, count: 6)
    Process.kill("TERM", pid)
    wait_for_log(/stopping 2 worker/)
    File.write(File.join(@dir, "go"), "")
    clients.each { |t| assert_equal "200", t.value.code }
    assert_equal 0, wait_exit(pid).exitstatus
  end

  # USR2 under load (a new connection per request, from several
  # threads): no refused connection, no error, and the workers change.
  def test_rolling_restart_under_load
    write_config
    File.write(File.join(@dir, "go"), "") # /wait does not wait here
    pid, port = spawn_server(RbConfig.ruby, WEFT, "serve", "-q", "-w", "2", "-b", "tcp://127.0.0.1:0")
    old = 2.times.map { |i| wait_for_log(/worker \d ready \(pid (\d+)\)/, count: i + 1)[1].to_i }
    stop = false
    errors = Queue.new
    pids = Queue.new
    load = Array.new(4) do
      Thread.new do
        n = 0
        until stop && n >= 20
          begin
            sock = connect(port)
            sock.write("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            r = read_response(sock)
            r&.status == 200 ? pids << r.body[/\d+/].to_i : errors << "status #{r&.status.inspect}"
          rescue StandardError => e
            errors << "#{e.class}: #{e.message}"
          ensure
            sock&.close
          end
          n += 1
        end
        n
      end
    end
    sleep 0.05 until pids.size >= 20
    Process.kill("USR2", pid)
    wait_for_log(/rolling restart done/)
    mark = pids.size
    sleep 0.05 until pids.size >= mark + 40
    stop = true
    total = load.sum(&:value)
    seen = []
    seen << pids.pop until pids.empty?
    messages = []
    messages << errors.pop until errors.empty?
    assert_empty messages, "errors during the rolling restart"
    assert_equal total, seen.size
    fresh = seen.last(20).uniq
    assert_empty fresh & old, "requests after the restart were served by old workers"
    Process.kill("TERM", pid)
    assert_equal 0, wait_exit(pid).exitstatus
  end
end
