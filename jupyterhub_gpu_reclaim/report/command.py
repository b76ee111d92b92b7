"""`jupyterhub-gpu-reclaim report`: its arguments, their checks (bad input: one line and exit
2) and the run (Prometheus or the hub failing: one line and exit 1). The hub's token is read
from the environment, never from the command line (where `ps` shows it)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from urllib.parse import urlsplit

from ..signals.http_source import hide_password
from ..signals.prometheus import check_matchers

TOKEN_ENV = "JUPYTERHUB_API_TOKEN"
STEP_S = (10, 3600)
MAX_DAYS = 400


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus-url", metavar="URL", required=True,
                        help="the Prometheus holding the cluster's dcgm-exporter and kube-state-metrics history")
    parser.add_argument("--since", metavar="WHEN", default="30d",
                        help="start of the report, a duration back from now (30d, 36h) or an ISO 8601 time, "
                        "UTC unless it has an offset (default: 30d)")
    parser.add_argument("--until", metavar="WHEN", help="end of the report, as --since (default: now)")
    parser.add_argument("--step", type=int, default=60,
                        help="seconds a step, %d to %d: each GPU's readings are taken at their maximum over "
                        "a step (default: 60)" % STEP_S)
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as one JSON object")
    out.add_argument("--csv", action="store_true", help="print one CSV row per UTC day, user and profile")
    parser.add_argument("--hub-api-url", metavar="URL",
                        help=f"the hub's API (http://hub:8081/hub/api) for the users' groups, with a token "
                        f"allowed read:groups in {TOKEN_ENV}")
    parser.add_argument("--gpu-matchers", metavar="MATCHERS", default="",
                        help='PromQL label matchers selecting the dcgm-exporter job, e.g. job="dcgm-exporter"')
    parser.add_argument("--pod-label", choices=("auto", "pod", "exported_pod"), default="auto",
                        help="the label naming the pod that holds a GPU (as the service's --prometheus-pod-label; "
                        "default: auto)")
    parser.add_argument("--max-series", type=int, default=20_000,
                        help="refuse a window with more series than this in one query (default: 20000)")
    parser.add_argument("--max-samples", type=int, default=1_000_000,
                        help="the most points one range query may return; longer windows are asked in pages "
                        "(default: 1000000)")
    parser.set_defaults(func=run)


def _fail(message: str, code: int) -> int:
    print(f"jupyterhub-gpu-reclaim report: {message}", file=sys.stderr)
    return code


def _url(text: str, option: str) -> str:
    parts = urlsplit(text.strip())
    shown = hide_password(text.strip().split("?", 1)[0].split("#", 1)[0])  # a query may hold a token
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{option} {shown!r}: not an http(s) URL without a query")
    try:
        _ = parts.port  # ValueError for a port that is not a number
    except ValueError:
        raise ValueError(f"{option} {shown!r}: the port is not a number") from None
    return text.strip()


def run(args: argparse.Namespace) -> int:
    from ..timestamps import format_time, parse_since, utcnow
    from .prometheus_range import ReportError
    from .formats import as_csv, as_json, as_text
    from .run import ReportRequest, build_report

    now = utcnow().replace(microsecond=0)
    try:
        prometheus = _url(args.prometheus_url, "--prometheus-url")
        hub = _url(args.hub_api_url, "--hub-api-url") if args.hub_api_url else None
        when = {}
        for option, text in (("--since", args.since), ("--until", args.until)):
            try:
                when[option] = parse_since(text.strip(), now) if text is not None else now
            except (ValueError, OverflowError):
                raise ValueError(f"{option} {text!r}: not a duration back from now (30d, 36h) or an ISO 8601 "
                                 "time (2026-11-02T08:00:00Z)") from None
        since, until = when["--since"], when["--until"]
        if since >= until:
            raise ValueError(f"--since {format_time(since)} is not before --until {format_time(until)}")
        if (until - since).days > MAX_DAYS:
            raise ValueError(f"--since to --until spans more than {MAX_DAYS} days")
        if not STEP_S[0] <= args.step <= STEP_S[1]:
            raise ValueError(f"--step {args.step}: must be from {STEP_S[0]} to {STEP_S[1]} seconds")
        for option, value in (("--max-series", args.max_series), ("--max-samples", args.max_samples)):
            if value < 1:
                raise ValueError(f"{option} {value}: must be 1 or more")
        try:
            check_matchers(args.gpu_matchers)
        except ValueError as e:
            raise ValueError(f"--gpu-matchers: {e}") from None
    except ValueError as e:
        return _fail(str(e), 2)
    token = os.environ.get(TOKEN_ENV) or None
    if hub and not token:
        return _fail(f"--hub-api-url needs a token in {TOKEN_ENV}", 2)
    request = ReportRequest(prometheus, since, until, args.step, args.gpu_matchers, args.pod_label, hub, token,
                            args.max_series, args.max_samples)
    try:
        report = asyncio.run(build_report(request))
    except ReportError as e:
        return _fail(str(e), 1)
    sys.stdout.write(as_json(report) if args.json else as_csv(report) if args.csv else as_text(report))
    return 0
