# The demo's reclaim service when the demo runs its own hub (see jupyterhub_config.py):
# the options of the demo's values (values.yaml, which the demo's z2jh release passes
# the service) and where this hub's service finds the cluster and keeps its records.
import os
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # traitlets' config loader provides get_config() when it runs this file
    from traitlets.config import Config

    def get_config() -> Config: ...


c = get_config()
env = os.environ.get

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "values.yaml")) as f:
    for _key, _value in yaml.safe_load(f)["custom"]["gpuReclaim"]["options"].items():
        setattr(c.GpuReclaim, _key.replace("-", "_"), _value)
c.GpuReclaim.namespace = "jhub"
c.GpuReclaim.kubeconfig = env("KUBECONFIG", "")
c.GpuReclaim.dcgm_exporter_urls = [env("GPU_RECLAIM_DCGM_URL", "")]
# the demo's Prometheus (z2jh/demo_prometheus.py), where it runs: the GPU readings from it, as
# on a z2jh hub, and the usage report's history before the service's own record
c.GpuReclaim.prometheus_url = env("GPU_RECLAIM_PROMETHEUS_URL", "")
c.GpuReclaim.store_url = "sqlite:///" + os.path.abspath("gpu_reclaim.sqlite")  # in the demo's data dir
c.GpuReclaim.notifiers = [{"type": "log"}]   # the warnings appear in the hub's log (jupyterhub.log)
