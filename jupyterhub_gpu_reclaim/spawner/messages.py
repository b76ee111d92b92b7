"""What the spawn-progress page says while a server waits for a GPU or an image.

The scheduler's own line ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.
preemption: …") means nothing to most users; these say the same in their words. Pure
functions over the camelCase pod/event dicts KubeSpawner's reflectors hold.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Callable, Iterable

from ..durations import format_duration
from ..signals.pods import gpu_shortage, is_gpu_resource
from ..timestamps import parse_time_lenient
from .timings import event_first_time, event_last_time, event_message

_IMAGE_IN_MESSAGE = re.compile(r'[Ii]mage "([^"]+)"')


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def gpu_wait_message(requested_gpus: int, ahead: int, waiting: dt.timedelta, expected: str = "") -> str:
    """"Waiting for a free GPU (1 GPU requested, 2 requests ahead of you, waiting 2 min)",
    and "; a GPU is expected to be free in about 3 min" when `expected` says so."""
    queue = "no requests ahead of you" if ahead <= 0 else f"{_plural(ahead, 'request')} ahead of you"
    return (f"Waiting for a free GPU ({_plural(requested_gpus, 'GPU')} requested, {queue}, "
            f"waiting {format_duration(waiting)})" + (f"; {expected}" if expected else ""))


def _scheduled_condition(pod: dict) -> dict | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return c
    return None


def is_waiting_for_gpu(pod: dict) -> bool:
    """Pending, not bound, and the scheduler said Unschedulable for lack of a GPU resource."""
    if (pod.get("metadata") or {}).get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
        return False
    if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
        return False
    c = _scheduled_condition(pod)
    return bool(c and c.get("status") == "False" and c.get("reason") == "Unschedulable"
                and gpu_shortage(c.get("message") or ""))


def waiting_since(pod: dict) -> dt.datetime | None:
    """When the pod started waiting for a GPU: the PodScheduled=False condition's
    transition time (the scheduler keeps it across retries, as the status does not
    change), else its creation; None when it is not waiting."""
    if not is_waiting_for_gpu(pod):
        return None
    c = _scheduled_condition(pod) or {}
    return parse_time_lenient(c.get("lastTransitionTime")) or parse_time_lenient(
        (pod.get("metadata") or {}).get("creationTimestamp"))


def requested_gpus(pod: dict) -> int:
    """GPUs the pod asks for: the larger of its containers' sum and its largest init
    container, limits first (extended resources need limit == request). Each GPU resource
    counts (signals.pods.is_gpu_resource): a MIG instance or a replica is one GPU."""
    spec = pod.get("spec") or {}

    def count(value: object) -> int:
        try:
            return int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return 0

    def gpus(c: dict) -> int:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        return sum(count(limits.get(name, requests.get(name, 0)))
                   for name in {*limits, *requests} if isinstance(name, str) and is_gpu_resource(name))

    main = sum(gpus(c) for c in spec.get("containers") or [])
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _queue_key(pod: dict) -> tuple[dt.datetime, str]:
    meta = pod.get("metadata") or {}
    created = parse_time_lenient(meta.get("creationTimestamp")) or dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return created, meta.get("name") or ""


def _identity(pod: dict) -> tuple[str | None, str | None, str | None]:
    meta = pod.get("metadata") or {}
    return meta.get("uid"), meta.get("namespace"), meta.get("name")


def queue_position(pod: dict, pending_pods: Iterable[dict]) -> int:
    """How many GPU-waiting pods are ahead of this one, in kube-scheduler's queue order
    (PrioritySort): any of higher spec.priority, and those of the same priority created
    earlier (ties, common with second-precision timestamps, broken by name).
    Lower-priority pods (e.g. placeholders) never block it."""
    me = _identity(pod)
    my_key = _queue_key(pod)
    my_priority = (pod.get("spec") or {}).get("priority") or 0
    ahead = 0
    for other in pending_pods:
        ident = _identity(other)
        if (me[0] and ident[0] == me[0]) or (ident[1:] == me[1:] and (not me[0] or not ident[0])):
            continue  # this pod itself
        if not is_waiting_for_gpu(other):
            continue
        priority = (other.get("spec") or {}).get("priority") or 0
        if priority > my_priority or (priority == my_priority and _queue_key(other) < my_key):
            ahead += 1
    return ahead


def format_size(size_bytes: int) -> str:
    """Decimal units (1 GB = 10^9 bytes), as container runtimes report image sizes
    (node status.images sizeBytes, the kubelet's "Image size: N bytes")."""
    if size_bytes >= 10**9:
        return f"{size_bytes / 1e9:.1f} GB"
    if size_bytes >= 10**6:
        return f"{size_bytes / 1e6:.0f} MB"
    return f"{max(1, round(size_bytes / 1e3))} kB"


def pull_message(image: str, size_bytes: int | None, node: str) -> str:
    """"Downloading the environment image (5.0 GB) on node gpu-1". The image name is not
    shown: users know it as their profile, and the size is what explains the wait."""
    size = f" ({format_size(size_bytes)})" if size_bytes else ""
    where = f" on node {node}" if node else ""
    return f"Downloading the environment image{size}{where}"


def queue_timeout_message(waited: dt.timedelta, gpus: int) -> str:
    """The final line when gpu_queue_timeout expires."""
    return (f"No GPU became free within {format_duration(waited)}; your request for "
            f"{_plural(gpus, 'GPU')} was withdrawn. Try again later or choose a CPU profile.")


def translate_event(
    event: dict,
    pod: dict,
    pending_pods: Iterable[dict],
    now: dt.datetime,
    image_sizes: Callable[[str], int | None],
) -> str | None:
    """The friendly line for a FailedScheduling-for-GPU or Pulling event; None for any
    other event (the caller keeps KubeSpawner's raw line)."""
    reason = event.get("reason")
    message = event_message(event)
    if reason == "FailedScheduling" and gpu_shortage(message):
        since = waiting_since(pod)
        if since is not None:
            waited = now - since
        else:  # replayed after the pod was bound: the event's own span
            first, last = event_first_time(event), event_last_time(event)
            waited = (last - first) if first and last else dt.timedelta(0)
        ahead = queue_position(pod, pending_pods) if is_waiting_for_gpu(pod) else 0
        return gpu_wait_message(requested_gpus(pod), ahead, waited)
    if reason == "Pulling":
        m = _IMAGE_IN_MESSAGE.search(message)
        image = m.group(1) if m else ""
        node = ((pod.get("spec") or {}).get("nodeName") or (event.get("source") or {}).get("host")
                or event.get("reportingInstance") or "")
        try:
            size = image_sizes(image) if image else None
        except Exception:  # a size lookup must never break the progress stream
            size = None
        return pull_message(image, size, node)
    return None
