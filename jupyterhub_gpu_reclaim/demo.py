"""`jupyterhub-gpu-reclaim demo`: the simulated GPU cluster and a JupyterHub on it."""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import threading
from pathlib import Path

from .launch import EXAMPLES, start_hub, start_sim
from .sim.main import port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=port, default=8000, help="the hub's public port on 127.0.0.1")
    parser.add_argument("--scenario", metavar="FILE", default=str(EXAMPLES / "sim" / "cluster.yaml"),
                        help="the simulated cluster (default: examples/sim/cluster.yaml)")
    parser.add_argument("--config", metavar="FILE", default=str(EXAMPLES / "demo" / "jupyterhub_config.py"),
                        help="the JupyterHub configuration (default: examples/demo/jupyterhub_config.py)")
    parser.add_argument("--data-dir", metavar="DIR", default=".demo",
                        help="where the hub database, volumes and logs go (default: ./.demo)")
    parser.add_argument("--password", help="the demo users' password (default: a new random one)")


def _kubectl() -> str:
    """The kubectl the setup installed into the virtualenv, else the one on PATH."""
    venv = Path(sys.executable).with_name("kubectl")
    return str(venv) if venv.exists() else "kubectl"


def run(args: argparse.Namespace) -> int:
    workdir = Path(args.data_dir).resolve()
    password = args.password or secrets.token_urlsafe(9)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"Starting the simulated cluster (logs: {workdir / 'sim.log'}) ...", flush=True)
    try:
        sim = start_sim(workdir, Path(args.scenario))
    except RuntimeError as e:
        print(f"demo: the simulated cluster did not start: {e}", file=sys.stderr)
        return 1
    hub = None
    try:
        print(f"Starting JupyterHub (logs: {workdir / 'jupyterhub.log'}) ...", flush=True)
        hub = start_hub(workdir, Path(args.config), sim.info["kubeconfig"], port=args.port,
                        env={"GPU_RECLAIM_DEMO_PASSWORD": password})
        url = hub.info["url"]
        print(
            "\nThe demo is running.\n"
            f"  Open {url}/hub/login and log in as alice, bob or carol (admin: admin)\n"
            f"  with the password: {password}\n"
            "  Pick '1 × NVIDIA A100' and press Start: the spawn page shows the pod being scheduled\n"
            "  and the image being pulled. Then create a notebook and run a cell, for example:\n"
            "      from jupyterhub_gpu_reclaim.sim.gpu import use_gpu; use_gpu(percent=90, seconds=30)   # blocks 30 s, like training\n"
            f"  GPU metrics as dcgm-exporter shows them: {sim.info['metrics']}\n"
            f"  The cluster with kubectl:  KUBECONFIG={sim.info['kubeconfig']} {_kubectl()} get pods -A\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while not stop.wait(1):
            for child in (sim, hub):
                if not child.alive():
                    print(f"demo: {child.name} exited; its log:\n{child.log_tail()}", file=sys.stderr)
                    return 1
        return 0
    except RuntimeError as e:
        print(f"demo: JupyterHub did not start: {e}", file=sys.stderr)
        return 1
    finally:
        print("Stopping ...", flush=True)
        if hub is not None:
            hub.stop(grace=60)  # the hub stops the users' servers first
        sim.stop()
