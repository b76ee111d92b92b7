"""The cycle on what jupyterhub-idle-culler 2.0 is run on: a hub without Kubernetes (no pod
source: every server is culled by idle-culler's rule) and idle-culler 2.0's
`cull_arbiter_hook`, called as 2.0's `handle_server` calls it. The hooks are the ones
idle-culler documents: its trait's help (`my_cull_arbiter`, servers with the profile
"unlimited" never culled) and its own tests (`cull_arbiter_function`, always True;
`async_cull_arbiter_function`, async, always False). On a virtual clock (the harness of
tests/support/harness.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading

import pytest

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.signals.hub import HubServer

from ..support.clock import START, at
from ..support.cycles import P
from ..support.harness import Harness


@pytest.fixture
def harness(tmp_path):
    made: list[Harness] = []

    def make(**kw) -> Harness:
        (tmp_path / str(len(made))).mkdir()
        made.append(Harness(tmp_path / str(len(made)), **kw))
        return made[-1]

    yield make
    for h in made:
        h.store.close()


# idle-culler 2.0's documented hooks (its cull_arbiter_hook help; its tests)
def my_cull_arbiter(inactive, inactive_limit, server):
    if server["state"]["profile_name"] == "unlimited":
        return False
    return inactive.total_seconds() >= inactive_limit


def cull_arbiter_function(inactive, inactive_limit, server):
    return True


async def async_cull_arbiter_function(inactive, inactive_limit, server):
    return False


def model(profile: str, last_activity: dt.datetime | None = START) -> dict:
    """A server model as the hub lists it to a role with admin:server_state."""
    return {"name": "", "ready": True, "pending": None, "started": START.isoformat(),
            "last_activity": last_activity.isoformat() if last_activity else None,
            "state": {"profile_name": profile}}


def no_kubernetes(h):
    """The service on a hub without Kubernetes: no pod source (launcher.build)."""
    h.reclaimer.pods = None
    h.pods.pods.clear()
    return h


async def test_without_kubernetes_every_server_is_culled_by_idle_cullers_rule(harness):
    h = no_kubernetes(harness())
    idle = h.add("alice", gpus=None, last_activity=START)
    named = h.add("alice", gpus=None, name="lab", last_activity=at(20))
    active = h.add("bob", gpus=None, last_activity=START)

    def each(t):
        h.hub.servers[active] = HubServer(user="bob", started=START, ready=True, last_activity=t, url="/user/bob/")

    await h.run_until(at(90), each)
    assert h.stopped(idle) == [at(60)] and h.stopped(named) == [at(80)]  # inactive >= --timeout (60 min)
    assert h.decisions(idle)[-1] == (at(60), "reclaim", "idle-culler-timeout")
    assert {(a, r) for _, a, r in h.decisions(active)} == {("keep", "idle-culler")}
    assert h.stopper.calls == [("alice", ""), ("alice", "lab")]
    assert h.metric(P + "cycles_total", result="ok") == len(h.reports)  # no pod list to fail
    assert h.metric(P + "holds", reason="pod-missing") is None
    assert h.metric(P + "signal_errors_total", source="pods") is None
    assert h.metric(P + "sessions", gpu="false", action="keep", rule="idle-culler") == 1


async def test_the_hook_is_called_as_idle_culler_calls_it(harness):
    calls = []

    def hook(**kwargs):
        calls.append(kwargs)
        return False

    h = harness(cull_arbiter_hook=hook)
    cpu = h.add("bob", gpus=0, last_activity=at(-20), model=model("small", at(-20)))
    never = h.add("carol", gpus=0, model=model("small", None))  # no last_activity: since the start
    h.add("alice")  # a GPU session: the GPU policy's, never the hook's
    await h.cycle()
    assert [sorted(c) for c in calls] == [["inactive", "inactive_limit", "server"]] * 2  # keywords
    assert calls[0]["inactive"] == dt.timedelta(minutes=20) and calls[0]["inactive_limit"] == 3600
    assert calls[1]["inactive"] == dt.timedelta(0)
    assert calls[0]["server"] is h.hub.servers[cpu].model  # the hub's own model, as 2.0 passes it
    assert h.reports[-1].decisions[never].measured.cull_arbiter is False


async def test_idle_cullers_documented_profile_hook_keeps_unlimited(harness):
    h = harness(cull_arbiter_hook=my_cull_arbiter)
    plain = h.add("bob", gpus=0, last_activity=START, model=model("small"))
    unlimited = h.add("carol", gpus=0, last_activity=START, model=model("unlimited"))
    await h.run_until(at(90))
    assert h.stopped(plain) == [at(60)]  # the default rule: inactive >= inactive_limit
    assert h.stopped(unlimited) == []
    assert h.decisions(unlimited)[-1][1:] == ("keep", "idle-culler")
    assert "cull_arbiter_hook says keep" in h.reports[-1].decisions[unlimited].reason


async def test_idle_cullers_test_hooks_cull_at_once_and_keep_for_ever(harness):
    h = harness(cull_arbiter_hook=cull_arbiter_function)
    fresh = h.add("bob", gpus=0, last_activity=START)
    await h.cycle()
    # time has not passed but the arbiter says cull: culled (2.0's test_custom_cull_arbiter)
    assert h.stopped(fresh) == [START]

    h = harness(cull_arbiter_hook=async_cull_arbiter_function, policy=PolicyConfig(cpu_max_age=dt.timedelta(hours=2)))
    old = h.add("carol", gpus=0, last_activity=at(hours=-5), started=at(hours=-5))
    await h.run_until(at(10))
    # the async hook says keep (2.0's test_async_custom_cull_arbiter); --max-age still applies
    assert h.decisions(old)[0][1:] == ("reclaim", "idle-culler-max-age")


async def test_the_server_kinds_not_culled_stay_whatever_the_hook_says(harness):
    h = harness(cull_arbiter_hook=cull_arbiter_function, policy=PolicyConfig(cull_named_servers=False))
    named = h.add("bob", gpus=0, name="lab", last_activity=START)
    default = h.add("bob", gpus=0, last_activity=START)
    await h.cycle()
    assert h.stopped(default) == [START] and h.stopped(named) == []


async def test_a_hook_that_raises_holds_that_server_only_logged_once(harness, caplog):
    caplog.set_level(logging.INFO)
    h = harness(cull_arbiter_hook=my_cull_arbiter)
    stateless = h.add("bob", gpus=0, last_activity=at(-90), model={"name": ""})  # no "state": KeyError
    other = h.add("carol", gpus=0, last_activity=at(-90), model=model("small", at(-90)))
    await h.run_until(at(10))
    assert {(a, r) for _, a, r in h.decisions(stateless)} == {("hold", "cull-arbiter-failed")}
    d = h.reports[-1].decisions[stateless]
    assert "the cull_arbiter_hook raised KeyError: 'state'; kept" in d.reason
    assert h.stopped(stateless) == [] and h.stopped(other) == [START]
    assert caplog.text.count("server bob kept") == 1 and "Traceback" in caplog.text
    assert h.metric(P + "holds", reason="cull-arbiter-failed") == 1


@pytest.mark.parametrize("argv, env, kube_file, reads_pods", [
    ([], {}, False, False),  # a hub without Kubernetes
    ([], {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False, True),  # in a pod
    ([], {"KUBECONFIG": "/etc/kube/config"}, False, True),
    ([], {}, True, True),  # ~/.kube/config
    (["--kubeconfig=/etc/kube/config"], {}, False, True),
    (["--kubernetes=false"], {"KUBECONFIG": "/etc/kube/config"}, False, False),
    (["--kubernetes=true"], {}, False, True),
])
def test_pods_are_read_where_kubernetes_is(tmp_path, monkeypatch, argv, env, kube_file, reads_pods):
    from jupyterhub_gpu_reclaim.application import GpuReclaim
    from jupyterhub_gpu_reclaim.launcher import build, service_settings
    from jupyterhub_gpu_reclaim.service.metrics import Metrics
    from jupyterhub_gpu_reclaim.signals.pods import PodSignal
    from jupyterhub_gpu_reclaim.store import Store

    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"JUPYTERHUB_API_TOKEN": "t0ken", "HOME": str(tmp_path), **env}.items():
        monkeypatch.setenv(name, value)
    if kube_file:
        (tmp_path / ".kube").mkdir()
        (tmp_path / ".kube" / "config").write_text("{}")
    app = GpuReclaim()
    app.parse_command_line(["--url=http://hub:8081/hub/api", "--prometheus-url=http://prometheus", *argv])
    with Store.open(f"sqlite:///{tmp_path}/store.sqlite") as store:
        r = build(service_settings(app), store, Metrics())
    assert isinstance(r.pods, PodSignal) is reads_pods and (r.pods is None) is not reads_pods
    # without pods no server has GPUs: no GPU source, no kernel probes, no pod to wait for
    assert (r.gpu is None, r.kernels is None, r.stopper.pod_gone is None) == (not reads_pods,) * 3


# --cull-arbiter-timeout: a hook that hangs or raises anything holds only its own server

def hanging_for(user: str, release: threading.Event, calls: list[str]):
    """A synchronous hook that blocks (until `release`, 10 s at most) for `user`'s server and
    says cull for the others'."""
    def hook(inactive, inactive_limit, server):
        calls.append(server["name"])
        if server["name"] == user:
            release.wait(10)
        return True
    return hook


