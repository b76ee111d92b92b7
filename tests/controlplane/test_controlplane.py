"""The real Kubernetes control plane that `make setup` builds from controlplane/'s Go module
(issue 37): etcd, kube-apiserver, kube-scheduler and kube-controller-manager start on loopback,
the API server says the version go.mod pins, the controller-manager's controllers run, and RBAC
refuses what it should. scripts/controlplane_smoke.py starts them (stopping each by its PID)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_control_plane_built_from_its_go_modules_comes_up():
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (ROOT / "controlplane" / "go.mod").read_text(), re.M)
    assert pinned is not None
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "controlplane_smoke.py")], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout)
    apiserver = results["kube-apiserver"]
    assert apiserver["version"] == pinned[1] == "v1.37.2"
    # RBAC enforces: anonymous may read /version and nothing else; the scheduler no secrets
    assert apiserver["anonymous_list_pods"] == 403
    assert apiserver["scheduler_list_secrets"] == 403
    # the scheduler and the controller-manager each took their leader-election Lease, and the
    # controller-manager's serviceaccount controller made the default namespace's account
    assert results["kube-scheduler"]["lease_holder"] and results["kube-controller-manager"]["lease_holder"]
    assert results["kube-controller-manager"]["default_serviceaccount_s"] > 0
    etcd = re.search(r"^\s*go\.etcd\.io/etcd/server/v3 v(\S+)", (ROOT / "controlplane" / "go.mod").read_text(), re.M)
    assert etcd is not None and results["etcd"]["version"] == etcd[1]
