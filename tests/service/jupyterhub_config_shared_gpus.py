# The service tests' hub (jupyterhub_config_service.py) on MIG and time-sliced GPUs
# (test_shared_gpus_live.py), with their profiles (tests/spawner/jupyterhub_config_gpu_kinds.py);
# the tests' token gets the admin scope (the admin data); users may use the service's pages
# (a waiting user's own page), its OAuth login without the confirmation page.
import os

from jupyterhub_gpu_reclaim.hubcompat import grant_user_scopes

_tests = os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests")
load_subconfig(os.path.join(_tests, "service", "jupyterhub_config_service.py"))  # noqa: F821
load_subconfig(os.path.join(_tests, "spawner", "jupyterhub_config_gpu_kinds.py"))  # noqa: F821

c = get_config()  # noqa: F821
next(s for s in c.JupyterHub.services if s["name"] == "gpu-reclaim")["oauth_no_confirm"] = True
grant_user_scopes(c, ["access:services!service=gpu-reclaim"])  # JupyterHub 5 and 6
c.JupyterHub.custom_scopes["custom:gpu-reclaim:admin"] = {
    "description": "See and act on every GPU session on the GPU reclaim admin page"}
next(r for r in c.JupyterHub.load_roles if r["name"] == "tests")["scopes"].append("custom:gpu-reclaim:admin")
