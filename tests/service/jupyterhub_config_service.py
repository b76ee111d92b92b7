# The tests' hub (5 s activity intervals) with jupyterhub-gpu-reclaim as a hub-managed
# service in place of jupyterhub-idle-culler, with the minimal role the README documents.
import os
import sys

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "signals", "jupyterhub_config_activity.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.JupyterHub.services.append({
    "name": "gpu-reclaim",
    "url": f"http://127.0.0.1:{os.environ['GPU_RECLAIM_SERVICE_PORT']}",
    "command": [sys.executable, "-m", "jupyterhub_gpu_reclaim",
                f"--config={os.environ['GPU_RECLAIM_SERVICE_CONFIG']}"],
})
c.JupyterHub.load_roles.append({
    "name": "gpu-reclaim",
    "services": ["gpu-reclaim"],
    # idle-culler's role, plus groups (for --exempt-groups) and access:servers (kernel probes)
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers",
               "read:users:groups", "access:servers"],
})
