# jupyterhub-gpu-reclaim on Kubernetes without the Zero to JupyterHub chart: JupyterHub and
# its proxy in pods of your own, KubeSpawner for the users. The parts that concern this
# project; merge them into your jupyterhub_config.py. With the chart: helm-values/ instead.
#
# The hub's ServiceAccount needs: get/list/watch on pods in its namespace, create/delete on
# pods and PVCs (KubeSpawner), and what helm-values/rbac.yaml grants: patch on pods (the
# spawn timings annotation) and cluster-wide reads of nodes and pods (image locality).
import os
import sys

from jupyterhub_gpu_reclaim.hubcompat import grant_user_scopes
from jupyterhub_gpu_reclaim.spawner.probe_tokens import configure_hub

c = get_config()  # noqa: F821 (provided by JupyterHub)

SERVICE_PORT = 10101
# where the proxy reaches this hub pod (a Service named "hub" with this port, as z2jh does)
SERVICE_HOST = os.environ.get("GPU_RECLAIM_SERVICE_HOST", "hub")

c.JupyterHub.services = [{
    "name": "gpu-reclaim",
    "url": f"http://{SERVICE_HOST}:{SERVICE_PORT}",
    "command": [
        sys.executable, "-m", "jupyterhub_gpu_reclaim",
        # jupyterhub-idle-culler's options, unchanged (what the z2jh chart passes it)
        "--timeout=3600", "--cull-every=600", "--concurrency=10",
        f"--bind-url=http://0.0.0.0:{SERVICE_PORT}",
        # on the hub's persistent volume, next to jupyterhub.sqlite
        "--store-url=sqlite:////srv/jupyterhub/gpu_reclaim.sqlite",
        "--prometheus-url=http://prometheus-server.monitoring.svc",
        "--kubernetes=true",  # a pod list that cannot be read holds GPU sessions
        "--admin-recipients=admin",
        "--dry-run",   # the first week: decide and record, stop nothing (docs/rollout.md)
    ],
    # a managed service gets few of the hub's variables: pass on the in-cluster API address
    "environment": {key: os.environ[key] for key in
                    ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE")
                    if key in os.environ},
}]
c.JupyterHub.load_roles = [{
    "name": "gpu-reclaim",
    "services": ["gpu-reclaim"],
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers",
               "read:users:groups", "custom:gpu-reclaim:probe-tokens"],
}]
# the hub-side API that mints kernel-probe tokens (one server's access, expiring) and its
# scope, in place of `tokens`, which mints any user's rights (docs/security.md)
configure_hub(c)
# users may open the service's pages (JupyterHub 6: extra_user_scopes; 5: the "user" role)
grant_user_scopes(c, ["access:services!service=gpu-reclaim"])

c.JupyterHub.spawner_class = "jupyterhub_gpu_reclaim.spawner.GPUReclaimSpawner"
c.GPUReclaimSpawner.image_locality = "auto"
c.GPUReclaimSpawner.gpu_queue_timeout = 900
c.KubeSpawner.namespace = os.environ.get("POD_NAMESPACE", "default")
c.KubeSpawner.profile_list = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "1 × GPU", "slug": "gpu-1",
     "kubespawner_override": {
         "extra_resource_limits": {"nvidia.com/gpu": "1"},
         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
]
