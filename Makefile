# tokenwire: `make demo` and `make test` each set up .venv by themselves on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_DIR := demo_out

.PHONY: venv demo test bench lint clean samples browser

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,report,tokens]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(BIN)/tokenwire ingest sample_traces -o $(DEMO_DIR)/dataset
	$(BIN)/tokenwire sql $(DEMO_DIR)/dataset \
	  "SELECT rank, op, count(*) AS calls, sum(bytes) AS bytes FROM collectives GROUP BY ALL ORDER BY rank, op"

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Headless Chromium for the report's browser tests (tests/report): installed from Debian's
# packages where missing and we are root; elsewhere those tests skip and say why.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && apt-get install -y -qq chromium chromium-driver; \
	fi

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests benchmarks
	$(BIN)/ruff format --check pipeline tests benchmarks

samples: $(STAMP)
	$(BIN)/python -m pipeline.synth sample_traces --gzip

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
