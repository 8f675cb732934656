# weft — build, test, demo, bench.
#
#   make                 libweft.a, libweft.so, examples (build/)
#   make test            every test, every backend, plus ASan+UBSan, the
#                        ucontext fallback and aarch64 under qemu-user
#   make demo            the showcase
#   make bench           benchmarks against peers
#   make install PREFIX=/usr/local   (make uninstall PREFIX=... undoes it)
#
# Variables: CC, BUILD (output dir), SAN (e.g. address,undefined),
# CTX=ucontext (force the portable context switch), OPT.

# `make` alone builds everything the README says (the probes' rule below
# would otherwise be the first, and so the default, goal).
.DEFAULT_GOAL := all

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
OPT     ?= -O2
SAN     ?=
CTX     ?=

WARN    := -Wall -Wextra -Werror -Wshadow
CFLAGS_ALL := -std=gnu11 $(OPT) -g $(WARN) -fPIC -Iinclude -D_GNU_SOURCE $(CFLAGS)
ifneq ($(SAN),)
CFLAGS_ALL += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS_SAN := -fsanitize=$(SAN)
endif
ifeq ($(CTX),ucontext)
CFLAGS_ALL += -DWEFT_CTX_UCONTEXT=1
endif
# Header dependencies: every compile writes a .d file next to its output.
CFLAGS_ALL += -MMD -MP
LDLIBS  := -lpthread -lm

# ---- probes, cached: what this compiler can link (liburing, libpq,
# OpenSSL 3), whether doxygen and Ruby's headers are here. They run once per
# build directory and compiler, and again when packages change (dpkg's
# status file) — not on every invocation.
RUBY    ?= ruby
CONFIG_MK := $(BUILD)/config.mk
-include $(CONFIG_MK)
.PHONY: FORCE
$(CONFIG_MK): $(wildcard /var/lib/dpkg/status) scripts/probe.sh $(if $(filter-out $(CC),$(CONFIG_CC)),FORCE)
	@mkdir -p $(dir $@)
	@CC="$(CC)" RUBY="$(RUBY)" bash scripts/probe.sh > $@.tmp && mv $@.tmp $@
# io_uring backend when liburing links for this compiler (a cross compiler
# may see the build machine's header without the target's library).
ifeq ($(HAVE_URING),1)
LDLIBS  += -luring
else
CFLAGS_ALL += -DWEFT_NO_URING
endif
# Backtraces of parked fibers (weft_dump, src/fiber/dump.c). Where
# libunwind's header is (x86-64), they follow the DWARF call-frame
# information every object carries, through code built with or without
# frame pointers, and libunwind is loaded only when a dump is taken: the
# library keeps no frame pointers (they cost a channel round trip 6%).
# Elsewhere the walk follows frame pointers, so the library keeps them.
ifeq ($(HAVE_UNWIND),1)
CFLAGS_ALL += -DWEFT_HAVE_UNWIND=1
else
CFLAGS_ALL += -fno-omit-frame-pointer
endif

