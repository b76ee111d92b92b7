# The demo's reclaim service (started by the hub, see jupyterhub_config.py): the default
# policy with its timings shrunk from hours to minutes, so a session goes idle, is warned
# and reclaimed while you watch. A real hub keeps the defaults (docs/policy.md).
import os

c = get_config()  # noqa: F821
env = os.environ.get

c.GpuReclaim.timeout = 1800                  # servers without a GPU: idle-culler's rule, 30 min
c.GpuReclaim.cull_every = 15                 # a cycle every 15 s (z2jh: 600 s)
c.GpuReclaim.never_used_warn_after = "2m"    # default 30 min: GPU never used since start
c.GpuReclaim.never_used_reclaim_after = "4m"  # default 60 min
c.GpuReclaim.idle_warn_after = "3m"          # default 60 min: GPU used, then idle
c.GpuReclaim.idle_reclaim_after = "6m"       # default 2 h
c.GpuReclaim.warning_lead = "1m"             # default 15 min between the warning and the reclaim
c.GpuReclaim.stale_after = "1m"
c.GpuReclaim.namespace = "jhub"
c.GpuReclaim.kubeconfig = env("KUBECONFIG", "")
c.GpuReclaim.dcgm_exporter_urls = [env("GPU_RECLAIM_DCGM_URL", "")]
c.GpuReclaim.store_url = "sqlite:///" + os.path.abspath("gpu_reclaim.sqlite")  # in the demo's data dir
c.GpuReclaim.hub_name = "GPU Reclaim demo"
c.GpuReclaim.admin_recipients = ["admin"]
c.GpuReclaim.notifiers = [{"type": "log"}]   # the warnings appear in the hub's log (jupyterhub.log)
