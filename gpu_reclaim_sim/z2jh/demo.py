"""`jupyterhub-gpu-reclaim-sim demo`: the simulated GPU cluster with the Zero to JupyterHub
release on it, as the release tests install it (gpu_reclaim_sim.z2jh.release); where
the chart is not beside the clone, a JupyterHub of the demo's own (demo_config/)."""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import threading
from pathlib import Path

from . import release as z2jh
from ..launch import Child, free_port, start_hub, start_sim
from ..main import port
from ..paths import DEFAULT_SCENARIO, DEMO_CONFIG

STORY = """
The demo is running: {what}.
The reclaim policy's timings are shrunk from hours to minutes ({values}).
Log in at {url}/hub/login as alice, bob or carol (admin: admin), password: {password}

  1. As alice, choose '{gpu_1}' and press Start. The spawn page says what happens
     (the node, the image, the GPU queue). Then leave the GPU unused.
  2. In a private window, as bob, start '{gpu_2}'. In another, carol starts
     '{gpu_2}' too: only one GPU is free, so her spawn page says
     "Waiting for a free GPU (2 GPUs requested, ...)".
  3. Back as alice: 2 minutes after her start the hub's pages show a banner, "Your GPU session
     will be reclaimed at ...". Her page {url}/services/gpu-reclaim/ shows why
     (GPU never used), with "Keep alive until..." and "Stop now and free the GPU".
     Do nothing: 4 minutes after the start her server is stopped through the hub, and carol's
     spawn proceeds on the freed GPU. (Or keep it alive, and carol keeps waiting.)
  4. As admin, open {url}/services/gpu-reclaim/admin: every GPU session with its
     utilization, the rule that applies and its evidence, the GPU queue, the reclaims.
  5. A session that works is never reclaimed. In a notebook:
         from gpu_reclaim_sim.gpu import use_gpu; use_gpu(percent=90, seconds=300)
     (the cell "trains" for 5 minutes; a busy kernel or a busy GPU keeps the session).

The service's decisions and warnings are in {log}; its metrics at
{url}/services/gpu-reclaim/metrics; dcgm-exporter's at {metrics}.
The cluster with kubectl:  KUBECONFIG={kubeconfig} {kubectl} get pods -A
A shell in alice's server: KUBECONFIG={kubeconfig} {kubectl} -n jhub exec -it jupyter-alice -- bash
Press Ctrl-C to stop."""
DEMO_VALUES = DEMO_CONFIG / "values.yaml"
USERS, ADMINS = ["alice", "bob", "carol"], ["admin"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chart", metavar="DIR",
                        help="the Zero to JupyterHub chart the demo installs on the simulated cluster, with "
                             "helm-values/gpu-reclaim.yaml (default: ../shared/z2jh/chart beside the clone); "
                             "without it the demo runs its own JupyterHub (--config) instead")
    parser.add_argument("--port", type=port, default=8000,
                        help="the hub's public port on 127.0.0.1: the demo's own hub's, or, on the real plane, "
                             "where the release's proxy-public is offered (on the model plane the release's "
                             "hub is at its proxy-public Service's address)")
    parser.add_argument("--scenario", metavar="FILE", default=str(DEFAULT_SCENARIO),
                        help="the simulated cluster (default: %(default)s)")
    parser.add_argument("--config", metavar="FILE", default=str(DEMO_CONFIG / "jupyterhub_config.py"),
                        help="the demo's own hub's JupyterHub configuration, without the chart "
                             "(default: %(default)s)")
    parser.add_argument("--plane", choices=["model", "real"], default="real",
                        help="the cluster's control plane for the release (`run --plane`): the real "
                             "kube-apiserver, kube-scheduler and kube-controller-manager (default), or the "
                             "simulator's own model")
    parser.add_argument("--data-dir", metavar="DIR", default=".demo",
                        help="where the cluster's data, the hub database and the logs go (default: ./.demo)")
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
    chart = Path(args.chart).resolve() if args.chart else z2jh.CHART
    reason = z2jh.unavailable(chart)
    if reason is None:
        return _run_release(args, chart, workdir, password, stop)
    print(f"demo: not installing the Zero to JupyterHub release: {reason}.\n"
          f"demo: running the demo's own JupyterHub instead ({args.config}).", flush=True)
    return _run_own_hub(args, workdir, password, stop)


