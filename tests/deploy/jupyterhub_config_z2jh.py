# The tests' hub on the simulated cluster (tests/jupyterhub_config.py: loopback ports, the
# demo's KubeSpawner settings, an API token for the tests) configured from a values file
# the way the z2jh chart's jupyterhub_config.py does it (tests/deploy/z2jh_chart.py).
# $GPU_RECLAIM_Z2JH_VALUES: the merged values (YAML); $GPU_RECLAIM_Z2JH_SECRETS: the
# chart-generated secrets (JSON), i.e. the services' api tokens.
import json
import os
import sys

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "jupyterhub_config.py"))  # noqa: F821

c = get_config()  # noqa: F821
# the tests may create tokens for users (to read their scopes)
c.JupyterHub.load_roles[0]["scopes"].append("tokens")

sys.path.insert(0, os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "deploy"))
import yaml  # noqa: E402
from z2jh_chart import apply_chart  # noqa: E402

with open(os.environ["GPU_RECLAIM_Z2JH_VALUES"]) as f:
    _values = yaml.safe_load(f)
apply_chart(c, _values, json.loads(os.environ["GPU_RECLAIM_Z2JH_SECRETS"]), keep_services=True)
