"""What the default policy would have freed, estimated on what Prometheus's history shows:
GPU readings and pod lifetimes, no kernel, terminal or browser activity. So it assumes, and
says so (ASSUMED), and errs toward keeping wherever the history cannot tell."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..durations import HOUR, format_duration
from ..policy.config import PolicyConfig
from .timelines import ABSENT, NO_VALUE, USED
from .sessions import Session


_UNREAD = bytes([ABSENT, NO_VALUE])
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
    shared_left_out: int = 0  # pods (sessions) on time-sliced GPUs
    freed_steps: list[tuple[int, int, int]] = field(default_factory=list)  # (first step, step after, GPUs) freed

    def as_dict(self) -> dict:
        return {"estimate": True, "gpu_hours_freed": round(self.gpu_hours_freed, 2), "reclaims": self.reclaims,
                "would_have_interrupted": self.interruptions,
                "gpu_hours_idle_at_end_not_counted": round(self.gpu_hours_idle_at_end, 2),
                "pods_on_time_sliced_gpus_left_out": self.shared_left_out}


def estimate(sessions: Iterable[Session], steps: int, step: int, config: PolicyConfig | None = None) -> Estimate:
    """The policy's reclaims in each session of a window of `steps` steps: each idle
    stretch long enough, freed from the reclaim to the stretch's end when the pod ended then
    without using its GPU again (its last steps without a reading, no longer than
    stale_after, do not hide its end: its exporter and kube-state-metrics are scraped at
    other times)."""
    config = config or PolicyConfig()
    h = step / HOUR.total_seconds()
    stale = max(1, int(config.stale_after.total_seconds() // step))
    result = Estimate()
    for session in sessions:
        if session.shared:
            result.shared_left_out += 1
            continue
        codes = session.codes()
        for run in re.finditer(rb"\x01+", codes):
            used = codes.rfind(bytes([USED]), 0, run.start()) >= 0
            wait = int(reclaim_after(config, used=used).total_seconds() // step)
            past = run.end() - run.start() - wait
            if past <= 0:
                continue
            after = run.end()
            rest = codes[after:]
            held = session.held_at(session.first + after - 1)
            if len(rest) <= stale and not rest.strip(_UNREAD):  # the session ends with the stretch
                if session.end == steps:
                    result.gpu_hours_idle_at_end += past * h * held
                else:
                    result.reclaims += 1
                    result.gpu_hours_freed += past * h * held
                    result.freed_steps.append((session.first + after - past, session.first + after, held))
            elif codes[after] == USED:
                result.interruptions += 1
            # else a missing reading: the policy would have held (unknown), not counted
    return result
