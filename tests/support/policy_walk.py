"""The policy stepped minute by minute on a simulated clock (`policy.step`, as the service and
the backtest run it), for the policy tests."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.policy.observations import Sample, SessionView, Warning
from jupyterhub_gpu_reclaim.policy.rules import AppliedPolicy
from jupyterhub_gpu_reclaim.policy.scan import retained_samples
from jupyterhub_gpu_reclaim.policy.step import step

from .clock import START, at
from .policy_inputs import CFG, IDLE, mins, per_gpu, session


def walk(util_at, minutes, *, kernels_at=lambda k: IDLE, intent=None, config=CFG, gpus=1,
         pending=1, trim=False):
    """Step minute by minute (`policy.step`, as the service and the backtest do): a sample
    each minute, the session's warnings after each step fed back. Returns (reclaim minute or
    None, warnings sent)."""
    sess = session(gpus=gpus)
    kept: tuple[Sample, ...] = ()
    warnings: tuple[Warning, ...] = ()
    sent = []
    for k in range(minutes + 1):
        kept = kept + (Sample(at(k), per_gpu(util_at(k), gpus), kernels=kernels_at(k)),)
        if trim:
            kept = retained_samples(kept, now=at(k), config=config, gpus=gpus)
        done = step(SessionView(sess, kept, intent=intent, warnings=warnings), now=at(k),
                    pending_gpus=pending, policy=AppliedPolicy(config))
        d, warnings = done.decision, done.warnings
        if d.action == "warn":
            assert warnings[-1] == Warning(sess.id, at(k), d.rule, d.reclaim_at)
            sent.append((k, d.rule, (d.reclaim_at - START) / mins(1)))
        if d.action == "reclaim":
            return k, sent
    return None, sent


def walk_view(s: tuple[Sample, ...]) -> int | None:
    """walk() over given samples: the reclaim minute or None."""
    by_minute = {round((x.t - START) / mins(1)): x for x in s}
    return walk(lambda k: by_minute[k].gpu_util, len(s) - 1, kernels_at=lambda k: by_minute[k].kernels)[0]
