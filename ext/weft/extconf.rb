# extconf.rb — builds weft's Ruby extension (weft/weft.so).
#
# weft's reactor layer (every source in src/reactor/) is compiled into the
# extension itself, so no system install of libweft is needed. Works from
# the repository and from an unpacked gem (which ships src/ and include/
# next to ext/).
require "mkmf"

root = File.expand_path("../..", __dir__)
# The reactor layer's folder, and only it: a file of the extension that
# included a higher layer's header would not compile.
src = File.join(root, "src", "reactor")
inc = File.join(root, "include")
abort "weft: core sources not found in #{src}" unless File.exist?(File.join(src, "reactor.c"))

have_header("ruby/io/buffer.h") or abort "weft: needs Ruby >= 3.1 (IO::Buffer)"
have_func("rb_io_descriptor", "ruby/io.h") or abort "weft: needs rb_io_descriptor (Ruby >= 3.1)"

have_func("rb_io_timeout", "ruby/io.h") # Ruby >= 3.2: IO#timeout
have_func("rb_io_path", "ruby/io.h") # Ruby >= 3.2
have_func("rb_postponed_job_preregister", "ruby/debug.h") # Ruby >= 3.3

$INCFLAGS << " -I#{src} -I#{inc}"
$CFLAGS << " -std=gnu11 -fvisibility=hidden -Wall -Wno-unused-parameter"
$CPPFLAGS << " -D_GNU_SOURCE"
$LDFLAGS << " -lpthread"
# The io_uring backend when liburing is there (as the Makefile decides).
unless have_header("liburing.h") && have_library("uring", "io_uring_queue_init")
  $CPPFLAGS << " -DWEFT_NO_URING"
end

# Only the reactor layer (src/reactor/, see its README.md): the reactor,
# its timers and backends, and the worker pool. The extension drives the
# reactor with Ruby fibers; weft's own fibers, stacks, context switch and
# fiber-blocking I/O are not part of it (scripts/test.d/layers.sh checks
# that nothing here needs them).
core = Dir[File.join(src, "*.c")].sort

# Weft::HTTP (http.c, for Weft::Server) binds contrib/http's request-head
# parser, compiled in from there.
http = File.join(root, "contrib", "http")
abort "weft: #{http}/http_parse.c missing" unless File.exist?(File.join(http, "http_parse.c"))
$INCFLAGS << " -I#{http}"

# The extension's own files (ext/weft/*.c: the scheduler, one file per
# concern, and http.c), then the parser and the reactor layer.
ext = Dir[File.join(__dir__, "*.c")].map { |f| File.basename(f) }.sort

$VPATH << src << http
$srcs = ext + ["http_parse.c"] + core.map { |f| File.basename(f) }
$objs = $srcs.map { |f| f.sub(/\.c\z/, ".#{$OBJEXT}") }

create_makefile("weft/weft")

# mkmf's objects depend on their .c only: make every object depend on
# weft's headers (struct layouts are shared by all of them) and on this
# Makefile (its flags), so an incremental build never mixes layouts.
headers = (Dir[File.join(src, "*.h")] + Dir[File.join(inc, "*.h")] + Dir[File.join(__dir__, "*.h")] +
           [File.join(http, "http_parse.h")]).sort
File.open("Makefile", "a") do |mk|
  mk.puts
  mk.puts "$(OBJS): #{headers.join(" ")} Makefile"
end

