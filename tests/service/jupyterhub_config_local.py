# A hub without Kubernetes: the tests' hub (5 s activity intervals) with JupyterHub's
# SimpleLocalProcessSpawner in place of KubeSpawner, each server a local
# jupyterhub-singleuser process (GPU_RECLAIM_SINGLEUSER: the tests' environment's, as the
# simulated cluster runs it). Its spawner keeps the profile a server was started with in the
# server's state, as a spawner with profiles may: what idle-culler's documented
# cull_arbiter_hook reads (server["state"]["profile_name"]).
# GPU_RECLAIM_REGISTRATION set: jupyterhub-gpu-reclaim registered by that README
# (jupyterhub_config_registered.py). GPU_RECLAIM_EXTERNAL (JSON {name: token}): external
# services with idle-culler's README role plus admin:server_state, for cullers the tests run.
import json
import os

from jupyterhub.spawner import SimpleLocalProcessSpawner

here = os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests")
if os.environ.get("GPU_RECLAIM_REGISTRATION"):
    load_subconfig(os.path.join(here, "service", "jupyterhub_config_registered.py"))  # noqa: F821
else:
    load_subconfig(os.path.join(here, "signals", "jupyterhub_config_activity.py"))  # noqa: F821


class ProfileSpawner(SimpleLocalProcessSpawner):
    def get_state(self):
        return {**super().get_state(), "profile_name": self.user_options.get("profile", "")}


c = get_config()  # noqa: F821
c.JupyterHub.spawner_class = ProfileSpawner
c.JupyterHub.allow_named_servers = True
c.Spawner.cmd = [os.environ["GPU_RECLAIM_SINGLEUSER"]]
c.Spawner.default_url = "/tree"
c.Spawner.args = ["--allow-root"] if os.geteuid() == 0 else []  # the tests may run as root (CI containers)
c.SimpleLocalProcessSpawner.home_dir_template = os.path.join(os.getcwd(), "home", "{username}")
for name, token in json.loads(os.environ.get("GPU_RECLAIM_EXTERNAL", "{}")).items():
    c.JupyterHub.services.append({"name": name, "api_token": token})
    c.JupyterHub.load_roles.append({"name": name, "services": [name], "scopes": [
        "list:users", "read:users:activity", "read:servers", "delete:servers", "admin:server_state"]})
