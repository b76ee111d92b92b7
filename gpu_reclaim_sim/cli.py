"""The `jupyterhub-gpu-reclaim-sim` command: `run` the simulated cluster, or the `demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

PROG = "jupyterhub-gpu-reclaim-sim"


def build_parser() -> argparse.ArgumentParser:
    from .z2jh import demo
    from .main import add_arguments, run_cluster

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The simulated Kubernetes GPU cluster jupyterhub-gpu-reclaim is tested and "
        "demonstrated on (test and demo infrastructure, not part of the product).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_parser = sub.add_parser(
        "run",
        help="run the simulated Kubernetes GPU cluster",
        description="Run a simulated Kubernetes cluster with GPUs that kubectl, KubeSpawner and the "
        "Kubernetes clients accept. Runs until interrupted.",
    )
    add_arguments(run_parser)
    run_parser.set_defaults(func=run_cluster)
    demo_parser = sub.add_parser(
        "demo",
        help="run the demo: the Zero to JupyterHub release on the simulated cluster",
        description="Start the simulated cluster, install the Zero to JupyterHub release on it (the "
                    "chart with helm-values/gpu-reclaim.yaml) or, without the chart, a JupyterHub of the "
                    "demo's own, then print how to log in.",
    )
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(func=demo.run)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))