async def test_a_synchronous_hook_that_hangs_holds_only_its_own_server_off_the_event_loop(harness):
    release, calls = threading.Event(), []
    h = harness(cull_arbiter_hook=hanging_for("bob", release, calls), cull_arbiter_timeout=0.5)
    try:
        bob = h.add("bob", gpus=0, last_activity=START, model={"name": "bob"})
        carol = h.add("carol", gpus=0, last_activity=START, model={"name": "carol"})
        ticks = 0

        async def tick():  # the event loop's other work: the pages, /health
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await h.cycle()
        ticker.cancel()
        assert h.stopped(carol) == [START]  # asked with bob, answered, culled
        d = h.reports[-1].decisions[bob]
        assert (d.action, d.rule) == ("hold", "cull-arbiter-failed")
        assert "the cull_arbiter_hook did not answer within 0.5 s" in d.reason
        assert ticks >= 5, ticks  # the loop ran on while the hook blocked (0.5 s)
        # its thread cannot be stopped: while its call runs on, bob's server is not asked again
        await h.cycle()
        assert calls == ["bob", "carol"]
        assert "is still running" in h.reports[-1].decisions[bob].reason
        release.set()
        await asyncio.sleep(0.2)
        await h.cycle()  # the call returned: asked again, and its answer holds
        assert calls == ["bob", "carol", "bob"] and h.stopped(bob) == [h.reports[-1].t]
    finally:
        release.set()


