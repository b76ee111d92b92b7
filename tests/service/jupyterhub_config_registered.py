# The tests' hub (5 s activity intervals) with jupyterhub-gpu-reclaim registered by a
# README's own words: GPU_RECLAIM_REGISTRATION names the README ("idle-culler": the culler's
# README as installed, its module swapped for ours; "ours": this repository's README). Its
# `c.JupyterHub.services` and `c.JupyterHub.load_roles` blocks run as written (and what
# their configure_hub(c) declares reaches this hub), with the
# options in GPU_RECLAIM_SERVICE_FLAGS (JSON) set on the command line for the loopback test
# cluster (replacing the README's value of the same option) and 127.0.0.1:10101 replaced by
# GPU_RECLAIM_SERVICE_PORT.
import json
import os
import re
import sys
from importlib.metadata import metadata
from pathlib import Path

from traitlets.config import Config

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "signals", "jupyterhub_config_activity.py"))  # noqa: F821

c = get_config()  # noqa: F821
which = os.environ["GPU_RECLAIM_REGISTRATION"]
if which == "idle-culler":
    readme = metadata("jupyterhub-idle-culler").get_payload().replace("jupyterhub_idle_culler", "jupyterhub_gpu_reclaim")
else:
    readme = (Path(os.environ["GPU_RECLAIM_REPO"]) / "README.md").read_text()
readme = readme.replace("127.0.0.1:10101", f"127.0.0.1:{os.environ.get('GPU_RECLAIM_SERVICE_PORT', '')}")
blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
registered = Config()
for block in blocks:
    if "c.JupyterHub.services" in block and '"command"' in block or "c.JupyterHub.load_roles" in block:
        exec(block, {"c": registered, "sys": sys})
services = registered.JupyterHub.services
assert len(services) == 1 and registered.JupyterHub.load_roles, blocks
flags = json.loads(os.environ["GPU_RECLAIM_SERVICE_FLAGS"])
names = {flag.split("=", 1)[0] for flag in flags}
services[0]["command"] = [arg for arg in services[0]["command"] if arg.split("=", 1)[0] not in names] + flags
c.JupyterHub.services.extend(services)
c.JupyterHub.load_roles.extend(registered.JupyterHub.load_roles)
for key in ("custom_scopes", "extra_handlers"):  # the README's configure_hub(c), on this hub
    if key in registered.JupyterHub:
        c.JupyterHub[key] = registered.JupyterHub[key].get_value(c.JupyterHub[key])
