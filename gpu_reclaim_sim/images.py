"""Container images: the names runtimes report (`normalize` lives in the shared
`jupyterhub_gpu_reclaim.spawner.images` and is re-exported here), and what the scenario says of
each image (size, entrypoint, env, user)."""

from __future__ import annotations

import hashlib

from jupyterhub_gpu_reclaim.spawner.images import normalize

from .scenario import Image, Scenario

__all__ = ["ImageRegistry", "normalize", "repo_digest"]


def repo_digest(ref: str) -> str:
    """A stable `repo@sha256:…` name, the second name runtimes report for a pulled image."""
    norm = normalize(ref)
    if "@" in norm:
        return norm
    repo = norm.rsplit(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(norm.encode()).hexdigest()}"


class ImageRegistry:
    """What the scenario knows about images, looked up by any spelling of their name."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._by_name = {normalize(name): img for name, img in scenario.images.items()}

    def get(self, ref: str) -> Image:
        """The scenario's image, or one of the default size with the image defaults."""
        img = self._by_name.get(normalize(ref))
        if img is not None:
            return img
        d = self.scenario.image_defaults
        return Image(name=ref, size=self.scenario.default_image_size, entrypoint=list(d.entrypoint),
                     cmd=list(d.cmd), env=dict(d.env), working_dir=d.working_dir, user=d.user)

    def size(self, ref: str) -> int:
        return self.get(ref).size

    def known(self, ref: str) -> bool:
        return normalize(ref) in self._by_name

    def status_entry(self, ref: str) -> dict:
        """An entry of node `status.images`, as the kubelet reports it."""
        return {"names": [repo_digest(ref), normalize(ref)], "sizeBytes": self.size(ref)}
