# The two commands of the README. Both set up a fresh machine first (scripts/setup.sh).
VENV ?= .venv
VENV_JH5 ?= .venv-jh5
PYTEST_ARGS ?=
# pytest-xdist workers, each taking a module at a time, the slowest first (tests/support/order.py;
# --no-loadscope-reorder keeps that order): five on CI's two cores, as the tests with a real
# hub (marked integration) wait on the service's timers and their servers' start while the
# others compute, so one pass runs both (four left a quarter of the cores idle; six were
# slower than five: docs/architecture.md#the-tests); 0 runs a pass in one process
WORKERS ?= 5
HUB5_WORKERS ?= 1
HUB5_MODULES = $(shell grep -rl --include='test_*.py' hub_contract tests)
XDIST = --dist loadfile --no-loadscope-reorder

.PHONY: setup demo test benchmarks kubespawner-suite controlplane

# Python writes the bytecode it compiles (a machine may say otherwise in its environment): a
# clone's own modules and tests are otherwise compiled again by every process of a test pass,
# each worker's collection 9 CPU-seconds more (scripts/setup.sh compiles the virtualenvs)
unexport PYTHONDONTWRITEBYTECODE

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/jupyterhub-gpu-reclaim-sim demo

test: setup
	$(VENV)/bin/ruff check .
# mypy, and at the same time a first collection that writes the bytecode of the tests (pytest's
# assertion rewriting) and of this clone's modules, which every worker then reads
	@$(VENV)/bin/python -m pytest --collect-only -q $(PYTEST_ARGS) > /dev/null & collect=$$!; \
	$(VENV)/bin/mypy; mypy_status=$$?; wait $$collect; exit $$mypy_status
# two passes at once: every test on JupyterHub 6, and the hub contract (tests marked
# hub_contract) again on the z2jh chart's hub image, JupyterHub 5.5 (the rest meets the hub only
# through it: docs/install-z2jh.md). The second, on one worker, waits on its hubs and releases
# far more than it computes, so it fills the first's waits rather than following it; it
# collects only the modules that hold such a test, and its output follows the first's
# (docs/architecture.md#the-tests)
	@hub5_log=$$(mktemp); trap 'rm -f "$$hub5_log"' EXIT; \
	$(VENV)/bin/python -m pytest -n $(HUB5_WORKERS) $(XDIST) --hub-python=$(VENV_JH5)/bin/python \
		-m hub_contract $(PYTEST_ARGS) $(if $(PYTEST_ARGS),,$(HUB5_MODULES)) > "$$hub5_log" 2>&1 & hub5=$$!; \
	$(VENV)/bin/python -m pytest -n $(WORKERS) $(XDIST) $(PYTEST_ARGS); main=$$?; \
	wait $$hub5; hub5_status=$$?; echo "=== the JupyterHub 5.5 pass (hub_contract)"; cat "$$hub5_log"; \
	[ $$main = 0 ] && [ $$hub5_status = 0 ]
# no test changed the environments the tests ran from: every package the set-up installed
# is still there, as it installed it (scripts/venv_packages.py)
	$(VENV)/bin/python scripts/venv_packages.py check
	$(VENV_JH5)/bin/python scripts/venv_packages.py check

benchmarks: setup
	$(VENV)/bin/python benchmarks/controlplane_startup.py
	$(VENV)/bin/python benchmarks/backtest_speed.py
	$(VENV)/bin/python benchmarks/service_cycle.py
	$(VENV)/bin/python benchmarks/store_queries.py
	$(VENV)/bin/python benchmarks/spawn_latency.py

# KubeSpawner's own test suite, unmodified, on the simulator (docs/sim.md)
kubespawner-suite: setup
	@bash scripts/kubespawner_suite.sh $(PYTEST_ARGS)

# the real Kubernetes control plane, built from its Go modules (controlplane/) and cached outside
# the clone (setup builds it too); `benchmarks/controlplane_startup.py` starts and measures it
controlplane:
	@bash scripts/build-controlplane.sh
