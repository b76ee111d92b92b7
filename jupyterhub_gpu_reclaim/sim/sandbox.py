"""The filesystem view of a pod's process: run as `unshare --mount --propagation private
python -m jupyterhub_gpu_reclaim.sim.sandbox`, with the spec in $GPU_RECLAIM_SANDBOX.

In its own mount namespace the process gets a private, empty /tmp (gone with the pod,
like a container's writable layer) and each volume bind-mounted at its mountPath (a PVC's
files outlive the pod). Paths under the host's /tmp that the process needs to run — the
Python installation, this package, volume sources — are mounted back into the new /tmp.
Then it execs the container's command with the pod's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SPEC_ENV = "GPU_RECLAIM_SANDBOX"
_STASH = "/run/gpu-reclaim-sim/host-tmp"  # where the host's /tmp stays reachable


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def _source(path: str, private_tmp: bool) -> str:
    """Where a host path is reachable once /tmp has been replaced."""
    return _STASH + path[len("/tmp"):] if private_tmp and _under_tmp(path) else path


def main() -> None:
    spec = json.loads(os.environ.pop(SPEC_ENV))
    private_tmp = spec.get("private_tmp", True)
    if private_tmp:
        os.makedirs(_STASH, exist_ok=True)
        _mount("--rbind", "/tmp", _STASH)
        _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/tmp")
        for keep in spec.get("keep", []):
            if _under_tmp(keep) and os.path.exists(_source(keep, True)):
                os.makedirs(keep, exist_ok=True)
                _mount("--rbind", _source(keep, True), keep)
    for m in spec.get("mounts", []):
        source = _source(m["source"], private_tmp)
        if os.path.isdir(source):
            os.makedirs(m["target"], exist_ok=True)
        else:
            os.makedirs(os.path.dirname(m["target"]), exist_ok=True)
            open(m["target"], "a").close()
        _mount("--bind", source, m["target"])
    os.chdir(spec.get("workdir") or "/")
    argv = spec["argv"]
    try:
        os.execvp(argv[0], argv)
    except OSError as e:  # the runtime's wording, and its exit code for "not found"
        print(f'exec: "{argv[0]}": {e.strerror}', file=sys.stderr, flush=True)
        sys.exit(127)


if __name__ == "__main__":
    main()
