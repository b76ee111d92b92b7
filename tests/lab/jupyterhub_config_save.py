# The JupyterLab extension's hub (jupyterhub_config_lab.py) with a lead that fits a test: the
# servers' tabs save 45 s before the reclaim time, which the servers read from the service
# every 2 s (GpuReclaimLab.save_lead, .watch_interval; the defaults are 120 s and 30 s).
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "lab", "jupyterhub_config_lab.py"))  # noqa: F821

c = get_config()  # noqa: F821
c.Spawner.args = ["--GpuReclaimLab.save_lead=45", "--GpuReclaimLab.watch_interval=2"]
