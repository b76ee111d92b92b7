# The tests' hub (5 s activity intervals) with jupyterhub-gpu-reclaim as a hub-managed
# service in place of jupyterhub-idle-culler, with the minimal role the README documents.
import os
import sys

from jupyterhub_gpu_reclaim.spawner.probe_tokens import configure_hub

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "signals", "jupyterhub_config_activity.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.JupyterHub.services.append({
    "name": "gpu-reclaim",
    "url": f"http://127.0.0.1:{os.environ['GPU_RECLAIM_SERVICE_PORT']}",
    "command": [sys.executable, "-m", "jupyterhub_gpu_reclaim",
                f"--config={os.environ['GPU_RECLAIM_SERVICE_CONFIG']}"],
})
# the spawner asks the service for users' recent reclaims (resume priority)
c.JupyterHub.spawner_class = "jupyterhub_gpu_reclaim.spawner.GPUReclaimSpawner"
c.GPUReclaimSpawner.resume_priority_window = 3600
c.GPUReclaimSpawner.resume_priority_class_name = "jhub-resume-priority"
c.GPUReclaimSpawner.reclaim_service_url = f"http://127.0.0.1:{os.environ['GPU_RECLAIM_SERVICE_PORT']}/services/gpu-reclaim/"
c.GPUReclaimSpawner.reclaim_service_token = os.environ["GPU_RECLAIM_TEST_TOKEN"]
c.GPUReclaimSpawner.gpu_wait_message_interval = 2  # and asks the service when a GPU is expected

# the probe-token API in the hub: the service mints kernel-probe tokens only (no `tokens`)
configure_hub(c)
c.JupyterHub.load_roles.append({
    "name": "gpu-reclaim",
    "services": ["gpu-reclaim"],
    # idle-culler's role, plus groups (for --exempt-groups) and kernel-probe tokens
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers",
               "read:users:groups", "custom:gpu-reclaim:probe-tokens"],
})
