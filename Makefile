# Two entry points, each of which sets up a virtualenv on a fresh clone first:
#   make demo   -- the streaming enrichment demo on local Spark (no servers needed)
#   make test   -- ruff, mypy, the docs build, the whole pytest suite on PySpark 4.3, then the
#                  test matrix (what .ci/run calls); installs Chromium for the docs site's
#                  browser test (apt, as root) if missing
#   make test-matrix -- the Spark tests on every other supported PySpark line (noxfile.py)
#   make test-spark VERSION=3.5.7 -- the Spark tests on one PySpark release
#   make test-extras -- each extra's docs example in a virtualenv with only that extra
#   make docs   -- the documentation site (docs/, mkdocs.yml) into site/, warnings as errors
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-matrix test-extras test-spark lint docs browser bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,redis,postgres,adbc,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m examples demo

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m mypy

# --strict: a warning (a broken link, a docstring mkdocstrings cannot read) fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

# Two pytest-xdist workers: the suite waits on JVMs, servers and subprocesses as much as it
# computes. Each kind of Spark session stays on one worker (tests/conftest.py); `-n 0`
# runs everything in this process.
XDIST ?= -n 2 --dist loadgroup

test: lint docs browser
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-matrix

# tests/test_docs_site.py opens the built site in the system's headless Chromium (through
# chromedriver). Installed here when missing, where apt-get runs as root; elsewhere (or if
# the install fails) those tests skip, saying why, except under CI=true, where they fail.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium and chromium-driver (apt-get) for the docs site's browser test"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq chromium chromium-driver >/dev/null; } \
	  || echo "could not install them: the browser tests will skip (fail under CI=true)"; \
	else echo "no chromium/chromedriver, and no apt-get as root to install them:" \
	  "the browser tests will skip (fail under CI=true)"; fi

# The other supported PySpark lines, one nox session (and .nox/ virtualenv, made by uv)
# each: noxfile.py says what runs.
MATRIX ?= 3.5 4.0 4.1 4.2

test-matrix: $(STAMP)
	$(BIN)/nox -s $(addprefix spark-,$(MATRIX))

# Each extra with an example in docs/extras.md (noxfile.py: EXTRA_EXAMPLES).
EXTRAS ?= postgres adbc mysql redis delta iceberg

test-extras: $(STAMP)
	$(BIN)/nox -s $(addprefix extras-,$(EXTRAS))

test-spark: $(STAMP)
	test -n "$(VERSION)" || (echo "usage: make test-spark VERSION=3.5.7"; exit 2)
	PYSPARK_VERSION=$(VERSION) $(BIN)/nox -s spark-$(basename $(VERSION))

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .nox site .mypy_cache .ruff_cache .pytest_cache .hypothesis
