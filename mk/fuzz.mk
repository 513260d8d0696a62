# mk/fuzz.mk: the libFuzzer targets of fuzz/ (docs/robustness.md).
#
#   make fuzz-build          build every target into build/fuzz/
#   make fuzz                run each target for FUZZ_SECONDS (default 60), one
#                            after the other, from its seed corpus
#   make fuzz-TARGET         run one (fuzz-json, fuzz-request, fuzz-sequence, ...)
#
# Targets are always built with clang (FUZZ_CC), -fsanitize=fuzzer plus
# ASan and UBSan, into build/fuzz whatever BUILD is; `make units` builds them
# so that `make test` replays their corpora (tests/integration/test_fuzz_corpus.py).
#
# Seeds live in fuzz/corpus/TARGET/ (kept in git); what a run finds goes to
# build/fuzz/corpus/TARGET/ (merge the interesting part back with
# fuzz/merge-corpus.sh) and crashes to build/fuzz/crashes/.

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_ARGS    ?=
FUZZ_DIR     := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -Ifuzz $(WARN) -pthread $(VERSION_DEF) \
                -g -O1 -fno-omit-frame-pointer $(FUZZ_SAN)
FUZZ_TARGETS := $(patsubst fuzz/fuzz_%.c,%,$(filter-out fuzz/fuzz_common.c,$(wildcard fuzz/fuzz_*.c)))
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
# The server's sources without main, instrumented for coverage.
FUZZ_LIB_SRC := $(filter-out $(SERVER_MAIN),$(LIB_SRC))
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
# The client library (lib/), for fuzz_client: its own include paths.
FUZZ_CLIENT_OBJ := $(patsubst lib/%.c,$(FUZZ_DIR)/obj/lib/%.o,$(wildcard lib/*.c))
FUZZ_HELPERS := fuzz/fuzz_common.c
FUZZ_HELP_OBJ := $(FUZZ_HELPERS:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZ_MAX_LEN := 4096
# Per-target options: recovery logs what it finds as errors (close the target's stderr).
FUZZ_ARGS_wal_recover := -close_fd_mask=2

.PHONY: fuzz fuzz-build $(FUZZ_TARGETS:%=fuzz-%)

units: fuzz-build
fuzz-build: $(FUZZ_BINS)

# Fail early and clearly without clang or its libFuzzer runtime.
$(FUZZ_DIR)/.toolchain-ok:
	@mkdir -p $(dir $@)
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { \
	  echo "mk/fuzz.mk: '$(FUZZ_CC)' not found: the fuzz targets need clang with libFuzzer" \
	       "(Debian: apt-get install clang libclang-rt-14-dev; or make deps)" >&2; exit 1; }
	@printf '%s\n' 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);' \
	  'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; return (int)(n & 0); }' \
	  | $(FUZZ_CC) -x c -fsanitize=fuzzer -o $(FUZZ_DIR)/.toolchain-probe - || { \
	  echo "mk/fuzz.mk: $(FUZZ_CC) cannot link -fsanitize=fuzzer: the libFuzzer runtime is" \
	       "missing (Debian: apt-get install libclang-rt-14-dev)" >&2; exit 1; }
	@rm -f $(FUZZ_DIR)/.toolchain-probe
	@touch $@

# The server's sources and the client library are held to clang's warnings
# too, as errors: a va_list printer needs its format attribute for clang.
$(FUZZ_DIR)/obj/src/%.o: src/%.c | $(FUZZ_DIR)/.toolchain-ok
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/lib/%.o: lib/%.c | $(FUZZ_DIR)/.toolchain-ok
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(filter-out -Isrc,$(FUZZ_CFLAGS)) -iquote src -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/fuzz/%.o: fuzz/%.c | $(FUZZ_DIR)/.toolchain-ok
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Ilib -Itests -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_CLIENT_OBJ:.o=.d) $(FUZZ_HELP_OBJ:.o=.d) $(FUZZ_TARGETS:%=$(FUZZ_DIR)/obj/fuzz/fuzz_%.d)

$(FUZZ_DIR)/libfuzzmetad.a: $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_DIR)/libfuzzclient.a: $(FUZZ_CLIENT_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/fuzz/fuzz_%.o $(FUZZ_HELP_OBJ) $(FUZZ_DIR)/libfuzzmetad.a \
                    $(FUZZ_DIR)/libfuzzclient.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lhttp_parser -lyajl -lhiredis -pthread -lm

fuzz: $(FUZZ_TARGETS:%=fuzz-%)

# New inputs go to build/fuzz/corpus/TARGET (the first directory); the seeds
# in fuzz/corpus/TARGET are read, never written.
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(FUZZ_DIR)/fuzz_%
	@mkdir -p $(FUZZ_DIR)/corpus/$* $(FUZZ_DIR)/crashes
	./$(FUZZ_DIR)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAX_LEN) \
	  -dict=fuzz/fuzz.dict -artifact_prefix=$(FUZZ_DIR)/crashes/$*- -print_final_stats=1 \
	  $(FUZZ_ARGS_$*) $(FUZZ_ARGS) $(FUZZ_DIR)/corpus/$* fuzz/corpus/$*

