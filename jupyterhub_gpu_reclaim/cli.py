"""The `jupyterhub-gpu-reclaim` command and its subcommands."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _sim(args: argparse.Namespace) -> int:
    from .sim.main import run

    return run(args)


def _demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyterhub-gpu-reclaim",
        description="Give idle GPUs on a JupyterHub back to the people waiting for them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from .sim.main import add_arguments as add_sim_arguments

    sim = sub.add_parser(
        "sim",
        help="run the simulated Kubernetes GPU cluster",
        description="Run a simulated Kubernetes cluster with GPUs that kubectl, KubeSpawner and the "
        "Kubernetes clients accept. Runs until interrupted.",
    )
    add_sim_arguments(sim)
    sim.set_defaults(func=_sim)

    from .demo import add_arguments as add_demo_arguments

    demo = sub.add_parser(
        "demo",
        help="run the demo: the simulated cluster and JupyterHub with GPU profiles",
        description="Start the simulated cluster and a JupyterHub on it, then print how to log in.",
    )
    add_demo_arguments(demo)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(2)
    sys.exit(args.func(args))
