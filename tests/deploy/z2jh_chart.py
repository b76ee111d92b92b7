"""What the Zero to JupyterHub chart does with a values file, for the deploy tests.

- `merge`: Helm's coalescing of `--values` files: maps are merged key by key, anything else
  (lists included) is replaced, and a null in a later file deletes the key.
- `apply_chart`: the part of the chart's `jupyterhub_config.py` (jupyterhub/files/hub/
  jupyterhub_config.py) that turns values into traitlets config, applied in the chart's
  order to a traitlets `Config`:
    1. `cull.*` → the jupyterhub-idle-culler service and role (when `cull.enabled`);
    2. `hub.services.<key>` → `c.JupyterHub.services` (name defaults to the key; the
       chart-generated `api_token` comes from `secrets`), `hub.loadRoles.<key>` →
       `c.JupyterHub.load_roles` (name defaults to the key);
    3. the `hub.*` settings the chart maps to `c.JupyterHub` traits, and
       `singleuser.profileList` → `c.KubeSpawner.profile_list`;
    4. `hub.config.<Class>` → `c.<Class>.update(...)`, dropping what the chart drops
       (JupyterHub.proxy_auth_token/cookie_secret/services, ConfigurableHTTPProxy.auth_token,
       CryptKeeper.keys);
    5. `hub.extraConfig` snippets, executed in sorted key order, in a namespace with `c`,
       `get_config` (the chart's), `set_config_if_not_none`, `get_secret_value`, `get_name`,
       and an importable `z2jh` module with the same helpers.
  Not covered (the chart renders them into Kubernetes objects, or they concern the chart's own
  pods rather than JupyterHub's configuration): the proxy, ports and IPs, the hub database,
  authenticators, the other singleuser.* KubeSpawner settings, hub.extraFiles, secrets other
  than service tokens. `keep_services=True` appends to the services and roles a test hub
  already has instead of starting from empty lists as the chart does.
"""

from __future__ import annotations

import copy
import re
import sys
import types
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
# ../shared beside the clone (the layout of the workspace and of CI)
SHARED = REPO.parent / "shared"
Z2JH = SHARED / "z2jh"
HELM_VALUES = REPO / "helm-values"
BASE = HELM_VALUES / "gpu-reclaim.yaml"


CHART = Z2JH / "chart"


