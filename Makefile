# hf3fs-metad build.
#
#   make            build build/hf3fs-metad, build/hf3fs_metad_redis.so (the Redis
#                   module) and, mk/*.mk, the client library and CLI
#   make run        install build deps if missing, build, start on the defaults
#   make test       install deps if missing, build normal, ASan+UBSan and TSan, run
#                   every suite against the first two and the thread-heavy ones
#                   against TSan, several at once (tests/run-all.sh)
#   make check      the quick loop: the unit tests and the embedded engine's
#                   suites against the normal build
#   make test-normal / make test-asan   every suite against one build only
#   make tsan       the server under ThreadSanitizer in build/tsan (mk/tsan.mk)
#   make lint       clang-tidy (.clang-tidy) and cppcheck over src/, lib/, cli/, and
#                   the include arrows of src/ (tests/check-layers.sh)
#                   (mk/lint.mk); any finding fails
#   make format-check  the C files clang-format (.clang-format) would change
#   make test-partitions  every nemesis of tests/integration/test_partitions.py
#                  (root: a Redis Cluster and two front ends in network
#                  namespaces, links cut under load; make test runs two and a
#                  short random run)
#   make deb       the Debian package build/deb/hf3fs-metad_<VERSION>_<arch>.deb,
#                  checked by lintian; make test-deb also runs what it holds (mk/deb.mk)
#
# JOBS suites run at once (default 6: most of them sleep); the output of each
# goes to build/test-logs/ and is printed when it fails.
#
# Objects of a variant live in build/<variant>/ (build/ itself for the normal one).

CC       ?= gcc
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
WARN     := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
            -Wmissing-prototypes -Wformat=2 -Wvla -Wno-unused-parameter \
            -Wconversion -Wsign-conversion
CFLAGS   ?= -O2 -g
# The release: the file VERSION is the one place it is kept (a semantic
# version; docs/operations.md, "Versions and upgrades"). Every compile gets
# it as HF3FS_VERSION; debian/changelog must name the same (mk/deb.mk checks).
HF3FS_VERSION := $(shell cat VERSION)
ifeq ($(shell printf '%s' '$(HF3FS_VERSION)' | grep -Ex '[0-9]+\.[0-9]+\.[0-9]+'),)
$(error VERSION holds '$(HF3FS_VERSION)', not a version MAJOR.MINOR.PATCH)
endif
VERSION_DEF := -DHF3FS_VERSION='"$(HF3FS_VERSION)"'
# CPPFLAGS and LDFLAGS: empty here; dpkg-buildflags' (hardening) in `make deb`.
override CFLAGS += -std=c11 -D_GNU_SOURCE -Isrc -Iinclude $(WARN) -pthread $(VERSION_DEF) $(CPPFLAGS)
LDLIBS   := -lhttp_parser -lyajl -lhiredis -pthread

# Debian packages the build and the tests need (checked by `make deps`).
BUILD_DEPS := gcc make libhttp-parser-dev libyajl-dev libhiredis-dev pkg-config
TEST_DEPS  := python3 python3-requests python3-yaml curl prometheus clang libclang-rt-14-dev faketime gdb \
              redis-server redis-sentinel redis-tools clang-tidy clang-format cppcheck valgrind \
              iproute2 nftables chromium-headless-shell

SERVER_MAIN := src/server/main.c
MODULE_MAIN := $(wildcard src/module/*.c)
# src/FOLDER/*.c and, for an engine in a folder of its own, src/FOLDER/ENGINE/*.c
LIB_SRC     := $(filter-out $(SERVER_MAIN) $(MODULE_MAIN),$(wildcard src/*/*.c src/*/*/*.c))
LIB_OBJ     := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test check test-normal test-upgrade test-asan asan deps clean lint tsan format-check \
        test-partitions

JOBS     ?= 6
# Compiler processes at once for the builds that make test and make check start.
BUILD_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ASAN_DIR := build/asan
# HF_ASSERTS: the invariants written as HF_ASSERT (util/hf_assert.h) are checked.
ASAN_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
               -DHF_ASSERTS

all: $(BUILD)/hf3fs-metad

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

-include $(LIB_OBJ:.o=.d) $(BUILD)/obj/$(SERVER_MAIN:.c=.d)

