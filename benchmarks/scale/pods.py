"""The pods benchmarks/sim_scale.py creates, as KubeSpawner makes them."""

from __future__ import annotations

from typing import Any

from benchmarks.scale.scene import COMPONENT, GPU_PLAN, IMAGE


async def pod_manifests(n: int) -> list[dict[str, Any]]:
    """n pods as KubeSpawner 7 makes them (its own `make_pod`, its labels and annotations);
    GPU_PLAN's pods (80 GPUs in all) spread evenly through the sequence, largest first."""
    import jupyterhub
    from kubernetes_asyncio.client import ApiClient
    from kubespawner import __version__ as kubespawner_version
    from kubespawner.objects import make_pod

    gpu_every = max(1, n // len(GPU_PLAN))
    gpu_at = {i * gpu_every: gpus for i, gpus in enumerate(GPU_PLAN) if i * gpu_every < n}
    out = []
    async with ApiClient() as api_client:
        for i in range(n):
            user = f"user-{i}"
            gpus = gpu_at.get(i, 0)
            pod = make_pod(
                name=f"jupyter-{user}",
                cmd=["jupyterhub-singleuser"],
                port=8888,
                image=IMAGE,
                image_pull_policy="IfNotPresent",
                labels={
                    "hub.jupyter.org/username": user,
                    "app": "jupyterhub",
                    "heritage": "jupyterhub",
                    "chart": "jupyterhub-4.1.0",
                    "release": "jhub",
                    "app.kubernetes.io/name": "jupyterhub",
                    "app.kubernetes.io/managed-by": "kubespawner",
                    "app.kubernetes.io/component": COMPONENT,
                    "component": COMPONENT,
                    "hub.jupyter.org/servername": "",
                    "hub.jupyter.org/network-access-hub": "true",
                },
                annotations={
                    "hub.jupyter.org/username": user,
                    "hub.jupyter.org/kubespawner-version": kubespawner_version,
                    "hub.jupyter.org/jupyterhub-version": jupyterhub.__version__,
                },
                env={"JUPYTERHUB_USER": user, "JUPYTERHUB_SERVER_NAME": "",
                     "JUPYTERHUB_SERVICE_PREFIX": f"/user/{user}/", "JUPYTER_IMAGE": IMAGE,
                     "MEM_GUARANTEE": "1073741824" if gpus else "134217728"},
                cpu_guarantee=1.0 if gpus else 0.05,
                cpu_limit=8.0 if gpus else 1.0,
                mem_guarantee="8Gi" if gpus else "128Mi",
                mem_limit="32Gi" if gpus else "1Gi",
                extra_resource_limits={"nvidia.com/gpu": str(gpus)} if gpus else None,
                uid=1000, fs_gid=100,
                service_account=None,
                automount_service_account_token=False,
            )
            out.append(api_client.sanitize_for_serialization(pod))
    return out
