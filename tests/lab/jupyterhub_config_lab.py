# The web tests' hub (tests/web/jupyterhub_config_web.py) with the JupyterLab extension's
# wiring as docs/lab.md documents it: the servers' tokens may use the service, and the
# servers know its URL. dave's server is not told the URL: there the service is absent.
# The servers load the extension as the demo's do: installed in the environment they run
# from (scripts/setup.sh; tests/packaging/test_setup_env.py), nothing on a path.
import os

from jupyterhub_gpu_reclaim.hubcompat import lab_server_token_scopes

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "web", "jupyterhub_config_web.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.Spawner.server_token_scopes = lab_server_token_scopes()
_url = f"http://127.0.0.1:{os.environ['GPU_RECLAIM_SERVICE_PORT']}/services/gpu-reclaim/"
c.Spawner.environment = {
    **c.Spawner.environment,
    "JUPYTERHUB_GPU_RECLAIM_URL": lambda spawner: "" if spawner.user.name == "dave" else _url,
}
