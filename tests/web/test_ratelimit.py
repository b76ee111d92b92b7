"""The per-user budgets of web/ratelimit.py on a virtual clock: what ordinary use never
exceeds, and what a loop gets."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.web.ratelimit import READS_PER_MINUTE, WriteLimiter


def test_ordinary_reads_are_never_limited():
    """Three tabs of JupyterLab polling every 10 s and the admin page (its page and a dozen
    calls) loaded every 15 s, for two hours: never a wait."""
    now = [0.0]
    reads = WriteLimiter(READS_PER_MINUTE, clock=lambda: now[0])
    for second in range(2 * 3600):
        now[0] = float(second)
        calls = (3 if second % 10 == 0 else 0) + (13 if second % 15 == 0 else 0)
        assert all(reads.take("admin") == 0.0 for _ in range(calls)), second


def test_a_read_loop_is_held_to_the_rate_and_told_when_to_come_back():
    now = [0.0]
    reads = WriteLimiter(READS_PER_MINUTE, clock=lambda: now[0])
    waits = [reads.take("mallory") for _ in range(READS_PER_MINUTE + 1)]
    assert waits[:-1] == [0.0] * READS_PER_MINUTE and 0 < waits[-1] <= 60 / READS_PER_MINUTE
    assert reads.take("gina") == 0.0  # per user
    allowed = 0
    for tick in range(60 * 100):  # 762 a second for a minute, 100 per tick
        now[0] = tick / 100
        allowed += sum(reads.take("mallory") == 0.0 for _ in range(8))
    assert allowed <= READS_PER_MINUTE + 1  # the rate after the burst, not the loop's