# ---- the library's layers: one folder of src/ each (src/README.md), bottom
# up. A layer's files are whatever its folder holds; each compiles with
# include/, its own folder and the folders of the layers below it on the
# include path, so a header of a higher layer cannot be included (the
# compiler does not find it). arch/ (the context switch) compiles as part
# of the fiber layer; tls/ is libweft_tls, above all of them.
LAYERS := reactor fiber sync io net proc
layer_inc :=
$(foreach l,$(LAYERS),$(eval layer_inc += -Isrc/$(l))$(eval INC_$(l) := $(layer_inc)))
INC_arch := $(INC_fiber)
# Every layer's headers, for programs that may use internal symbols (the
# tests and benchmarks).
INC_ALL := $(INC_$(lastword $(LAYERS)))
$(foreach d,$(filter-out arch tls $(LAYERS),$(notdir $(patsubst %/,%,$(wildcard src/*/)))),\
  $(error src/$(d)/ is in no layer: add it to LAYERS in the Makefile))

LIB_SRC := $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c)) $(wildcard src/arch/*.c)
# The reactor layer (src/reactor/): it builds and links on its own
# (libweft_reactor.a; the Ruby extension compiles exactly these), which
# $(BUILD)/tests/layer_reactor and scripts/test.d/layers.sh check.
REACTOR_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(wildcard src/reactor/*.c))
LIB_ASM := $(wildcard src/arch/*.S)
LIB_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC)) \
           $(patsubst src/%.S,$(BUILD)/obj/%.o,$(LIB_ASM))

EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
TESTS    := $(patsubst test/c/%.c,$(BUILD)/tests/%,$(wildcard test/c/t_*.c test/c/tool_*.c))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c)) \
            $(patsubst bench/%.cpp,$(BUILD)/bench/%,$(wildcard bench/boost_*.cpp))

# PostgreSQL (connection pool part): contrib/pg/wpg.c is libpq glue for
# examples/pool_demo and the database tests test/c/t_pg*.c, which build into
# $(BUILD)/tests-pg/ (scripts/test.d/pg.sh runs them against a throw-away
# server). Only where libpq links for this compiler (not the aarch64 cross
# build); libweft itself never needs libpq.
PG_TESTS := $(patsubst test/c/%.c,$(BUILD)/tests-pg/%,$(wildcard test/c/t_pg*.c))
TESTS    := $(filter-out $(BUILD)/tests/t_pg%,$(TESTS))
ifneq ($(HAVE_PQ),1)
EXAMPLES := $(filter-out $(BUILD)/examples/pool_demo,$(EXAMPLES))
PG_TESTS :=
endif

# TLS: libweft_tls, a layer above libweft built from src/tls/
# (not src/, which the Ruby extension compiles: libweft never needs
# OpenSSL), the TLS tests test/c/t_tls*.c (in $(BUILD)/tests/, so every
# stage of scripts/test.sh runs them) and the programs that speak TLS.
# Only where OpenSSL 3 links for this compiler (Debian: libssl-dev; not
# the aarch64 cross build).
TLS_OBJ      := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(wildcard src/tls/*.c))
TLS_LDLIBS   := -lssl -lcrypto
TLS_TESTS    := $(filter $(BUILD)/tests/t_tls%,$(TESTS))
TLS_EXAMPLES := $(BUILD)/examples/https_get
ifneq ($(HAVE_SSL),1)
TESTS    := $(filter-out $(TLS_TESTS),$(TESTS))
EXAMPLES := $(filter-out $(TLS_EXAMPLES),$(EXAMPLES))
TLS_TESTS :=
endif

.PHONY: all lib examples tests test test-fast demo bench benches install uninstall clean deps
all: lib examples tests ruby

lib: $(BUILD)/libweft.a $(BUILD)/libweft.so $(BUILD)/libweft_reactor.a
examples: $(EXAMPLES)
tests: $(TESTS) $(BUILD)/tests/layer_reactor

# The include path of the layer a file's folder names (INC_reactor...).
$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(INC_$(firstword $(subst /, ,$*))) -c $< -o $@

$(BUILD)/obj/%.o: src/%.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(INC_$(firstword $(subst /, ,$*))) -c $< -o $@

# A variable's value, for scripts that build from the same lists
# (make -s print-LIB_SRC, print-INC_ALL: scripts/test.d/fuzz_ops.sh).
print-%:
	@echo $($*)

# Compile $(PROBE) as a file of layer $(LAYER) would be, no output
# (scripts/test.d/layers.sh: a reactor file that includes a fiber header
# does not compile).
.PHONY: probe-layer
probe-layer:
	$(CC) $(filter-out -MMD -MP,$(CFLAGS_ALL)) $(INC_$(LAYER)) -c $(PROBE) -o /dev/null

$(BUILD)/libweft.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libweft_reactor.a: $(REACTOR_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# Linked with the reactor layer alone: it fails to link if that layer
# calls up into the fiber layer.
$(BUILD)/tests/layer_reactor: test/c/layer_reactor.c $(BUILD)/libweft_reactor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(INC_reactor) $< -o $@ $(BUILD)/libweft_reactor.a $(LDFLAGS_SAN) $(LDLIBS)

$(BUILD)/libweft.so: $(LIB_OBJ) src/weft.map
	$(CC) -shared -Wl,--version-script=src/weft.map -Wl,-soname,libweft.so.0 \
	    $(LDFLAGS_SAN) -o $@ $(LIB_OBJ) $(LDLIBS)

# -rdynamic: the programs' own functions get names in weft_dump()'s
# backtraces and stall reports (dladdr reads the dynamic symbol table).
$(BUILD)/examples/%: examples/%.c $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -rdynamic -Icontrib $(filter %.c,$^) -o $@ $(BUILD)/libweft.a $(LDFLAGS_SAN) $(LDLIBS)

# The HTTP examples and tests share the parser and server in contrib/http/
# (extra .c prerequisites are compiled in by the rules above and below).
HTTP_SRC := contrib/http/http_parse.c contrib/http/http_srv.c
HTTP_HDR := $(wildcard contrib/http/*.h)
$(BUILD)/examples/http_server: $(HTTP_SRC) $(HTTP_HDR)
$(BUILD)/examples/http_load: contrib/http/http_parse.c $(HTTP_HDR)
$(filter $(BUILD)/tests/t_http%,$(TESTS)): $(HTTP_SRC) $(HTTP_HDR)

$(BUILD)/tests/%: test/c/%.c test/c/harness.h $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -rdynamic $(INC_ALL) -Icontrib $(filter %.c,$^) -o $@ $(BUILD)/libweft.a $(LDFLAGS_SAN) $(LDLIBS)

# Database glue and tests (see PG_TESTS above).
$(BUILD)/examples/pool_demo: contrib/pg/wpg.c contrib/pg/wpg.h
$(BUILD)/examples/pool_demo: CFLAGS_ALL += $(PG_CFLAGS)
$(BUILD)/examples/pool_demo: LDLIBS += -lpq
tests: $(PG_TESTS)
$(BUILD)/tests-pg/%: test/c/%.c test/c/harness.h contrib/pg/wpg.c contrib/pg/wpg.h $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(PG_CFLAGS) $(INC_ALL) -Icontrib $(filter %.c,$^) -o $@ $(BUILD)/libweft.a $(LDFLAGS_SAN) $(LDLIBS) -lpq

# TLS library, tests and programs (see HAVE_SSL above). http_server serves
# HTTPS when built here (contrib/http/http_tls.c, -DWEFT_HTTP_TLS).
ifeq ($(HAVE_SSL),1)
lib: $(BUILD)/libweft_tls.a $(BUILD)/libweft_tls.so
$(TLS_OBJ): src/tls/tls_internal.h include/weft_tls.h
$(BUILD)/libweft_tls.a: $(TLS_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^
$(BUILD)/libweft_tls.so: $(TLS_OBJ) src/tls/weft_tls.map $(BUILD)/libweft.so
	$(CC) -shared -Wl,--version-script=src/tls/weft_tls.map -Wl,-soname,libweft_tls.so.0 \
	    $(LDFLAGS_SAN) -o $@ $(TLS_OBJ) $(BUILD)/libweft.so $(TLS_LDLIBS)
$(TLS_TESTS): $(BUILD)/tests/%: test/c/%.c test/c/harness.h test/c/tls_util.h $(BUILD)/libweft_tls.a $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(INC_ALL) -Icontrib $(filter %.c,$^) -o $@ $(BUILD)/libweft_tls.a $(BUILD)/libweft.a $(LDFLAGS_SAN) $(LDLIBS) $(TLS_LDLIBS)
TLS_EXAMPLES += $(BUILD)/examples/http_server
$(BUILD)/examples/http_server: contrib/http/http_tls.c contrib/http/http_tls.h
$(BUILD)/tests/t_tls_http: $(HTTP_SRC) $(HTTP_HDR) contrib/http/http_tls.c contrib/http/http_tls.h
$(TLS_EXAMPLES): $(BUILD)/examples/%: examples/%.c $(BUILD)/libweft_tls.a $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -DWEFT_HTTP_TLS=1 -Icontrib $(filter %.c,$^) -o $@ $(BUILD)/libweft_tls.a $(BUILD)/libweft.a $(LDFLAGS_SAN) $(LDLIBS) $(TLS_LDLIBS)
endif

# The whole suite: installs what it needs, then every configuration.
test:
	@bash scripts/deps.sh test
	@bash scripts/test.sh

# Plain build, every backend, no sanitizers: the quick loop while coding.
test-fast: tests
	@bash test/c/run.sh $(BUILD)/tests plain

demo:
	@bash scripts/deps.sh demo
	@$(MAKE) --no-print-directory all
	@bash scripts/demo.sh

# Benchmark programs (bench/*.c, bench/boost_*.cpp): the optimised build
# without sanitizers, linked with libweft.a (they may use internal symbols).
benches: $(BENCHES)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(INC_ALL) $< -o $@ $(BUILD)/libweft.a $(LDFLAGS_SAN) $(LDLIBS)

$(BUILD)/bench/boost_%: bench/boost_%.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++14 $(OPT) -g -Wall -Wextra -Werror $< -o $@ -lboost_fiber -lboost_context

bench:
	@bash scripts/deps.sh bench
	@$(MAKE) --no-print-directory all benches
	@bash bench/run.sh

# install: the library, header, weft.pc and (when doxygen is there) the man
# pages. Into a prefix the dynamic linker searches (/usr, /usr/local) and
# with DESTDIR empty it also runs ldconfig, so that programs linked with
# -lweft find libweft.so.0 at once; for any other prefix link with
# -Wl,-rpath,$(PREFIX)/lib (README.md). uninstall removes exactly those files.
LDCONFIG_PREFIXES := /usr /usr/local
INSTALLED := lib/libweft.a lib/libweft.so.0 lib/libweft.so include/weft.h \
             lib/pkgconfig/weft.pc
install: lib
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(BUILD)/libweft.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libweft.so $(DESTDIR)$(PREFIX)/lib/libweft.so.0
	ln -sf libweft.so.0 $(DESTDIR)$(PREFIX)/lib/libweft.so
	install -m 644 include/weft.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS_PRIVATE@|$(LDLIBS)|' weft.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/weft.pc
	$(if $(DESTDIR),,$(if $(filter $(patsubst %/,%,$(PREFIX)),$(LDCONFIG_PREFIXES)),ldconfig))

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED))
	rm -f $(DESTDIR)$(PREFIX)/share/man/man3/weft.3 $(DESTDIR)$(PREFIX)/share/man/man3/weft_*.3
	$(if $(DESTDIR),,$(if $(filter $(patsubst %/,%,$(PREFIX)),$(LDCONFIG_PREFIXES)),ldconfig))

# TLS: libweft_tls, weft_tls.h and weft-tls.pc beside weft.pc.
ifeq ($(HAVE_SSL),1)
INSTALLED += lib/libweft_tls.a lib/libweft_tls.so.0 lib/libweft_tls.so \
             include/weft_tls.h lib/pkgconfig/weft-tls.pc
install: install-tls
endif
.PHONY: install-tls
install-tls: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/weft_tls.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' weft-tls.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/weft-tls.pc
	install -m 644 $(BUILD)/libweft_tls.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libweft_tls.so $(DESTDIR)$(PREFIX)/lib/libweft_tls.so.0
	ln -sf libweft_tls.so.0 $(DESTDIR)$(PREFIX)/lib/libweft_tls.so

# ---- doc: the reference, from include/weft.h's comments alone: doxygen
# (docs/Doxyfile) writes $(BUILD)/doc/html and XML, and scripts/mkman.py
# turns the XML into man pages, one per function and type plus weft.3
# ($(BUILD)/doc/man/man3). Needs doxygen and python3 (Debian packages of
# the same names); without them make install skips the man pages, saying so.
DOC := $(BUILD)/doc
WEFT_VERSION = $(shell awk '/^\#define WEFT_VERSION_(MAJOR|MINOR|PATCH) / { v = v (v == "" ? "" : ".") $$3 } END { print v }' include/weft.h)
.PHONY: doc install-man
doc: $(DOC)/man/man3/weft.3
$(DOC)/man/man3/weft.3: include/weft.h docs/Doxyfile scripts/mkman.py
	@command -v doxygen >/dev/null && command -v python3 >/dev/null || \
	  { echo "weft: make doc needs doxygen and python3 (apt-get install doxygen python3)" >&2; exit 1; }
	@rm -rf $(DOC)/html $(DOC)/xml $(DOC)/man && mkdir -p $(DOC)
	WEFT_DOC_OUT=$(DOC) WEFT_DOC_VERSION=$(WEFT_VERSION) doxygen docs/Doxyfile
	python3 scripts/mkman.py $(DOC)/xml include/weft.h $(DOC)/man/man3

ifeq ($(HAVE_DOC),1)
install: install-man
install-man: doc
	install -d $(DESTDIR)$(PREFIX)/share/man/man3
	install -m 644 $(DOC)/man/man3/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/
else
install: install-man
install-man:
	@echo "weft: doxygen or python3 missing (apt-get install doxygen python3): man pages not installed"
endif

# ---- ruby: the extension (ext/weft) built into lib/weft/weft.so, so that
# `ruby -I lib -r weft` works from the repository root. Skipped (with a
# note) when Ruby's headers are not installed (Debian: ruby-dev).
RUBY_EXT_DEPS := ext/weft/extconf.rb $(wildcard ext/weft/*.c) contrib/http/http_parse.c contrib/http/http_parse.h $(wildcard src/reactor/*) include/weft.h
RUBY_EXT_DEPS += $(wildcard ext/weft/*.h)
.PHONY: ruby test-ruby test-ruby-latest
ifeq ($(RUBY_HDRS),1)
ruby: lib/weft/weft.so
else
ruby:
	@echo "weft: Ruby headers missing (apt-get install ruby-dev): Ruby extension not built"
endif
lib/weft/weft.so: $(RUBY_EXT_DEPS)
	@mkdir -p build/ruby
	@# extconf again when it or the set of files changed (directory mtimes)
	cd build/ruby && { for d in ../../src/reactor ../../include ../../ext/weft ../../ext/weft/extconf.rb; do \
	    [ Makefile -nt $$d ] || rm -f Makefile; done; [ -f Makefile ] || $(RUBY) $(CURDIR)/ext/weft/extconf.rb >/dev/null; } \
	  && $(MAKE) --no-print-directory -s V=0 >/dev/null
	@# A new file renamed into place, never a copy over the old one: a Ruby
	@# process that has the extension loaded keeps its mapping of the old
	@# file; copying over it rewrites the pages it runs ([BUG] Bus Error or
	@# Segmentation fault in whatever extension code runs next).
	cp build/ruby/weft.so $@.tmp.$$$$ && mv -f $@.tmp.$$$$ $@
test-ruby: ruby
	@bash scripts/test.d/ruby.sh
# Ruby 3.3 and 3.4 from Debian's source packages (trixie, experimental),
# built once into a cache outside the repository, then the same suite on
# each.
test-ruby-latest:
	@bash scripts/build-ruby-latest.sh 3.3
	@bash scripts/build-ruby-latest.sh 3.4
	@for r in $$(bash scripts/build-ruby-latest.sh --print-rubies); do WEFT_RUBY=$$r bash scripts/test.d/ruby.sh || exit 1; done

clean:
	rm -rf build lib/weft/weft.so

# The header dependencies the compiler wrote (see -MMD above).
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
