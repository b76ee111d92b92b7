# The web tests' hub (tests/web/jupyterhub_config_web.py) with the JupyterLab extension's
# wiring as docs/lab.md documents it: the servers' tokens may use the service, and the
# servers know its URL. dave's server is not told the URL: there the service is absent.
# The servers load the worktree's code and build (PYTHONPATH, JUPYTER_PATH,
# JUPYTER_CONFIG_PATH: $GPU_RECLAIM_LAB_PATHS), as an installed wheel provides them.
import json
import os

from jupyterhub_gpu_reclaim.hubcompat import lab_server_token_scopes

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "web", "jupyterhub_config_web.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.Spawner.server_token_scopes = lab_server_token_scopes()
_url = f"http://127.0.0.1:{os.environ['GPU_RECLAIM_SERVICE_PORT']}/services/gpu-reclaim/"
c.Spawner.environment = {
    **c.Spawner.environment,
    **json.loads(os.environ["GPU_RECLAIM_LAB_PATHS"]),
    "JUPYTERHUB_GPU_RECLAIM_URL": lambda spawner: "" if spawner.user.name == "dave" else _url,
}
