"""The parts of kubernetes_asyncio the pods signal uses (its configuration loading, with
kubeconfig auth plugins and in-cluster tokens; `ApiClient`; `CoreV1Api`; `Watch`), imported
without the rest of the package.

Importing any module of kubernetes_asyncio runs the package's `__init__`, which imports every
API group and every one of its ~1,300 model modules: 54 MiB of memory (from compiled
bytecode; docs/benchmarks.md, "20,000 servers"), of which the pods signal needs 17 (it reads
the pod and node lists as JSON, never as models). So
the packages whose `__init__` imports all that (`kubernetes_asyncio`, `.client`, `.client.api`,
`.client.models`) are registered first as *deferred* packages (the first of them
completed at once, see `load`): their submodules import as
usual, and a package's own `__init__` runs in full the first time something asks it for a
name it does not hold yet (`from kubernetes_asyncio.client import V1Pod`, the ApiClient's
deserialisation into models), so any other user of the library in the same process gets
the whole package as before. Where kubernetes_asyncio is already imported, nothing is
deferred.

`KUBECONFIG` must be set before kubernetes_asyncio is imported: call `load()` only then.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
from dataclasses import dataclass
from typing import Any

# the packages whose __init__ imports every API and model, parents first
_DEFERRED = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.api",
             "kubernetes_asyncio.client.models")


class _DeferredPackage(types.ModuleType):
    """A package whose `__init__` has not run yet: it runs on the first name asked for
    that the package does not hold (a submodule imported meanwhile is held)."""

    def __getattr__(self, name: str) -> Any:  # any name, dunders included
        _run_init(self)
        return getattr(self, name)


def _run_init(package: types.ModuleType) -> None:
    package.__class__ = types.ModuleType  # once: a name missing during or after it is missing
    spec = package.__spec__
    assert spec is not None and spec.loader is not None  # module_from_spec in _defer
    spec.loader.exec_module(package)


@dataclass(frozen=True)
class Kube:
    """What the pods signal uses of kubernetes_asyncio."""

    config: Any  # kubernetes_asyncio.config: load_kube_config, load_incluster_config, ConfigException
    ApiClient: Any
    CoreV1Api: Any
    Watch: Any
    ApiException: Any


def _defer() -> None:
    for name in _DEFERRED:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ImportError(f"{name} is not installed")
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _DeferredPackage
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


@functools.cache
def load() -> Kube:
    if "kubernetes_asyncio" not in sys.modules:
        _defer()
    mod = importlib.import_module
    configuration = mod("kubernetes_asyncio.client.configuration")
    exceptions = mod("kubernetes_asyncio.client.exceptions")
    mod("kubernetes_asyncio.client.rest")  # before api_client, which imports it from the package
    api_client = mod("kubernetes_asyncio.client.api_client")
    client = sys.modules["kubernetes_asyncio.client"]
    # the two names config and watch import from the package (a deferred one would run its __init__)
    for obj in (configuration.Configuration, api_client.ApiClient):
        client.__dict__.setdefault(obj.__name__, obj)
    top = sys.modules["kubernetes_asyncio"]
    if isinstance(top, _DeferredPackage):
        # its own __init__ now (config, watch, dynamic, utils, stream: ~8 MiB), so that its
        # submodules import as usual (`dynamic` asks it for __version__ as it imports):
        # only `client`'s, `client.api`'s and `client.models`' stay deferred
        _run_init(top)
    core_v1 = mod("kubernetes_asyncio.client.api.core_v1_api")
    return Kube(config=mod("kubernetes_asyncio.config"), ApiClient=api_client.ApiClient,
                CoreV1Api=core_v1.CoreV1Api, Watch=mod("kubernetes_asyncio.watch.watch").Watch,
                ApiException=exceptions.ApiException)
