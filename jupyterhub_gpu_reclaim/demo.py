"""`jupyterhub-gpu-reclaim demo`: the simulated GPU cluster and a JupyterHub on it."""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import threading
from pathlib import Path

from .launch import EXAMPLES, free_port, start_hub, start_sim
from .sim.main import port


STORY = """
The demo is running: a simulated cluster with 4 GPUs, JupyterHub with GPUReclaimSpawner,
and the reclaim service with its timings shrunk from hours to minutes.
Log in at {url}/hub/login as alice, bob or carol (admin: admin), password: {password}

  1. As alice, choose '1 × NVIDIA A100' and press Start. The spawn page says what happens
     ("Downloading the environment image (5.0 GB) on node ..."). Then leave the GPU unused.
  2. In a private window, as bob, start '2 × NVIDIA A100'. In another, carol starts
     '2 × NVIDIA A100' too: only one GPU is free, so her spawn page says
     "Waiting for a free GPU (2 GPUs requested, ...)".
  3. Back as alice: 2 minutes after her start the hub's pages show a banner, "Your GPU session
     will be reclaimed at ...". Her page {url}/services/gpu-reclaim/ shows why
     (GPU never used), with "Keep alive until..." and "Stop now and free the GPU".
     Do nothing: 4 minutes after the start her server is stopped through the hub, and carol's
     spawn proceeds on the freed GPU. (Or keep it alive, and carol keeps waiting.)
  4. As admin, open {url}/services/gpu-reclaim/admin: every GPU session with its
     utilization, the rule that applies and its evidence, the GPU queue, the reclaims.
  5. A session that works is never reclaimed. In a notebook:
         from jupyterhub_gpu_reclaim.sim.gpu import use_gpu; use_gpu(percent=90, seconds=300)
     (the cell "trains" for 5 minutes; a busy kernel or a busy GPU keeps the session).

The service's decisions and warnings are in {log}; its metrics at
{url}/services/gpu-reclaim/metrics; dcgm-exporter's at {metrics}.
The cluster with kubectl:  KUBECONFIG={kubeconfig} {kubectl} get pods -A
Press Ctrl-C to stop."""


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
                        env={"GPU_RECLAIM_DEMO_PASSWORD": password,
                             "GPU_RECLAIM_DEMO_CONFIG": str(Path(args.config).resolve()),
                             "GPU_RECLAIM_SERVICE_PORT": str(free_port()),
                             "GPU_RECLAIM_DCGM_URL": sim.info["metrics"]})
        url = hub.info["url"]
        print(STORY.format(url=url, password=password, metrics=sim.info["metrics"],
                           kubeconfig=sim.info["kubeconfig"], kubectl=_kubectl(),
                           log=workdir / "jupyterhub.log"), flush=True)
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