$(BUILD)/libhfmetad.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/hf3fs-metad: $(BUILD)/obj/$(SERVER_MAIN:.c=.o) $(BUILD)/libhfmetad.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/check.h tests/unit/checks.h tests/unit/randops.h tests/engines.h $(BUILD)/libhfmetad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DHF_ASSERTS -Itests/unit -Itests -o $@ $< $(UNIT_EXTRA) $(BUILD)/libhfmetad.a $(LDLIBS)

# Disk faults beneath the log (tests/fault/fault.h): linked into test_wal,
# and preloaded into the server by the integration tests that fill the disk.
FAULT_SRC := tests/fault/fault.c tests/fault/fault.h
$(BUILD)/tests/test_wal: $(FAULT_SRC)
$(BUILD)/tests/test_wal: UNIT_EXTRA := tests/fault/fault.c
$(BUILD)/tests/libhf3fs_fault.so: $(FAULT_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ tests/fault/fault.c -ldl

units: $(UNIT_BIN) $(BUILD)/tests/libhf3fs_fault.so

deps:
	@./tests/ensure-deps.sh $(BUILD_DEPS) $(TEST_DEPS)

run: deps
	$(MAKE) all
	./$(BUILD)/hf3fs-metad $(ARGS)

# The sanitized build: its own objects in build/asan/. The test runner sets
# ASAN_OPTIONS and UBSAN_OPTIONS for it (a leak at exit fails the suite).
asan:
	$(MAKE) -j$(BUILD_JOBS) BUILD=$(ASAN_DIR) CC=gcc CFLAGS="$(ASAN_CFLAGS)" all units

# One run of the suites over both builds: the suites that do not depend on the
# build (fuzz corpora, bench smoke) run once.
test: deps
	$(MAKE) -j$(BUILD_JOBS) all units
	$(MAKE) asan
	$(MAKE) tsan
	./tests/run-all.sh -j $(JOBS) $(BUILD) $(ASAN_DIR) $(TSAN_DIR)

check: deps
	$(MAKE) -j$(BUILD_JOBS) all units
	./tests/run-all.sh -j $(JOBS) --check $(BUILD)

# The upgrades from the previous release in full (tests/integration/
# test_upgrade.py; prev_release.py builds that release once under build/prev/).
test-upgrade: deps
	$(MAKE) -j$(BUILD_JOBS) all
	HF3FS_UPGRADE_FULL=1 /usr/bin/python3 tests/integration/test_upgrade.py

test-partitions: deps
	$(MAKE) -j$(BUILD_JOBS) all
	$(PYTHON) tests/integration/test_partitions.py

test-normal: all units
	./tests/run-all.sh -j $(JOBS) $(BUILD)

test-asan: asan
	./tests/run-all.sh -j $(JOBS) $(ASAN_DIR)

clean:
	rm -rf build

# The C files that clang-format would change under .clang-format (the style
# the code has), with how many lines each; fails if any. Never rewrites one:
# `clang-format -i FILE` does, for a file of one's own change.
CLANG_FORMAT ?= clang-format
FORMAT_FILES  = $(shell git ls-files '*.c' '*.h' 2>/dev/null || find src lib cli include tests fuzz bench -name '*.[ch]')

# One clang-format over every file first (a second); only when it finds a
# line to change, each file again, to say which and how many.
format-check:
	@if $(CLANG_FORMAT) --style=file --dry-run --Werror $(FORMAT_FILES) 2>/dev/null; then \
	    echo "format-check: 0 lines would change"; exit 0; fi; \
	n=0; for f in $(FORMAT_FILES); do \
	    c=$$($(CLANG_FORMAT) --style=file "$$f" | diff -U0 "$$f" - | grep -c '^-[^-]'); \
	    if [ "$$c" -gt 0 ]; then echo "$$f: $$c lines"; n=$$((n + c)); fi; \
	done; echo "format-check: $$n lines would change"; [ $$n -eq 0 ]

# Further components (client library, CLI, benchmarks, fuzzers) add their
# rules in mk/*.mk; they may append test suites to EXTRA_TESTS.
-include mk/*.mk

# A new VERSION rebuilds what prints it.
$(BUILD)/obj/src/api/version.o $(BUILD)/obj/src/server/main.o $(BUILD)/cli-obj/main.o: VERSION
