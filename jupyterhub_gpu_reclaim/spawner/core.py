"""GPUReclaimSpawner: KubeSpawner that measures each phase of a spawn, says plainly what a
user waits for, keeps pods on nodes that already hold their image, and carries the user's
"keep alive until" from the spawn form to the pod."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import json
from typing import Any

from prometheus_client import Counter, Histogram
from traitlets import Enum, Float, Int, List, Unicode, default

from ..hubcompat import user_options_from_query
from ..policy.config import PolicyConfig
from ..signals.pod_facts import KEEPALIVE_ANNOTATION, PROFILE_ANNOTATION
from ..timestamps import parse_time_lenient, utcnow
from . import affinity, keepalive, messages
from .images import normalize
from .cluster_view import ClusterView
from .timings import SpawnTimings, extract

TIMINGS_ANNOTATION = "jupyterhub-gpu-reclaim/spawn-timings"

# In the hub's default registry: they appear on the hub's /metrics next to
# jupyterhub_server_spawn_duration_seconds.
SPAWN_PHASE_SECONDS = Histogram(
    "jupyterhub_gpu_reclaim_spawn_phase_duration_seconds",
    "Time of each phase of a spawn (create, schedule, pull, start, ready, total), by profile",
    ["phase", "profile"],
    buckets=(0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, float("inf")),
)
SPAWN_IMAGE_PULLS = Counter(
    "jupyterhub_gpu_reclaim_spawn_image_pulls",
    "Spawns whose pod had to pull its image first, by profile", ["profile"])
IMAGE_LOCALITY_DECISIONS = Counter(
    "jupyterhub_gpu_reclaim_image_locality_decisions",
    "Image-locality affinity decisions by configured mode and outcome (disabled, no_holder, "
    "configured, configured_no_room, holder_fits, no_holder_fits)", ["mode", "decision"])
GPU_QUEUE_TIMEOUTS = Counter(
    "jupyterhub_gpu_reclaim_gpu_queue_timeouts", "Spawns withdrawn after waiting too long for a GPU")


class GpuQueueTimeout(Exception):
    """The spawn waited longer than gpu_queue_timeout for a GPU."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.jupyterhub_message = message


def _options_applied_at_start(spawner: GPUReclaimSpawner, user_options: dict) -> None:
    """JupyterHub's (5.3+) apply_user_options hook. KubeSpawner applies the profile and its
    options in load_user_options, at the start, as this spawner does the keep-alive, so
    without a hook the hub said "Received unhandled user_options: profile" at every spawn.
    Options neither of them reads are still named, as the hub names them."""
    unknown = [k for k in user_options
               if k not in ("profile", keepalive.OPTION) and not str(k).startswith("profile-option-")]
    if unknown:
        spawner.log.warning("Received unhandled user_options for %s: %s", spawner._log_name,
                            ", ".join(map(str, unknown)))


