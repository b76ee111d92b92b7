"""What the workload tests run on the simulated cluster: Deployments whose pods serve
HTTP, and whether a simulated address answers."""

from __future__ import annotations

import ipaddress
import urllib.error
import urllib.request

from gpu_reclaim_sim.network import namespace

PYTHON_IMAGE = "python:3.11"


def server_deployment(name: str, *, replicas: int = 1, strategy: str = "RollingUpdate",
                      env: str = "one", labels: dict | None = None) -> dict:
    """A Deployment whose pods serve HTTP on a named port (the process prints its env var
    VERSION, so a template change is visible)."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": strategy},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **(labels or {})}},
                "spec": {"containers": [{
                    "name": "web", "image": PYTHON_IMAGE,
                    "command": ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"],
                    "env": [{"name": "VERSION", "value": env}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                }], "terminationGracePeriodSeconds": 2},
            },
        },
    }


def http_status(url: str) -> int | None:
    """The HTTP status `url` answers with, None where nothing answers (within 2 s)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except (urllib.error.URLError, ConnectionError, OSError):
        return None


def in_the_run(ip: str) -> bool:
    """An address of the run's networks (sim.network.namespace), which the tests reach."""
    return namespace.holds(ipaddress.ip_network(ip))
