# The spawner tests' hub (jupyterhub_config_spawner.py) on MIG and time-sliced GPUs
# (test_offer_by_kind_live.py): their 1-GPU profiles (jupyterhub_config_gpu_kinds.py), and a
# 2-GPU one of each kind, which waits while the other user holds one.
import copy
import os

_here = os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "spawner")
load_subconfig(os.path.join(_here, "jupyterhub_config_spawner.py"))  # noqa: F821
load_subconfig(os.path.join(_here, "jupyterhub_config_gpu_kinds.py"))  # noqa: F821

c = get_config()  # noqa: F821
_twice = []
for _one in c.KubeSpawner.profile_list:
    _two = copy.deepcopy(_one)
    _two["slug"], _two["display_name"] = f"{_one['slug']}-2", _one["display_name"].replace("1 ×", "2 ×")
    _two["kubespawner_override"]["extra_resource_limits"] = dict.fromkeys(_one["kubespawner_override"]["extra_resource_limits"], "2")
    _twice.append(_two)
c.KubeSpawner.profile_list = [*c.KubeSpawner.profile_list, *_twice]