class GPUReclaimSpawner(ClusterView):
    image_locality = Enum(
        ["off", "prefer", "require", "auto"], "auto", config=True,
        help="""Keep pods on nodes that already hold their image, with node affinity (no
        custom scheduler). "prefer": preferred affinity towards those nodes; "require":
        required affinity (only such nodes; off when no node holds the image); "auto":
        require when a node holding the image can take the pod now (counting room that
        lower-priority pods such as user placeholders would free by preemption), else
        prefer. Needs list/watch on nodes and pods cluster-wide (docs/spawner.md).""")

    image_locality_weight = Int(
        100, config=True, help="Weight (1-100) of the preferred affinity terms.")

    image_locality_max_nodes = Int(
        50, config=True,
        help="""At most this many nodes are named in the affinity (those with room for the
        pod first): each is one term per existing required term, and the scheduler checks
        every term against every node.""")

    gpu_queue_timeout = Float(
        0, config=True,
        help="""Seconds a spawn may wait for a free GPU (its pod unschedulable for
        lack of nvidia.com/gpu, a MIG instance or a time-sliced replica) before it is withdrawn with a clear message. 0: only start_timeout
        applies.""")

    keepalive_choices = List(
        Unicode(), ["1h", "2h", "4h", "8h", "12h"], config=True,
        help="""Durations the spawn form offers for "Keep this session until" (longer ones
        than the reclaim service's --max-keepalive are left out); a custom time is offered too.""")

    gpu_wait_message_interval = Float(
        10, config=True, help="Seconds between updates of the 'waiting for a free GPU' message.")

    resume_priority_window = Float(
        0, config=True,
        help="""Resume priority (off by default): when the server being started was reclaimed
        by jupyterhub-gpu-reclaim (its GPUs given back while idle) within this many seconds,
        its pod gets resume_priority_class_name, so the user is not sent to the back of the
        GPU queue. 0: off.""")

    resume_priority_class_name = Unicode(
        "", config=True,
        help="""The PriorityClass of resumed sessions' pods (higher than the user pods'
        jhub-default-priority, so the scheduler tries them first). Required with
        resume_priority_window.""")

    _priority_classes: dict[str, tuple[int, bool]] = {}  # name → (value, may preempt), shared

    # ------------------------------------------------------------------ state

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spawn_timings: SpawnTimings | None = None
        self._requested: dt.datetime | None = None
        self._expected_free_failed = False  # the service could not be asked: said once
        # the longest keep-alive: the service's --max-keepalive, its one source (`_keepalive_cap`)
        self.longest_keepalive = PolicyConfig.max_keepalive
        self._keepalive_cap_failed = False
        self.keepalive_until: dt.datetime | None = None
        self.applied_profile = ""  # the slug of the profile KubeSpawner applied ("" without one)

    def get_state(self) -> dict:
        state = super().get_state()
        if self.spawn_timings is not None:
            state["spawn_timings"] = self.spawn_timings.to_state()
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        if state.get("spawn_timings"):
            self.spawn_timings = SpawnTimings.from_state(state["spawn_timings"])

    def clear_state(self) -> None:
        super().clear_state()
        self.spawn_timings = None

    # ------------------------------------------------------------------ the form

    @default("options_form")
    def _options_form_default(self) -> Any:
        base = super()._options_form_default()

        async def form(spawner: GPUReclaimSpawner) -> str:
            extra = keepalive.form_html(spawner.keepalive_choices, await spawner._keepalive_cap())
            text = base
            if callable(base):
                text = await base(spawner) if asyncio.iscoroutinefunction(base) else base(spawner)
                if asyncio.iscoroutine(text):
                    text = await text
            # above the profiles, what is free and who waits; beside each GPU profile, whether
            # it starts now (in the profile list KubeSpawner's form renders)
            room, profiles = await spawner.room()
            if profiles:
                text = spawner._render_options_form(profiles)
            return (f'<p class="gpu-room">{html.escape(room)}</p>' if room else "") + (text or "") + extra

        return form

    @default("options_from_form")
    def _options_from_form_default(self) -> Any:
        return self._gpu_reclaim_options_from_form

    def _gpu_reclaim_options_from_form(self, formdata: dict) -> dict:
        data = {k: v for k, v in formdata.items() if not k.startswith("keepalive")}
        options = self._options_from_form(data) if self.profile_list else {}
        # the cap the form was made with (this method is synchronous)
        until = keepalive.from_form(formdata, now=utcnow(), max_keepalive=self.longest_keepalive)
        if until is not None:
            options[keepalive.OPTION] = keepalive.format_keepalive(until)
        return options

    def options_from_query(self, query_data: dict) -> dict:
        # a spawn link's `opt-` options, on JupyterHub 5 as on 6; a keep-alive needs the form
        query = user_options_from_query(query_data)
        keepalive.refuse_from_link(query)
        return super().options_from_query(query)

    @default("apply_user_options")
    def _apply_user_options_default(self) -> Any:
        return _options_applied_at_start

    async def load_user_options(self) -> None:
        self.applied_profile = ""
        await super().load_user_options()
        options = self.user_options or {}
        # the service is asked only for a spawn that declares a keep-alive
        cap = await self._keepalive_cap() if options.get(keepalive.OPTION) else self.longest_keepalive
        self.keepalive_until = keepalive.from_user_options(options, now=utcnow(), max_keepalive=cap)

    def _load_profile(self, slug: str | None, profile_list: list) -> None:
        # KubeSpawner's hook (private: tests/spawner/test_profile.py notices a change) with
        # its own choice (for no slug: the default profile, else the first one), kept for
        # the pod's annotation: the reclaim service's rules match what was applied
        super()._load_profile(slug, profile_list)
        self.applied_profile = self._get_profile(slug, profile_list)["slug"]

    # ------------------------------------------------------------------ the pod

    async def get_pod_manifest(self) -> Any:
        pod = await super().get_pod_manifest()
        annotations = dict(pod.metadata.annotations or {})
        annotations[PROFILE_ANNOTATION] = self.applied_profile
        if self.keepalive_until is not None:
            annotations[KEEPALIVE_ANNOTATION] = keepalive.format_keepalive(self.keepalive_until)
        pod.metadata.annotations = annotations
        if self.image_locality != "off":
            await self._apply_image_locality(pod)
        return pod

    async def _priority_of(self, name: str | None) -> tuple[int, bool]:
        """(value, may preempt) of a PriorityClass, as admission gives them to the pod;
        (0, True) when unset or unreadable, as for the default class."""
        if not name:
            return 0, True
        cache = GPUReclaimSpawner._priority_classes
        if name not in cache:
            from kubespawner.clients import shared_client

            try:
                pc = await shared_client("SchedulingV1Api").read_priority_class(name)
            except Exception as e:
                self.log.warning("image locality: cannot read PriorityClass %s (%s); using 0", name, e)
                return 0, True
            cache[name] = (int(pc.value or 0), pc.preemption_policy != "Never")
        return cache[name]

    async def _apply_image_locality(self, pod: Any) -> None:
        try:
            nodes_ref, pods_ref = await self._informer("nodes"), await self._informer("pods")
        except Exception as e:  # no RBAC for nodes/pods: spawn as plain KubeSpawner would
            self.log.warning("image locality off for %s: cannot watch nodes and pods (%s)", self._log_name, e)
            IMAGE_LOCALITY_DECISIONS.labels(self.image_locality, "no_rbac").inc()
            return
        spec = self.api.api_client.sanitize_for_serialization(pod)["spec"]
        container = next((c for c in spec["containers"] if c["name"] == "notebook"), spec["containers"][0])
        image = normalize(container["image"])
        index = affinity.ImageIndex()
        nodes = {}
        for node in nodes_ref.resources.values():
            index.update(node)
            nodes[node["metadata"]["name"]] = node
        holders = index.nodes_with(image)
        requests = affinity.pod_requests(spec)
        priority, may_preempt = await self._priority_of(spec.get("priorityClassName"))
        by_node: dict[str, list[dict]] = {}
        for p in pods_ref.resources.values():
            name = (p.get("spec") or {}).get("nodeName")
            if name:
                by_node.setdefault(name, []).append(p)
        node_affinity = dict((spec.get("affinity") or {}).get("nodeAffinity") or {})
        required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms", [])
        candidates, fits = affinity.candidates_and_fits(
            holders, nodes, by_node, requests, priority, spec.get("tolerations") or [],
            spec.get("nodeSelector") or {}, required,
            can_preempt=may_preempt and spec.get("preemptionPolicy") != "Never")
        decision = affinity.choose_mode(self.image_locality, candidates, fits, self.image_locality_max_nodes)
        IMAGE_LOCALITY_DECISIONS.labels(self.image_locality, decision.code).inc()
        self.log.info("image locality for %s (%s): %s - %s", self._log_name, image, decision.mode,
                      decision.reason)
        if decision.mode == "off":
            return
        required, preferred = affinity.apply(
            decision, required, node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"),
            self.image_locality_weight)
        if required:
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
        if preferred:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        # a plain dict is serialised as it is, next to the model's other fields
        pod.spec.affinity = dict(spec.get("affinity") or {}, nodeAffinity=node_affinity)

    # ------------------------------------------------------------------ starting

    def _ref_key(self) -> str:
        return f"{self.namespace}/{self.pod_name}"

    def _pod(self) -> dict | None:
        reflector = self.pod_reflector
        return reflector.pods.get(self._ref_key()) if reflector else None

    def _pending_gpu_pods(self) -> list[dict]:
        reflector = self.pod_reflector
        return [p for p in (reflector.pods.values() if reflector else []) if messages.gpu_wait(p)]

    async def _start(self) -> str:
        self._requested = utcnow()
        self.spawn_timings = None
        if self.resume_priority_window > 0 and self.resume_priority_class_name:
            await self._apply_resume_priority()
        start = asyncio.ensure_future(super()._start())
        watch = asyncio.ensure_future(self._watch_gpu_queue()) if self.gpu_queue_timeout > 0 else None
        try:
            if watch is None:
                url = await start
            else:
                done, _ = await asyncio.wait({start, watch}, return_when=asyncio.FIRST_COMPLETED)
                if watch in done and watch.exception() is not None:
                    start.cancel()
                    await asyncio.gather(start, return_exceptions=True)
                    await self.stop(now=True)
                    raise watch.exception()  # type: ignore[misc]
                url = await start
        finally:
            if watch is not None:
                watch.cancel()
        await self._record_timings()
        return url

    async def _recent_reclaim(self) -> dict | None:
        """This server's latest GPU reclaim within resume_priority_window, from the service."""
        body = await self._ask_service("reclaims", user=self.user.name, since=f"{int(self.resume_priority_window)}s")
        mine = [x for x in body.get("reclaims", [])
                if x.get("server") == self.name and x.get("gpus") and x.get("outcome") == "stopped"]
        return mine[-1] if mine else None

    priority_class_name: str  # KubeSpawner's option (untyped there), set per spawn below

    async def _apply_resume_priority(self) -> None:
        if not hasattr(self, "_plain_priority_class"):
            self._plain_priority_class = self.priority_class_name
        self.priority_class_name = self._plain_priority_class
        try:
            reclaim = await self._recent_reclaim()
        except Exception as e:  # the service down never blocks a spawn
            self.log.warning("resume priority for %s: cannot ask the reclaim service (%s)", self._log_name, e)
            return
        if reclaim is not None:
            self.priority_class_name = self.resume_priority_class_name
            self.log.info("resume priority for %s: its GPU session was reclaimed at %s; pod priority class %s",
                          self._log_name, reclaim["t"], self.resume_priority_class_name)

    async def _watch_gpu_queue(self) -> None:
        """Raise GpuQueueTimeout once the pod has waited gpu_queue_timeout for a GPU."""
        while True:
            await asyncio.sleep(1)
            pod = self._pod()
            wait = messages.gpu_wait(pod) if pod is not None else None
            if pod is None or wait is None:
                continue
            waited = utcnow() - (wait.since or self._requested or utcnow())
            if waited.total_seconds() >= self.gpu_queue_timeout:
                GPU_QUEUE_TIMEOUTS.inc()
                message = messages.queue_timeout_message(waited, wait.kinds)
                self.log.warning("%s: %s", self._log_name, message)
                raise GpuQueueTimeout(message)

    async def _record_timings(self) -> None:
        pod = self._pod()
        if pod is None or self._requested is None:
            return
        try:
            timings = extract(pod, self.events, self._requested)
        except Exception:  # never fail a started server over its statistics
            self.log.exception("could not extract the spawn timings of %s", self._log_name)
            return
        self.spawn_timings = timings
        profile = self.applied_profile
        for phase, seconds in timings.phases().items():
            SPAWN_PHASE_SECONDS.labels(phase, profile).observe(seconds)
        if timings.image_pulled:
            SPAWN_IMAGE_PULLS.labels(profile).inc()
        self.log.info("spawn timings %s", json.dumps(
            {"user": self.user.name, "server": self.name, "profile": profile, **timings.log_fields()}))
        try:
            await self.api.patch_namespaced_pod(
                self.pod_name, self.namespace,
                {"metadata": {"annotations": {TIMINGS_ANNOTATION: json.dumps(timings.to_annotations())}}})
        except Exception as e:
            self.log.warning("could not annotate %s with its spawn timings: %s", self.pod_name, e)

    # ------------------------------------------------------------------ progress

    async def progress(self) -> Any:
        """KubeSpawner's progress, with the scheduler's and kubelet's lines said plainly,
        and a "waiting for a free GPU" line every gpu_wait_message_interval while the pod
        waits for one (the wait is counted from the pod's own condition time)."""
        queue: asyncio.Queue = asyncio.Queue()
        done = object()

        async def pump() -> None:
            try:
                async for event in super(GPUReclaimSpawner, self).progress():
                    await queue.put(event)
            finally:
                await queue.put(done)

        task = asyncio.ensure_future(pump())
        try:
            while True:
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the item
                    # when the hub cancels the read just as one arrives, and a stream that
                    # then ends breaks the hub's progress handler (tests/spawner/test_progress.py)
                    async with asyncio.timeout(self.gpu_wait_message_interval):
                        event = await queue.get()
                except TimeoutError:
                    pod = self._pod()
                    if pod is not None and messages.gpu_wait(pod):
                        yield await self._gpu_wait_event(pod)
                    continue
                if event is done:
                    break
                pod = self._pod()
                if pod is not None:
                    raw = event.get("raw_event")
                    waiting = messages.gpu_wait(pod) is not None
                    if raw is not None:
                        text = messages.translate_event(raw, pod, self._pending_gpu_pods(), utcnow(),
                                                        self._image_size)
                        if text and raw.get("reason") == "FailedScheduling" and waiting:
                            # the scheduler's retries come more often than the line below:
                            # they say when and what fits now too
                            event = dict(event, **await self._gpu_wait_event(pod))
                        elif text:
                            event = dict(event, message=text)
                    elif waiting:  # KubeSpawner's patience message
                        event = dict(event, **await self._gpu_wait_event(pod))
                yield event
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _gpu_wait_event(self, pod: dict) -> dict[str, str]:
        """The waiting line's progress fields: the queue, when a GPU is expected (the
        service's), and a smaller profile that would start now (then also as HTML, the hub's
        home page linked: the spawn page shows `html_message` in place of `message`)."""
        expected, offer = await self._expected_free(), await self.smaller_offer(pod)
        now = utcnow()
        wait = messages.gpu_wait(pod)
        since = (wait.since if wait else None) or self._requested or now
        line = messages.gpu_wait_message(messages.requested_kinds(pod),
                                         messages.queue_position(pod, self._pending_gpu_pods()),
                                         now - since, expected, now)
        if offer is None:
            return {"message": line}
        return {"message": f"{line}. {offer[0]}", "html_message": f"{html.escape(line, quote=False)}. {offer[1]}"}

    async def _keepalive_cap(self) -> dt.timedelta:
        """The longest keep-alive a user can declare (`longest_keepalive`): the reclaim service's
        --max-keepalive, the one source, as its `api/queue` says it (the service caps every
        keep-alive at it too). The policy's default without reclaim_service_url; the last one
        known while the service cannot be asked (said once in the log)."""
        if self.reclaim_service_url and self.reclaim_service_token:
            try:
                seconds = (await self._ask_service("queue", user=self.user.name))["max_keepalive_seconds"]
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
                    raise ValueError(f"max_keepalive_seconds: {seconds!r}")
                self.longest_keepalive = dt.timedelta(seconds=seconds)
            except Exception as e:
                if not self._keepalive_cap_failed:
                    self._keepalive_cap_failed = True
                    self.log.warning("longest keep-alive for %s: cannot ask the reclaim service (%s); %s",
                                     self._log_name, e, self.longest_keepalive)
        return self.longest_keepalive

    async def _expected_free(self) -> dt.datetime | None:
        """When the reclaim service expects a GPU to be free for this server, from the
        reclaims it has scheduled (its `api/queue`); None when it expects none, or without
        reclaim_service_url, or when it cannot be asked (said once in the log)."""
        if not (self.reclaim_service_url and self.reclaim_service_token):
            return None
        try:
            body = await self._ask_service("queue", user=self.user.name)
            mine = [q for q in body.get("queue", []) if isinstance(q, dict) and q.get("server") == self.name]
            return parse_time_lenient(mine[0].get("expected_free_at")) if mine else None
        except Exception as e:
            if not self._expected_free_failed:
                self._expected_free_failed = True
                self.log.warning("expected wait for %s: cannot ask the reclaim service (%s)", self._log_name, e)
            return None

    def _image_size(self, image: str) -> int | None:
        reflector = ClusterView._informers.get("nodes")
        if reflector is None or not reflector.first_load.done():
            return None
        index = affinity.ImageIndex()
        for node in reflector.resources.values():
            index.update(node)
        return index.size_of(image)
