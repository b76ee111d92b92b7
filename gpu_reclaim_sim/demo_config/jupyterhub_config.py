# JupyterHub configuration of the demo: KubeSpawner on the simulated cluster.
# `jupyterhub-gpu-reclaim-sim demo` starts the cluster and runs `jupyterhub -f` on this file;
# the integration tests load it too. Ports and the password come from the environment.
import os
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # traitlets' config loader provides get_config() when it runs this file
    from traitlets.config import Config

    def get_config() -> Config: ...


c = get_config()
env = os.environ.get

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env("GPU_RECLAIM_HUB_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env("GPU_RECLAIM_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env('GPU_RECLAIM_PROXY_API_PORT', '8001')}"
# pods reach the hub here (in a real cluster: the hub Service)
c.JupyterHub.hub_connect_url = f"http://127.0.0.1:{c.JupyterHub.hub_port}"
c.JupyterHub.last_activity_interval = 60  # as z2jh sets it

# --- log in: demo users with one password ------------------------------------------
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = env("GPU_RECLAIM_DEMO_PASSWORD", "")
c.Authenticator.allowed_users = {"alice", "bob", "carol"}
c.Authenticator.admin_users = {"admin"}

# --- KubeSpawner, unmodified, through the kubeconfig in $KUBECONFIG --------------------
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.KubeSpawner.namespace = "jhub"
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.uid = 1000  # jovyan, as z2jh's singleuser.uid and fsGid set them
c.KubeSpawner.fs_gid = 100
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:latest"
c.KubeSpawner.start_timeout = 600  # a GPU spawn may wait in the queue
c.KubeSpawner.http_timeout = 120
c.KubeSpawner.node_selector = {"hub.jupyter.org/node-purpose": "user"}
c.KubeSpawner.cpu_guarantee = 0.5
c.KubeSpawner.mem_guarantee = "1G"

# home directories on a PVC per user, mounted where the docker-stacks images keep home
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = "10Gi"
c.KubeSpawner.pvc_name_template = "claim-{user_server}"
c.KubeSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]

_gpu_toleration = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU — 1 core, 2 GB",
        "slug": "cpu",
        "description": "For data wrangling and writing. No GPU.",
        "default": True,
        "kubespawner_override": {"cpu_limit": 1, "mem_limit": "2G"},
    },
    {
        "display_name": "1 × NVIDIA A100 (40 GB)",
        "slug": "gpu-1",
        "description": "PyTorch with CUDA 12. Idle GPUs are given back to the queue.",
        "kubespawner_override": {
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02",
            "cpu_limit": 4,
            "mem_limit": "16G",
            "extra_resource_limits": {"nvidia.com/gpu": "1"},
            "tolerations": _gpu_toleration,
        },
    },
    {
        "display_name": "2 × NVIDIA A100 (40 GB)",
        "slug": "gpu-2",
        "description": "For multi-GPU training.",
        "kubespawner_override": {
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02",
            "cpu_limit": 8,
            "mem_limit": "32G",
            "extra_resource_limits": {"nvidia.com/gpu": "2"},
            "tolerations": _gpu_toleration,
        },
    },
]

# --- jupyterhub-gpu-reclaim: the spawner, the reclaim service and its pages ------------
import sys  # noqa: E402

from jupyterhub_gpu_reclaim.hubcompat import grant_user_scopes, lab_server_token_scopes  # noqa: E402
from jupyterhub_gpu_reclaim.spawner.probe_tokens import configure_hub  # noqa: E402
from jupyterhub_gpu_reclaim.spawner.service_link import link_to_service  # noqa: E402
from jupyterhub_gpu_reclaim.web import HUB_TEMPLATES  # noqa: E402

c.JupyterHub.spawner_class = "jupyterhub_gpu_reclaim.spawner.GPUReclaimSpawner"
c.GPUReclaimSpawner.gpu_queue_timeout = 900  # a spawn gives up after 15 min in the GPU queue

_demo = os.path.dirname(os.path.abspath(__file__))  # traitlets sets __file__ for a config file
c.JupyterHub.services = [{
    "name": "gpu-reclaim",
    "url": f"http://127.0.0.1:{env('GPU_RECLAIM_SERVICE_PORT', '10101')}",
    "command": [sys.executable, "-m", "jupyterhub_gpu_reclaim",
                f"--config={os.path.join(_demo, 'gpu_reclaim_config.py')}"],
    # a hub-managed service does not inherit the hub's environment
    "environment": {"KUBECONFIG": env("KUBECONFIG", ""), "GPU_RECLAIM_DCGM_URL": env("GPU_RECLAIM_DCGM_URL", ""),
                    "GPU_RECLAIM_PROMETHEUS_URL": env("GPU_RECLAIM_PROMETHEUS_URL", "")},
    "oauth_no_confirm": True,
    "oauth_client_allowed_scopes": ["custom:gpu-reclaim:admin"],
}]
c.JupyterHub.custom_scopes = {
    "custom:gpu-reclaim:admin": {"description": "See and act on every GPU session on the GPU reclaim admin page"},
}
c.JupyterHub.load_roles = [{
    "name": "gpu-reclaim",
    "services": ["gpu-reclaim"],
    # idle-culler's scopes, plus groups (--exempt-groups) and kernel-probe tokens
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers",
               "read:users:groups", "custom:gpu-reclaim:probe-tokens"],
}, {
    # the admin page and API: the scope decides, not the hub's admin flag (docs/security.md)
    "name": "gpu-reclaim-admins",
    "users": sorted(c.Authenticator.admin_users),
    "scopes": ["custom:gpu-reclaim:admin"],
}]
configure_hub(c)  # the probe-token API in the hub and its scope (not `tokens`: docs/security.md)
# users may open its pages (JupyterHub 6: extra_user_scopes; 5: the "user" role)
grant_user_scopes(c, ["access:services!service=gpu-reclaim"])
c.JupyterHub.template_paths = [HUB_TEMPLATES]  # the reclaim state and banner on the hub's pages
# the JupyterLab extension (docs/lab.md): the servers' tokens may use the service, which the
# servers reach directly (never through their own route on the proxy)
c.Spawner.server_token_scopes = lab_server_token_scopes()
c.Spawner.environment = {
    "JUPYTERHUB_GPU_RECLAIM_URL": f"http://127.0.0.1:{env('GPU_RECLAIM_SERVICE_PORT', '10101')}/services/gpu-reclaim/",
}


def _kept_token(path: str) -> str:
    """A token kept in `path` (the demo's data dir), made once: JupyterHub never revokes a
    service's token from its configuration, so one made at each start would leave the old
    ones valid in its database."""
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        token = secrets.token_hex(32)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(token)
        return token


# the spawner asks the service (resume priority, the reclaim's grace period, the spawn page's
# expected wait) with a token of its own that reaches the service and nothing else, as on z2jh
link_to_service(c, c.JupyterHub.services[0]["url"], token=_kept_token(os.path.abspath("gpu_reclaim_spawner_token")))
