"""The release tests' z2jh release on the simulated cluster: its values (users, admins and
password; the hub and user images from the worktree; the base release's short timings),
installing it afresh, and what it did as its logs tell (the service's settings, the API
server's refusals)."""

from __future__ import annotations

import ast
import base64
import json
import re
from pathlib import Path

from gpu_reclaim_sim.z2jh import release as z2jh
from gpu_reclaim_sim.z2jh.release import BASE, HELM_VALUES, NAMESPACE

from . import live

PASSWORD = "release-password"
USERS, ADMINS = ["alice", "bob", "carol"], ["admin"]
# who else may use the admin page: gpu-reclaim.yaml's role lists them beside the hub's admins
RECLAIM_ADMINS = ["carol"]
HUB_SA = f"system:serviceaccount:{NAMESPACE}:hub"
USER_ROLE = "jupyterhub5-user-role.yaml"
# the base release's story in seconds instead of hours
TIMINGS = {"cull-every": 2, "never-used-warn-after": "12s", "never-used-reclaim-after": "24s",
           "idle-warn-after": "12s", "idle-reclaim-after": "24s", "warning-lead": "8s"}


def sim_values(**options) -> dict:
    values = z2jh.sim_values(password=PASSWORD, users=USERS, admins=ADMINS, options=options)
    # the hub image with the package: the worktree's (an editable install's own path lookup
    # may not reach a pod); the user image has the JupyterLab extension installed, as the
    # demo's (the environment the simulator maps it to: gpu_reclaim_sim/z2jh/release.py)
    values["hub"]["extraEnv"] = {"PYTHONPATH": str(live.REPO)}
    return values


def hub_variants() -> list[str]:
    """The variants every release on the tests' hub adds: on JupyterHub 5 the user role, as
    docs/install-z2jh.md tells its admins to."""
    return [USER_ROLE] if live.hub_major() == 5 else []


def install(sim, *variants: str, extra: dict | None = None, objects: list[dict] | None = None,
            rbac: list[dict] | None = None) -> z2jh.Release:
    """A fresh release in namespace jhub: gpu-reclaim.yaml, `variants`, the place's values
    (and `extra`), with `objects` (e.g. a database) applied first. The simulator's log
    from here on is the release's (`forbidden`)."""
    kubeconfig = sim.info["kubeconfig"]
    z2jh.kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                 "--timeout=120s", timeout=130)
    z2jh.kubectl(kubeconfig, "create", "namespace", NAMESPACE)
    sim.info["release_log_from"] = _log(sim).stat().st_size
    if objects:
        z2jh.apply(kubeconfig, objects, "-n", NAMESPACE)
    values = z2jh.merge_values_files(sim_values(), extra or {})
    docs = z2jh.render(BASE, *(HELM_VALUES / v for v in variants), extra=values)
    return z2jh.install(kubeconfig, docs, with_rbac=rbac)


def rbac_without_patch() -> list[dict]:
    """rbac.yaml without `patch` on pods."""
    objects = z2jh.rbac()
    for doc in objects:
        for rule in doc.get("rules", []):
            if "pods" in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
        if "rules" in doc:
            doc["rules"] = [r for r in doc["rules"] if r["verbs"]]
    return objects


def _log(sim) -> Path:
    """Where the API server's refusals are written: the real one's audit log, or the
    simulator's log (its own API server logs each 403)."""
    return Path(sim.info.get("audit_log") or sim.log_path)


def forbidden(sim, user: str = HUB_SA) -> list[str]:
    """The requests of `user` that the API server refused since the release was installed,
    one line each (`VERB /path ... forbidden: ... by user`)."""
    with open(_log(sim), errors="replace") as f:
        f.seek(sim.info["release_log_from"])
        lines = f.read().splitlines()
    if "audit_log" not in sim.info:
        return [line for line in lines if "forbidden:" in line and line.endswith(f" by {user}")]
    events = [json.loads(line) for line in lines if line.strip()]
    return [f"{e['verb'].upper()} {e['requestURI']} forbidden: {e['responseStatus'].get('message', '')} by {user}"
            for e in events if e["user"]["username"] == user and e.get("responseStatus", {}).get("code") == 403]


def settings(release: z2jh.Release) -> dict:
    """The service's settings, as it logs them when it starts (in the hub container's log):
    the lines of its logger after its header, one a setting; the hub's own lines can come
    between them (two processes write the container's log)."""
    log = release.hub_log()
    starts = list(re.finditer(r"^\[[^\]]* (\S+)\] jupyterhub-gpu-reclaim settings", log, re.MULTILINE))
    assert starts, log[-3000:]
    header = starts[-1]  # the last start's
    logger = re.escape(header.group(1))
    out = {}
    for line in log[header.end():].splitlines()[1:]:
        if not re.match(rf"\[[^\]]* {logger}\]", line):
            continue
        m = re.match(rf"\[[^\]]* {logger}\]   (\w+) = (.*)$", line)
        if not m:
            break
        out[m.group(1)] = ast.literal_eval(m.group(2))
    return out


def service_token(release: z2jh.Release, service: str = "gpu-reclaim") -> str:
    """The API token of a hub.services entry (the service's; the spawner's: SPAWNER_SERVICE),
    which the chart generated into the hub Secret."""
    secret = json.loads(release.kubectl("get", "secret", "hub", "-o", "json"))
    return base64.b64decode(secret["data"][f"hub.services.{service}.apiToken"]).decode()
