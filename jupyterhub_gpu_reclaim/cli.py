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


def _backtest(args: argparse.Namespace) -> int:
    import json

    from .backtest import ConfigError, backtest, format_report, load_policy_config
    from .trace import TraceError

    try:
        config = load_policy_config(args.config) if args.config else None
        report = backtest(args.trace, config=config)
    except (TraceError, ConfigError) as e:
        print(f"jupyterhub-gpu-reclaim backtest: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyterhub-gpu-reclaim",
        description="Give idle GPUs on a JupyterHub back to the people waiting for them.",
        epilog="Without a subcommand it runs the reclaim service, a drop-in replacement for "
        "jupyterhub-idle-culler that takes all of its options (jupyterhub-gpu-reclaim "
        "--timeout=3600 --cull-every=600 ...); `jupyterhub-gpu-reclaim --help-all` lists "
        "them, `--generate-config` prints a gpu_reclaim_config.py with all of them.",
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

    backtest = sub.add_parser(
        "backtest",
        help="replay a session trace through the reclaim policy",
        description="Replay a session trace (JSON Lines, ../shared/traces/FORMAT.md) through the "
        "reclaim policy on a virtual clock and report its warnings, reclaims and holds, scored "
        "against the trace's labels and compared with idle-culler's rule and a 0%%-GPU-for-2h rule.",
    )
    backtest.add_argument("--trace", required=True, metavar="FILE", help="the trace file")
    backtest.add_argument(
        "--config", metavar="FILE",
        help='JSON or YAML object of policy settings to override, e.g. '
        '{"gpu_idle_threshold": 9, "idle_reclaim_after": "2h"} (durations in seconds or 30m/2h)',
    )
    backtest.add_argument("--json", action="store_true", help="print the report as one JSON object")
    backtest.set_defaults(func=_backtest)
    return parser


def runs_service(argv: Sequence[str]) -> bool:
    """No subcommand (nothing, or only options such as --timeout=3600): run the service.
    -h/--help show this command's help (subcommands and how to see the service options)."""
    return not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help"))


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if runs_service(argv):
        from .config import run_app

        sys.exit(run_app(argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(2)
    sys.exit(args.func(args))
