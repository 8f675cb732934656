#!/usr/bin/env bash
# probe.sh — what this machine and compiler can build with, as Makefile
# assignments on stdout. The Makefile caches the output in
# $(BUILD)/config.mk (once per build directory and compiler, again when
# packages change); nothing here is run on every make invocation.
# Environment: CC (the compiler), RUBY.
set -u
cc=${CC:-cc}
ruby=${RUBY:-ruby}
links() { printf '%b' "$1" | $cc -x c - -o /dev/null "${@:2}" >/dev/null 2>&1 && echo 1; }
echo "CONFIG_CC := $cc"
# io_uring backend when liburing links for this compiler (a cross compiler
# may see the build machine's header without the target's library).
echo "HAVE_URING := $(links '#include <liburing.h>\nint main(void){struct io_uring r;return io_uring_queue_init(1,&r,0);}\n' -luring)"
pg=$(pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
echo "PG_CFLAGS := $pg"
# shellcheck disable=SC2086
echo "HAVE_PQ := $(links '#include <libpq-fe.h>\nint main(void){return PQlibVersion()>0?0:1;}\n' $pg -lpq)"
echo "HAVE_SSL := $(links '#include <openssl/ssl.h>\nint main(void){return OPENSSL_VERSION_MAJOR>=3&&OPENSSL_init_ssl(0,0)?0:1;}\n' -lssl -lcrypto)"
# libunwind's header, for weft_dump's backtraces (the library loads
# libunwind.so.8 itself when a dump is taken: nothing to link). x86-64 only:
# dump.c builds the unwinder's context from the x86-64 switch's registers.
echo "HAVE_UNWIND := $(links '#include <libunwind.h>\n#ifndef __x86_64__\n#error x86-64 only\n#endif\nint main(void){return 0;}\n')"
echo "HAVE_DOC := $(command -v doxygen >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1 && echo 1)"
echo "RUBY_HDRS := $("$ruby" -rrbconfig -e 'print File.exist?(File.join(RbConfig::CONFIG["rubyhdrdir"].to_s, "ruby.h")) ? 1 : 0' 2>/dev/null)"
