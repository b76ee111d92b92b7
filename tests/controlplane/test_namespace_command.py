"""`python -m gpu_reclaim_sim.network.namespace COMMAND`: a command (scripts/kubespawner_suite.sh's
`run` and pytest) in a network namespace of a run's kind of its own: the run's networks local
to it, what listens in the caller's namespace out of its reach, its exit status passed on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making a network namespace needs root")

PROBE = textwrap.dedent("""
    import socket, sys
    from gpu_reclaim_sim.network import namespace
    print(namespace.inside())
    try:
        socket.create_connection(("10.244.0.250", int(sys.argv[1])), timeout=5).close()
        print("reached")
    except OSError:
        print("out of reach")
    sys.exit(3)
""")


def test_a_command_runs_in_a_namespace_of_its_own():
    with socket.socket() as outside:  # the test worker's own namespace (tests/conftest.py)
        outside.bind(("10.244.0.250", 0))
        outside.listen()
        done = subprocess.run([sys.executable, "-m", "gpu_reclaim_sim.network.namespace",
                               sys.executable, "-c", PROBE, str(outside.getsockname()[1])],
                              capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.split()) == (3, ["True", "out", "of", "reach"]), done.stderr


def test_without_a_command_it_says_how_to_call_it():
    done = subprocess.run([sys.executable, "-m", "gpu_reclaim_sim.network.namespace"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "usage: python -m gpu_reclaim_sim.network.namespace COMMAND" in done.stderr