def render(*files: Path, extra: dict | None = None, name: str = "jhub", namespace: str = "jhub") -> list[dict]:
    """The manifests the real chart renders for `files` (then `extra`) over its defaults,
    with Helm's own Go SDK (PyPI's helm-python-sdk; its schema enforced as `helm install`
    does), in file order; NOTES.txt and empty documents left out."""
    import helm_python as helm

    chart = helm.Chart.load(str(CHART))
    values: dict = {}
    for text in [Path(f).read_text() for f in files] + ([yaml.safe_dump(extra)] if extra else []):
        values = _merge_maps(values, helm.values_from_yaml(text))
    manifests = chart.render(values, name=name, namespace=namespace, is_install=True)
    return [doc for path, text in sorted(manifests.items()) if path.endswith((".yaml", ".yml"))
            for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def _merge_maps(a: dict, b: dict) -> dict:
    """Helm's mergeMaps for `-f a -f b`: maps merged key by key, anything else (a null
    included) replaced; the chart's defaults are coalesced in later, by the SDK."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_maps(out[key], value)
        else:
            out[key] = value
    return out


def merge(base: Any, overlay: Any) -> Any:
    """`overlay` over `base` as Helm coalesces values files (neither is modified)."""
    if not isinstance(base, dict) or not isinstance(overlay, dict):
        return copy.deepcopy(overlay)
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load(path: Path) -> dict:
    return yaml.safe_load(Path(path).read_text()) or {}


def chart_values(*files: Path, extra: dict | None = None) -> dict:
    """The chart's defaults with `files` (and `extra`) over them, as `helm --values` does."""
    values = load(Z2JH / "values.yaml")
    for path in files:
        values = merge(values, load(path))
    if extra:
        values = merge(values, extra)
    return values


_MISSING = object()


def _lookup(values: dict, key: str, default: Any = None) -> Any:
    value: Any = values
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def z2jh_module(values: dict, secrets: dict[str, str] | None = None) -> types.ModuleType:
    """A stand-in for the chart's `z2jh.py` helpers, reading `values`."""
    module = types.ModuleType("z2jh")
    secrets = secrets or {}

    def get_config(key, default=None):
        value = _lookup(values, key, _MISSING)
        return default if value is _MISSING or value is None else value

    def set_config_if_not_none(cparent, name, key):
        value = get_config(key)
        if value is not None:
            setattr(cparent, name, value)

    def get_secret_value(key, default="never-set"):
        if key in secrets:
            return secrets[key]
        if default != "never-set":
            return default
        raise KeyError(f"{key} not found in the chart-managed secret")

    def get_name(name):
        return name

    module.get_config = get_config
    module.set_config_if_not_none = set_config_if_not_none
    module.get_secret_value = get_secret_value
    module.get_name = get_name
    return module


def apply_chart(c, values: dict, secrets: dict[str, str] | None = None, *, keep_services: bool = False) -> None:
    """Configure `c` from `values` as the chart's jupyterhub_config.py does (see above)."""
    values = copy.deepcopy(values)
    z2jh = z2jh_module(values, secrets)
    sys.modules["z2jh"] = z2jh
    get_config, set_config = z2jh.get_config, z2jh.set_config_if_not_none

    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    c.JupyterHub.cleanup_servers = False
    for trait in ("concurrent_spawn_limit", "active_server_limit", "base_url", "allow_named_servers",
                  "named_server_limit_per_user", "authenticate_prometheus", "redirect_to_server",
                  "shutdown_on_logout", "template_paths", "template_vars"):
        set_config(c.JupyterHub, trait, "hub." + _camel(trait))
    set_config(c.KubeSpawner, "profile_list", "singleuser.profileList")

    services = list(c.JupyterHub.services) if keep_services and "services" in c.JupyterHub else []
    roles = list(c.JupyterHub.load_roles) if keep_services and "load_roles" in c.JupyterHub else []
    if get_config("cull.enabled", False):
        role = {"name": "jupyterhub-idle-culler", "services": ["jupyterhub-idle-culler"],
                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}
        cmd = ["python3", "-m", "jupyterhub_idle_culler", "--url=http://localhost:8081/hub/api"]
        for option, key in (("timeout", "cull.timeout"), ("cull-every", "cull.every"),
                            ("concurrency", "cull.concurrency"), ("max-age", "cull.maxAge")):
            if get_config(key):
                cmd.append(f"--{option}={get_config(key)}")
        if get_config("cull.users"):
            cmd.append("--cull-users")
            role["scopes"].append("admin:users")
        if not get_config("cull.adminUsers"):
            cmd.append("--cull-admin-users=false")
        if get_config("cull.removeNamedServers"):
            cmd.append("--remove-named-servers")
        services.append({"name": "jupyterhub-idle-culler", "command": cmd})
        roles.append(role)
    for key, service in get_config("hub.services", {}).items():
        service.setdefault("name", key)
        service.pop("apiToken", None)
        service["api_token"] = z2jh.get_secret_value(f"hub.services.{key}.apiToken")
        services.append(service)
    for key, role in get_config("hub.loadRoles", {}).items():
        role.setdefault("name", key)
        roles.append(role)
    c.JupyterHub.services = services
    c.JupyterHub.load_roles = roles

    for app, cfg in get_config("hub.config", {}).items():
        if app == "JupyterHub":
            for key in ("proxy_auth_token", "cookie_secret", "services"):
                cfg.pop(key, None)
        elif app == "ConfigurableHTTPProxy":
            cfg.pop("auth_token", None)
        elif app == "CryptKeeper":
            cfg.pop("keys", None)
        c[app].update(cfg)

    namespace = {"c": c, "get_config": get_config, "set_config_if_not_none": set_config,
                 "get_secret_value": z2jh.get_secret_value, "get_name": z2jh.get_name, "z2jh": z2jh,
                 "__name__": "jupyterhub_config"}
    for key, snippet in sorted(get_config("hub.extraConfig", {}).items()):
        exec(compile(snippet, f"hub.extraConfig.{key}", "exec"), namespace)
