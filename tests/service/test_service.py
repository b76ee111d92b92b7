"""The reclaim cycle (service.Reclaimer) with in-process fakes for the signals and the
stopper, a real Store in tmp_path and a controllable clock: when it warns, reclaims and holds,
across restarts and gaps, and the users it deletes. What it publishes (metrics, status):
test_service_status.py; policy rules in the cycle: test_service_policy_rules.py.

Every harness (tests/support/harness.py; the `harness` fixture: tests/service/conftest.py)
steps its clock by `STEP` (= the settings' cycle_interval) between cycles and waits for the stop
tasks of each cycle (`drain`) before the next one."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from jupyterhub_gpu_reclaim.service import notify
from jupyterhub_gpu_reclaim.service.metrics import Metrics
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.timestamps import format_time

from ..support.clock import START, YALE_NEVER_USED, at
from ..support.cycles import P, STEP


def log_notices(caplog) -> list[str]:
    """The notices the log channel (LogNotifier) wrote, by event."""
    return [r.getMessage().split(" ", 1)[0] for r in caplog.records if r.name == notify.__name__]


# ---------------------------------------------------------------------------- tests


async def test_never_used_gpu_is_warned_at_30_then_reclaimed_at_60(harness, caplog):
    caplog.set_level(logging.INFO)
    h = harness()
    sid = h.add("alice")
    await h.run_until(at(90))

    assert h.warned(sid) == [at(30)]
    assert h.stopped(sid) == [at(60)]
    assert h.stopper.calls == [("alice", "")]
    before = [d for d in h.decisions(sid) if d[0] < at(30)]
    assert {(a, r) for _, a, r in before} == {("keep", "gpu-never-used")}
    assert [(t, a) for t, a, _ in h.decisions(sid) if t >= at(30)] == [
        (at(30), "warn"), (at(35), "keep"), (at(40), "keep"), (at(45), "keep"),
        (at(50), "keep"), (at(55), "keep"), (at(60), "reclaim")]
    (record,) = h.store.reclaims()
    assert (record.session, record.rule, record.outcome, record.gpus) == (sid, "gpu-never-used", "stopped", 1)
    assert len(h.store.open_warnings().get(sid, ())) == 0  # the episode ended with the stop
    assert log_notices(caplog) == ["warning", "reclaim"]
    assert "warn alice (gpu-never-used)" in caplog.text


async def test_busy_gpu_with_stale_activity_is_kept_while_cpu_server_is_culled(harness):
    h = harness()
    gpu = h.add("alice", util=(63.0,), last_activity=START)
    cpu = h.add("bob", gpus=0, last_activity=START)
    await h.run_until(at(90))

    assert {(a, r) for _, a, r in h.decisions(gpu)} == {("keep", "gpu-active")}
    assert h.stopped(gpu) == [] and h.warned(gpu) == []
    # idle-culler: inactive >= --timeout (3600 s), no warning first
    assert h.stopped(cpu) == [at(60)]
    assert h.warned(cpu) == []
    assert h.decisions(cpu)[-1] == (at(60), "reclaim", "idle-culler-timeout")
    assert h.stopper.calls == [("bob", "")]
    assert h.store.reclaims()[0].rule == "idle-culler-timeout"


async def test_busy_kernel_keeps_gpu_idle_session_and_only_gpu_idle_sessions_are_probed(harness):
    h = harness()
    sid = h.add("alice", util=(60.0,))  # used at the start, then idle while a cell runs
    h.add("carol", util=(80.0,))  # busy GPU: never probed
    h.add("bob", gpus=0, last_activity=START)  # no GPU: never probed
    h.add("dave", util=None)  # no GPU data: never probed
    h.kernels.states["/user/alice/"] = ["idle", "busy"]

    def each(t):
        if t == at(5):
            h.set_util("alice", (0.0,))
        if t == at(60):
            h.kernels.states["/user/alice/"] = ["idle"]

    await h.run_until(at(180), each)

    assert {(a, r) for t, a, r in h.decisions(sid) if at(5) <= t < at(60)} == {("keep", "kernel-busy")}
    # the idle clock restarts from the last busy-kernel sample (55 min)
    assert h.warned(sid) == [at(115)]
    assert h.stopped(sid) == [at(175)]
    probed = {url for url, _ in h.kernels.calls}
    assert probed == {"/user/alice/"}
    assert {direct for _, direct in h.kernels.calls} == {"http://10.0.0.7:8888"}  # the pod's address
    assert len(h.kernels.calls) == len([t for t, _, _ in h.decisions(sid) if t >= at(5)])  # once per idle cycle
    assert sum(r.probes for r in h.reports) == len(h.kernels.calls)


async def test_intent_is_honoured(harness):
    h = harness()
    sid = h.add("alice")
    h.store.set_intent(sid, until=at(120), set_at=at(10), by="alice")
    await h.run_until(at(185))

    rules = {t: r for t, _, r in h.decisions(sid)}
    assert all(rules[at(m)] == "intent" for m in range(10, 105, 5))
    # the GPU unused since the intent was set: warned `warning_lead` before its end,
    # reclaimed `intent_grace` after it
    assert h.warned(sid) == [at(105)] and rules[at(105)] == "intent-ended"
    assert h.stopped(sid) == [at(135)]


async def test_keepalive_from_the_spawn_form_is_the_first_intent(harness):
    """GPUReclaimSpawner writes the spawn form's "keep until" on the pod; the service
    takes it as the session's intent, once: a later intent (the keep-alive page) wins."""
    import dataclasses

    h = harness()
    sid = h.add("alice")
    pod = h.pods.pods[sid]
    h.pods.pods[sid] = dataclasses.replace(pod, keepalive_until=at(120))
    await h.run_until(at(30))
    intent = h.store.intents()[sid]
    assert (intent.until, intent.set_at) == (at(120), START)
    h.store.set_intent(sid, until=at(60), set_at=at(35), by="alice")  # shortened later
    await h.run_until(at(125))
    assert h.store.intents()[sid].until == at(60)  # not overwritten by the annotation
    # the never-used clock counts from when the later intent was set (35): due at 65,
    # after the intent's end, so the normal rule warns then
    assert h.warned(sid) == [at(65)] and h.stopped(sid) == [at(95)]


