"""Container image names as container runtimes report them in node `status.images`.

Shared by the simulated cluster (which writes those names) and the spawner's image
index (which reads them), so both sides agree on one spelling per image.
"""

from __future__ import annotations

DEFAULT_REGISTRY = "docker.io"
# Docker's legacy name for Docker Hub; distribution/reference rewrites it to docker.io.
_LEGACY_REGISTRIES = {"index.docker.io": DEFAULT_REGISTRY}


def _split_registry(name: str) -> tuple[str, str]:
    """(registry, path) the way distribution/reference's splitDockerDomain does it: the
    first component is a registry only if it looks like a host (has a dot or a port, or
    is `localhost`) and is lower case; otherwise the image is on Docker Hub."""
    first, sep, rest = name.partition("/")
    if sep and (("." in first or ":" in first or first == "localhost") and first == first.lower()):
        return _LEGACY_REGISTRIES.get(first, first), rest
    return DEFAULT_REGISTRY, name


def normalize(ref: str) -> str:
    """The fully qualified name a runtime lists in node `status.images`.

    `ubuntu` → `docker.io/library/ubuntu:latest`, `jupyter/x` → `docker.io/jupyter/x:latest`,
    `quay.io/a/b` → `quay.io/a/b:latest`, `registry:5000/x` → `registry:5000/x:latest`,
    `index.docker.io/x` → `docker.io/library/x:latest`.

    Digests: `name@sha256:…` → `<repo>@sha256:…`. A ref with both a tag and a digest
    (`name:tag@sha256:…`) drops the tag: the runtime pulls by digest alone and reports the
    image as `repo@digest` (containerd/distribution `ParseDockerRef`: "For references
    containing both a tag and a digest, it returns a digested reference"), so the digest
    decides what matches, never the tag.
    """
    ref = ref.strip()
    name, _, digest = ref.partition("@")
    registry, path = _split_registry(name)
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = "library/" + path  # Docker Hub's official images live under library/
    last = path.rsplit("/", 1)[-1]  # a ':' before the last '/' belongs to no tag
    if digest:
        if ":" in last:
            path = path[: len(path) - len(last)] + last.split(":", 1)[0]
        return f"{registry}/{path}@{digest}"
    if ":" not in last:
        path += ":latest"
    return f"{registry}/{path}"
