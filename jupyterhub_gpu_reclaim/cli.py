"""The `jupyterhub-gpu-reclaim` command and its subcommands."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Sequence

from . import DEFAULT_STORE_URL


def _backtest(args: argparse.Namespace) -> int:
    import json

    from .replay.backtest import backtest, load_policy_config, replay
    from .replay.backtest_report import format_report
    from .errors import ConfigError
    from .replay.trace import TraceError

    def fail(message: str) -> int:
        print(f"jupyterhub-gpu-reclaim backtest: {message}", file=sys.stderr)
        return 2

    if not args.from_store:
        given = [opt for opt, value in (("--store", args.store), ("--since", args.since),
                                        ("--until", args.until)) if value is not None]
        if given:
            return fail(f"{', '.join(given)} only go{'es' if len(given) == 1 else ''} with --from-store")
    try:
        config = load_policy_config(args.config) if args.config else None
    except ConfigError as e:
        return fail(str(e))
    if not args.from_store:
        try:
            report = backtest(args.trace, config=config)
        except TraceError as e:
            return fail(str(e))
        report["trace"]["source"] = f"trace {args.trace}"
    else:
        try:
            report = _backtest_from_store(args, config, replay)
        except _BacktestError as e:
            return fail(str(e))
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0


class _BacktestError(Exception):
    """A --from-store problem, said in one line."""


def _parse_when(text: str, option: str, now: dt.datetime) -> dt.datetime:
    """`timestamps.parse_since`, its errors said for `option`."""
    from .timestamps import parse_since

    try:
        return parse_since(text.strip(), now)
    except OverflowError:
        raise _BacktestError(f"{option} {text}: too far back") from None
    except ValueError:
        raise _BacktestError(f"{option} {text!r}: not a duration back from now (7d, 36h, 1h30m) "
                             "or an ISO 8601 time (2026-11-02T08:00:00Z)") from None


def _existing_sqlite_store(url: str) -> None:
    """Refuse a SQLite store that does not exist or is not a gpu-reclaim store before
    Store.open, which would create one: a backtest never writes a database."""
    import os
    import sqlite3

    from .store.engine import StoreError, make_url

    try:
        parsed = make_url(url)
    except StoreError as e:
        raise _BacktestError(str(e)) from None
    if parsed.get_backend_name() != "sqlite":
        return
    name = parsed.render_as_string(hide_password=True)
    path = parsed.database or ""
    if parsed.query.get("uri") in ("true", "1") and path.startswith("file:"):
        path = path[len("file:"):].split("?", 1)[0]
    if not path or path == ":memory:":
        raise _BacktestError(f"store {name} names no database file")
    if not os.path.exists(path):
        raise _BacktestError(f"store {name}: no such file {os.path.abspath(path)} (--store takes the "
                             "database the service writes, its --store-url)")
    if not os.path.isfile(path):
        raise _BacktestError(f"store {name}: {os.path.abspath(path)} is not a file")
    try:
        conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
        try:
            found = conn.execute("select 1 from sqlite_master where type = 'table' "
                                 "and name = 'schema_version'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise _BacktestError(f"store {name}: cannot read the database: {e}") from None
    if found is None:
        raise _BacktestError(f"store {name}: not a gpu-reclaim store (no schema_version table)")


def _backtest_from_store(args: argparse.Namespace, config: object, replay) -> dict:
    from sqlalchemy import exc as sa_exc

    from .store import Store
    from .store.engine import StoreError
    from .timestamps import format_time, utcnow
    from .policy.observations import SessionSample
    from .replay.trace import TraceError
    from .replay.trace_export import export_records

    now = utcnow().replace(microsecond=0)
    since = _parse_when(args.since if args.since is not None else "7d", "--since", now)
    until = _parse_when(args.until, "--until", now) if args.until is not None else now
    if since >= until:
        raise _BacktestError(f"--since {format_time(since)} is not before --until {format_time(until)}")
    url = args.store if args.store is not None else DEFAULT_STORE_URL
    _existing_sqlite_store(url)
    try:
        store = Store.open(url)
    except StoreError as e:
        raise _BacktestError(str(e)) from None
    samples = 0

    def counted(records):
        nonlocal samples
        for record in records:
            if isinstance(record, SessionSample):
                samples += 1
            yield record

    try:
        report = replay(counted(export_records(store, since, until)), config=config)
    except (TraceError, ValueError) as e:
        raise _BacktestError(f"store {store.name}: {e}") from None
    except sa_exc.SQLAlchemyError as e:
        reason = getattr(e, "orig", None) or e
        raise _BacktestError(f"store {store.name}: cannot read the observations: {reason}") from None
    finally:
        store.close()
    if samples == 0:
        raise _BacktestError(f"store {store.name} has no observations from {format_time(since)} "
                             f"to {format_time(until)}")
    report["trace"]["source"] = f"store {store.name}"
    return report


# generate-trace's bounds: a month of a big hub at most, and samples the policy can read
# (a sample older than its stale_after, 5 min by default, is missing data)
MAX_TRACE_HOURS = 24 * 31
MAX_TRACE_SESSIONS = 2000
TRACE_INTERVAL_S = (10, 300)


def _generate_trace(args: argparse.Namespace) -> int:
    import os
    import tempfile

    from .timestamps import format_time, parse_time
    from .replay.trace import write_trace
    from .replay.tracegen import generate

    def fail(message: str) -> int:
        print(f"jupyterhub-gpu-reclaim generate-trace: {message}", file=sys.stderr)
        return 2

    if not 0 < args.hours <= MAX_TRACE_HOURS:
        return fail(f"--hours {args.hours:g}: must be more than 0 and at most {MAX_TRACE_HOURS}")
    if not 1 <= args.sessions <= MAX_TRACE_SESSIONS:
        return fail(f"--sessions {args.sessions}: must be from 1 to {MAX_TRACE_SESSIONS}")
    if args.seed < 0:
        return fail(f"--seed {args.seed}: must be 0 or more")
    low, high = TRACE_INTERVAL_S
    if not low <= args.interval <= high:
        return fail(f"--interval {args.interval}: must be from {low} to {high} seconds")
    try:
        start = parse_time(args.start, require_offset=True)
    except ValueError:
        start = None
    if start is None:
        return fail(f"--start {args.start!r}: not an RFC 3339 time with an offset (2026-11-02T08:00:00Z)")
    records = generate(seed=args.seed, hours=args.hours, sessions=args.sessions, start=start,
                       interval_s=args.interval)
    if args.out == "-":
        write_trace(records, sys.stdout)
        return 0
    folder = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out):
        return fail(f"--out {args.out}: is a folder")
    # written beside the target and moved into place: a failed write leaves nothing behind
    try:
        handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, prefix=".trace-",
                                             suffix=".tmp", delete=False)
    except OSError as e:
        return fail(f"--out {args.out}: cannot write: {e.strerror or e}")
    try:
        with handle:
            lines = write_trace(records, handle)
        os.replace(handle.name, args.out)
    except OSError as e:
        os.unlink(handle.name)
        return fail(f"--out {args.out}: cannot write: {e.strerror or e}")
    print(f"{args.out}: {lines} lines, {args.sessions} sessions from {format_time(start)}, "
          f"{args.hours:g} h, seed {args.seed}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .timestamps import format_time
    from .replay.tracegen import DEFAULT_START

    parser = argparse.ArgumentParser(
        prog="jupyterhub-gpu-reclaim",
        description="Give idle GPUs on a JupyterHub back to the people waiting for them.",
        epilog="Without a subcommand it runs the reclaim service, a drop-in replacement for "
        "jupyterhub-idle-culler that takes all of its options (jupyterhub-gpu-reclaim "
        "--timeout=3600 --cull-every=600 ...); `jupyterhub-gpu-reclaim --help-all` lists "
        "them, `--generate-config` prints a gpu_reclaim_config.py with all of them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    backtest = sub.add_parser(
        "backtest",
        help="replay a session trace through the reclaim policy",
        description="Replay a session trace (JSON Lines, docs/trace-format.md), or with "
        "--from-store the observations the service recorded, through the reclaim policy on a "
        "virtual clock and report its warnings, reclaims and holds, scored against the trace's "
        "labels and compared with idle-culler's rule and a 0%-GPU-for-2h rule.",
    )
    source = backtest.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", metavar="FILE", help="the trace file")
    source.add_argument(
        "--from-store", action="store_true",
        help="replay the observations the service recorded in its store (--store) from --since "
        "to --until, e.g. under another --config: what would a 9%% threshold have done last week?",
    )
    backtest.add_argument(
        "--store", metavar="URL",
        help="with --from-store: the store's SQLAlchemy URL or SQLite file, the database the "
        "service's --store-url names (default: %s); it is only read" % DEFAULT_STORE_URL.replace("%", "%%"),
    )
    backtest.add_argument(
        "--since", metavar="WHEN",
        help="with --from-store: start of the replay, a duration back from now (7d, 36h, 1h30m) or "
        "an ISO 8601 time, UTC unless it has an offset (default: 7d)",
    )
    backtest.add_argument(
        "--until", metavar="WHEN",
        help="with --from-store: end of the replay, a duration back from now or an ISO 8601 time "
        "(default: now)",
    )
    backtest.add_argument(
        "--config", metavar="FILE",
        help='JSON or YAML object of policy settings to override, e.g. '
        '{"gpu_idle_threshold": 9, "idle_reclaim_after": "2h"} (durations in seconds or 30m/2h), '
        "over the service's defaults but one: servers without GPUs are culled after the z2jh "
        "chart's --timeout (its cull.timeout) rather than idle-culler's own (set cpu_timeout)",
    )
    backtest.add_argument("--json", action="store_true", help="print the report as one JSON object")
    backtest.set_defaults(func=_backtest)

    gen = sub.add_parser(
        "generate-trace",
        help="write a labelled session trace made from a seed",
        description="Write a session trace (docs/trace-format.md) of the kinds of sessions a "
        "course or lab hub has (interactive bursts, lunch breaks, silent training, CPU work on "
        "a GPU server, intents, metrics outages, slow loaders, multi-GPU jobs, pressure "
        "bursts), each labelled and tagged with its kind, to try a policy on with `backtest`. "
        "The same arguments write the same file, byte for byte.",
    )
    gen.add_argument("--seed", type=int, default=1, help="random seed, 0 or more (default: 1)")
    gen.add_argument("--hours", type=float, default=48.0,
                     help=f"length of the trace in hours, at most {MAX_TRACE_HOURS} (default: 48)")
    gen.add_argument("--sessions", type=int, default=80,
                     help=f"number of sessions, 1 to {MAX_TRACE_SESSIONS} (default: 80)")
    start = format_time(DEFAULT_START)
    gen.add_argument("--start", default=start, help=f"start of the trace, RFC 3339 (default: {start})")
    gen.add_argument("--interval", type=int, default=60,
                     help="seconds between samples, %d to %d (default: 60)" % TRACE_INTERVAL_S)
    gen.add_argument("--out", metavar="FILE", required=True, help="the trace file to write; - for stdout")
    gen.set_defaults(func=_generate_trace)

    from .report.command import add_arguments

    add_arguments(sub.add_parser(
        "report",
        help="GPU-hours held, used and idle per user, group, profile and day, from Prometheus",
        description="A GPU usage report from the cluster's own Prometheus history (dcgm-exporter and "
        "kube-state-metrics; nothing installed in the hub): GPU-hours held, used and idle per user, "
        "group, profile and UTC day, the GPU queue, and an estimate of what the default policy would "
        "have freed (docs/report.md).",
    ))
    return parser


def runs_service(argv: Sequence[str]) -> bool:
    """No subcommand (nothing, or only options such as --timeout=3600): run the service.
    -h/--help show this command's help (subcommands and how to see the service options)."""
    return not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help"))


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if runs_service(argv):
        from .launcher import run_app

        sys.exit(run_app(argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(2)
    sys.exit(args.func(args))
