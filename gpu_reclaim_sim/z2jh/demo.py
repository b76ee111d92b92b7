"""`jupyterhub-gpu-reclaim-sim demo`: the simulated GPU cluster with the Zero to JupyterHub
release on it, as the release tests install it (gpu_reclaim_sim.z2jh.release); where
the chart is not beside the clone, a JupyterHub of the demo's own (demo_config/)."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import demo_prometheus
from . import release as z2jh
from ..launch import Child, free_port, start_hub, start_sim
from ..main import port
from ..network import namespace
from ..network.relay import Relay
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
OWN_HUB_PORT = 8000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chart", metavar="DIR",
                        help="the Zero to JupyterHub chart the demo installs on the simulated cluster, with "
                             "helm-values/gpu-reclaim.yaml (default: ../shared/z2jh/chart beside the clone); "
                             "without it the demo runs its own JupyterHub (--config) instead")
    parser.add_argument("--port", type=port, default=None,
                        help=f"the hub's public port on 127.0.0.1 (default: {OWN_HUB_PORT}): the demo's own hub's, "
                             "or where the release's proxy-public is offered")
    parser.add_argument("--scenario", metavar="FILE", default=str(DEFAULT_SCENARIO),
                        help="the simulated cluster (default: %(default)s)")
    parser.add_argument("--config", metavar="FILE", default=str(DEMO_CONFIG / "jupyterhub_config.py"),
                        help="the demo's own hub's JupyterHub configuration, without the chart "
                             "(default: %(default)s)")
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
    # the users' servers run from this environment: a half-installed JupyterLab extension is
    # said here (the check prints which half is missing), not found out from a silent JupyterLab
    if subprocess.run([sys.executable, "-m", "jupyterhub_gpu_reclaim_lab.install_check"],
                      stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL).returncode:
        print("demo: JupyterLab will show no GPU state (above: what is missing; docs/troubleshooting.md).",
              flush=True)
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
    with_prometheus = demo_prometheus.unavailable() is None  # the service then reads it, by its Service
    prometheus_port = free_port()
    docs = z2jh.render(z2jh.BASE, DEMO_VALUES, chart=chart,
                       extra=z2jh.sim_values(password=password, users=USERS, admins=ADMINS,
                                             options=demo_prometheus.RELEASE_OPTIONS if with_prometheus else None))
    print(f"Starting the simulated cluster (logs: {workdir / 'sim.log'}) ...", flush=True)
    try:
        sim = z2jh.start_cluster(workdir, docs, base=Path(args.scenario), publish=args.port or OWN_HUB_PORT,
                                 reach=prometheus_port if with_prometheus else None)
    except RuntimeError as e:
        print(f"demo: the simulated cluster did not start: {e}", file=sys.stderr)
        return 1
    prometheus = None
    try:
        try:
            prometheus = _prometheus(workdir, sim, prometheus_port)
            if prometheus is not None:
                z2jh.apply(sim.info["kubeconfig"], demo_prometheus.as_service(z2jh.reached(sim, prometheus_port)))
        except RuntimeError as e:
            print(f"demo: Prometheus did not start: {e}", file=sys.stderr)
            return 1
        print("Installing the release in namespace jhub (and helm-values/rbac.yaml) ...", flush=True)
        try:
            # proxy-public is offered at --port (the run's addresses are its own)
            release = z2jh.install(sim.info["kubeconfig"], docs, url=f"http://127.0.0.1:{args.port or OWN_HUB_PORT}")
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
        return _watch(stop, sim, *([prometheus.child] if prometheus else []))
    finally:
        print("Stopping ...", flush=True)
        if prometheus is not None:
            prometheus.stop()
        sim.stop()  # the release's pods with it


def _prometheus(workdir: Path, sim: Child, port: int | None = None,
                doorway: Doorway | None = None) -> demo_prometheus.DemoPrometheus | None:
    """The demo's Prometheus (demo_prometheus), or None where Debian's is not installed (said
    so); RuntimeError when it does not start. Its address is said as this machine's programs
    reach it (through `doorway`, where the demo has a network namespace of its own)."""
    if reason := demo_prometheus.unavailable():
        print(f"demo: no Prometheus ({reason}): the usage report shows only the service's own record.", flush=True)
        return None
    prometheus = demo_prometheus.start(workdir, sim.info["metrics"], sim.info["kubeconfig"], _kubectl(), port)
    shown = doorway.open(doorway.prometheus, prometheus.url) if doorway is not None else prometheus.url
    print(f"Prometheus (the usage report's history): {shown}", flush=True)
    return prometheus


def _profile(docs: list[dict], slug: str) -> str:
    """The display name of a spawn-page profile of the rendered release."""
    profiles = z2jh.hub_values(docs)["singleuser"]["profileList"]
    return next(p["display_name"] for p in profiles if p.get("slug") == slug)


class Doorway:
    """The demo's own network namespace, entered with the ports of this machine's loopback that
    lead into it bound first: the hub reaches its users' pods at their addresses, so it runs
    in the cluster's network with them (outside, a pod's address would go out by the default
    route), and the browser and kubectl come in through these ports."""

    def __init__(self, hub_port: int) -> None:
        # bound here, outside
        self.hub, self.api, self.prometheus, self.metrics = Relay(hub_port), Relay(0), Relay(0), Relay(0)
        namespace.enter()  # this thread; the programs it starts, and the relays' thread, follow
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="doorway", daemon=True).start()

    def open(self, relay: Relay, url: str) -> str:
        """Connections to `relay`'s port go to `url`'s host and port, inside; `url` as this
        machine's programs reach it."""
        inside = urlsplit(url)
        asyncio.run_coroutine_threadsafe(relay.start(inside.hostname or "127.0.0.1", inside.port or 0),
                                         self._loop).result(10)
        return urlunsplit(inside._replace(netloc=f"127.0.0.1:{relay.port}"))

    def kubeconfig(self, sim: Child) -> Path:
        """The cluster's kubeconfig for programs outside (kubectl), by the API's relay."""
        self.open(self.api, sim.info["api"])
        path = Path(sim.info["kubeconfig"]).with_name("kubeconfig-outside")
        path.write_text(Path(sim.info["kubeconfig"]).read_text().replace(sim.info["api"], f"https://127.0.0.1:{self.api.port}"))
        return path


