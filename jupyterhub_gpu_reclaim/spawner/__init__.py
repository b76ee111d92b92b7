"""The KubeSpawner extension: `GPUReclaimSpawner` (see docs/spawner.md)."""

from .core import GPUReclaimSpawner

__all__ = ["GPUReclaimSpawner"]