async def test_a_cleared_spawn_keepalive_stays_cleared_until_the_next_spawn(harness):
    """Cleared by the user or an admin, the spawn form's keep-alive does not come back from
    the pod's annotation; a new server start with a new keep-alive counts again."""
    import dataclasses

    h = harness()
    sid = h.add("alice")
    h.pods.pods[sid] = dataclasses.replace(h.pods.pods[sid], keepalive_until=at(120))
    await h.run_until(at(10))
    assert h.store.intents()[sid].until == at(120)
    assert h.store.clear_intent(sid, at(12))
    await h.run_until(at(60))
    assert sid not in h.store.intents()
    assert [r for t, _, r in h.decisions(sid) if t > at(12)][0] != "intent"
    # the server is started again (a new pod) with a new keep-alive
    h.add("alice", started=at(65))
    h.pods.pods[sid] = dataclasses.replace(h.pods.pods[sid], keepalive_until=at(200))
    await h.run_until(at(70))
    assert h.store.intents()[sid].until == at(200)


async def test_dry_run_stops_nothing_and_reports_once_per_episode(harness, caplog):
    caplog.set_level(logging.INFO)
    h = harness(dry_run=True)
    sid = h.add("alice")
    await h.run_until(at(120))

    assert h.stopper.calls == []
    assert h.store.reclaims() == []
    assert [r.t for r in h.reports if sid in r.would_reclaim] == [at(60)]
    assert all(r.stops == [] for r in h.reports)
    assert h.warned(sid) == [at(30)]
    assert h.decisions(sid)[-1][1:] == ("reclaim", "gpu-never-used")  # still decided each cycle
    assert h.metric(P + "reclaims_total", rule="gpu-never-used", outcome="dry-run") == 1
    assert h.metric(P + "reclaims_total", rule="gpu-never-used", outcome="stopped") is None
    assert h.metric(P + "dry_run") == 1
    # dry run: the messages go to the admins only (none here); the log channel still writes
    assert log_notices(caplog) == ["warning"]


async def test_server_whose_pod_is_missing_is_held_never_reclaimed(harness):
    h = harness(step=dt.timedelta(minutes=15))
    gpu = h.add("alice", gpus=None)
    cpu = h.add("bob", gpus=None, last_activity=at(hours=-5))
    await h.run_until(at(240))

    for sid in (gpu, cpu):
        assert {(a, r) for _, a, r in h.decisions(sid)} == {("hold", "pod-missing")}
    assert h.stopper.calls == [] and h.store.reclaims() == []
    assert all(r.warned == [] for r in h.reports)
    assert h.metric(P + "holds", reason="pod-missing") == 2


