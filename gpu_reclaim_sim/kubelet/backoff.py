"""The kubelet's back-off before restarting a container that exited (CrashLoopBackOff):
client-go's `flowcontrol.Backoff` as the kubelet uses it (`doBackOff` in
pkg/kubelet/kuberuntime), with the kubelet's 10 s initial and 5 min maximum delay.

The first exit is restarted at once; a container that exits again within the current
delay of its last restart waits out that delay, which doubles with each restart up to
the maximum; a container that ran for twice the maximum (10 min) starts over at once.
Pure: the clock is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIAL = 10.0
MAXIMUM = 300.0


@dataclass
class _Entry:
    delay: float
    last_update: float


class RestartBackoff:
    def __init__(self, initial: float = INITIAL, maximum: float = MAXIMUM) -> None:
        self.initial, self.maximum = initial, maximum
        self._entries: dict[str, _Entry] = {}

    def _expired(self, event_time: float, entry: _Entry) -> bool:
        return event_time - entry.last_update > 2 * self.maximum

    def wait(self, key: str, finished_at: float, now: float) -> float:
        """Seconds still to wait before restarting a container that exited at
        `finished_at` (IsInBackOffSince); 0: restart now."""
        entry = self._entries.get(key)
        if entry is None or self._expired(finished_at, entry):
            return 0.0
        return max(0.0, entry.delay - (now - finished_at))

    def delay(self, key: str) -> float:
        """The current delay (what the kubelet prints in `back-off 20s restarting …`)."""
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def restarted(self, key: str, finished_at: float, now: float) -> None:
        """Record a restart at `now` of a container that exited at `finished_at` (Next)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(finished_at, entry):
            self._entries[key] = _Entry(self.initial, now)
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
            entry.last_update = now
