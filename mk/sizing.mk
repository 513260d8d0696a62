# mk/sizing.mk: the trace replay (bench/replay) and the figures of docs/sizing.md.
#
#   make replay    build, replay both shipped traces through the server with vLLM's
#                  calls at pools of 1, 5, 10, 20% (seconds); ARGS="..." passes flags
#                  to bench/replay (e.g. ARGS="--engine both --tp 4")
#   make sizing    also installs gnuplot if missing: regenerates docs/sizing.md's
#                  tables and docs/sizing.png (bench/sizing, about a minute)
#
# gnuplot is needed by `make sizing` only, not by the build or `make test`.

SIZING_DEPS := python3 gnuplot-nox

replay: $(BUILD)/hf3fs-metad
	$(PYTHON) bench/replay --server $(BUILD)/hf3fs-metad $(ARGS)

sizing: $(BUILD)/hf3fs-metad
	@./tests/ensure-deps.sh $(SIZING_DEPS)
	$(PYTHON) bench/sizing --server $(BUILD)/hf3fs-metad

.PHONY: replay sizing
