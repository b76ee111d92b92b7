"""What a pod's volumes hold on the host, set up as the kubelet's volume plugins do.

- `emptyDir`: a directory of the pod, mode 0777; `medium: Memory` puts it in /dev/shm
  (memory-backed; `sizeLimit` is not enforced).
- `configMap`, `secret`, `downwardAPI` and `projected` (with `configMap`, `secret`,
  `downwardAPI` and `serviceAccountToken` sources): written the way the kubelet's atomic
  writer writes them (the files in a `..<timestamp>` directory, `..data` pointing at it,
  each top-level name a link through `..data`), with `items` (key → path), `defaultMode`
  and `mode`, `optional`. Containers mount them read-only.
- `persistentVolumeClaim`: the directory of the claim's bound volume (the kubelet waits
  for the binding; its `PodApi.claim_dir` says which directory), which
  outlives the pod. `hostPath`: the host's path.
- `fsGroup` gives emptyDir, configMap, secret, downwardAPI and projected volumes to that
  group, as `SetVolumeOwnership` does (group-readable, or -writable for emptyDir, and
  setgid directories).

A volume that cannot be set up raises `MountError` with the kubelet's message; the
kubelet reports it as a `FailedMount` event and tries again.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..api.quantity import parse as parse_quantity

Obj = dict[str, Any]
DEFAULT_MODE = 0o644  # the API's default for defaultMode (420)
TOKEN_EXPIRATION = 3600
MEMORY_ROOT = Path("/dev/shm/gpu-reclaim-sim")  # emptyDir with medium Memory
_RW_MASK, _RO_MASK, _EXEC_MASK = 0o660, 0o440, 0o110


class MountError(Exception):
    """A volume that cannot be set up; the message is the kubelet's error."""


@dataclass
class PodVolumes:
    """Sets up the volumes of one pod; `lookup(kind, name)` finds a ConfigMap or Secret of
    the pod's namespace, `claim_dir(claim)` the directory of a claim's bound volume (None:
    not found or not bound), `token(service_account, expiration, audience)` asks the API
    server for a bound service account token (TokenRequest)."""

    pod: Obj
    pod_dir: Path
    lookup: Callable[[str, str], Obj | None]
    claim_dir: Callable[[str], Path | None]
    token: Callable[[str, int, str | None], str]

    def __post_init__(self) -> None:
        self.fs_group: int | None = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        self.memory_dir = MEMORY_ROOT / self.pod["metadata"]["uid"]

    def setup(self, vol: Obj) -> Path:
        """The host path of the volume, created or refreshed."""
        name = vol["name"]
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            path = self.claim_dir(claim)
            if path is None:  # deleted (or unbound) since the kubelet saw it bound
                raise MountError(f'persistentvolumeclaim "{claim}" not found or not bound')
            return path
        if "hostPath" in vol:
            return _host_path(vol["hostPath"])
        if "emptyDir" in vol:
            memory = (vol["emptyDir"] or {}).get("medium") == "Memory"
            path = (self.memory_dir if memory else self.pod_dir / "volumes") / name
            if not path.exists():
                path.mkdir(parents=True)
                path.chmod(0o777)
                self._own(path, readonly=False)
            return path
        for kind in ("configMap", "secret", "downwardAPI", "projected"):
            if kind in vol:
                files = getattr(self, f"_{kind.lower()}")(vol[kind])
                path = self.pod_dir / "volumes" / name
                write_atomically(path, files)
                self._own(path, readonly=True)
                return path
        # a volume type the simulator does not know: an empty directory, as good as any
        path = self.pod_dir / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def release(self) -> None:
        shutil.rmtree(self.memory_dir, ignore_errors=True)

    # --- sources: each returns {path in the volume: (bytes, mode)} -------------------

    def _configmap(self, src: Obj, default_mode: int | None = None) -> dict[str, tuple[bytes, int]]:
        obj = self._object("ConfigMap", "configmap", src)
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return _payload(src, data, default_mode, "configmap references non-existent config key: {}")

    def _secret(self, src: Obj, default_mode: int | None = None) -> dict[str, tuple[bytes, int]]:
        src = {**src, "name": src.get("secretName", src.get("name", ""))}
        obj = self._object("Secret", "secret", src)
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        return _payload(src, data, default_mode, "references non-existent secret key: {}")

    def _downwardapi(self, src: Obj, default_mode: int | None = None) -> dict[str, tuple[bytes, int]]:
        mode = src.get("defaultMode", default_mode if default_mode is not None else DEFAULT_MODE)
        files = {}
        for item in src.get("items") or []:
            if "fieldRef" in item:
                value = downward_field(self.pod, item["fieldRef"]["fieldPath"], volume=True)
            else:
                ref = item["resourceFieldRef"]
                value = resource_field(self.pod, ref.get("containerName"), ref)
            files[item["path"]] = (value.encode(), item.get("mode", mode))
        return files

    def _projected(self, src: Obj) -> dict[str, tuple[bytes, int]]:
        mode = src.get("defaultMode", DEFAULT_MODE)
        files: dict[str, tuple[bytes, int]] = {}
        errors: list[str] = []
        for source in src.get("sources") or []:
            try:
                if "serviceAccountToken" in source:
                    t = source["serviceAccountToken"]
                    sa = self.pod["spec"].get("serviceAccountName") or "default"
                    try:
                        token = self.token(sa, int(t.get("expirationSeconds", TOKEN_EXPIRATION)), t.get("audience"))
                    except Exception as e:
                        raise MountError(f"failed to fetch token: {e}") from None
                    files[t["path"]] = (token.encode(), mode)
                else:
                    kind = next(k for k in ("configMap", "secret", "downwardAPI") if k in source)
                    files.update(getattr(self, f"_{kind.lower()}")(source[kind], mode))
            except MountError as e:
                errors.append(str(e))
        if errors:  # as utilerrors.NewAggregate prints them
            raise MountError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        return files

    def _object(self, kind: str, word: str, src: Obj) -> Obj:
        obj = self.lookup(kind, src.get("name", ""))
        if obj is None:
            if src.get("optional"):
                return {}
            raise MountError(f'{word} "{src.get("name", "")}" not found')
        return obj

    def _own(self, path: Path, readonly: bool) -> None:
        """SetVolumeOwnership: the volume's files go to the fsGroup, with group access."""
        if self.fs_group is None or os.geteuid() != 0:
            return
        for entry in [path, *path.rglob("*")]:
            os.lchown(entry, -1, self.fs_group)
            if entry.is_symlink():
                continue
            mask = _RO_MASK if readonly else _RW_MASK
            if entry.is_dir():
                mask |= 0o2000 | _EXEC_MASK
            entry.chmod(entry.stat().st_mode & 0o7777 | mask)


