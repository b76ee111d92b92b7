# The two commands of the README. Both set up a fresh machine first (scripts/setup.sh).
VENV ?= .venv
VENV_JH5 ?= .venv-jh5
PYTEST_ARGS ?=
# the hub-facing live tests, run a second time with the z2jh chart's hub image (JupyterHub 5.5)
JH5_TESTS ?= tests/service tests/web tests/lab tests/spawner/test_spawner_live.py tests/release \
	tests/deploy/test_hub_image.py

.PHONY: setup demo test benchmarks

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/jupyterhub-gpu-reclaim-sim demo

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)
	$(VENV)/bin/python -m pytest --hub-python=$(VENV_JH5)/bin/python -m "integration or jupyterhub" \
		$(PYTEST_ARGS) $(JH5_TESTS)

benchmarks: setup
	$(VENV)/bin/python benchmarks/sim_scale.py
	$(VENV)/bin/python benchmarks/backtest_speed.py
	$(VENV)/bin/python benchmarks/service_cycle.py
	$(VENV)/bin/python benchmarks/store_queries.py
	$(VENV)/bin/python benchmarks/spawn_latency.py
