# tokenwire: `make demo` and `make test` each set up .venv by themselves on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_DIR := demo_out

.PHONY: venv demo test test-quick bench lint clean samples browser

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,tokens]'
	# Holistic Trace Analysis's trace parser reads tokenwire's exported timeline in
	# tests/export/test_parsers.py; the parser needs only pandas, psutil and pyyaml (in dev),
	# not the notebook packages (jupyterlab, plotly) HTA itself asks for.
	$(BIN)/python -m pip install --quiet --no-deps holistictraceanalysis==0.5.0
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(BIN)/tokenwire ingest sample_traces/rank* sample_traces/job.nsys.sqlite -o $(DEMO_DIR)/dataset --job sample
	$(BIN)/tokenwire link $(DEMO_DIR)/dataset --config sample_traces/job.yaml
	$(BIN)/tokenwire sql $(DEMO_DIR)/dataset \
	  "SELECT parallel_dim, op, phase, sum(calls) AS calls, sum(bytes) AS observed_bytes, \
	          sum(predicted_bytes) AS predicted_bytes, round(sum(bytes) / any_value(tokens)) AS bytes_per_token \
	   FROM token_wire WHERE step = (SELECT min(step) FROM token_wire) GROUP BY ALL ORDER BY ALL"
	$(BIN)/tokenwire report $(DEMO_DIR)/dataset --config sample_traces/job.yaml -o $(DEMO_DIR)/report.html
	$(BIN)/tokenwire export $(DEMO_DIR)/dataset -o $(DEMO_DIR)/timeline.json.gz --kernels
	for run in ddp fsdp; do \
	  $(BIN)/tokenwire ingest tests/data/cpu_gloo/$$run -o $(DEMO_DIR)/$$run --job $$run && \
	  $(BIN)/tokenwire link $(DEMO_DIR)/$$run --config tests/data/cpu_gloo/$$run/job.yaml || exit 1; \
	done
	$(BIN)/tokenwire diff $(DEMO_DIR)/ddp ddp fsdp --other $(DEMO_DIR)/fsdp --view predicted
	$(BIN)/tokenwire diff $(DEMO_DIR)/ddp ddp fsdp --other $(DEMO_DIR)/fsdp --html $(DEMO_DIR)/diff.html
	$(BIN)/python -m pipeline.journey --headline
	@echo "open $(DEMO_DIR)/report.html and $(DEMO_DIR)/diff.html; load $(DEMO_DIR)/timeline.json.gz in ui.perfetto.dev or chrome://tracing"

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

# The fast tests: every test but the real-trace ones (../shared/real_traces), the browser's,
# the wheel's and the benchmarks'; needs no Chromium and no traces beyond the repository's.
test-quick: $(STAMP)
	TOKENWIRE_REAL_TRACES= $(BIN)/python -m pytest -q -m "not slow" \
	  --ignore=tests/bench --ignore=tests/report/test_browser.py

# Headless Chromium for the report's browser tests (tests/report): installed from Debian's
# packages where missing and we are root; elsewhere those tests skip and say why.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) \
	  || echo "could not install chromium: the browser tests will be skipped" >&2; \
	fi

# ARGS=--quick for smaller inputs; installs the bench extra (HTA) on first use
bench: $(STAMP)
	$(BIN)/python -c "import hta.trace_analysis" 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[bench]' \
	  || echo "HTA could not be installed: the benchmark runs without it"
	$(BIN)/python -m benchmarks.run $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests benchmarks
	$(BIN)/ruff format --check pipeline tests benchmarks

samples: $(STAMP)
	$(BIN)/python -m pipeline.synth sample_traces --gzip
	$(BIN)/python -m pipeline.synth sample_traces --formats nccl,nsys

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
