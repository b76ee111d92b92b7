"""What the spawn-progress page says while a server waits for a GPU or an image.

The scheduler's own line ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.
preemption: …") means nothing to most users; these say the same in their words. Pure
functions over the camelCase pod/event dicts KubeSpawner's reflectors hold. What a pod waits
for, since when and its place in the queue are `signals.pod_facts`, the facts the reclaim
service counts its pending GPUs by: the two never disagree.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from typing import Callable, Iterable, Mapping

from ..durations import format_duration
from ..signals import pod_facts
from ..signals.node_gpus import in_words, kind_name
from ..signals.pod_facts import GpuWait, gpu_shortage
from ..wording import count, expected_free
from .timings import event_first_time, event_last_time, event_message

_IMAGE_IN_MESSAGE = re.compile(r'[Ii]mage "([^"]+)"')


def gpu_wait_message(gpus: Mapping[str, int], ahead: int, waiting: dt.timedelta,
                     expected_at: dt.datetime | None = None, now: dt.datetime | None = None) -> str:
    """"Waiting for a free GPU (1 GPU requested, 2 requests ahead of you, waiting 2 min)",
    the `gpus` asked for (by kind: requested_kinds) each by its kind's name ("Waiting for a
    free MIG slice (2 MIG slices requested, …"), and "; a GPU is expected to be free in about
    3 min" when the reclaim service expects one at `expected_at` (`now` the time now)."""
    queue = "no requests ahead of you" if ahead <= 0 else f"{count(ahead, 'request')} ahead of you"
    expected = f"; {expected_free(expected_at, now, kind_name(gpus))}" if expected_at and now else ""
    return (f"Waiting for a free {kind_name(gpus)} ({in_words(gpus)} requested, {queue}, "
            f"waiting {format_duration(waiting)})" + expected)


def smaller_fit_message(profile: str, gpus: Mapping[str, int], home: str = "") -> str:
    """What a user waiting for more GPUs is offered when a smaller GPU profile would start at
    once, its GPUs by kind (free_gpus.gpus_by_kind) as people read them ("1 MIG slice is free
    now"); with `home`, the hub's home page's URL, as HTML linking to it. The stop is the
    hub's own (Stop My Server, with the hub's XSRF token; JupyterHub 5's spawn page has no
    stop button): a link that stopped the spawn would be a GET any page could send."""
    verb = "is" if sum(gpus.values()) == 1 else "are"
    free = f"{in_words(gpus)} {verb} free now: “{profile}” would start at once."
    where = f'<a href="{html.escape(home)}">the hub\'s home page</a>' if home else "the hub's home page"
    return (html.escape(free, quote=False) if home else free) + (
        f" To take it, stop this request on {where} (Stop My Server) and start that profile.")


def room_message(free: Mapping[str, int], total: Mapping[str, int], waiting: int,
                 waiting_gpus: Mapping[str, int]) -> str:
    """The spawn form's line on the GPUs of each kind (free_gpus.GpuRoom) and the queue:
    "Free now: 2 of 4 GPUs and 3 of 7 MIG slices. Waiting for a GPU: 1 request (2 MIG slices)." """
    queue = (f"{count(waiting, 'request')} ({in_words(waiting_gpus)})" if waiting else "no one")
    return f"Free now: {in_words(total, free)}. Waiting for a GPU: {queue}."


def profile_room_message(free: Mapping[str, int], total: Mapping[str, int], fits: bool) -> str:
    """Beside a GPU profile on the spawn form (free_gpus.ProfileRoom): "Starts now: 3 of 4
    GPUs free." or "Waits for a GPU: 0 of 7 MIG slices free." (of the nodes it may use)."""
    if not total:
        return "Waits for a GPU: no node that can run it is ready."
    return f"{'Starts now' if fits else 'Waits for a GPU'}: {in_words(total, free)} free."


def gpu_wait(pod: dict) -> GpuWait | None:
    """pod_facts.gpu_wait; None too for a pod it cannot read (the progress stream never
    breaks over one: KubeSpawner's own line is shown)."""
    try:
        return pod_facts.gpu_wait(pod)
    except ValueError:
        return None


def requested_gpus(pod: dict) -> int:
    """pod_facts.requested_gpus; 0 for a pod it cannot read."""
    try:
        return pod_facts.requested_gpus(pod)
    except ValueError:
        return 0


def requested_kinds(pod: dict) -> dict[str, int]:
    """pod_facts.requested_by_kind: what the waiting lines name; {} for a pod it cannot read."""
    try:
        return pod_facts.requested_by_kind(pod)
    except ValueError:
        return {}


def _identity(pod: dict) -> tuple[str | None, str | None, str | None]:
    meta = pod.get("metadata") or {}
    return meta.get("uid"), meta.get("namespace"), meta.get("name")


def queue_position(pod: dict, pending_pods: Iterable[dict]) -> int:
    """How many GPU-waiting pods (gpu_wait) are ahead of this one in the GPU queue
    (GpuWait.queue_key, the order the reclaim service's queue has too): those of higher
    priority, and those of the same priority waiting longer. Lower-priority pods (e.g.
    placeholders) never block it."""
    me, mine = _identity(pod), gpu_wait(pod)
    if mine is None:
        return 0
    my_key = mine.queue_key(me[2] or "")
    ahead = 0
    for other in pending_pods:
        ident = _identity(other)
        if (me[0] and ident[0] == me[0]) or (ident[1:] == me[1:] and (not me[0] or not ident[0])):
            continue  # this pod itself
        wait = gpu_wait(other)
        if wait is not None and wait.queue_key(ident[2] or "") < my_key:
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


def queue_timeout_message(waited: dt.timedelta, gpus: Mapping[str, int]) -> str:
    """The final line when gpu_queue_timeout expires, the `gpus` asked for (by kind:
    requested_kinds) each by its kind's name."""
    return (f"No {kind_name(gpus)} became free within {format_duration(waited)}; your request for "
            f"{in_words(gpus)} was withdrawn. Try again later or choose a CPU profile.")


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
        wait = gpu_wait(pod)
        if wait is not None and wait.since is not None:
            waited = now - wait.since
        else:  # replayed after the pod was bound: the event's own span
            first, last = event_first_time(event), event_last_time(event)
            waited = (last - first) if first and last else dt.timedelta(0)
        ahead = queue_position(pod, pending_pods) if wait is not None else 0
        return gpu_wait_message(requested_kinds(pod), ahead, waited)
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
