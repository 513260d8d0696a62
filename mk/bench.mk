# Benchmarks (issue 4): programs under bench/ that print figures.
BENCH_BIN := $(BUILD)/bench/core_memory

$(BUILD)/bench/core_memory: bench/core_memory.c $(BUILD)/libhfmetad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libhfmetad.a $(LDLIBS)

bench-memory: $(BUILD)/bench/core_memory
	./$(BUILD)/bench/core_memory 1000000

.PHONY: bench-memory