def subpath_source(volume_dir: Path, sub_path: str) -> Path:
    """The host path a `subPath` of a volume mounts: a file or directory of the volume (a
    directory is created when missing, with the volume's mode, as the kubelet does); it
    must stay inside the volume, links included."""
    root = volume_dir.resolve()
    target = (volume_dir / sub_path).resolve()
    if target != root and root not in target.parents:
        raise MountError(f"subpath {str(volume_dir / sub_path)!r} not within volume path {str(root)!r}")
    if not target.exists():
        target.mkdir(parents=True)
        target.chmod(root.stat().st_mode & 0o7777)
    return target


def write_atomically(path: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """The kubelet's atomic writer: files in `..<timestamp>`, `..data` → it, and each
    top-level name a link through `..data`; a rewrite swaps `..data` at once."""
    path.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("..%Y_%m_%d_%H_%M_%S.") + str(secrets.randbelow(10**9))
    version = path / stamp
    version.mkdir(mode=0o755)
    for rel, (content, mode) in files.items():
        file = version / rel
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content)
        file.chmod(mode & 0o7777)
    old = os.readlink(path / "..data") if (path / "..data").is_symlink() else None
    tmp = path / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp)
    tmp.rename(path / "..data")
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops:
        if not (path / top).is_symlink():
            (path / top).symlink_to(f"..data/{top}")
    for entry in path.iterdir():
        if not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()
    if old:
        shutil.rmtree(path / old, ignore_errors=True)


def downward_field(pod: Obj, field_path: str, volume: bool = False) -> str:
    """A `fieldRef` of the downward API. Volumes may also project all labels or
    annotations (`key="value"` lines, sorted by key)."""
    meta = pod["metadata"]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field_path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    if volume and field_path in ("metadata.labels", "metadata.annotations"):
        items = sorted((meta.get(field_path.split(".")[1]) or {}).items())
        return "\n".join(f'{k}="{_go_quote(v)}"' for k, v in items)
    return {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
            "metadata.uid": meta.get("uid", ""),
            "spec.nodeName": pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
            "status.podIP": (pod.get("status") or {}).get("podIP", ""),
            "status.hostIP": (pod.get("status") or {}).get("hostIP", "")}.get(field_path, "")


def resource_field(pod: Obj, container: str | None, ref: Obj, allocatable: Obj | None = None) -> str:
    """A `resourceFieldRef`: the container's limit or request in units of `divisor`,
    rounded up; a missing limit is the node's allocatable amount."""
    containers = pod["spec"].get("containers", [])
    c = next((c for c in containers if c["name"] == (container or ref.get("containerName"))), None) \
        or (containers[0] if containers else {})
    kind, _, resource = ref["resource"].partition(".")
    value = ((c.get("resources") or {}).get(kind) or {}).get(resource)
    if value is None:
        value = (allocatable or {}).get(resource, "0")
    divisor = parse_quantity(str(ref.get("divisor") or "1"))
    return str(math.ceil(parse_quantity(str(value)) / divisor))


def _payload(src: Obj, data: dict[str, bytes], default_mode: int | None, missing: str) -> dict[str, tuple[bytes, int]]:
    """configmap.MakePayload / secret.MakePayload: every key, or the `items` asked for."""
    mode = src.get("defaultMode", default_mode if default_mode is not None else DEFAULT_MODE)
    if not src.get("items"):
        return {k: (v, mode) for k, v in data.items()}
    files = {}
    for item in src["items"]:
        if item["key"] not in data:
            if src.get("optional"):
                continue
            raise MountError(missing.format(item["key"]))
        files[item.get("path") or item["key"]] = (data[item["key"]], item.get("mode", mode))
    return files


def _host_path(src: Obj) -> Path:
    path, kind = Path(src["path"]), src.get("type") or ""
    if kind == "DirectoryOrCreate" and not path.exists():
        path.mkdir(mode=0o755, parents=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o644)
    elif kind == "Directory" and not path.is_dir():
        raise MountError(f"hostPath type check failed: {path} is not a directory")
    elif kind == "File" and not path.is_file():
        raise MountError(f"hostPath type check failed: {path} is not a file")
    return path


def _go_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
