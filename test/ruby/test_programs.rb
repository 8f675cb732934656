# frozen_string_literal: true

require_relative "helper"
require "tmpdir"
require "rbconfig"
require "net/http"

# Ordinary programs, written as a user writes them, each compared with the
# same program on plain Ruby threads (the reference): autoload and require
# from many fibers at once, a server whose request fibers die, buffered
# output from several fibers to a pipe that fills, Enumerator#next over a
# socket, and many rounds of mixed file operations. Programs that must
# start from a fresh process (an autoload happens once) or that could hang
# the whole interpreter run as child processes with a hang guard.
class TestPrograms < Minitest::Test
  include WeftTestHelper

  LIB = File.expand_path("../../lib", __dir__)

  def ext_dir = File.dirname($LOADED_FEATURES.grep(%r{/weft/weft\.so\z}).first.to_s, 2)

  # The command line of a child Ruby with weft on its load path, under
  # timeout(1): a child outlives this process only that long, even when the
  # watchdog ends the test run (exit!) without reaching our own kill. A
  # TERM to timeout goes on to the child, and a KILL follows 5 s later (a
  # hung Ruby may not act on TERM).
  def ruby_command(*args, life:)
    ["timeout", "-k", "5", life.to_s, RbConfig.ruby, "-I", ext_dir, "-I", LIB, *args]
  end

  def stop_child(pid)
    Process.kill(:TERM, pid)
  rescue Errno::ESRCH
    nil
  end

  # Run @code in a new Ruby; [output, status]. The guard only turns a hang
  # into a failure (it kills the child).
  def child(code, dir: Dir.pwd, guard: 120)
    out = +""
    pid = nil
    IO.popen([*ruby_command("-e", code, life: guard + 30),
              chdir: dir, err: %i[child out]]) do |io|
      pid = io.pid
      Timeout.timeout(guard) { out << io.read }
    rescue Timeout::Error
      stop_child(pid)
      flunk "child still running after #{guard}s (hang guard); output so far:\n#{out}"
    end
    [out, $?]
  end

  # A library loaded lazily, as Rack and Rails load theirs: its files take
  # a while to load (a sleep and a file read at load time), its constants
  # are autoloaded, one file requires another.
  def write_library(dir)
    File.write(File.join(dir, "data.txt"), "42\n")
    File.write(File.join(dir, "slowlib.rb"), <<~RUBY)
      module SlowLib
        autoload :Inner, File.join(__dir__, "slowlib_inner.rb")
      end
    RUBY
    File.write(File.join(dir, "slowlib_inner.rb"), <<~RUBY)
      sleep 0.05
      require_relative "slowlib_helper"
      module SlowLib
        module Inner
          VALUE = Integer(File.read(File.join(__dir__, "data.txt"))) + SlowLib::Helper::ZERO
        end
      end
    RUBY
    File.write(File.join(dir, "slowlib_helper.rb"), <<~RUBY)
      sleep 0.02
      module SlowLib
        module Helper
          ZERO = File.read(File.join(__dir__, "data.txt")).size - 3
        end
      end
    RUBY
    File.write(File.join(dir, "slowreq.rb"), <<~RUBY)
      sleep 0.05
      module SlowReq
        VALUE = File.read(File.join(__dir__, "data.txt")).to_i
      end
    RUBY
  end

  AUTOLOAD_PROGRAM = <<~'RUBY'
    require "weft"
    $LOAD_PATH.unshift(Dir.pwd)
    autoload :SlowLib, File.join(Dir.pwd, "slowlib.rb")
    results = Queue.new
    work = lambda do |i|
      v = i.even? ? SlowLib::Inner::VALUE : (require("slowreq"); SlowReq::VALUE)
      results << [:ok, v]
    rescue NameError, LoadError => e
      results << [:error, e.class.name]
    end
    if ARGV.first == "threads"
      20.times.map { |i| Thread.new { work.(i) } }.each(&:join)
    else
      Weft.run { 20.times { |i| Fiber.schedule { work.(i) } } }
    end
    p Array.new(results.size) { results.pop }.tally.sort
  RUBY

  def test_autoload_and_require_from_many_fibers_at_once
    Dir.mktmpdir do |dir|
      write_library(dir)
      ref, st = child("ARGV.replace(%w[threads]); #{AUTOLOAD_PROGRAM}", dir: dir)
      assert st.success?, ref
      assert_equal "[[[:ok, 42], 20]]\n", ref, "the reference (threads)"
      3.times do # a fresh process each: a constant autoloads once
        out, st = child(AUTOLOAD_PROGRAM, dir: dir)
        assert st.success?, out
        assert_equal ref, out
      end
    end
  end

  # A rackup file is code evaluated with its file name (Rack::Builder
  # evals config.ru so), and a Rails app's config.ru begins with
  # `require_relative "config/environment"`. With weft loaded on Ruby 3.1
  # (whose require_relative weft wraps) that raised "cannot infer
  # basepath": the evaluated code has a path but no real path.
  REQUIRE_RELATIVE_PROGRAM = <<~'RUBY'
    require "weft" unless ARGV.first == "plain"
    eval("require_relative 'config/env'; p ENV_LOADED", TOPLEVEL_BINDING, "app/config.ru", 0)
    eval("require_relative 'config/other'; p OTHER_LOADED", TOPLEVEL_BINDING, File.expand_path("app/config.ru"), 0)
    begin
      eval("require_relative 'config/env'")
    rescue LoadError => e
      p e.message
    end
    run = ->(&b) { ARGV.first == "plain" ? b.call : Weft.run { Fiber.schedule(&b) } }
    run.call { eval("require_relative 'config/late'; p LATE_LOADED", TOPLEVEL_BINDING, "app/config.ru", 0) }
  RUBY

  def test_require_relative_in_code_evaluated_with_a_file_name
    Dir.mktmpdir do |dir|
      FileUtils.mkdir_p(File.join(dir, "app/config"))
      %w[env other late].each do |name|
        File.write(File.join(dir, "app/config/#{name}.rb"), "#{name.upcase}_LOADED = #{name.inspect}\n")
      end
      ref, st = child("ARGV.replace(%w[plain]); #{REQUIRE_RELATIVE_PROGRAM}", dir: dir)
      assert st.success?, ref
      assert_equal %("env"\n"other"\n"cannot infer basepath"\n"late"\n), ref, "the reference (no weft)"
      out, st = child(REQUIRE_RELATIVE_PROGRAM, dir: dir)
      assert st.success?, out
      assert_equal ref, out
    end
  end

  # A library that wraps Kernel#require after weft is loaded, as Zeitwerk
  # (Rails' autoloader) and Bootsnap do: alias the current method and
  # define a new one, which handles some paths itself (Zeitwerk: the
  # autoload of a namespace that is a directory alone) and sees every
  # other. Its wrapper must run for the requires and autoloads of
  # fibers. On Ruby 3.1 weft's wrapper was a module prepended to Kernel,
  # whose `super` went on calling RubyGems' require (Ruby 3.1 keeps the
  # method `super` found first): the library's was skipped, and a Rails
  # app's `Admin::UsersController` (app/controllers/admin/) raised
  # LoadError "cannot load such file -- .../app/controllers/admin".
  WRAPPED_REQUIRE_PROGRAM = <<~'RUBY'
    require "weft" unless ARGV.first == "plain"
    require "set" # a require before the library's wrapper
    $seen = []
    module Kernel
      alias_method :lib_original_require, :require
      def require(path)
        $seen << File.basename(path.to_s)
        return (Object.const_set(:Namespace, Module.new); true) if path == "/virtual/namespace"

        lib_original_require(path)
      end
      private :require
    end
    File.write("thing.rb", "module Thing; end\n")
    autoload :Namespace, "/virtual/namespace"
    autoload :Thing, File.expand_path("thing.rb")
    run = ->(&b) { ARGV.first == "plain" ? b.call : Weft.run { Fiber.schedule(&b) } }
    run.call do
      p Namespace.class, Thing.class, require("English")
    rescue LoadError => e
      p e.class
    end
    p $seen
  RUBY

  def test_a_require_wrapped_after_weft_is_loaded_runs_in_fibers
    Dir.mktmpdir do |dir|
      ref, st = child("ARGV.replace(%w[plain]); #{WRAPPED_REQUIRE_PROGRAM}", dir: dir)
      assert st.success?, ref
      assert_equal %(Module\nModule\ntrue\n["namespace", "thing.rb", "English"]\n), ref, "the reference (no weft)"
      out, st = child(WRAPPED_REQUIRE_PROGRAM, dir: dir)
      assert st.success?, out
      assert_equal ref, out
    end
  end

  def test_exclusive_runs_no_other_fiber_while_it_waits
    order = []
    weft do |s|
      Fiber.schedule { 3.times { |i| order << [:other, i]; sleep 0.001 } }
      Fiber.schedule do
        s.exclusive do
          order << :in
          sleep 0.01 # the other fiber's timers come due meanwhile
          r, w = IO.pipe
          Thread.new { sleep 0.005; w.write("x") }
          order << [:read, r.read(1)]
          order << :out
        end
      end
    end
    i = order.index(:in)
    assert_equal [:in, [:read, "x"], :out], order[i, 3], order.inspect
    assert_equal 3, order.count { |e| e.is_a?(Array) && e[0] == :other }
  end

  def test_exclusive_lets_others_run_when_only_they_can_end_the_wait
    q = Thread::Queue.new
    got = nil
    weft do |s|
      Fiber.schedule { s.exclusive { got = q.pop } }
      Fiber.schedule { q << :from_another_fiber }
    end
    assert_equal :from_another_fiber, got
  end

  # Kernel.require and Kernel.load, called on Kernel (Rails 6.1's classic
  # autoloader loads every file with `Kernel.load path`), are methods of
  # their own. A file that defines its module, then waits (a sleep, a file
  # read) before defining the module's methods: another fiber that
  # requires it or looks it up meanwhile must find it whole. A second
  # require waits for the first; a load has no such lock, and on Ruby 3.1
  # (where weft runs every load under Scheduler#exclusive) Kernel.load ran
  # without it: the other fiber found the module without its method (a
  # Rails 6.1 app's first concurrent requests: 500s, NoMethodError).
  def test_kernel_require_and_load_called_on_kernel_are_whole_to_other_fibers
    Dir.mktmpdir do |dir|
      calls = { require: :require, load: (:load if RUBY_VERSION < "3.2") }.compact
      calls.each do |call, method|
        name = "HalfDefined#{call.capitalize}"
        path = File.join(dir, "#{call}_half.rb")
        File.write(path, "module #{name}\n  sleep 0.01\n  def self.k = 42\nend\n")
        seen = nil
        weft do
          Fiber.schedule { Kernel.public_send(method, path) }
          Fiber.schedule do
            Kernel.require(path) if call == :require
            seen = Object.const_defined?(name) && Object.const_get(name).respond_to?(:k) ? :whole : :half
          end
        end
        assert_equal :whole, seen, "Kernel.#{method}"
      end
    end
  end

  # A fiber-per-connection server whose first requests die (an app that
  # raises, as one hit by a missing constant does): every later request is
  # answered, and once idle the process sleeps.
  SERVER_PROGRAM = <<~'RUBY'
    require "weft"; require "socket"
    $LOAD_PATH.unshift(Dir.pwd)
    autoload :SlowLib, File.join(Dir.pwd, "slowlib.rb")
    server = TCPServer.new("127.0.0.1", 0)
    $stdout.puts server.addr[1]; $stdout.flush
    answer = lambda do |c, body|
      c.write("HTTP/1.1 200 OK\r\nContent-Length: #{body.bytesize}\r\n\r\n#{body}")
    end
    Weft.run(report_on_exception: false) do
      loop do
        c = server.accept
        Fiber.schedule do
          while (head = c.gets("\r\n\r\n"))
            path = head[/\AGET (\S+)/, 1]
            case path
            when "/boom" then raise NameError, "uninitialized constant Missing"
            when "/cpu" then answer.(c, Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID).to_s)
            when "/quit" then answer.(c, "bye"); c.close; exit!(0)
            else answer.(c, SlowLib::Inner::VALUE.to_s)
            end
          end
        ensure
          c.close unless c.closed?
        end
      end
    end
  RUBY

  def get(port, path)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 30, read_timeout: 30) { |h| h.get(path).body }
  end

  def test_server_keeps_serving_and_idles_after_request_fibers_die
    Dir.mktmpdir do |dir|
      write_library(dir)
      File.write(File.join(dir, "server.rb"), SERVER_PROGRAM)
      IO.popen([*ruby_command("server.rb", life: 300), chdir: dir, err: File::NULL]) do |io|
        port = Integer(io.gets)
        answers = Queue.new
        # The first requests at once: half die in the app, half wait for
        # the autoload that one of them starts.
        20.times.map do |i|
          Thread.new do
            answers << (i.even? ? get(port, "/") : (begin; get(port, "/boom"); rescue EOFError, Errno::ECONNRESET; :died; end))
          end
        end.each(&:join)
        firsts = Array.new(answers.size) { answers.pop }.tally
        assert_equal({ "42" => 10, :died => 10 }, firsts)
        50.times { assert_equal "42", get(port, "/") }
        cpu0 = Float(get(port, "/cpu"))
        sleep 1
        cpu1 = Float(get(port, "/cpu"))
        # A loop that spins uses the whole second; a sleeping one, almost
        # none of it (two requests and a few timer wake-ups).
        assert_operator cpu1 - cpu0, :<, 0.5, "the idle server used #{cpu1 - cpu0}s of CPU in 1s"
        assert_equal "bye", get(port, "/quit")
      ensure
        stop_child(io.pid)
      end
    end
  end

  # Buffered output (sync = false, as $stdout is when piped) from several
  # fibers to a pipe that fills up before its reader starts.
  def pipe_writers(mode)
    r, w = IO.pipe
    w.sync = false
    reader = Thread.new { sleep 0.2; r.read }
    body = ->(i) { 50.times { w.write("#{i}" * 429 + "\n") } }
    if mode == :threads
      4.times.map { |i| Thread.new { body.(i) } }.each(&:join)
      150.times.map { Thread.new { w.puts("y" * 500) } }.each(&:join)
    else
      weft do
        4.times { |i| Fiber.schedule { body.(i) } }
        150.times { Fiber.schedule { w.puts("y" * 500) } }
      end
    end
    w.close
    data = reader.value
    r.close
    data
  end

  def test_buffered_writes_from_several_fibers_to_a_full_pipe
    ref = pipe_writers(:threads)
    got = pipe_writers(:weft)
    # Every byte arrives, as with threads. (Threads are only the reference
    # for the count: on Ruby 3.1 their puts may split a line between its
    # text and its newline, and a few runs in ten moved bytes between two
    # writers' lines.)
    assert_equal 4 * 50 * 430 + 150 * 501, ref.bytesize
    assert_equal ref.bytesize, got.bytesize
    # Under weft each line arrives whole.
    lines = got.lines.tally
    assert_equal 150, lines["y" * 500 + "\n"]
    4.times { |i| assert_equal 50, lines["#{i}" * 429 + "\n"] }
  end

  def enumerate_socket_lines
    a, b = UNIXSocket.pair
    writer = Thread.new { 3.times { |i| sleep 0.02; a.puts "line #{i}" }; a.close }
    got = []
    e = Enumerator.new { |y| while (l = b.gets); y << l.chomp; end }
    yield -> { loop { got << e.next } }
    writer.join
    b.close
    got
  end

  def test_enumerator_next_reading_a_socket
    ref = enumerate_socket_lines { |run| run.() }
    assert_equal ["line 0", "line 1", "line 2"], ref
    got = enumerate_socket_lines { |run| weft { Fiber.schedule { run.() } } }
    assert_equal ref, got
    got = enumerate_socket_lines { |run| weft { run.() } }
    assert_equal ref, got
  end

  FILE_STRESS = <<~'RUBY'
    require "weft"; require "tmpdir"
    rounds = Integer(ARGV[0])
    rng = Random.new(Integer(ARGV[1]))
    Dir.mktmpdir do |dir|
      big = File.join(dir, "big")
      rounds.times do |round|
        size = rng.rand(1..4 * 1024 * 1024)
        data = rng.bytes(size)
        File.binwrite(big, data)
        lines = File.join(dir, "lines")
        File.write(lines, Array.new(rng.rand(1..30_000)) { |i| "line #{i}\n" }.join)
        nlines = File.foreach(lines).count
        out = File.join(dir, "out#{round}")
        pw = File.join(dir, "pw")
        chunk = rng.rand(1..200_000)
        pieces = rng.rand(1..16)
        File.binwrite(pw, "\0" * (pieces * chunk))
        off = rng.rand(0...size)
        len = rng.rand(1..size - off)
        res = {}
        Weft.run do
          Fiber.schedule { res[:binread] = File.binread(big) == data }
          Fiber.schedule do
            File.open(big, "rb") do |f|
              buf = +""
              step = rng.rand(1..1_000_000)
              while (c = f.read(step)); buf << c; end
              res[:chunked] = buf == data
            end
          end
          Fiber.schedule { File.open(big, "rb") { |f| res[:pread] = f.pread(len, off) == data[off, len] } }
          Fiber.schedule { File.binwrite(out, data); res[:binwrite] = File.binread(out) == data }
          Fiber.schedule do
            File.open(pw, "r+b") do |f|
              Array.new(pieces) { |i| Weft.spawn { f.pwrite(i.chr * chunk, i * chunk) } }.each(&:wait)
            end
            res[:pwrite] = File.binread(pw) == Array.new(pieces) { |i| i.chr * chunk }.join
          end
          Fiber.schedule { n = 0; File.foreach(lines) { n += 1 }; res[:each_line] = n == nlines }
        end
        bad = res.reject { |_, v| v }.keys
        abort "round #{round}: wrong #{bad} (#{res.size} of 6 done)" unless res.size == 6 && bad.empty?
        File.unlink(out)
      end
    end
    puts "ok"
  RUBY

  # Ruby 3.3 and 3.4's IO#pwrite called the io_pwrite hook without the
  # GVL: the fibers that waited in it then ran Ruby code without it, and
  # the process hung later in the VM's thread scheduler.
  def test_many_rounds_of_mixed_file_operations
    3.times do |seed|
      out, st = child("ARGV.replace(%w[8 #{seed}]); #{FILE_STRESS}")
      assert st.success?, "seed #{seed}: #{out}"
      assert_equal "ok\n", out
    end
  end

  # IO#pwrite and IO#pread from fibers give what they give without a
  # scheduler: the byte count, the bytes at the offsets, the errors, and a
  # whole large pread (the scheduler moves files in pieces).
  def test_pwrite_and_pread_as_without_a_scheduler
    probe = lambda do
      out = []
      Dir.mktmpdir do |d|
        path = File.join(d, "f")
        File.binwrite(path, "")
        File.open(path, "r+b") do |f|
          out << f.pwrite("hello", 3) << f.pwrite(12_345, 10) << f.pwrite("", 0)
          out << f.pwrite("x" * 300_000, 100)
          out << (begin; f.pwrite("a", -1); rescue SystemCallError => e; e.class; end)
          big = Random.new(7).bytes(3 * 1024 * 1024 + 12_345)
          out << f.pwrite(big, 400_000)
          out << (f.pread(big.bytesize, 400_000) == big)
          out << f.pread(10, 0).bytes
          out << (begin; f.pread(1, -1); rescue SystemCallError => e; e.class; end)
        end
        out << File.binread(path).bytesize
        File.open(path, "rb") { |f| out << (begin; f.pwrite("a", 0); rescue IOError => e; e.message; end) }
        f = File.open(path, "r+b")
        f.close
        out << (begin; f.pwrite("a", 0); rescue IOError => e; e.message; end)
        _r, w = IO.pipe
        out << (begin; w.pwrite("a", 0); rescue SystemCallError => e; e.class; end)
      end
      out
    end
    ref = probe.call
    got = nil
    weft { Fiber.schedule { got = probe.call } }
    assert_equal ref, got
  end

  # Several processes logging to one file they inherited (a server's
  # workers with stderr redirected to a file, not appended): every line
  # arrives, as it does with write(2) from plain Ruby. A ring WRITE at the
  # file position would read and store the shared position without the
  # kernel's lock, and lines written at the same moment overwrite each
  # other.
  SHARED_LOG = <<~'RUBY'
    require "weft"
    path, procs, fibers, lines = ARGV[0], *ARGV[1, 3].map { Integer(_1) }
    weft = ARGV[4] == "weft"
    File.open(path, "w") do |log|
      log.sync = true
      pids = Array.new(procs) do |p|
        fork do
          body = ->(f) { lines.times { |i| log.write(format("p%02d f%02d line %06d\n", p, f, i)) } }
          if weft
            Weft.run { fibers.times { |f| Fiber.schedule { body.(f) } } }
          else
            fibers.times.map { |f| Thread.new { body.(f) } }.each(&:join)
          end
          exit!(0)
        end
      end
      pids.each { Process.wait(_1) }
    end
    all = File.readlines(path)
    puts [all.size, all.uniq.size, all.all? { _1.match?(/\Ap\d\d f\d\d line \d{6}\n\z/) }].inspect
  RUBY

  def test_processes_sharing_a_log_file_lose_no_line
    Dir.mktmpdir do |dir|
      path = File.join(dir, "log")
      args = [path, 3, 4, 3000]
      ref, st = child("ARGV.replace(%w[#{args.join(" ")} threads]); #{SHARED_LOG}")
      assert st.success?, ref
      assert_equal "[36000, 36000, true]\n", ref
      got, st = child("ARGV.replace(%w[#{args.join(" ")} weft]); #{SHARED_LOG}")
      assert st.success?, got
      assert_equal ref, got
    end
  end

  # A blocking pipe (a FIFO opened with File.open, a shell's pipe on
  # stdout) written and read by two workers at once. Writable means room
  # for PIPE_BUF bytes: a larger write(2) waited in the kernel for the
  # reader with the GVL held, and the reader was a fiber of the same
  # thread, so the process hung.
  BLOCKING_PIPE = <<~'RUBY'
    require "weft"
    require "tmpdir"
    Dir.mktmpdir do |dir|
      path = File.join(dir, "fifo")
      File.mkfifo(path)
      w = File.open(path, "rb+") # neither open waits: each end has a peer
      r = File.open(path, "rb")
      data = Random.new(5).bytes(300_000)
      got = Thread::Queue.new
      work = [-> { got << [:wrote, w.write(data)]; w.close }, -> { got << [:read, r.read == data] }]
      run_jobs(work)
      r.close
      p Array.new(got.size) { got.pop }.sort
    end
  RUBY

  # What each program below starts with: run_jobs(jobs) runs every lambda
  # on a thread of its own (ARGV "threads") or in a fiber of one Weft.run,
  # and returns once all have ended.
  JOBS_PRELUDE = <<~'RUBY'
    def run_jobs(jobs)
      if ARGV.first == "threads"
        jobs.map { |job| Thread.new(&job) }.each(&:join)
      else
        Weft.run { jobs.each { |job| Fiber.schedule(&job) } }
      end
    end
  RUBY

  # Run +program+ on threads (ARGV "threads": the reference, which must
  # print +expected+) and in fibers, each after JOBS_PRELUDE: both succeed
  # and print the same.
  def assert_fibers_print_what_threads_print(program, expected, guard: 40)
    ref, st = child("ARGV.replace(%w[threads])\n#{JOBS_PRELUDE}#{program}", guard: guard)
    assert st.success?, ref
    assert_equal expected, ref
    got, st = child("#{JOBS_PRELUDE}#{program}", guard: guard)
    assert st.success?, got
    assert_equal ref, got
  end

  def test_big_writes_to_a_blocking_pipe_read_by_another_fiber
    assert_fibers_print_what_threads_print(BLOCKING_PIPE, "[[:read, true], [:wrote, 300000]]\n")
  end

  # Opening a FIFO waits in open(2) until its other end is opened, and
  # Ruby has no hook for open: a fiber that opened one first held the
  # whole thread, so the fiber that would open the other end never ran.
  # IO.foreach, IO.copy_stream with a path and IO.sysopen did so after
  # File.open, IO.read and the like no longer did.
  FIFO_OPENS = <<~'RUBY'
    require "weft"
    require "tmpdir"
    require "timeout"
    Dir.mktmpdir do |dir|
      path = File.join(dir, "fifo")
      File.mkfifo(path)
      got = Thread::Queue.new
      rounds = [
        [-> { File.open(path, "rb") { |f| got << [:open, f.read.size] } },
         -> { File.open(path, "wb") { |f| f.write("x" * 100_000) } }],
        [-> { got << [:read, File.read(path)] }, -> { File.write(path, "abc") }],
        [-> { got << [:readlines, IO.readlines(path)] }, -> { open(path, "w") { |f| f.puts "a", "b" } }],
        [-> { got << [:foreach, File.foreach(path, chomp: true).to_a] }, -> { File.write(path, "c\nd\n") }],
        [-> { got << [:copy_stream, IO.copy_stream(path, File::NULL)] }, -> { File.write(path, "e" * 70_000) }],
        [-> { io = IO.new(IO.sysopen(path)); got << [:sysopen, io.read]; io.close }, -> { File.write(path, "f") }],
        [-> { got << [:timeout, (Timeout.timeout(0.01) { File.open(path) } rescue $!.class)] }],
      ]
      rounds.each do |jobs|
        run_jobs(jobs)
      end
      p Array.new(got.size) { got.pop }
    end
  RUBY

  def test_fifos_opened_by_two_fibers
    assert_fibers_print_what_threads_print(
      FIFO_OPENS,
      "[[:open, 100000], [:read, \"abc\"], [:readlines, [\"a\\n\", \"b\\n\"]], [:foreach, [\"c\", \"d\"]], " \
      "[:copy_stream, 70000], [:sysopen, \"f\"], [:timeout, Timeout::Error]]\n"
    )
  end

  # A wait with a timeout that passes: Mutex#sleep returns nil,
  # ConditionVariable#wait returns nil and Monitor's wait returns false on
  # a thread; one that is woken returns the seconds slept (true for
  # Monitor). Ruby's Mutex#sleep ignores what the scheduler's kernel_sleep
  # returns, and every timed-out wait in a fiber looked woken.
  TIMED_WAITS = <<~'RUBY'
    require "weft"
    require "monitor"
    got = Thread::Queue.new
    m = Thread::Mutex.new
    cv = Thread::ConditionVariable.new
    mon = Monitor.new
    cond = mon.new_cond
    woken = Thread::Mutex.new
    wcv = Thread::ConditionVariable.new
    wmon = Monitor.new
    wcond = wmon.new_cond
    waiting = [] # added to with the lock held, so a waiter seen here waits
    jobs = [
      -> { m.synchronize { got << [:cv, cv.wait(m, 0.02).inspect, m.owned?] } },
      -> { m.synchronize { got << [:sleep, m.sleep(Rational(1, 50)).inspect, m.owned?] } },
      -> { mon.synchronize { got << [:monitor, cond.wait(0.02), mon.mon_owned?] } },
      -> { woken.synchronize { waiting << :cv; got << [:cv_woken, wcv.wait(woken, 1000).class] } },
      -> { sleep 0.001 until woken.synchronize { waiting.include?(:cv).tap { |w| wcv.signal if w } } },
      -> { wmon.synchronize { waiting << :mon; got << [:monitor_woken, wcond.wait(1000)] } },
      -> { sleep 0.001 until wmon.synchronize { waiting.include?(:mon).tap { |w| wcond.signal if w } } },
    ]
    run_jobs(jobs)
    p Array.new(got.size) { got.pop }.sort
  RUBY

  def test_timed_waits_that_time_out_return_what_they_return_on_threads
    assert_fibers_print_what_threads_print(
      TIMED_WAITS,
      "[[:cv, \"nil\", true], [:cv_woken, Integer], [:monitor, false, true], " \
      "[:monitor_woken, true], [:sleep, \"nil\", true]]\n"
    )
  end

  # IO#syswrite to a full pipe waits for the reader on a thread (Ruby >=
  # 3.3); in a fiber it raised Errno::EAGAIN, as write_nonblock does, and
  # the reader then waited forever for the rest.
  SYSWRITE_FULL_PIPE = <<~'RUBY'
    require "weft"
    got = Thread::Queue.new
    r, w = IO.pipe
    jobs = [
      -> { n = 0; 40.times { n += w.syswrite("x" * 65_536) }; w.close; got << [:wrote, n] },
      -> { n = 0; while (s = r.read(4096)); n += s.size; end; got << [:read, n] },
    ]
    run_jobs(jobs)
    wrote, read = Array.new(got.size) { got.pop }.sort.map(&:last)
    p [read == wrote, read.positive?]
  RUBY

  def test_syswrite_to_a_full_pipe_waits_as_on_threads
    skip "Ruby 3.1's IO#syswrite raises Errno::EAGAIN on threads too" if RUBY_VERSION < "3.3"
    assert_fibers_print_what_threads_print(SYSWRITE_FULL_PIPE, "[true, true]\n")
  end

  # File#flock(LOCK_EX) on a file another worker has locked: on a thread
  # it waits while the holder goes on and unlocks; a fiber waited in
  # flock(2) with the whole thread, the holder (a fiber of that thread)
  # never ran again, and the process hung.
  FLOCK_CONTENDED = <<~'RUBY'
    require "weft"
    require "tmpdir"
    Dir.mktmpdir do |dir|
      path = File.join(dir, "lock")
      File.write(path, "")
      held = Thread::Queue.new
      trying = Thread::Queue.new
      got = Thread::Queue.new
      jobs = [
        -> { File.open(path, "a") { |f| f.flock(File::LOCK_EX); held << 1; trying.pop; f.puts "a"; f.flock(File::LOCK_UN) } },
        -> { held.pop; File.open(path, "a") { |f| trying << 1; got << f.flock(File::LOCK_EX); f.puts "b" } },
      ]
      run_jobs(jobs)
      p [got.pop, File.read(path).lines.sort]
    end
  RUBY

  def test_flock_on_a_file_another_fiber_has_locked_waits_as_on_threads
    assert_fibers_print_what_threads_print(FLOCK_CONTENDED, "[0, [\"a\\n\", \"b\\n\"]]\n")
  end

  # Process.wait with no pid (any child) waits on a helper thread. A
  # timeout around it left that thread in waitpid, where it reaped the
  # next child to exit: the child's own Process.wait raised Errno::ECHILD,
  # where on a thread the interrupted wait reaps nothing.
  WAIT_ANY_TIMED_OUT = <<~'RUBY'
    require "weft"
    require "timeout"
    rd, wr = IO.pipe
    long = spawn("cat", in: rd, out: File::NULL) # lives until wr is closed
    rd.close
    got = []
    job = lambda do
      3.times do |i|
        begin
          Timeout.timeout(0.05) { Process.wait }
          got << :not_timed_out
        rescue Timeout::Error
          got << :timed_out
        end
        pid = spawn("sh", "-c", "exit #{i}")
        got << [:own, Process.wait(pid) == pid, $?.exitstatus]
      end
      wr.close
      got << [:long, Process.wait(long) == long]
    rescue SystemCallError => e
      got << e.class
    end
    run_jobs([job])
    p got
  RUBY

  def test_a_timed_out_wait_for_any_child_reaps_no_later_child
    assert_fibers_print_what_threads_print(
      WAIT_ANY_TIMED_OUT,
      "[:timed_out, [:own, true, 0], :timed_out, [:own, true, 1], " \
      ":timed_out, [:own, true, 2], [:long, true]]\n"
    )
  end

  # A worker that waits for another by looping on Thread.pass, as code
  # written for threads does: Thread.pass calls no scheduler hook, so the
  # fiber spun forever and the one that would end its loop never ran.
  PASS_UNTIL_DONE = <<~'RUBY'
    require "weft"
    done = false
    got = Thread::Queue.new
    jobs = [
      -> { n = 0; (Thread.pass; n += 1) until done; got << [:passed, Thread.pass.nil?] },
      -> { sleep 0.001; done = true; got << :done },
    ]
    run_jobs(jobs)
    p Array.new(got.size) { got.pop }.sort_by(&:to_s)
  RUBY

  def test_thread_pass_lets_the_other_fibers_run
    assert_fibers_print_what_threads_print(PASS_UNTIL_DONE, "[[:passed, true], :done]\n", guard: 20)
  end

  # Loops that poll with a zero timeout until another worker acts: on
  # threads the other one runs meanwhile; in a fiber a zero timeout
  # answered at once without letting any other fiber run, and the loops
  # spun forever.
  POLL_UNTIL_DONE = <<~'RUBY'
    require "weft"
    require "io/wait"
    r, w = IO.pipe
    done = false
    got = Thread::Queue.new
    jobs = [
      -> { IO.select(nil, nil, nil, 0) until done; got << :select },
      -> { r.wait_readable(0) until done; got << :wait_readable },
      -> { nil until IO.select([r], nil, nil, 0); got << [:select_r, r.read(1)] },
      -> { sleep 0.001; done = true; w.write("x") },
    ]
    run_jobs(jobs)
    p Array.new(got.size) { got.pop }.sort_by(&:to_s)
  RUBY

  def test_polling_with_a_zero_timeout_lets_the_other_fibers_run
    assert_fibers_print_what_threads_print(
      POLL_UNTIL_DONE, "[[:select_r, \"x\"], :select, :wait_readable]\n", guard: 20
    )
  end

  # Thread.abort_on_exception = true, for a program that a worker's death
  # must end: on threads the worker's exception is raised in the main
  # thread at once and the other workers go with the program. The
  # scheduler ignored the flag: the exception came only once every other
  # fiber had ended, and one that waited for the dead one never did.
  ABORT_ON_EXCEPTION = <<~'RUBY'
    require "weft"
    Thread.abort_on_exception = true
    Thread.report_on_exception = false
    finished = []
    never = Thread::Queue.new
    jobs = [
      -> { raise ArgumentError, "worker died" },
      -> { never.pop; finished << :waiter },
    ]
    begin
      run_jobs(jobs)
      p :no_error
    rescue ArgumentError => e
      p [e.message, finished]
    end
  RUBY

  def test_abort_on_exception_ends_the_program_as_on_threads
    assert_fibers_print_what_threads_print(ABORT_ON_EXCEPTION, "[\"worker died\", []]\n", guard: 20)
  end

  # Process.wait2(pid, Process::WUNTRACED) for a child that another
  # worker stops: on a thread it returns the stopped status. The fiber
  # waited on the child's pidfd, which becomes readable when the child
  # exits, not when it stops: the wait went on while the child stayed
  # stopped, for good.
  WAIT_FOR_A_STOP = <<~'RUBY'
    require "weft"
    got = []
    pid = spawn("sleep", "30")
    jobs = [
      -> { _, st = Process.wait2(pid, Process::WUNTRACED); got << [:stopped, st.stopped?, st.stopsig] },
      -> { sleep 0.05; Process.kill(:STOP, pid) },
    ]
    run_jobs(jobs)
    Process.kill(:KILL, pid)
    Process.kill(:CONT, pid)
    _, st = Process.wait2(pid)
    p got + [[:killed, st.termsig]]
  RUBY

  def test_a_wait_for_a_child_s_stop_returns_as_on_threads
    assert_fibers_print_what_threads_print(
      WAIT_FOR_A_STOP, "[[:stopped, true, #{Signal.list["STOP"]}], [:killed, #{Signal.list["KILL"]}]]\n", guard: 20
    )
  end

  # A reverse lookup (an address to a name) whose nameserver does not
  # answer: on threads the others run while it waits for the resolver.
  # getnameinfo(3) has no scheduler hook, and the fiber waited in it with
  # the whole thread, so no other fiber ran until the resolver gave up.
  # The program runs in a mount namespace of its own (unshare), whose
  # /etc/resolv.conf names a nameserver on 127.0.0.1 that never answers.
  SLOW_REVERSE_LOOKUP = <<~'RUBY'
    require "weft"
    require "socket"
    silent = UDPSocket.new
    begin
      silent.bind("127.0.0.1", 53)
    rescue SystemCallError
      puts "port 53 busy"
      exit
    end
    ticks = 0
    done = false
    got = Thread::Queue.new
    jobs = [
      lambda do
        before = ticks
        result = begin
          Socket.getnameinfo(["AF_INET", 80, "10.1.2.3"]).class
        rescue SocketError => e
          e.class
        end
        got << [:others_ran_meanwhile, ticks > before]
        got << [:result, result]
        done = true
      end,
      -> { (sleep 0.01; ticks += 1) until done },
    ]
    run_jobs(jobs)
    p Array.new(got.size) { got.pop }.sort_by(&:to_s)
  RUBY

  def test_a_reverse_lookup_lets_the_other_fibers_run
    skip "needs root for a mount namespace" unless Process.uid.zero?
    Dir.mktmpdir do |dir|
      resolv = File.join(dir, "resolv.conf")
      File.write(resolv, "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
      probe = IO.popen(["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && echo ok', resolv,
                        err: File::NULL], &:read) rescue ""
      skip "no mount namespace here (unshare -m)" unless probe == "ok\n"
      outputs = %w[threads weft].map do |mode|
        code = "ARGV.replace(%w[#{mode}])\n#{JOBS_PRELUDE}#{SLOW_REVERSE_LOOKUP}"
        cmd = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv,
               *ruby_command("-e", code, life: 60)]
        out = IO.popen([*cmd, err: %i[child out]], &:read)
        skip "port 53 is taken here" if out == "port 53 busy\n"
        out
      end
      assert_match(/\[:others_ran_meanwhile, true\]/, outputs[0], "the reference (threads)")
      assert_equal outputs[0], outputs[1]
    end
  end
end
