# The service tests' hub (jupyterhub_config_service.py) for policy rules by profile and
# group: a second 1-GPU profile (gpu-course, as a course's would be), the default one (a
# spawn that names no profile gets it), ben in the group "lab", and the admin scope for the
# tests' token (the admin page's data).
import copy
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "service", "jupyterhub_config_service.py"))  # noqa: F821

c = get_config()  # noqa: F821
_course = copy.deepcopy(next(p for p in c.KubeSpawner.profile_list if p["slug"] == "gpu-1"))
_course.update(slug="gpu-course", display_name="1 × GPU (course)", default=True)
c.KubeSpawner.profile_list = [{k: v for k, v in p.items() if k != "default"} for p in c.KubeSpawner.profile_list]
c.KubeSpawner.profile_list.append(_course)
c.JupyterHub.load_groups = {"lab": {"users": ["ben"]}}
c.JupyterHub.custom_scopes["custom:gpu-reclaim:admin"] = {
    "description": "See and act on every GPU session on the GPU reclaim admin page"}
next(r for r in c.JupyterHub.load_roles if r["name"] == "tests")["scopes"].append("custom:gpu-reclaim:admin")
