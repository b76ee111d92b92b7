"""The backtest's report as text: what `jupyterhub-gpu-reclaim backtest` prints without
``--json`` (the report itself is `backtest.replay`'s)."""

from __future__ import annotations

from typing import Any

from .backtest import BASELINES
from .interruptions import LABELS

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
            f"Score: {score['false_reclaims']} false reclaim(s), {score['gray_reclaims']} in gray, "
            f"{score['unwarned_reclaims']} unwarned; "
            f"recovered {score['reclaimable_gpu_hours_recovered']:.1f} of "
            f"{score['reclaimable_gpu_hours']:.1f} reclaimable GPU-hours"
            + (f" ({share:.0%})" if share is not None else ""))
    lines += _rule_table(report)
    for name, b in report.get("baselines", {}).items():
        text = f"Baseline {name}: {b['reclaims']} reclaim(s), {b['gpu_hours_freed']:.1f} GPU-hours freed"
        if "false_reclaims" in b:
            share = b["recovered_share"]
            text += (f", {b['false_reclaims']} false reclaim(s), recovered "
                     f"{b['reclaimable_gpu_hours_recovered']:.1f} reclaimable GPU-hours"
                     + (f" ({share:.0%})" if share is not None else ""))
        if "returned" in b:
            text += f", users back after {_returned(b['returned'])}"
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


def _returned(returned: dict[str, int]) -> str:
    """"2 / 1 / 0 / 0, never 3": how many users came back after the reclaims, by how soon."""
    soon = " / ".join(str(n) for k, n in returned.items() if k != "never")
    return f"{soon} ({' / '.join(v for k, v in LABELS.items() if k != 'never')}), never {returned['never']}"


def _rule_table(report: dict[str, Any]) -> list[str]:
    """Per rule: reclaims, GPU-hours freed, users interrupted and how soon they came back."""
    rules = report.get("by_rule")
    if not rules:
        return []
    heads = [LABELS[k] for k in next(iter(rules.values()))["returned"]]
    width = max(len("rule"), *(len(r) for r in rules))
    lines = ["Per rule: reclaims, GPU-hours freed, users interrupted (the user came back after the reclaim), by how soon",
             f"  {'rule':<{width}}  reclaims  GPU-h freed  interrupted  " + "  ".join(f"{h:>8}" for h in heads)]
    for rule, r in rules.items():
        lines.append(f"  {rule:<{width}}  {r['reclaims']:>8}  {r['gpu_hours_freed']:>11.1f}  {r['users_interrupted']:>11}  "
                     + "  ".join(f"{n:>8}" for n in r["returned"].values()))
    return lines
