# A hub for the usage report's groups: the tests' hub with JupyterHub's local process spawner
# (no server is started), its groups, and a service allowed to read them, as docs/report.md
# says (list:groups, read:groups), its token GPU_RECLAIM_REPORT_TOKEN.
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "jupyterhub_config.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.JupyterHub.spawner_class = "simple"
c.JupyterHub.load_groups = {"physics": {"users": ["alice", "bob"]}, "ml-lab": {"users": ["alice", "dave"]},
                            "empty": {"users": []}}
c.JupyterHub.services.append({"name": "usage-report", "api_token": os.environ["GPU_RECLAIM_REPORT_TOKEN"]})
c.JupyterHub.load_roles.append({"name": "usage-report", "services": ["usage-report"],
                                "scopes": ["list:groups", "read:groups"]})
