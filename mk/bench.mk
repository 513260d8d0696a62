# Benchmarks: the suite (bench/run, `make bench`), its load
# generator, and the core memory figures. See docs/performance.md.
#
#   make bench          build, start servers, print the tables (minutes): bench/run,
#                       then bench/read_cost.py (what persistence and tenants cost a reader)
#   make bench-smoke    the same in seconds, one run, tiny loads (no figures)
#   make bench-memory   core memory per entry (in-process, 1M entries)

BENCH_BIN := $(BUILD)/bench/core_memory $(BUILD)/bench/core_speed $(BUILD)/bench/loadgen

$(BUILD)/bench/core_memory: bench/core_memory.c bench/keys.h $(BUILD)/libhfmetad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libhfmetad.a $(LDLIBS)

$(BUILD)/bench/core_speed: bench/core_speed.c $(BUILD)/libhfmetad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libhfmetad.a $(LDLIBS)

$(BUILD)/bench/loadgen: bench/loadgen.c bench/keys.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -lm

bench-tools: $(BUILD)/hf3fs-metad $(BENCH_BIN)

bench:
	./bench/run
	/usr/bin/python3 bench/read_cost.py

bench-smoke:
	./bench/run --smoke

bench-memory: $(BUILD)/bench/core_memory
	./$(BUILD)/bench/core_memory 1000000

.PHONY: bench bench-smoke bench-memory bench-tools
