# The service tests' hub (jupyterhub_config_service.py) with a short reclaim grace period, so
# that a checkpoint that hangs is cut within the test's time.
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "service", "jupyterhub_config_service.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.GPUReclaimSpawner.reclaim_grace_period = int(os.environ["GPU_RECLAIM_TEST_GRACE"])
