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
HUB5_WORKERS ?= 2
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
	$(VENV)/bin/python -m pytest -n $(WORKERS) $(XDIST) $(PYTEST_ARGS)
# the hub contract (tests marked hub_contract) again on the z2jh chart's hub image (JupyterHub
# 5.5): the rest meets the hub only through it (docs/install-z2jh.md, JupyterHub 5 and 6). It
# collects only the modules that hold such a test. After the first pass, not beside it: beside
# it, the load it added at the start made a GPU spawn of tests/web miss its 120 s
# (docs/architecture.md#the-tests)
	$(VENV)/bin/python -m pytest -n $(HUB5_WORKERS) $(XDIST) --hub-python=$(VENV_JH5)/bin/python \
		-m hub_contract $(PYTEST_ARGS) $(if $(PYTEST_ARGS),,$(HUB5_MODULES))
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
