"""`python -m gpu_reclaim_sim.nodeagent`: the node agent of a run, for the nodes of a
scenario, against a control plane started by sim.controlplane; it stops on SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from ..scenario import ScenarioError, load
from .agent import serve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpu_reclaim_sim.nodeagent", description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the API server's URL (https://127.0.0.1:PORT)")
    parser.add_argument("--pki", required=True, type=Path,
                        help="the run's CA folder (ca.crt, ca.key): each node's certificate is signed with it")
    parser.add_argument("--scenario", required=True, type=Path, help="the scenario whose nodes to run")
    parser.add_argument("--version", required=True, help="the kubelet version the nodes report (the API server's)")
    parser.add_argument("--data-dir", required=True, type=Path,
                        help="where the pods' files and their containers' logs go (logs/<ns>_<pod>_<container>.log)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        scenario = load(args.scenario)
    except (OSError, ScenarioError) as e:
        parser.error(str(e))

    async def run() -> None:
        task = asyncio.create_task(serve(scenario, args.server, args.pki, args.version, args.data_dir))
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(run())


if __name__ == "__main__":
    main()