async def test_without_a_probe_credential_the_session_is_held_with_the_cause(harness, caplog):
    """kernel_probe_credential = "none": no probe, so a due reclaim is held, the cause in the
    evidence; not counted or logged as a failing server every cycle."""
    caplog.set_level(logging.WARNING, "jupyterhub_gpu_reclaim.service")
    h = harness()
    h.reclaimer.kernels = KernelSignal(None)
    sid = h.add("alice")
    await h.run_until(at(90))

    assert h.warned(sid) == [at(30)] and h.stopped(sid) == []
    d = h.reports[-1].decisions[sid]
    assert (d.action, d.rule) == ("hold", "kernel-data-missing")
    assert "kernel_probe_credential = 'none'" in d.measured.problem
    assert h.metric(P + "holds", reason="kernel-data-missing") == 1
    assert h.metric(P + "signal_errors_total", source="kernels") is None
    assert "kernels of alice/" not in caplog.text


def test_the_service_token_goes_to_the_hub_only(tmp_path, monkeypatch):
    """build(): kernel probes get user-owned tokens (minted with the service's token at the
    hub) or nothing; the kernel signal itself never holds the service's token."""
    from jupyterhub_gpu_reclaim.application import GpuReclaim
    from jupyterhub_gpu_reclaim.launcher import build, service_settings
    from jupyterhub_gpu_reclaim.signals.probe_token_client import ProbeTokens

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")
    for argv, credentials in (([], ProbeTokens), (["--kernel-probe-credential=none"], type(None))):
        app = GpuReclaim()
        app.parse_command_line(["--url=http://hub:8081/hub/api", "--kernel-probe-token-lifetime=30m",
                                "--kubernetes=true", *argv])
        with Store.open(f"sqlite:///{tmp_path}/store.sqlite") as store:
            kernels = build(service_settings(app), store, Metrics()).kernels
        assert type(kernels.credentials) is credentials
        assert "service-token" not in repr(vars(kernels))
        if credentials is ProbeTokens:
            assert (kernels.credentials.api_url, kernels.credentials.lifetime) == ("http://hub:8081/hub/api", 1800)


def test_the_gpu_matchers_select_the_default_querys_series(tmp_path, monkeypatch):
    """build(): --prometheus-gpu-matchers go into the default query (the usage report reads
    them too); a query of the admin's own is theirs, as written."""
    from jupyterhub_gpu_reclaim.application import GpuReclaim
    from jupyterhub_gpu_reclaim.launcher import build, service_settings
    from jupyterhub_gpu_reclaim.signals.prometheus import PrometheusSignal, default_query

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")
    mine = "max by (pod) (DCGM_FI_DEV_GPU_UTIL)"
    for argv, query in ((['--prometheus-gpu-matchers=job="dcgm"'], default_query('job="dcgm"')),
                        (['--prometheus-gpu-matchers=job="dcgm"', f"--prometheus-query={mine}"], mine),
                        ([], default_query())):
        app = GpuReclaim()
        app.parse_command_line(["--url=http://hub:8081/hub/api", "--kubernetes=true",
                                "--prometheus-url=http://prometheus:9090", *argv])
        with Store.open(f"sqlite:///{tmp_path}/store.sqlite") as store:
            gpu = build(service_settings(app), store, Metrics()).gpu
        assert isinstance(gpu, PrometheusSignal) and gpu.query == query
    assert 'DCGM_FI_DEV_GPU_UTIL{job="dcgm"}' in default_query('job="dcgm"')


@pytest.mark.parametrize("source", ["missing-for-pod", "no-gpu-source"])
async def test_gpu_data_missing_is_held_never_reclaimed(harness, source):
    h = harness(gpu=source != "no-gpu-source", step=dt.timedelta(minutes=15))
    sids = [h.add("alice", util=None)]  # no series for the pod
    if h.gpu is not None:
        sids.append(h.add("carol", util=(None,)))  # a GPU without a value
        sids.append(h.add("dave", gpus=2, util=(0.0,)))  # one GPU of two
    await h.run_until(at(240))

    for sid in sids:
        assert {(a, r) for _, a, r in h.decisions(sid)} == {("hold", "gpu-data-missing")}
    assert h.stopper.calls == [] and h.store.reclaims() == []
    assert all(r.warned == [] for r in h.reports)
    assert h.metric(P + "holds", reason="gpu-data-missing") == len(sids)
    assert h.kernels.calls == []


async def test_stale_gpu_reading_is_held(harness):
    h = harness(step=dt.timedelta(minutes=15))
    sid = h.add("alice")
    h.gpu.age = dt.timedelta(minutes=6)  # older than stale_after (5 min)
    await h.run_until(at(180))
    assert {(a, r) for _, a, r in h.decisions(sid)} == {("hold", "gpu-data-missing")}
    assert h.stopper.calls == []


