# The two commands of the README. Both set up a fresh machine first (scripts/setup.sh).
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: setup demo test benchmarks

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/jupyterhub-gpu-reclaim demo

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

benchmarks: setup
	$(VENV)/bin/python benchmarks/sim_scale.py
	$(VENV)/bin/python benchmarks/backtest_speed.py
	$(VENV)/bin/python benchmarks/service_cycle.py
