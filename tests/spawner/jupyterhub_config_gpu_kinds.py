# The GPU profiles of the MIG and time-sliced cluster (tests/support/shared_gpu_nodes.py):
# one asks for a MIG instance, the other for a replica of a time-sliced GPU under its plain
# name, nvidia.com/gpu, on the nodes GPU feature discovery labels `<model>-SHARED`. Loaded
# on top of a hub's config (tests/service/jupyterhub_config_shared_gpus.py,
# tests/spawner/jupyterhub_config_offer_by_kind.py).
c = get_config()  # noqa: F821
_toleration = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]


def _profile(slug: str, name: str, resource: str, product: str) -> dict:
    return {"slug": slug, "display_name": name, "kubespawner_override": {
        "cpu_limit": 2, "mem_limit": "4G", "extra_resource_limits": {resource: "1"}, "tolerations": _toleration,
        "node_selector": {"hub.jupyter.org/node-purpose": "user", "nvidia.com/gpu.product": product}}}


c.KubeSpawner.profile_list = [
    _profile("mig", "1 × A100 MIG 1g.10gb", "nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB"),
    _profile("sliced", "1 × T4, time-sliced", "nvidia.com/gpu", "Tesla-T4-SHARED"),
]