@pytest.mark.parametrize("kind", ["never-used", "used-then-idle"])
async def test_restart_keeps_warnings_and_the_idle_clock(harness, kind):
    h = harness()
    sid = h.add("alice", util=(0.0,))
    if kind == "never-used":
        warn_at, reclaim_at, restart_at = at(30), at(60), at(45)
        each = None
    else:  # used until 20 min: warned at 20 + 60, reclaimed at 20 + 120
        warn_at, reclaim_at, restart_at = at(80), at(140), at(100)

        def each(t):
            h.set_util("alice", (55.0,) if t <= at(20) else (0.0,))

    await h.run_until(restart_at - STEP, each)
    assert h.warned(sid) == [warn_at] and h.stopped(sid) == []
    first = len(h.reports)

    h.new_reclaimer()  # the service restarts (same store, nothing in memory)
    await h.run_until(reclaim_at + 3 * STEP, each)
    after = h.reports[first:]
    assert [r.t for r in after if r.warned] == []  # no second warning
    assert [r.t for r in after if sid in r.stops] == [reclaim_at]  # neither earlier nor later
    assert h.stopper.calls == [("alice", "")]
    rule = "gpu-never-used" if kind == "never-used" else "gpu-idle"
    assert h.metric(P + "warnings_total", rule=rule) is None  # the new process sent none
    assert h.metric(P + "reclaims_total", rule=rule, outcome="stopped") == 1
    assert len(h.store.reclaims()) == 1


@pytest.mark.parametrize("gap_minutes,bridge", [(10, True), (15, True), (15, False)])
async def test_gap_longer_than_interval_plus_stale_after_restarts_idle_clock(harness, gap_minutes, bridge):
    h = harness(policy=PolicyConfig(**YALE_NEVER_USED) if bridge else
                PolicyConfig(**YALE_NEVER_USED, bridge_gaps_up_to=dt.timedelta(0)))
    sid = h.add("alice")
    await h.run_until(at(20))
    h.now[0] = at(20 + gap_minutes)  # the service was away
    await h.run_until(at(20 + gap_minutes + 70))

    resumed = at(20 + gap_minutes)
    if gap_minutes == 10:  # not a gap: one missed cycle
        assert h.warned(sid) == [at(30)]
        assert h.stopped(sid) == [at(60)]
    elif bridge:  # a gap, but idle on both sides and no kernel activity: the clock runs on
        assert h.warned(sid) == [resumed]
        assert h.stopped(sid) == [at(60)]  # when the rule says: the warning came 25 min ahead
    else:  # the gap is unknown time: the clock restarts just before `resumed`
        assert h.warned(sid) == [resumed + dt.timedelta(minutes=30)]
        assert h.stopped(sid) == [resumed + dt.timedelta(minutes=60)]


async def test_cull_users_deletes_inactive_users_like_idle_culler(harness):
    h = harness(cull_users=True, policy=PolicyConfig(cull_admin_users=False, cpu_timeout=dt.timedelta(hours=1)))
    old = at(hours=-3)
    h.add("bob", gpus=0, last_activity=old, user_last_activity=old, user_created=old)
    h.add("gina", gpus=0, last_activity=old, user_last_activity=START, user_created=old)
    h.add("gina", gpus=0, name="x", last_activity=START, user_last_activity=START, user_created=old)
    h.add("alice", util=(70.0,), last_activity=old, user_last_activity=old, user_created=old)
    h.hub.inactive = [
        {"name": "dave", "admin": False, "created": "2025-01-01T00:00:00Z", "last_activity": format_time(at(hours=-3))},
        {"name": "erin", "admin": False, "created": "2025-01-01T00:00:00Z", "last_activity": format_time(at(-10))},
        {"name": "frank", "admin": True, "created": "2025-01-01T00:00:00Z", "last_activity": None},
    ]
    await h.run_until(at(10))

    assert sorted(h.stopper.calls) == [("bob", ""), ("gina", "")]
    # bob: his only server was culled and he is inactive; dave: inactive with no server;
    # gina keeps a running server; erin is recent; frank is an admin (cull_admin_users off)
    assert sorted(h.stopper.deleted) == ["bob", "dave"]
    assert h.metric(P + "users_deleted_total") == 2
    assert h.reports[0].users_deleted == ["dave"]


async def test_cull_users_in_dry_run_deletes_nobody(harness):
    h = harness(cull_users=True, dry_run=True)
    old = at(hours=-3)
    h.add("bob", gpus=0, last_activity=old, user_last_activity=old, user_created=old)
    h.hub.inactive = [{"name": "dave", "created": "2025-01-01T00:00:00Z", "last_activity": None}]
    await h.run_until(at(10))
    assert h.stopper.calls == [] and h.stopper.deleted == []
