"""signals.kube_client: the pods signal's parts of kubernetes_asyncio imported without its
models and API groups, and the whole library still there for whoever asks for it. Each test
runs in a fresh interpreter: the test process has imported kubernetes_asyncio already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_load_imports_neither_the_models_nor_the_other_api_groups(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://192.0.2.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    got = run(f"""
        import asyncio, json, sys
        from jupyterhub_gpu_reclaim.signals.kube_client import load

        kube = load()
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio")]

        async def main():
            await kube.config.load_kube_config(config_file={str(kubeconfig)!r})
            async with kube.ApiClient() as api:
                return api.configuration.host, api.configuration.api_key

        host, key = asyncio.run(main())
        print(json.dumps({{"host": host, "key": key, "loaded": loaded,
                          "core": kube.CoreV1Api.__module__, "watch": kube.Watch.__module__,
                          "api_exception": kube.ApiException.__name__}}))
    """)
    assert got["host"] == "https://192.0.2.1:6443"
    assert got["key"] == {"BearerToken": "Bearer t0ken"}
    assert got["core"].endswith("core_v1_api") and got["watch"] == "kubernetes_asyncio.watch.watch"
    assert got["api_exception"] == "ApiException"
    # no model, no other API group (a few hundred modules fewer)
    assert not [m for m in got["loaded"] if m.startswith("kubernetes_asyncio.client.models.")]
    assert [m for m in got["loaded"] if m.startswith("kubernetes_asyncio.client.api.")] == [
        "kubernetes_asyncio.client.api.core_v1_api"]


def test_the_whole_library_is_there_after_load():
    """Another user of kubernetes_asyncio in the same process (KubeSpawner, a test) gets every
    name, the same classes, and deserialisation into models."""
    got = run("""
        import asyncio, json
        from jupyterhub_gpu_reclaim.signals.kube_client import load

        kube = load()
        import kubernetes_asyncio.dynamic  # a submodule first: it asks the package for its __version__
        from kubernetes_asyncio.client import V1Pod, CoreV1Api, AppsV1Api
        from kubernetes_asyncio import client, config, dynamic, watch
        import kubernetes_asyncio

        class Response:  # what ApiClient.deserialize reads
            data = json.dumps({"metadata": {"name": "jupyter-alice"}, "spec": {"containers": []}})

        async def main():
            async with client.ApiClient() as api:
                return api.deserialize(Response(), "V1Pod")

        pod = asyncio.run(main())
        print(json.dumps({"same": [CoreV1Api is kube.CoreV1Api, client.ApiClient is kube.ApiClient,
                                   watch.Watch is kube.Watch, config is kube.config],
                          "pod": [type(pod) is V1Pod, pod.metadata.name],
                          "apps": AppsV1Api.__name__, "dynamic": dynamic.DynamicClient.__name__,
                          "version": kubernetes_asyncio.__version__}))
    """)
    assert got["same"] == [True, True, True, True]
    assert got["pod"] == [True, "jupyter-alice"]
    assert got["apps"] == "AppsV1Api" and got["dynamic"] == "DynamicClient" and got["version"]
