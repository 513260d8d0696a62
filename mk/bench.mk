# Benchmarks: the suite (bench/run, `make bench`), its load
# generator, and the core memory figures. See docs/performance.md.
#
#   make bench          build, start servers, print the tables (minutes): bench/run,
#                       then bench/read_cost.py (what persistence and tenants cost a reader), then
#                       bench-stripes and bench-fleet
#   make bench-stripes  what stripes cost and buy (~2.5 min): bench/cluster_bench.py
#                       --stripes 1,16, MIGRATE of a 1M-key namespace's values
#                       (bench/migrate_cost.py), the trace replay through Redis at 16
#                       stripes (bench/replay --stripes 16)
#   make bench-fleet    one Redis against a cluster of 3 primaries as a fleet uses them
#                       (~6 min): bench/fleet_bench.py
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
	$(MAKE) bench-stripes
	$(MAKE) bench-fleet

bench-fleet: $(BUILD)/hf3fs-metad $(MODULE_SO) $(BENCH_BIN)
	/usr/bin/python3 bench/fleet_bench.py

bench-stripes: $(BUILD)/hf3fs-metad $(MODULE_SO) $(BENCH_BIN)
	/usr/bin/python3 bench/cluster_bench.py --stripes 1,16 --primaries 3 --keys 60000 --runs 3 --seconds 5
	/usr/bin/python3 bench/migrate_cost.py --stripes 1,16 --runs 3
	/usr/bin/python3 bench/replay --server $(BUILD)/hf3fs-metad --stripes 16

bench-smoke:
	./bench/run --smoke
	/usr/bin/python3 bench/fleet_bench.py --smoke

bench-memory: $(BUILD)/bench/core_memory
	./$(BUILD)/bench/core_memory 1000000

.PHONY: bench bench-smoke bench-memory bench-tools bench-stripes bench-fleet
