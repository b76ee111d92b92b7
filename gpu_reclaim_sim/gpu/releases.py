"""dcgm-exporter's release tags (`<DCGM version>-<exporter version>`), which a scenario's
`gpu.exporterVersion` names and `dcgm_exporter.Release` reads."""

from __future__ import annotations

CURRENT = "4.5.3-4.8.2"  # the exporter's latest release (its tags: <DCGM>-<exporter>)


def exporter_release(tag: str) -> tuple[int, ...]:
    """The exporter's own version of a release tag ("4.5.3-4.8.2" -> (4, 8, 2)); ValueError
    for anything but <DCGM version>-<exporter version>."""
    parts = tag.split("-")
    numbers = [p.split(".") for p in parts]
    if len(parts) != 2 or not all(len(n) == 3 and all(x.isdigit() for x in n) for n in numbers):
        raise ValueError(f"{tag!r} is not a dcgm-exporter release tag such as {CURRENT}")
    return tuple(int(x) for x in numbers[1])
