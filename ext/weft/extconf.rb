# extconf.rb — builds weft's Ruby extension (weft/weft.so).
#
# weft's core sources (src/*.c and the context switch for this CPU) are
# compiled into the extension itself, so no system install of libweft is
# needed. Works from the repository and from an unpacked gem (which ships
# src/ and include/ next to ext/).
require "mkmf"

root = File.expand_path("../..", __dir__)
src = File.join(root, "src")
inc = File.join(root, "include")
abort "weft: core sources not found in #{src}" unless File.exist?(File.join(src, "reactor.c"))

have_header("ruby/io/buffer.h") or abort "weft: needs Ruby >= 3.1 (IO::Buffer)"
have_func("rb_io_descriptor", "ruby/io.h") or abort "weft: needs rb_io_descriptor (Ruby >= 3.1)"

have_func("rb_io_timeout", "ruby/io.h") # Ruby >= 3.2: IO#timeout

$INCFLAGS << " -I#{src} -I#{inc}"
$CFLAGS << " -std=gnu11 -fvisibility=hidden -Wall -Wno-unused-parameter"
$CPPFLAGS << " -D_GNU_SOURCE"
$LDFLAGS << " -lpthread"
# The io_uring backend when liburing is there (as the Makefile decides).
unless have_header("liburing.h") && have_library("uring", "io_uring_queue_init")
  $CPPFLAGS << " -DWEFT_NO_URING"
end

core = Dir[File.join(src, "*.c")].sort + [File.join(src, "arch", "ctx.c")]
asm = case RbConfig::CONFIG["host_cpu"]
      when /x86_64|amd64/ then "ctx_x86_64.S"
      when /aarch64|arm64/ then "ctx_aarch64.S"
      end
$CPPFLAGS << " -DWEFT_CTX_UCONTEXT=1" unless asm

$VPATH << src << File.join(src, "arch")
$srcs = ["scheduler.c"] + core.map { |f| File.basename(f) }
$objs = $srcs.map { |f| f.sub(/\.c\z/, ".#{$OBJEXT}") }
$objs << asm.sub(/\.S\z/, ".#{$OBJEXT}") if asm

create_makefile("weft/weft")

# mkmf's objects depend on their .c only: make every object depend on
# weft's headers (struct layouts are shared by all of them) and on this
# Makefile (its flags), so an incremental build never mixes layouts.
headers = (Dir[File.join(src, "**", "*.h")] + Dir[File.join(inc, "*.h")]).sort
File.open("Makefile", "a") do |mk|
  mk.puts
  mk.puts "$(OBJS): #{headers.join(" ")} Makefile"
end

if asm
  File.open("Makefile", "a") do |mk|
    mk.puts
    mk.puts "#{asm.sub(/\.S\z/, ".#{$OBJEXT}")}: #{File.join(src, "arch", asm)}"
    mk.puts "\t$(ECHO) assembling $(<)"
    mk.puts "\t$(Q) $(CC) $(INCFLAGS) $(CPPFLAGS) $(CFLAGS) -c $< -o $@"
  end
end
