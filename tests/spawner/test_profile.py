"""The profile the spawner applied, on its pod: KubeSpawner's own choice (for a spawn that
names none, the default profile, else the first), which the reclaim service's rules match."""

from __future__ import annotations

import pytest

from jupyterhub_gpu_reclaim.signals.pod_facts import PROFILE_ANNOTATION

COURSE_DEFAULT = [
    {"display_name": "CPU only", "slug": "cpu"},
    {"display_name": "One GPU", "slug": "gpu-1"},
    {"display_name": "One GPU (course)", "slug": "gpu-course", "default": True},
]
NO_DEFAULT = [{"display_name": "One GPU (course)"}, {"display_name": "One GPU", "slug": "gpu-1"}]


class User:
    name = escaped_name = "ivan"
    id = 9
    url = "/user/ivan/"
    spawners: dict = {}


@pytest.fixture
def make_spawner(monkeypatch):
    """A GPUReclaimSpawner with no cluster: KubeSpawner's client is never used to make a pod."""
    import kubespawner.spawner
    from traitlets.config import Config

    from jupyterhub_gpu_reclaim.spawner.core import GPUReclaimSpawner

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **kw: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda name: None)

    def make(profile_list):
        config = Config()
        config.GPUReclaimSpawner.profile_list = profile_list
        config.GPUReclaimSpawner.image_locality = "off"
        return GPUReclaimSpawner(_mock=True, user=User(), config=config)

    return make


async def applied(spawner, user_options: dict) -> str | None:
    """The profile annotation of the pod the spawner makes for `user_options`, as KubeSpawner's
    _start does it: load_user_options, then the manifest."""
    spawner.user_options = user_options
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    return (pod.metadata.annotations or {}).get(PROFILE_ANNOTATION)


async def _course_default_coroutine(spawner):
    return COURSE_DEFAULT


@pytest.mark.parametrize("profile_list", [COURSE_DEFAULT, lambda spawner: COURSE_DEFAULT,
                                          _course_default_coroutine], ids=["list", "callable", "coroutine"])
async def test_a_spawn_naming_no_profile_is_annotated_with_the_default_one(make_spawner, profile_list):
    spawner = make_spawner(profile_list)
    assert await applied(spawner, {}) == "gpu-course"  # the REST API's {}, a link without opt-profile
    # the form posted with `profile=` empty
    assert await applied(spawner, spawner.run_options_from_form({"profile": [""]})) == "gpu-course"
    assert await applied(spawner, {"profile": ""}) == "gpu-course"
    # the profile chosen, and the next spawn of the same spawner follows its own options
    assert await applied(spawner, spawner.run_options_from_form({"profile": ["gpu-1"]})) == "gpu-1"
    assert await applied(spawner, {"profile": "cpu"}) == "cpu"
    assert await applied(spawner, {}) == "gpu-course"


async def test_without_a_default_the_first_profile_is_applied_by_its_generated_slug(make_spawner):
    spawner = make_spawner(NO_DEFAULT)
    assert await applied(spawner, {}) == "one-gpu-course"  # KubeSpawner's slug of its display_name
    assert await applied(spawner, {"profile": "gpu-1"}) == "gpu-1"


async def test_an_unknown_profile_starts_nothing(make_spawner):
    spawner = make_spawner(COURSE_DEFAULT)
    with pytest.raises(ValueError, match="No such profile"):
        await applied(spawner, {"profile": "gpu-8"})


async def test_without_a_profile_list_no_profile_is_applied(make_spawner):
    spawner = make_spawner([])
    assert await applied(spawner, {}) == ""
    with pytest.raises(ValueError, match="No such profile"):  # KubeSpawner's refusal
        await applied(spawner, {"profile": "gpu-course"})
