# hf3fs-metad build.
#
#   make            build build/hf3fs-metad and build/hf3fs_metad_redis.so
#   make run        install build deps if missing, build, start on the defaults
#   make test       install deps if missing, build normal and ASan+UBSan, run every test
#   make test-asan  the sanitized half only
#
# Objects of a variant live in build/<variant>/ (build/ itself for the normal one).

CC       ?= gcc
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
WARN     := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
            -Wmissing-prototypes -Wformat=2 -Wvla -Wno-unused-parameter
CFLAGS   ?= -O2 -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Isrc -Ibuild/gen -Iinclude $(WARN) -pthread
LDLIBS   := -lhttp_parser -lyajl -lhiredis -pthread

# Debian packages the build and the tests need (checked by `make deps`).
BUILD_DEPS := gcc make libhttp-parser-dev libyajl-dev libhiredis-dev pkg-config
TEST_DEPS  := python3 python3-requests python3-yaml curl prometheus clang libclang-rt-14-dev \
              redis-server redis-tools

SERVER_MAIN := src/server/main.c
MODULE_MAIN := src/module/module.c
LIB_SRC     := $(filter-out $(SERVER_MAIN) $(MODULE_MAIN),$(wildcard src/*/*.c))
LIB_OBJ     := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test test-normal test-asan deps clean

all: $(BUILD)/hf3fs-metad

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

-include $(LIB_OBJ:.o=.d) $(BUILD)/obj/$(SERVER_MAIN:.c=.d)

# The Redis engine's script (src/store/redis.lua) as a C string, shared by
# every build variant (and the fuzz build): build/gen/redis_lua.h.
REDIS_LUA_H := build/gen/redis_lua.h
$(REDIS_LUA_H): src/store/redis.lua
	@mkdir -p $(dir $@)
	{ echo '/* generated from src/store/redis.lua by the Makefile: do not edit */'; \
	  echo 'static const char redis_lua[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $<; \
	  echo '    ;'; } > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/src/store/redis.o: $(REDIS_LUA_H)

$(BUILD)/libhfmetad.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/hf3fs-metad: $(BUILD)/obj/$(SERVER_MAIN:.c=.o) $(BUILD)/libhfmetad.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/check.h tests/engines.h $(BUILD)/libhfmetad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -Itests -o $@ $< $(BUILD)/libhfmetad.a $(LDLIBS)

units: $(UNIT_BIN)

deps:
	@./tests/ensure-deps.sh $(BUILD_DEPS) $(TEST_DEPS)

run: deps
	$(MAKE) all
	./$(BUILD)/hf3fs-metad $(ARGS)

test: deps
	$(MAKE) test-normal
	$(MAKE) test-asan

test-normal: all units
	./tests/run-all.sh $(BUILD)

test-asan:
	$(MAKE) BUILD=build/asan CC=gcc \
	  CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	  all units
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ./tests/run-all.sh build/asan

clean:
	rm -rf build

# Further components (client library, CLI, benchmarks, fuzzers) add their
# rules in mk/*.mk; they may append test suites to EXTRA_TESTS.
-include mk/*.mk
