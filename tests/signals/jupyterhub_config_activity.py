# The tests' hub (tests/jupyterhub_config.py) with activity reported every 5 s instead of
# 60/300 s (GPU_RECLAIM_ACTIVITY_INTERVAL, if set: the signals' own tests take 2 s), so tests
# can see within seconds whether something moves `last_activity`.
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "jupyterhub_config.py"))  # noqa: F821

interval = int(os.environ.get("GPU_RECLAIM_ACTIVITY_INTERVAL", "5"))
c = get_config()  # noqa: F821
c.JupyterHub.last_activity_interval = interval  # the hub pulls the proxy's route activity
c.Spawner.environment = {"JUPYTERHUB_ACTIVITY_INTERVAL": str(interval)}  # servers push their activity
