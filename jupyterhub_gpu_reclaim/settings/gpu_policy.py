"""The GPU policy's options: `GpuPolicyOptions`, each option a trait declared in its body.

Organised as `settings.service_options` is: each option declared once, its help beside it. Its
default is the `policy.config.PolicyConfig` field the option sets (read from the field,
never written again); `application.GpuReclaim` has these options as its own
(``--idle-reclaim-after=2h``, ``c.GpuReclaim.idle_reclaim_after``) and makes the policy's
frozen `PolicyConfig` of their typed values in one call (`GpuReclaim.policy_config`: the
policy stays free of traitlets).
"""

from __future__ import annotations

from traitlets import Bool, Float, HasTraits, Set, Unicode

from ..durations import seconds_or_off
from ..policy.config import PolicyConfig
from .service_options import Duration, option_help

_DEFAULT = PolicyConfig()


class GpuPolicyOptions(HasTraits):
    """The GPU policy's options, each a trait with its help, its default `PolicyConfig`'s;
    `policy_config` makes the policy's thresholds of them (with idle-culler's timeout rule)."""

    gpu_idle_threshold = Float(_DEFAULT.gpu_idle_threshold, help=option_help("""
        Percent GPU utilization (DCGM_FI_DEV_GPU_UTIL) below which a GPU counts as idle
        in a sample; in (0, 100].

        Near zero on purpose: a GPU at 3-8% is a slow data loader, not an idle GPU
        (Princeton raised its cut from 0% to 9% and withdrew it after a backlash).
        """)).tag(config=True)

    never_used_warn_after = Duration(_DEFAULT.never_used_warn_after.total_seconds(), help=option_help("""
        Warn a session whose GPU nothing ran on and whose kernels ran no cell this long
        after it started (seconds or "1h"). Default 1 h: the idle rule's warning point, an
        hour before the reclaim.
        """)).tag(config=True)

    never_used_reclaim_after = Duration(_DEFAULT.never_used_reclaim_after.total_seconds(), help=option_help("""
        Reclaim a session whose GPU nothing ran on and whose kernels ran no cell this long
        after it started (seconds or "2h"). Default 2 h: a server's start is its user's
        first action, given the idle rule's window as a cell is (Yale's 1 h is for batch
        jobs; real notebook users often run their first cell 1-2 h after the start).
        """)).tag(config=True)

    idle_warn_after = Duration(_DEFAULT.idle_warn_after.total_seconds(), help=option_help("""
        Warn a session whose GPU was used, then idle this long (seconds or "1h").
        Princeton and Yale: 60 min.
        """)).tag(config=True)

    idle_reclaim_after = Duration(_DEFAULT.idle_reclaim_after.total_seconds(), help=option_help("""
        Reclaim a session whose GPU was used, then idle this long (seconds or "2h").
        Princeton and Yale: 120 min.
        """)).tag(config=True)

    unattended_warn_after = Duration(_DEFAULT.unattended_warn_after.total_seconds(), help=option_help("""
        Warn a session this long after its GPU work (a cell, a job in a terminal) ended
        with nobody there (seconds or "1h"; rule "job-ended-unattended"): when the last
        sign of a person (the browser, a cell, a terminal, a keep-alive) came
        --idle-reclaim-after or more before the work ended, and none since. Default 1 h,
        as --idle-warn-after: the owner's absence during a job says nothing about when
        they come back after it (real users came back 139 and 149 min after day-long jobs).
        """)).tag(config=True)

    unattended_reclaim_after = Duration(_DEFAULT.unattended_reclaim_after.total_seconds(), help=option_help("""
        Reclaim a session this long after its GPU work ended with nobody there (seconds or
        "2h"; see --unattended-warn-after). Default 2 h, as --idle-reclaim-after; shorter
        suits a hub whose GPU work is batch jobs nobody comes back to.
        """)).tag(config=True)

    warning_lead = Duration(_DEFAULT.warning_lead.total_seconds(), help=option_help("""
        Minimum time between the first warning of an idle episode and the reclaim, so
        the user can answer it (seconds or "15m"). Default 15 min.
        """)).tag(config=True)

    cpu_work_keeps_unused_gpu = Bool(_DEFAULT.cpu_work_keeps_unused_gpu, help=option_help("""
        Let CPU work keep a GPU session whose GPU nothing ran on for as long as it goes on
        (rule "cpu-work-on-gpu" off). Off by default: CPU cells that go on for
        --cpu-work-reclaim-after with the GPU untouched are a server on the wrong profile,
        warned --cpu-work-warn-after into the work (the warning says a CPU profile would do
        and offers the keep-alive). Either way a person who runs cells is present: the
        idle timings count from their last cell.
        """)).tag(config=True)

    cpu_work_warn_after = Duration(_DEFAULT.cpu_work_warn_after.total_seconds(), help=option_help("""
        Warn a session whose kernels have run CPU cells, with no pause of --idle-warn-after,
        for this long while its GPU was never used since it started (seconds or "2h"; rule
        "cpu-work-on-gpu"). Default 2 h: Princeton's 2 h of a GPU at 0 %.
        """)).tag(config=True)

    cpu_work_reclaim_after = Duration(_DEFAULT.cpu_work_reclaim_after.total_seconds(), help=option_help("""
        Reclaim a session whose kernels have run CPU cells this long with its GPU never used
        (seconds or "3h"; see --cpu-work-warn-after). Default 3 h: an hour after the warning,
        Yale's hour between the warning and the cancel of an idle GPU, for the user at work
        to answer it (keep alive, or start again on a CPU profile).
        """)).tag(config=True)

    intent_grace = Duration(_DEFAULT.intent_grace.total_seconds(), help=option_help("""
        How long after a "keep alive until" ends an idle session is reclaimed (rule
        "intent-ended"; seconds or "15m"). Its warning comes --warning-lead before the
        end; using the GPU or a kernel from then on cancels it. Default 15 min: the user
        named the time, and the warning already gave them --warning-lead to extend it.
        """)).tag(config=True)

    bridge_gaps_up_to = Duration(_DEFAULT.bridge_gaps_up_to.total_seconds(), help=option_help("""
        Longest gap in the GPU data that the idle clock may run across (seconds or "2h";
        0: never). A gap is bridged only when the samples on both sides show every GPU
        idle and no busy kernel, and the kernels' and terminals' last activity did not
        move across it; otherwise the idle clock starts again after the gap. Missing
        data itself never leads to a reclaim. Default 2 h, the GPU-idle rule's window.
        """)).tag(config=True)

    max_keepalive = Duration(_DEFAULT.max_keepalive.total_seconds(), help=option_help("""
        Longest "keep alive until" a user can declare, counted from when it is set
        (seconds or "12h"). Default 12 h (GitHub Codespaces' cap).
        """)).tag(config=True)

    stale_after = Duration(_DEFAULT.stale_after.total_seconds(), help=option_help("""
        GPU data older than this is missing, and a session with missing GPU data is held,
        never reclaimed (seconds or "5m"; > 0). Default 5 min.
        """)).tag(config=True)

    gpu_max_age = Duration(seconds_or_off(_DEFAULT.max_age), help=option_help("""
        Optional hard lifetime of GPU sessions from their start, warned --warning-lead
        before (seconds or "7d"). It also caps keep-alive intents. 0: off (default).
        """)).tag(config=True)

    pressure_only = Bool(_DEFAULT.pressure_only, help=option_help("""
        Reclaim GPU sessions only while GPU requests are pending (pods unschedulable
        for nvidia.com/gpu). Warnings still go out. Default off.
        """)).tag(config=True)

    exempt_users = Set(Unicode(), set(_DEFAULT.exempt_users), help=option_help("""
        User names whose GPU sessions are never reclaimed.
        """)).tag(config=True)

    exempt_groups = Set(Unicode(), set(_DEFAULT.exempt_groups), help=option_help("""
        JupyterHub groups whose members' GPU sessions are never reclaimed.
        """)).tag(config=True)

    exempt_profiles = Set(Unicode(), set(_DEFAULT.exempt_profiles), help=option_help("""
        KubeSpawner profile slugs whose sessions are never reclaimed: the profile the
        spawner applied (its pod's jupyterhub-gpu-reclaim/profile annotation), else the one
        the spawn named.
        """)).tag(config=True)
