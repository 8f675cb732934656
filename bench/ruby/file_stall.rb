# frozen_string_literal: true

# How long does reading a big regular file hold up everything else? A
# ticker wakes every millisecond while another task reads a 64 MiB file
# (from the page cache) with File.binread; the figure is the longest gap
# between two ticks, in milliseconds (1 ms = no stall at all).
#   ruby -I lib bench/ruby/file_stall.rb weft|async|threads [PATH] [MIB]
#     weft     ticker and reader are fibers under Weft::Scheduler
#     async    the same under Async 1.x (tasks)
#     threads  the same with two Threads, no scheduler
# The file is made (once) if missing; the reads are repeated 5 times in
# the process and the worst gap of all is printed.
mode = ARGV[0] || "weft"
path = ARGV[1] || "/tmp/weft-bench-64m"
mib = Integer(ARGV[2] || 64)
unless File.size?(path) == mib << 20
  File.open(path, "wb") { |f| mib.times { f.write(Random.new(1).bytes(1 << 20)) } }
end
File.binread(path) # into the page cache

clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
worst = 0.0
reader = -> { 5.times { File.binread(path) } }
ticker = lambda do |done|
  last = clock.call
  until done.call
    sleep 0.001
    now = clock.call
    worst = now - last if now - last > worst
    last = now
  end
end

case mode
when "threads"
  finished = false
  t = Thread.new { ticker.call(-> { finished }) }
  sleep 0.01
  reader.call
  finished = true
  t.join
when "async"
  require "async"
  Async do |task|
    finished = false
    task.async { ticker.call(-> { finished }) }
    task.async do
      sleep 0.01
      reader.call
      finished = true
    end
  end
else
  require "weft"
  Weft.run do
    finished = false
    Fiber.schedule { ticker.call(-> { finished }) }
    Fiber.schedule do
      sleep 0.01
      reader.call
      finished = true
    end
  end
end
printf("%.2f\n", worst * 1000)