def _watch(stop: threading.Event, *children: Child) -> int:
    """Until Ctrl-C or SIGTERM (0), or until a child exits (1)."""
    while not stop.wait(1):
        for child in children:
            if not child.alive():
                print(f"demo: {child.name} exited; its log:\n{child.log_tail()}", file=sys.stderr)
                return 1
    return 0


def _run_release(args: argparse.Namespace, chart: Path, workdir: Path, password: str,
                 stop: threading.Event) -> int:
    """The z2jh release on the simulated cluster, as the release tests install it
    (gpu_reclaim_sim.z2jh.release): the chart with helm-values/gpu-reclaim.yaml and
    the demo's values, and helm-values/rbac.yaml."""
    print(f"Rendering the Zero to JupyterHub chart {chart} with helm-values/gpu-reclaim.yaml ...", flush=True)
    docs = z2jh.render(z2jh.BASE, DEMO_VALUES, chart=chart,
                       extra=z2jh.sim_values(password=password, users=USERS, admins=ADMINS))
    print(f"Starting the simulated cluster (logs: {workdir / 'sim.log'}) ...", flush=True)
    try:
        sim = z2jh.start_cluster(workdir, docs, base=Path(args.scenario), plane=args.plane,
                                 publish=args.port if args.plane == "real" else None)
    except RuntimeError as e:
        print(f"demo: the simulated cluster did not start: {e}", file=sys.stderr)
        return 1
    try:
        print("Installing the release in namespace jhub (and helm-values/rbac.yaml) ...", flush=True)
        try:
            # on the real plane proxy-public is offered at --port (the run's addresses are its own)
            release = z2jh.install(sim.info["kubeconfig"], docs,
                                   url=f"http://127.0.0.1:{args.port}" if args.plane == "real" else None)
        except RuntimeError as e:
            print(f"demo: the release did not come up: {e}", file=sys.stderr)
            return 1
        kubectl = f"KUBECONFIG={sim.info['kubeconfig']} {_kubectl()}"
        print(STORY.format(what="the Zero to JupyterHub release on a simulated cluster with 4 GPUs\n(the hub "
                                "with GPUReclaimSpawner, the reclaim service in the hub's pod)",
                           url=release.url, password=password, gpu_1=_profile(docs, "gpu-1"),
                           gpu_2=_profile(docs, "gpu-2"), log=f"the hub's log ({kubectl} -n jhub logs deploy/hub)",
                           metrics=sim.info["metrics"], kubeconfig=sim.info["kubeconfig"], kubectl=_kubectl(),
                           values=DEMO_VALUES),
              flush=True)
        return _watch(stop, sim)
    finally:
        print("Stopping ...", flush=True)
        sim.stop()  # the release's pods with it


def _profile(docs: list[dict], slug: str) -> str:
    """The display name of a spawn-page profile of the rendered release."""
    profiles = z2jh.hub_values(docs)["singleuser"]["profileList"]
    return next(p["display_name"] for p in profiles if p.get("slug") == slug)


def _run_own_hub(args: argparse.Namespace, workdir: Path, password: str, stop: threading.Event) -> int:
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
                             "GPU_RECLAIM_SERVICE_PORT": str(free_port()),
                             "GPU_RECLAIM_DCGM_URL": sim.info["metrics"]})
        url = hub.info["url"]
        print(STORY.format(what="a simulated cluster with 4 GPUs, JupyterHub with GPUReclaimSpawner\nand the "
                                "reclaim service", url=url, password=password,
                           gpu_1="1 × NVIDIA A100 (40 GB)", gpu_2="2 × NVIDIA A100 (40 GB)",
                           log=workdir / "jupyterhub.log", metrics=sim.info["metrics"],
                           kubeconfig=sim.info["kubeconfig"], kubectl=_kubectl(),
                           values=DEMO_VALUES), flush=True)
        return _watch(stop, sim, hub)
    except RuntimeError as e:
        print(f"demo: JupyterHub did not start: {e}", file=sys.stderr)
        return 1
    finally:
        print("Stopping ...", flush=True)
        if hub is not None:
            hub.stop(grace=60)  # the hub stops the users' servers first
        sim.stop()
