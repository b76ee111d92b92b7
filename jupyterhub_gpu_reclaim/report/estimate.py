"""What the default policy would have freed, estimated on what Prometheus's history shows:
GPU readings and pod lifetimes, no kernel, terminal or browser activity. So it assumes, and
says so (ASSUMED), and errs toward keeping wherever the history cannot tell."""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..durations import HOUR, format_duration
from ..policy.config import PolicyConfig
from .history import ABSENT, IDLE, NO_VALUE, USED, GpuTimeline, Pod


DEFAULT_POLICY = "the default policy"  # the command's; the admin page estimates by the service's own settings


def assumed(config: PolicyConfig, policy: str = DEFAULT_POLICY) -> list[str]:
    """The estimate's assumptions, each a sentence for the report (`policy`: whose settings)."""
    idle = format_duration(reclaim_after(config, used=True))
    never = format_duration(reclaim_after(config, used=False))
    return [
        f"{policy[:1].upper()}{policy[1:]}: a GPU under {config.gpu_idle_threshold:g}% counts as idle; a session whose "
        f"GPU was used, then idle, is reclaimed {idle} into the idle stretch, one whose GPU was never "
        f"used {never} after its start (rules gpu-idle and gpu-never-used).",
        "Prometheus holds no kernel, terminal or browser activity: the estimate assumes nobody ran a "
        "cell or a command in the idle stretch; a person working on the CPU would have kept the GPU.",
        "Only stretches after which the pod ended without using the GPU again are counted (the hours "
        "from the reclaim to the pod's end); a stretch after which the GPU was used again is a reclaim "
        "that would have interrupted someone, counted apart and not freed.",
        "A missing reading restarts the idle clock (the policy holds sessions without data); a "
        "stretch still idle at the end of the window, and time-sliced GPUs (their readings are the "
        "whole device's), are not counted.",
    ]


def reclaim_after(config: PolicyConfig, *, used: bool) -> dt.timedelta:
    """How long into an idle stretch the policy reclaims: its rule's time, and never sooner
    than the warning lead after the rule's warning."""
    if used:
        return max(config.idle_reclaim_after, config.idle_warn_after + config.warning_lead)
    return max(config.never_used_reclaim_after, config.never_used_warn_after + config.warning_lead)


@dataclass
class Estimate:
    gpu_hours_freed: float = 0.0
    reclaims: int = 0  # idle stretches that ended with their pod, reclaimed
    interruptions: int = 0  # long-enough stretches after which the GPU was used again
    gpu_hours_idle_at_end: float = 0.0  # past the reclaim point, still idle when the window ends
    shared_left_out: int = 0  # pods on time-sliced GPUs
    freed_steps: list[tuple[int, int, int]] = field(default_factory=list)  # (first step, step after, GPUs) freed

    def as_dict(self) -> dict:
        return {"estimate": True, "gpu_hours_freed": round(self.gpu_hours_freed, 2), "reclaims": self.reclaims,
                "would_have_interrupted": self.interruptions,
                "gpu_hours_idle_at_end_not_counted": round(self.gpu_hours_idle_at_end, 2),
                "pods_on_time_sliced_gpus_left_out": self.shared_left_out}


def session_codes(lines: list[GpuTimeline]) -> bytes:
    """One code a step for a pod: USED when any GPU it held was used, NO_VALUE when one had
    no reading, IDLE when every one was idle, ABSENT when it held none (z2jh names a user's
    pod alike each time, and it may hold another GPU the next time)."""
    if len(lines) == 1:
        return bytes(lines[0].codes)
    out = bytearray(len(lines[0].codes))
    for i, codes in enumerate(zip(*(line.codes for line in lines), strict=True)):
        present = [c for c in codes if c != ABSENT]
        if present:
            out[i] = USED if USED in present else NO_VALUE if NO_VALUE in present else IDLE
    return bytes(out)


def held_at(lines: list[GpuTimeline], i: int) -> int:
    """How many GPUs the pod held at step `i` (a pod name comes back on other GPUs)."""
    return sum(1 for line in lines if line.codes[i] != ABSENT)


def estimate(gpus: Mapping[tuple, GpuTimeline], step: int, config: PolicyConfig | None = None) -> Estimate:
    config = config or PolicyConfig()
    h = step / HOUR.total_seconds()
    stale = max(1, int(config.stale_after.total_seconds() // step))
    by_pod: dict[Pod, list[GpuTimeline]] = {}
    for line in gpus.values():
        by_pod.setdefault(line.pod, []).append(line)
    result = Estimate()
    ended = re.compile(rb"\x00{%d,}" % (stale + 1))
    for lines in by_pod.values():
        if any(line.shared for line in lines):
            result.shared_left_out += 1
            continue
        codes = session_codes(lines)
        n = len(codes)
        session_starts = [m.end() for m in ended.finditer(codes)]
        for run in re.finditer(rb"\x01+", codes):
            starts_before = bisect_right(session_starts, run.start())  # session_starts ascend
            begin = session_starts[starts_before - 1] if starts_before else 0
            used = codes.rfind(bytes([USED]), begin, run.start()) >= 0
            wait = int(reclaim_after(config, used=used).total_seconds() // step)
            past = run.end() - run.start() - wait
            if past <= 0:
                continue
            after = run.end()
            held = held_at(lines, after - 1)
            if after == n:
                result.gpu_hours_idle_at_end += past * h * held
            elif codes[after] == USED:
                result.interruptions += 1
            elif codes[after] == ABSENT:
                if ended.match(codes, after) is not None or codes.count(ABSENT, after) == n - after:
                    result.reclaims += 1
                    result.gpu_hours_freed += past * h * held
                    result.freed_steps.append((after - past, after, held))
            # NO_VALUE after: the policy would have held; unknown, not counted
    return result
