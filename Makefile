# Two commands are all the set-up there is: `make demo` and `make test` create .venv when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
STAMP := $(VENV)/.installed

.PHONY: install demo lint docs test test-fast bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing the pinned set into $(VENV) (torch first, CPU build)..."
	$(PIP) torch==2.13.0 -c constraints.txt
	$(PIP) -e ".[dev]" -c constraints.txt
	$(PIP) --no-deps ocatari -c constraints.txt
# The browser test (tests/e2e/test_inspect_browser.py) drives the system's Chromium: Playwright's own browser download
# is not possible everywhere. Debian's package where it is missing and apt-get runs as root; otherwise the test skips.
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } || \
		echo "no /usr/bin/chromium (apt-get install chromium as root): the browser test will skip"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rlfoundry train CartPole-v1:ppo

# One test worker per usable core (CPU affinity, cgroup quota); `make test WORKERS=0` runs them in one process.
CORES = $$($(PY) -c 'from rlfoundry.config.cores import usable_cores; print(usable_cores())')
# Lint and types (ruff: pyflakes, pycodestyle, import order, pyupgrade, bugbear, complexity ≤ 15; mypy on the
# package; settings in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or a page missing from the nav; the
# reference pages are generated from the code as it builds (docs/gen_pages.py). Output in site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --quiet

test: lint docs
	$(PY) -m pytest -q -n $(or $(WORKERS),$(CORES)) --dist loadgroup

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

$(VENV)/.bench: $(STAMP)
	$(PIP) -e ".[dev,bench]" -c constraints.txt
	@touch $@

bench: $(VENV)/.bench
	$(PY) benchmarks/ppo_cartpole_vs_sb3.py

clean:
	rm -rf $(VENV) runs .pytest_cache
