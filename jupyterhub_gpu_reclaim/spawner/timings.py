"""Spawn phase timings, read from the pod and its events.

requested → created → scheduled (the wait for capacity, e.g. a GPU) → image pulled →
container started → ready. Every time but `requested` comes from the Kubernetes objects
(creationTimestamp, condition transition times, event times), never from when the
spawner happened to look, so a slow poll or a hub restart does not bend the numbers.

Input is what KubeSpawner's reflectors hold: `api_client.sanitize_for_serialization(obj)`,
i.e. camelCase JSON dicts with times as RFC 3339 strings.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Iterable

from ..timestamps import format_time, parse_time_lenient

# The order of the milestones; phases() relies on it.
MILESTONES = ("requested", "created", "scheduled", "pull_started", "pulled", "started", "ready")
PHASES = ("create", "schedule", "pull", "start", "ready", "total")
NOTEBOOK_CONTAINER = "notebook"  # the name KubeSpawner gives the single-user container
# A "pull" shorter than this re-checked a cached image (pullPolicy Always): not a download.
CACHED_PULL_SECONDS = 1.0


# ---------------------------------------------------------------------------- events


def event_first_time(event: dict) -> dt.datetime | None:
    """When the event first happened.

    core/v1 events written by the legacy recorder (the kubelet: Pulling, Pulled, Started)
    have firstTimestamp/lastTimestamp in seconds and eventTime null; events written
    through events.k8s.io (kube-scheduler: Scheduled, FailedScheduling) have eventTime in
    microseconds and null first/lastTimestamp. eventTime is the first occurrence in
    both APIs, so it wins when set.
    """
    for key in ("eventTime", "firstTimestamp", "deprecatedFirstTimestamp", "lastTimestamp",
                "deprecatedLastTimestamp"):
        t = parse_time_lenient(event.get(key))
        if t is not None:
            return t
    return parse_time_lenient((event.get("metadata") or {}).get("creationTimestamp"))


def event_last_time(event: dict) -> dt.datetime | None:
    """When the event last happened (series.lastObservedTime for events.k8s.io repeats,
    lastTimestamp for legacy ones), else its first time."""
    series = event.get("series") or {}
    for t in (parse_time_lenient(series.get("lastObservedTime")),
              parse_time_lenient(event.get("lastTimestamp")),
              parse_time_lenient(event.get("deprecatedLastTimestamp"))):
        if t is not None:
            return t
    return event_first_time(event)


def _regarding(event: dict) -> dict:
    return event.get("involvedObject") or event.get("regarding") or {}


def event_message(event: dict) -> str:
    return event.get("message") or event.get("note") or ""


def pod_events(pod: dict, events: Iterable[dict]) -> list[dict]:
    """The events about this pod: by uid when both sides have one (an older pod with the
    same name, e.g. the user's previous server, has another uid), else by name."""
    meta = pod.get("metadata") or {}
    uid, name, ns = meta.get("uid"), meta.get("name"), meta.get("namespace")
    out = []
    for e in events:
        obj = _regarding(e)
        if obj.get("kind") not in (None, "Pod"):
            continue
        if uid and obj.get("uid"):
            if obj["uid"] != uid:
                continue
        elif obj.get("name") != name or (ns and obj.get("namespace") not in (None, ns)):
            continue
        out.append(e)
    return out


_IMAGE_IN_MESSAGE = re.compile(r'[Ii]mage "([^"]+)"')
_PULL_DURATION = re.compile(r"Successfully pulled image \"[^\"]*\" in ([0-9.hmsµun]+)")
_PULL_WAITING = re.compile(r"\(([0-9][0-9.a-zµ]*) including waiting\)")
_IMAGE_SIZE = re.compile(r"Image size: (\d+) bytes")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_go_duration(text: str) -> float | None:
    """Seconds from a Go time.Duration string as the kubelet prints it: "5.002s",
    "100ms", "1m2.5s", "1h0m3s"."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def pulled_image_size(event: dict) -> int | None:
    """The size the kubelet reports in a "Successfully pulled" message (1.28+), bytes."""
    m = _IMAGE_SIZE.search(event_message(event))
    return int(m.group(1)) if m else None


def pull_seconds(event: dict) -> float | None:
    """The time a "Successfully pulled … in 5.002s (14.4s including waiting)" message states
    the pod waited for its image: the pull with the wait behind other pulls on the node
    (another pod pulling the same image) when the message says it, else the pull itself."""
    text = event_message(event)
    m = _PULL_WAITING.search(text) or _PULL_DURATION.search(text)
    return parse_go_duration(m.group(1)) if m else None


def is_already_present(event: dict) -> bool:
    return "already present on machine" in event_message(event)


# ---------------------------------------------------------------------------- timings


@dataclass(frozen=True)
class SpawnTimings:
    """The milestones of one spawn, as aware UTC datetimes (None: not seen)."""

    requested: dt.datetime | None = None
    created: dt.datetime | None = None
    scheduled: dt.datetime | None = None
    pull_started: dt.datetime | None = None  # first Pulling event
    pulled: dt.datetime | None = None  # first Pulled event (also the "already present" one)
    started: dt.datetime | None = None  # the notebook container's running.startedAt
    ready: dt.datetime | None = None  # Ready condition's transition to True
    image_pulled: bool = False  # False when the kubelet found the image already present
    image: str = ""
    image_size: int | None = None  # bytes, from the Pulled message when it says

    def _normalized(self) -> dict[str, dt.datetime | None]:
        # Kubernetes truncates most times to whole seconds while `requested` and eventTime
        # carry microseconds, so a later milestone can read a fraction of a second earlier
        # than the one before it. Clamp each to the latest earlier one: no phase is ever
        # negative and the phases never add up to more than the total.
        out: dict[str, dt.datetime | None] = {}
        floor: dt.datetime | None = None
        for name in MILESTONES:
            t = getattr(self, name)
            if t is not None and floor is not None and t < floor:
                t = floor
            if t is not None:
                floor = t
            out[name] = t
        return out

    def phases(self) -> dict[str, float]:
        """Seconds per phase, only those whose two ends are known.

        create: requested → created; schedule: created → scheduled; pull: Pulling →
        Pulled (0 when already present); start: pulled (or scheduled) → container
        started; ready: started → Ready; total: requested → Ready. The gaps between
        them (e.g. scheduled → Pulling: volumes, init containers) count only in total.
        """
        t = self._normalized()

        def span(a: dt.datetime | None, b: dt.datetime | None) -> float | None:
            return None if a is None or b is None else (b - a).total_seconds()

        pull: float | None
        if self.image_pulled:
            pull = span(t["pull_started"], t["pulled"])
        else:
            pull = 0.0 if t["pulled"] is not None or t["started"] is not None else None
        values = {
            "create": span(t["requested"], t["created"]),
            "schedule": span(t["created"], t["scheduled"]),
            "pull": pull,
            "start": span(t["pulled"] or t["pull_started"] or t["scheduled"], t["started"]),
            "ready": span(t["started"], t["ready"]),
            "total": span(t["requested"], t["ready"]),
        }
        return {k: v for k, v in values.items() if v is not None}

    def to_state(self) -> dict[str, Any]:
        """JSON-safe (ISO 8601 strings), for the spawner's saved state."""
        times = {name: getattr(self, name) for name in MILESTONES}
        state: dict[str, Any] = {name: format_time(t) if t else None for name, t in times.items()}
        state.update(image_pulled=self.image_pulled, image=self.image, image_size=self.image_size)
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SpawnTimings:
        """The inverse of to_state() (and of to_annotations()); unknown keys are ignored,
        so state saved by an older or newer version still loads."""
        kwargs: dict[str, Any] = {name: parse_time_lenient(state.get(name)) for name in MILESTONES}
        try:
            size: int | None = int(state["image_size"])
        except (KeyError, TypeError, ValueError):
            size = None
        return cls(**kwargs, image_pulled=bool(state.get("image_pulled")),
                   image=str(state.get("image") or ""), image_size=size)

    def to_annotations(self) -> dict[str, Any]:
        """The state plus the phases in seconds (rounded to ms): one JSON object that an
        admin can read off the pod with `kubectl get pod -o yaml`."""
        return {"phases": {k: round(v, 3) for k, v in self.phases().items()}, **self.to_state()}

    def log_fields(self) -> dict[str, Any]:
        """Flat fields for one structured log line: `<phase>_s` seconds and the image."""
        fields: dict[str, Any] = {f"{k}_s": round(v, 3) for k, v in self.phases().items()}
        fields.update(image=self.image, image_pulled=self.image_pulled)
        if self.image_size is not None:
            fields["image_size_bytes"] = self.image_size
        return fields


def _main_container(pod: dict) -> tuple[str, str]:
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == NOTEBOOK_CONTAINER:
            return c["name"], c.get("image") or ""
    if containers:
        return containers[0].get("name") or "", containers[0].get("image") or ""
    return NOTEBOOK_CONTAINER, ""


def _condition_time(pod: dict, kind: str) -> dt.datetime | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return parse_time_lenient(c.get("lastTransitionTime"))
    return None


def _is_for_container(event: dict, container: str, image: str) -> bool:
    # Pulling/Pulled name the container in fieldPath ("spec.containers{notebook}"); init
    # containers pull their own images and must not count. Without a fieldPath, go by the
    # image the message names.
    path = _regarding(event).get("fieldPath")
    if path:
        return path == f"spec.containers{{{container}}}"
    m = _IMAGE_IN_MESSAGE.search(event_message(event))
    return m is None or not image or m.group(1) == image


def _earliest(times: Iterable[dt.datetime | None]) -> dt.datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def extract(pod: dict, events: list[dict], requested: dt.datetime | None) -> SpawnTimings:
    """The timings of the spawn that produced `pod`, from the pod and its events.

    Events may be repeated (count > 1), out of order, or about an older pod of the same
    name; the earliest matching occurrence of each reason is the spawn's own (later
    repeats come from container restarts or pull retries).
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    container, image = _main_container(pod)
    mine = pod_events(pod, events)

    def of(reason: str) -> list[dict]:
        return [e for e in mine if e.get("reason") == reason and _is_for_container(e, container, image)]

    pulling, pulled_events = of("Pulling"), of("Pulled")
    # for Pulled, the first occurrence: a restarted container adds "already present" repeats
    pulled = _earliest(event_first_time(e) for e in pulled_events)
    pull_started = _earliest(event_first_time(e) for e in pulling)
    fresh = sorted((e for e in pulled_events if not is_already_present(e)),
                   key=lambda e: event_first_time(e) or dt.datetime.max.replace(tzinfo=dt.timezone.utc))
    took = pull_seconds(fresh[0]) if fresh else None
    if took is not None:
        # pullPolicy Always (KubeSpawner's default for a :latest image) makes the kubelet
        # emit Pulling/"Successfully pulled" even for a cached image; the runtime then only
        # asks the registry for the manifest, in well under a second. That is no download.
        image_pulled = took >= CACHED_PULL_SECONDS
    elif fresh and pulled is not None and pull_started is not None:
        image_pulled = (pulled - pull_started).total_seconds() >= CACHED_PULL_SECONDS
    else:
        # Pulling without Pulled yet: a pull in progress; only "already present": none
        image_pulled = bool(pulling or fresh)
    if image_pulled and pull_started is None and took is not None:
        # the Pulling event expired or was missed: the Pulled message says how long it took
        first = event_first_time(fresh[0])
        if first is not None:
            pull_started = first - dt.timedelta(seconds=took)
    size = next((s for s in (pulled_image_size(e) for e in fresh) if s is not None), None)

    scheduled = _condition_time(pod, "PodScheduled")
    if scheduled is None:
        scheduled = _earliest(event_first_time(e) for e in mine if e.get("reason") == "Scheduled")

    started = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == container:
            state = cs.get("state") or {}
            started = parse_time_lenient((state.get("running") or {}).get("startedAt")) or parse_time_lenient(
                (state.get("terminated") or {}).get("startedAt"))
            if cs.get("image") and not image:
                image = cs["image"]
    if started is None:
        started = _earliest(event_first_time(e) for e in of("Started"))

    return SpawnTimings(
        requested=parse_time_lenient(requested),
        created=parse_time_lenient(meta.get("creationTimestamp")),
        scheduled=scheduled,
        pull_started=pull_started,
        pulled=pulled,
        started=started,
        ready=_condition_time(pod, "Ready"),
        image_pulled=image_pulled,
        image=image,
        image_size=size,
    )