async def test_an_async_hook_that_hangs_even_through_its_cancellation_holds_only_its_server(harness):
    cancelled = []

    async def hook(inactive, inactive_limit, server):
        if server["name"] == "bob":
            for _ in range(30):  # ignores its cancellation (for 3 s at most)
                try:
                    await asyncio.sleep(0.1)
                except asyncio.CancelledError:
                    cancelled.append(server["name"])
        return True

    h = harness(cull_arbiter_hook=hook, cull_arbiter_timeout=0.5)
    bob = h.add("bob", gpus=0, last_activity=START, model={"name": "bob"})
    carol = h.add("carol", gpus=0, last_activity=START, model={"name": "carol"})
    await asyncio.wait_for(h.cycle(), 5)
    assert h.stopped(carol) == [START] and cancelled == ["bob"]
    assert "did not answer within 0.5 s" in h.reports[-1].decisions[bob].reason
    await asyncio.wait_for(h.cycle(), 5)
    assert "is still running" in h.reports[-1].decisions[bob].reason and h.stopped(bob) == []


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, GeneratorExit, asyncio.CancelledError])
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_hook_raising_a_base_exception_holds_its_server_and_the_service_goes_on(harness, caplog, raised, kind):
    def sync_hook(inactive, inactive_limit, server):
        if server["name"] == "bob":
            raise raised("the hook's own")
        return True

    async def async_hook(**kwargs):
        return sync_hook(**kwargs)

    h = harness(cull_arbiter_hook=sync_hook if kind == "sync" else async_hook)
    bob = h.add("bob", gpus=0, last_activity=START, model={"name": "bob"})
    carol = h.add("carol", gpus=0, last_activity=START, model={"name": "carol"})
    await h.cycle()
    await h.cycle()
    assert h.stopped(carol) == [START] and h.stopped(bob) == []
    assert {(r.decisions[bob].action, r.decisions[bob].rule) for r in h.reports} == {("hold", "cull-arbiter-failed")}
    assert f"the cull_arbiter_hook raised {raised.__name__}: the hook's own" in h.reports[-1].decisions[bob].reason
    assert caplog.text.count("server bob kept") == 1 and h.reports[-1].error is None
