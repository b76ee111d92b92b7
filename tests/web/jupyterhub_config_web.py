# The service tests' hub (tests/service/jupyterhub_config_service.py) plus what the web
# pages need, as docs/api.md documents it: users may use the service, its OAuth login skips
# the confirmation page, the admin scope exists, is granted to the hub's admin and to carol
# (no hub admin) and reaches the service's login token, and the hub's pages show the reclaim
# state (the package's hub templates). For the attacks of tests/web/test_hardening.py: hub
# services named like users, with access to the service ($GPU_RECLAIM_SERVICE_TOKENS).
import json
import os

from jupyterhub_gpu_reclaim.hubcompat import grant_user_scopes
from jupyterhub_gpu_reclaim.web import HUB_TEMPLATES

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "service", "jupyterhub_config_service.py"))  # noqa: F821

c = get_config()  # noqa: F821
service = next(s for s in c.JupyterHub.services if s["name"] == "gpu-reclaim")
service["oauth_no_confirm"] = True
service["oauth_client_allowed_scopes"] = ["custom:gpu-reclaim:admin"]
grant_user_scopes(c, ["access:services!service=gpu-reclaim"])  # JupyterHub 5 and 6
c.JupyterHub.custom_scopes["custom:gpu-reclaim:admin"] = {
    "description": "See and act on every GPU session on the GPU reclaim admin page"}
c.JupyterHub.load_roles.append({"name": "gpu-reclaim-admins", "users": ["admin", "carol"],
                                "scopes": ["custom:gpu-reclaim:admin"]})
_tokens = json.loads(os.environ["GPU_RECLAIM_SERVICE_TOKENS"])
c.JupyterHub.services += [{"name": name, "api_token": token} for name, token in _tokens.items()]
c.JupyterHub.load_roles.append({"name": "services-named-like-users", "services": sorted(_tokens),
                                "scopes": ["access:services!service=gpu-reclaim"]})
c.JupyterHub.template_paths = [HUB_TEMPLATES]
# the tests mint tokens of users (as the hub's token page would for them)
next(r for r in c.JupyterHub.load_roles if r["name"] == "tests")["scopes"].append("tokens")
