"""Image names as a container runtime completes them (https://kubernetes.io/docs/concepts/
containers/images/#image-names and Docker's `docker image tag` reference):

- "If you don't specify a registry hostname, Kubernetes assumes that you mean the Docker
  public registry" (`docker.io`, "the canonical reference for Docker's public registry";
  `index.docker.io` is its old name); the first part of a name is a registry host when it
  has a `.` or a `:` (a port) or is `localhost`;
- on Docker's registry, "when the namespace is not present, Docker uses library as the
  default namespace";
- "If you don't specify a tag, Kubernetes assumes you mean the tag latest";
- "Digests are a unique identifier for a specific version of an image ... Tags can be moved
  to point to different images, but digests are fixed": a name with a digest is that
  image whatever tag it also names (a runtime pulls it by the digest), `repo@digest`.

So `busybox`, `library/busybox` and `docker.io/busybox:latest` are one image,
`docker.io/library/busybox:latest`: the name a node lists in `status.images`."""

from __future__ import annotations

DEFAULT_REGISTRY = "docker.io"
LEGACY_REGISTRY = "index.docker.io"


def normalize(ref: str) -> str:
    """The fully qualified name of an image reference."""
    ref = ref.strip()  # the apiserver refuses blanks around a pod's image; a scenario's may have them
    if not ref:
        return ref
    name, at, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DEFAULT_REGISTRY, name
    if host == LEGACY_REGISTRY:
        host = DEFAULT_REGISTRY
    if host == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    if at:
        return f"{host}/{path}@{digest}"
    return f"{host}/{path}:{tag or 'latest'}"
