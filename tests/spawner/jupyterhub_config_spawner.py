# The tests' hub with GPUReclaimSpawner in place of KubeSpawner (the demo's profiles and
# settings apply: its traits are KubeSpawner's), and a short GPU queue timeout.
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "jupyterhub_config.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.JupyterHub.spawner_class = "jupyterhub_gpu_reclaim.spawner.GPUReclaimSpawner"
c.GPUReclaimSpawner.gpu_queue_timeout = float(os.environ.get("GPU_RECLAIM_QUEUE_TIMEOUT", "8"))  # a few wait messages (every 2 s), then withdrawn
c.GPUReclaimSpawner.gpu_wait_message_interval = 2
c.JupyterHub.authenticate_prometheus = False  # the tests read the hub's /metrics
