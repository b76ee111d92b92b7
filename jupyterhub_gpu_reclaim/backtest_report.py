"""The backtest's report as text: what `jupyterhub-gpu-reclaim backtest` prints without
``--json`` (the report itself is `backtest.replay`'s)."""

from __future__ import annotations

from typing import Any

from .backtest import BASELINES

def format_report(report: dict[str, Any]) -> str:
    """The readable summary printed without ``--json``."""
    s = report["summary"]
    tr = report["trace"]
    lines = [
        f"Trace: {tr['sessions']} sessions, {tr['start']} to {tr['end']}"
        + (f" ({tr['source']})" if tr.get("source") else ""),
        f"GPU-hours held: {s['gpu_hours_held']:.1f}",
        f"Warnings: {s['warnings']}    Reclaims: {s['reclaims']}    "
        f"GPU-hours freed: {s['gpu_hours_freed']:.1f}    Holds: {len(report['holds'])}",
    ]
    for r in report["reclaims"]:
        lines.append(f"  reclaim {r['session']} at {r['t']} ({r['rule']}): "
                     f"{r['gpus']} GPU(s), {r['gpu_hours_freed']:.2f} GPU-hours freed"
                     + (f" [policy rule {r['policy_rule']}]" if r.get("policy_rule") else ""))
    for h in report["holds"]:
        lines.append(f"  hold {h['session']} from {h['t']} to {h['last']} ({h['reason']})")
    score = report.get("score")
    if score:
        share = score["recovered_share"]
        lines.append(
            f"Score: {score['false_reclaims']} false reclaim(s), {score['gray_reclaims']} in gray; "
            f"recovered {score['reclaimable_gpu_hours_recovered']:.1f} of "
            f"{score['reclaimable_gpu_hours']:.1f} reclaimable GPU-hours"
            + (f" ({share:.0%})" if share is not None else ""))
    for name, b in report.get("baselines", {}).items():
        text = f"Baseline {name}: {b['reclaims']} reclaim(s), {b['gpu_hours_freed']:.1f} GPU-hours freed"
        if "false_reclaims" in b:
            share = b["recovered_share"]
            text += (f", {b['false_reclaims']} false reclaim(s), recovered "
                     f"{b['reclaimable_gpu_hours_recovered']:.1f} reclaimable GPU-hours"
                     + (f" ({share:.0%})" if share is not None else ""))
        lines.append(text)
    if report.get("scenarios"):
        lines += _scenario_table(report["scenarios"])
    return "\n".join(lines)


def _scenario_table(scenarios: dict[str, Any]) -> list[str]:
    """Per kind of session: recovered share of its reclaimable GPU-hours, false / unwarned reclaims."""
    names = ["policy", *BASELINES]
    width = max(len("scenario"), *(len(k) for k in scenarios))
    lines = ["Per scenario: recovered share of reclaimable GPU-hours (false reclaims / unwarned reclaims)",
             f"  {'scenario':<{width}}  sessions  reclaimable GPU-h  "
             + "  ".join(f"{n:<16}" for n in names).rstrip()]
    for kind, entry in scenarios.items():
        cells = []
        for n in names:
            s = entry[n]
            share = "-" if s["recovered_share"] is None else f"{s['recovered_share']:.0%}"
            cells.append(f"{share:>4} ({s['false_reclaims']}/{s['unwarned_reclaims']})".ljust(16))
        first = entry["policy"]
        lines.append(f"  {kind:<{width}}  {entry['sessions']:>8}  {first['reclaimable_gpu_hours']:>17.1f}  "
                     + "  ".join(cells).rstrip())
    return lines
