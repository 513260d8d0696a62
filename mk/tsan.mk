# mk/tsan.mk: the server under ThreadSanitizer, build/tsan/hf3fs-metad.
#
# The server's threads (the event loop, the log writer, the keeper, the Redis
# monitor) share the store; `make tsan` builds the server alone with
# -fsanitize=thread into build/tsan/, and tests/run_all.py runs the suites
# that load those threads at once (TSAN_SUITES there: concurrency, abuse,
# Redis, load) against it whenever build/tsan/hf3fs-metad exists, with
# TSAN_OPTIONS=halt_on_error=1: a report ends the server with status 66, and
# the harness fails a server that does not exit 0.
#
# gcc 12 with its libtsan (clang's -Wformat-nonliteral stops at api.c).
# tests/tsan.supp lists the reports known and filed, if any.

TSAN_DIR    := build/tsan
TSAN_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=thread

.PHONY: tsan

# The Redis suites load the module into a stock redis-server: the normal
# build's (an instrumented module would need an instrumented Redis).
tsan:
	$(MAKE) -j$(BUILD_JOBS) BUILD=$(TSAN_DIR) CC=gcc CFLAGS="$(TSAN_CFLAGS)" \
	    $(TSAN_DIR)/hf3fs-metad
	$(MAKE) -j$(BUILD_JOBS) $(BUILD)/hf3fs_metad_redis.so