def _run_own_hub(args: argparse.Namespace, workdir: Path, password: str, stop: threading.Event) -> int:
    public = args.port or OWN_HUB_PORT
    doorway = Doorway(public) if namespace.available() and not namespace.inside() else None
    print(f"Starting the simulated cluster (logs: {workdir / 'sim.log'}) ...", flush=True)
    try:
        sim = start_sim(workdir, Path(args.scenario))
    except RuntimeError as e:
        print(f"demo: the simulated cluster did not start: {e}", file=sys.stderr)
        return 1
    hub = prometheus = None
    try:
        try:
            prometheus = _prometheus(workdir, sim, doorway=doorway)
        except RuntimeError as e:
            print(f"demo: Prometheus did not start: {e}", file=sys.stderr)
            return 1
        print(f"Starting JupyterHub (logs: {workdir / 'jupyterhub.log'}) ...", flush=True)
        hub = start_hub(workdir, Path(args.config), sim.info["kubeconfig"], port=free_port() if doorway else public,
                        env={"GPU_RECLAIM_DEMO_PASSWORD": password,
                             "GPU_RECLAIM_SERVICE_PORT": str(free_port()),
                             "GPU_RECLAIM_DCGM_URL": sim.info["metrics"],
                             "GPU_RECLAIM_PROMETHEUS_URL": prometheus.url if prometheus else ""})
        url, kubeconfig, metrics = hub.info["url"], sim.info["kubeconfig"], sim.info["metrics"]
        if doorway is not None:
            url, kubeconfig = doorway.open(doorway.hub, url), str(doorway.kubeconfig(sim))
            metrics = doorway.open(doorway.metrics, metrics)
        print(STORY.format(what="a simulated cluster with 4 GPUs, JupyterHub with GPUReclaimSpawner\nand the "
                                "reclaim service", url=url, password=password,
                           gpu_1="1 × NVIDIA A100 (40 GB)", gpu_2="2 × NVIDIA A100 (40 GB)",
                           log=workdir / "jupyterhub.log", metrics=metrics,
                           kubeconfig=kubeconfig, kubectl=_kubectl(),
                           values=DEMO_VALUES), flush=True)
        return _watch(stop, sim, hub, *([prometheus.child] if prometheus else []))
    except RuntimeError as e:
        print(f"demo: JupyterHub did not start: {e}", file=sys.stderr)
        return 1
    finally:
        print("Stopping ...", flush=True)
        if hub is not None:
            hub.stop(grace=60)  # the hub stops the users' servers first
        if prometheus is not None:
            prometheus.stop()
        sim.stop()
