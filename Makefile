# Vigil: `make demo` runs it, `make test` tests it. Both set themselves up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

comma := ,

.PHONY: install demo test test-deps lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# celery-batches declares celery<5.7 (it predates 5.7); see pyproject.toml.
	$(PY) -m pip install -q --no-deps 'celery-batches==0.11'
	touch $(STAMP)

install: $(STAMP)

# The demo is a development run on 127.0.0.1 (static files served from static/, no
# collectstatic, the development SECRET_KEY), so it asks for debug explicitly: settings fail
# closed without it. DEMO_ARGS passes options through (e.g. DEMO_ARGS='--port 8001').
demo: install
	VIGIL_DEBUG=true $(PY) manage.py demo $(DEMO_ARGS)

# Chromium for the browser tests, Slurm for the scheduler tests and Prometheus / Alertmanager
# for deploy/prometheus come from Debian (never `playwright install`: it downloads). Without
# them those tests are skipped with the reason, except in CI (CI set), where `make test`
# requires them and their fixtures fail instead.
test-deps: install
	@if [ ! -x /usr/sbin/slurmctld ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing slurm-wlm (apt)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null) \
	      || echo "slurm-wlm could not be installed: Slurm tests will be skipped"; \
	  else echo "slurm-wlm not found and not root: Slurm tests will be skipped"; fi; \
	fi
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "chromium could not be installed: browser tests will be skipped"; \
	  else echo "chromium not found and not root: browser tests will be skipped"; fi; \
	fi
	@if ! command -v pdftoppm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing poppler-utils (apt: pdftoppm, for the energy report's PDF test)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq poppler-utils >/dev/null) \
	      || echo "poppler-utils could not be installed: the PDF test will be skipped"; \
	  else echo "pdftoppm not found and not root: the PDF test will be skipped"; fi; \
	fi
	@if ! command -v promtool >/dev/null 2>&1 || [ ! -x /usr/bin/prometheus-alertmanager ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing prometheus and prometheus-alertmanager (apt)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null) \
	      || echo "prometheus could not be installed: Prometheus tests will be skipped"; \
	  else echo "prometheus not found and not root: Prometheus tests will be skipped"; fi; \
	fi

# Two test processes (pytest-xdist), each with its own embedded servers (tests/testenv.py);
# loadfile keeps a module's tests, and its module fixtures, in one process.
test: test-deps
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	# No database needed to compare models with migrations: start no embedded servers.
	VIGIL_OFFLINE=true $(PY) -W ignore::RuntimeWarning manage.py makemigrations --check --dry-run
	$(if $(CI),VIGIL_REQUIRE_REAL_PARTS=chromium$(comma)slurm$(comma)prometheus$(comma)alertmanager) $(PY) -m pytest -n 2 --dist loadfile

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	-$(PY) -c "from webapp.core import embedded; embedded.stop_all()" 2>/dev/null
	rm -rf .vigil
