"""`jupyterhub-gpu-reclaim-sim run`: run the simulated cluster until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path

from .cluster import Cluster, Published
from .paths import DEFAULT_SCENARIO
from .scenario import ScenarioError, load


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (0-65535; 0 picks a free one)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", default=str(DEFAULT_SCENARIO),
                        help="scenario file (YAML; see docs/sim.md). Default: the demo's cluster, "
                             "scenarios/cluster.yaml in the package")
    parser.add_argument("--kubeconfig", metavar="PATH", required=True,
                        help="where to write a kubeconfig for kubectl and the Kubernetes clients")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="where volumes and pod logs live (default: a new temporary directory)")
    parser.add_argument("--info-file", metavar="PATH",
                        help="also write the cluster's addresses as JSON to this file once it is up")
    parser.add_argument("--publish", metavar="PORT=NAMESPACE/SERVICE:PORT", action="append", default=[],
                        help="offer a Service's port at this port of the machine's loopback, "
                             "as a cloud's load balancer would (e.g. 8000=jhub/proxy-public:80); repeatable")
    parser.add_argument("--reach", metavar="PORT", type=port, action="append", default=[],
                        help="offer this port of the machine's loopback to the cluster's pods, "
                             "at an address an EndpointSlice may name (the info file's `reached`); repeatable")
    parser.add_argument("--control-plane", metavar="DIR", type=Path,
                        help="run on the control plane already running from DIR (its "
                             "admin.kubeconfig and pki/), in this network, instead of starting one: the run "
                             "adds its nodes and namespaces and deletes them when it stops (a test worker's)")
    parser.add_argument("--mode", choices=["process", "stub"],
                        help="override the scenario's run mode for pods")
    parser.add_argument("--api-port", type=port, help="the API server's port, where this machine's programs reach it "
                                                         "(default: a free one)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")


async def serve(cluster: Cluster, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await cluster.start()
    try:
        kubeconfig = cluster.write_kubeconfig(args.kubeconfig)
        info = {**cluster.info(), "kubeconfig": str(kubeconfig.resolve())}
        if args.info_file:
            tmp = Path(args.info_file).with_suffix(".tmp")
            tmp.write_text(json.dumps(info, indent=2))
            tmp.replace(args.info_file)  # atomic: readers never see half a file
        print(
            f"Simulated cluster {info['scenario']!r} is up.\n"
            f"  API server:   {info['api']}\n"
            f"  kubeconfig:   {info['kubeconfig']}   (export KUBECONFIG={info['kubeconfig']})\n"
            f"  nodes:        {', '.join(info['nodes'])}\n"
            f"  DCGM metrics: {info['metrics']}\n"
            f"  control API:  {info['control']}\n"
            f"  data:         {info['data_dir']}\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        await stop.wait()
    finally:
        await cluster.stop()


def run_cluster(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    try:
        scenario = load(args.config)
    except ScenarioError as e:
        print(f"jupyterhub-gpu-reclaim-sim run: {e}", file=sys.stderr)
        return 2
    if args.mode:
        scenario.mode = args.mode
    try:
        publish = [Published.parse(text) for text in args.publish]
    except ValueError as e:
        print(f"jupyterhub-gpu-reclaim-sim run: --publish: {e}", file=sys.stderr)
        return 2
    if args.control_plane is not None and not (args.control_plane / "admin.kubeconfig").is_file():
        print(f"jupyterhub-gpu-reclaim-sim run: --control-plane {args.control_plane}: no control plane there "
              "(its admin.kubeconfig)", file=sys.stderr)
        return 2
    if 0 in args.reach:
        print("jupyterhub-gpu-reclaim-sim run: --reach 0: a port a program listens at (1-65535)", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="gpu-reclaim-sim-"))
    cluster = Cluster(scenario, data_dir.resolve(), api_port=scenario.api_port if args.api_port is None else args.api_port, publish=publish,
                      reach=args.reach, control_plane=args.control_plane)
    try:
        asyncio.run(serve(cluster, args))
    except (OSError, RuntimeError) as e:  # RuntimeError: sim.controlplane's ControlPlaneError
        print(f"jupyterhub-gpu-reclaim-sim run: cannot start: {e}", file=sys.stderr)
        return 1
    return 0

