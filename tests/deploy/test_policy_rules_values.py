"""docs/install-z2jh.md's values for a policy rules file work with the z2jh chart: rendered
by the chart itself (Helm's SDK, the chart's schema enforced) after gpu-reclaim.yaml, the
file is in the hub's Secret and mounted in the hub container where the service's
--policy-rules points, and the service's command line, as gpu-reclaim.yaml's extraConfig
makes it from the rendered values, names it and loads the rules."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config

from gpu_reclaim_sim.z2jh import release as z2jh
from gpu_reclaim_sim.paths import REPO
from gpu_reclaim_sim.z2jh.release import BASE, CHART
from jupyterhub_gpu_reclaim.application import GpuReclaim

pytestmark = pytest.mark.skipif(z2jh.missing() is not None, reason=z2jh.missing() or "")

PAGE = REPO / "docs" / "install-z2jh.md"


def documented_values() -> dict:
    """The page's values block that mounts a file with hub.extraFiles (there is one)."""
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S) if "extraFiles" in b]
    assert len(blocks) == 1, blocks
    return yaml.safe_load(blocks[0])


def service_command(values: dict, monkeypatch) -> list[str]:
    """The gpu-reclaim service's command as the hub builds it from the rendered values: the
    chart's jupyterhub_config.py turns hub.services into c.JupyterHub.services, then runs
    gpu-reclaim.yaml's hub.extraConfig with the chart's own z2jh module reading `values`."""
    spec = importlib.util.spec_from_file_location("z2jh", CHART / "files" / "hub" / "z2jh.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_load_config", lambda: values)  # the mounted values.yaml
    monkeypatch.setitem(sys.modules, "z2jh", module)
    c = Config()
    c.JupyterHub.services = [{"name": key, **service} for key, service in values["hub"]["services"].items()]
    c.JupyterHub.load_roles = []
    exec(compile(values["hub"]["extraConfig"]["gpu-reclaim"], "gpu-reclaim", "exec"), {"c": c})
    service, = [s for s in c.JupyterHub.services if s["name"] == "gpu-reclaim"]
    return service["command"]


def test_the_documented_rules_file_is_mounted_where_the_service_reads_it(tmp_path, monkeypatch):
    documented = documented_values()
    (key, file), = documented["hub"]["extraFiles"].items()
    path = documented["custom"]["gpuReclaim"]["options"]["policy-rules"]
    assert file["mountPath"] == path
    values_file = tmp_path / "rules-values.yaml"
    values_file.write_text(yaml.safe_dump(documented))
    docs = z2jh.render(BASE, values_file)

    # the hub container mounts the file from the hub's Secret, at the path the option names
    pod = z2jh.find(docs, "Deployment", "hub")["spec"]["template"]["spec"]
    mount, = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == path]
    volume, = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "hub"
    assert {"key": key, "path": mount["subPath"]} in volume["secret"]["items"]
    content = z2jh.find(docs, "Secret", "hub")["stringData"][key]
    assert yaml.safe_load(content) == yaml.safe_load(file["stringData"])

    # the service's command line names it, and the service loads the rules from it
    command = service_command(z2jh.hub_values(docs), monkeypatch)
    assert command[:3] == ["python3", "-m", "jupyterhub_gpu_reclaim"]
    assert f"--policy-rules={path}" in command
    app = GpuReclaim()
    app.parse_command_line(command[3:])
    assert app.policy_rules == path
    mounted = tmp_path / Path(path).name  # the mounted file, here
    mounted.write_text(content)
    app.policy_rules = str(mounted)
    rules = app.load_policy_rules(app.policy_config())
    assert rules.names == [rule["name"] for rule in yaml.safe_load(content)]


def test_the_charts_schema_refuses_the_rules_as_a_list_under_data():
    """Why the page puts the list under stringData: `data` must be a mapping."""
    import helm_python

    documented = documented_values()
    (key, file), = documented["hub"]["extraFiles"].items()
    as_data = {"mountPath": file["mountPath"], "data": yaml.safe_load(file["stringData"])}
    with pytest.raises(helm_python.HelmValuesError, match="extraFiles/.*/data"):
        z2jh.render(BASE, extra={"hub": {"extraFiles": {key: as_data}}})
