"""benchmarks/service_cycle.py's table and verdict, from the rounds of each tool."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.cycle.measure import summary
from benchmarks.cycle.scene import Scene


def table(ours: dict[str, Any], culler: dict[str, Any], prefilled: dict[str, Any] | None = None) -> str:
    def hub_cell(r: dict[str, Any]) -> str:
        c = r["fake_counts_per_cycle"]
        hub = {k: v for k, v in c.items() if k.startswith("hub:")}
        total = sum(hub.values())
        pages = hub.get("hub:users-page", 0)
        rest = ", ".join(f"{k[4:]} {v:g}" for k, v in hub.items() if k != "hub:users-page")
        return f"{total:g} ({pages:g} pages{', ' + rest if rest else ''})"

    def probes(r: dict[str, Any]) -> str:
        c = r["fake_counts_per_cycle"]
        k = c.get("server:kernels", 0)
        return f"{k:g} servers ({k + c.get('server:terminals', 0):g} requests)" if k else "0"

    rows = ["| tool | cycle p50 / max (s) | CPU p50 (s) | first cycle (CPU) (s) | peak RSS (MiB) | hub requests / cycle "
            "| Prometheus queries / cycle | kernel probes / cycle |",
            "|---|---|---|---|---|---|---|---|"]
    for r in (ours, prefilled, culler):
        if r is None:
            continue
        name = r["tool"] + (" (pods: PodSignal list + watch)" if r.get("pods") == "watch" else
                            " (pods: view pre-filled)" if r.get("pods") == "fake" else "")
        rows.append(f"| {name} | {r['cycles']['p50']:.2f} / {r['cycles']['max']:.2f} | {r['cpu_p50']:.2f} "
                    f"| {r['first']:.2f} ({r['first_cpu']:.2f}) "
                    f"| {r['VmHWM']:.0f} | {hub_cell(r)} "
                    f"| {r['fake_counts_per_cycle'].get('prometheus:query', 0):g} | {probes(r)} |")
    return "\n".join(rows)


def verdict(ours: dict[str, Any], culler: dict[str, Any], scene: Scene) -> str:
    p50, cp50 = ours["cycles"]["p50"], culler["cycles"]["p50"]
    ratio = p50 / cp50
    c = ours["fake_counts_per_cycle"]
    hub_only_pages = all(k in ("hub:users-page",) for k in c if k.startswith("hub:"))
    lines = [
        f"- cycle < 3 s: p50 {p50:.2f} s, max {ours['cycles']['max']:.2f} s, first {ours['first']:.2f} s "
        f"→ {'met' if ours['cycles']['max'] < 3 and ours['first'] < 3 else 'NOT met'}",
        f"- RSS < 200 MB: peak {ours['VmHWM']:.0f} MiB ({ours['VmHWM'] * 1.048576:.0f} MB) "
        f"→ {'met' if ours['VmHWM'] * 1.048576 < 200 else 'NOT met'}",
        f"- ≤ 1.5 × idle-culler's cycle: {p50:.2f} s / {cp50:.2f} s = {ratio:.2f}× "
        f"→ {'met' if ratio <= 1.5 else 'NOT met'} (at most idle-culler's: "
        f"{'met' if ratio <= 1 else 'NOT met'})",
        "- the first cycle's CPU beyond the steady cycles' (p50) of its round: "
        + ", ".join(f"{x:+.2f} s" for x in ours["first_extra_cpu"])
        + f" → {'under' if max(ours['first_extra_cpu']) < 0.5 else 'NOT under'} 0.5 s",
        f"- CPU p50 (the machine's load moves it less than the wall time): {ours['cpu_p50']:.2f} s / "
        f"{culler['cpu_p50']:.2f} s = {ours['cpu_p50'] / culler['cpu_p50']:.2f}×",
        f"- hub requests = pages only: {'yes' if hub_only_pages else 'no'}; Prometheus queries ≤ 2: "
        f"{'yes' if c.get('prometheus:query', 0) <= 2 else 'no'}; kernel probes only for GPU-idle "
        f"candidates ({scene.idle_servers}): "
        f"{'yes' if c.get('server:kernels', 0) == scene.idle_servers else 'no'}",
    ]
    return "\n".join(lines)


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds of one tool together: every timed cycle pooled, the worst first cycle
    and peak RSS; per-cycle counts from the first round (they do not vary)."""
    out = dict(runs[0])
    out["times"] = [t for r in runs for t in r["times"]]
    out["cycles"] = summary(out["times"])
    out["cpu_p50"] = statistics.median(c for r in runs for c in r["cpu"])  # the machine's load moves it less
    out["first"] = max(r["first"] for r in runs)
    out["firsts"] = [r["first"] for r in runs]
    out["first_cpu"] = max(r["first_cpu"] for r in runs)
    out["first_cpus"] = [r["first_cpu"] for r in runs]
    out["first_extra_cpu"] = [r["first_cpu"] - statistics.median(r["cpu"]) for r in runs]
    out["VmHWM"] = max(r["VmHWM"] for r in runs)
    out["VmRSS"] = max(r["VmRSS"] for r in runs)
    return out


def sizes_table(scenes: list[Scene], sizes: dict[int, dict[str, dict[str, Any]]]) -> str:
    """One row per size: ours (both pods variants) and idle-culler, run alternately, and how
    each grows from the smallest size."""
    rows = ["| servers (GPU) | ours: cycle p50 (CPU) / first (CPU) / peak RSS | pods view pre-filled: p50 / peak "
            "| idle-culler 2.0: p50 (CPU) / peak | ours / idle-culler (p50; CPU) | growth from the first size: "
            "ours / idle-culler (CPU p50; peak RSS) |",
            "|---|---|---|---|---|---|"]
    base = sizes[scenes[0].servers]

    def grown(r: dict[str, dict[str, Any]], tool: str, key: str) -> float:
        return r[tool][key] / base[tool][key]

    for scene in scenes:
        r = sizes[scene.servers]
        ours, culler, pre = r["ours"], r["culler"], r.get("ours-prefilled")
        pre_cell = f"{pre['cycles']['p50']:.2f} s / {pre['VmHWM']:.0f} MiB" if pre else "–"

        rows.append(
            f"| {scene.servers:,} ({scene.gpu_servers:,}) "
            f"| {ours['cycles']['p50']:.2f} s ({ours['cpu_p50']:.2f} s) / {ours['first']:.2f} s ({ours['first_cpu']:.2f} s) "
            f"(after {ours['startup']:.2f} s) "
            f"/ {ours['VmHWM']:.0f} MiB "
            f"| {pre_cell} "
            f"| {culler['cycles']['p50']:.2f} s ({culler['cpu_p50']:.2f} s) / {culler['VmHWM']:.0f} MiB "
            f"| {ours['cycles']['p50'] / culler['cycles']['p50']:.2f}×; {ours['cpu_p50'] / culler['cpu_p50']:.2f}× "
            f"| {grown(r, 'ours', 'cpu_p50'):.1f}× / {grown(r, 'culler', 'cpu_p50'):.1f}×; "
            f"{grown(r, 'ours', 'VmHWM'):.1f}× / {grown(r, 'culler', 'VmHWM'):.1f}× |")
    return "\n".join(rows)
