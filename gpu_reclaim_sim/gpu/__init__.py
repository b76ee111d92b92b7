"""Make a simulated GPU busy from inside a pod (a notebook cell):

    from gpu_reclaim_sim.gpu import use_gpu
    use_gpu(percent=90, seconds=120)          # "trains" for two minutes

Only the standard library, so it works in any kernel the pod runs.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

URL_ENV = "GPU_RECLAIM_SIM_GPU_URL"
TOKEN_ENV = "GPU_RECLAIM_SIM_GPU_TOKEN"


def use_gpu(percent: float = 90, seconds: float = 60, memory_mib: int | None = None,
            block: bool = True) -> dict:
    """Run this pod's GPUs at `percent` for `seconds`. With `block` (the default) the call
    lasts as long as the work, like a training cell; `memory_mib` is the framebuffer held."""
    url, token = os.environ.get(URL_ENV), os.environ.get(TOKEN_ENV)
    if not url or not token:
        raise RuntimeError(f"{URL_ENV} is not set: this is not a GPU pod of the simulated cluster")
    body = {"utilization": percent, "seconds": seconds}
    if memory_mib is not None:
        body["memory_mib"] = memory_mib
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        answer = json.loads(r.read())
    if block:
        time.sleep(seconds)
    return answer
