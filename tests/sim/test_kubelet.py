"""The simulated kubelet's pod runtime, through kubectl and the official client against
the real simulator (`jupyterhub-gpu-reclaim-sim run`, process mode): volumes (subPath,
items, modes, projected, emptyDir, PVCs) and their mount errors, stopping pods and every
process in them (namespace deletion, grace period 0, processes that leave their
session), CrashLoopBackOff, hostnames, and the user and file system a container gets.

Isolation needs the simulator to run as root (namespaces, mounts, cgroups); elsewhere
these tests skip, saying so.
"""

from __future__ import annotations

import base64
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from gpu_reclaim_sim.api.timestamps import parse_time
from gpu_reclaim_sim.kubelet import cgroups, hosts, volumes
from gpu_reclaim_sim.kubelet.backoff import RestartBackoff

from ..support.sim_cluster import kubectl, notebook_scenario, sim_fixtures, wait_for
from ..support.sim_cluster import NOTEBOOK_IMAGE as IMAGE

NS = "jhub"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the simulator isolates pods only as root "
                                "(namespaces, mounts, cgroups)")

sim, core = sim_fixtures(notebook_scenario("kubelet", NS))


def pod(name: str, script: str, *, volumes: list | None = None, mounts: list | None = None,
        security: dict | None = None, container_security: dict | None = None, restart: str = "Never",
        containers: list | None = None, **spec: Any) -> dict:
    container = {"name": name, "image": IMAGE, "command": ["sh", "-c", script], "volumeMounts": mounts or []}
    if container_security:
        container["securityContext"] = container_security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container, *(containers or [])], "volumes": volumes or [],
                     "restartPolicy": restart, "terminationGracePeriodSeconds": 2,
                     "securityContext": security or {}, **spec}}


def create(core: k8s.CoreV1Api, body: dict, ns: str = NS) -> Any:
    return core.create_namespaced_pod(ns, body)


def finished(core: k8s.CoreV1Api, name: str, ns: str = NS, timeout: float = 60) -> Any:
    return wait_for(lambda: (p := core.read_namespaced_pod(name, ns)).status.phase in ("Succeeded", "Failed") and p,
                    f"end of pod {name}", timeout)


def output(core: k8s.CoreV1Api, name: str, ns: str = NS) -> str:
    p = finished(core, name, ns)
    text = core.read_namespaced_pod_log(name, ns)
    assert p.status.phase == "Succeeded", text
    return text


def running(core: k8s.CoreV1Api, name: str, ns: str = NS) -> Any:
    return wait_for(lambda: (p := core.read_namespaced_pod(name, ns)).status.phase == "Running" and p,
                    f"pod {name} running")


def events(core: k8s.CoreV1Api, name: str, reason: str, ns: str = NS) -> list:
    return core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name},reason={reason}").items


def processes_with(marker: str) -> list[int]:
    """Host PIDs of processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def gone(core: k8s.CoreV1Api, name: str, ns: str = NS) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as e:
        return e.status == 404
    return False


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- volumes ---------------------------------------------------------------------------

@needs_root
def test_subpath_mounts_single_files_as_z2jhs_hub_pod_does(sim, core):
    core.create_namespaced_config_map(NS, {"metadata": {"name": "hub"}, "data": {
        "jupyterhub_config.py": "c = get_config()\n", "z2jh.py": "def get_config(): ...\n", "checksum_hook": "x"}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "hub"}, "data": {"values.yaml": b64("hub: {}\n")}})
    etc = "/usr/local/etc/jupyterhub"
    create(core, pod("hub", f"cat {etc}/jupyterhub_config.py {etc}/z2jh.py {etc}/secret/values.yaml; "
                            f"ls {etc}; ls {etc}/config; touch {etc}/config/new || echo read-only",
                     volumes=[{"name": "config", "configMap": {"name": "hub"}},
                              {"name": "secret", "secret": {"secretName": "hub"}}],
                     mounts=[{"mountPath": f"{etc}/jupyterhub_config.py", "subPath": "jupyterhub_config.py",
                              "name": "config"},
                             {"mountPath": f"{etc}/z2jh.py", "subPath": "z2jh.py", "name": "config"},
                             {"mountPath": f"{etc}/config/", "name": "config"},
                             {"mountPath": f"{etc}/secret/", "name": "secret"}]))
    lines = output(core, "hub").splitlines()
    assert lines[:3] == ["c = get_config()", "def get_config(): ...", "hub: {}"]
    assert lines[3:6] == ["config", "jupyterhub_config.py", "secret"] and lines[6] == "z2jh.py"
    assert lines[7:10] == ["checksum_hook", "jupyterhub_config.py", "z2jh.py"]
    assert lines[-1] == "read-only"  # configMap volumes are mounted read-only
    assert not events(core, "hub", "FailedMount")


@needs_root
def test_items_modes_optional_and_the_atomic_writer_layout(sim, core):
    core.create_namespaced_config_map(NS, {"metadata": {"name": "app"}, "data": {"a": "A", "b": "B"}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "app"}, "data": {"token": b64("t0k3n")}})
    create(core, pod("items", "cd /cfg; ls -A; stat -Lc '%n %a' conf/a.yaml b; cat conf/a.yaml; echo; "
                              "stat -Lc '%a %g' /sec/token; cat /sec/token; echo; ls /opt-cm | wc -l",
                     volumes=[{"name": "cfg", "configMap": {"name": "app", "defaultMode": 0o440, "items": [
                                  {"key": "a", "path": "conf/a.yaml", "mode": 0o600}, {"key": "b", "path": "b"}]}},
                              {"name": "sec", "secret": {"secretName": "app", "defaultMode": 0o400}},
                              {"name": "opt", "configMap": {"name": "absent", "optional": True}}],
                     mounts=[{"name": "cfg", "mountPath": "/cfg"}, {"name": "sec", "mountPath": "/sec"},
                             {"name": "opt", "mountPath": "/opt-cm"}],
                     security={"fsGroup": 100}))
    lines = output(core, "items").splitlines()
    entries, rest = lines[:4], lines[4:]
    assert entries[0].startswith("..2") and entries[1:] == ["..data", "b", "conf"]
    # the mode asked for, plus the group's read bit for fsGroup (SetVolumeOwnership)
    assert rest == ["conf/a.yaml 640", "b 440", "A", "440 100", "t0k3n", "0"]


@needs_root
def test_a_missing_configmap_is_a_failed_mount_until_it_exists(sim, core):
    create(core, pod("waits", "cat /cfg/x", volumes=[{"name": "cfg", "configMap": {"name": "later"}}],
                     mounts=[{"name": "cfg", "mountPath": "/cfg"}]))
    event = wait_for(lambda: events(core, "waits", "FailedMount"), "FailedMount event")[0]
    assert event.type == "Warning" and event.source.component == "kubelet"
    assert event.message == 'MountVolume.SetUp failed for volume "cfg" : configmap "later" not found'
    p = core.read_namespaced_pod("waits", NS)
    assert p.status.phase == "Pending"
    assert p.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    core.create_namespaced_config_map(NS, {"metadata": {"name": "later"}, "data": {"x": "here"}})
    assert output(core, "waits") == "here"

    create(core, pod("nokey", "true", volumes=[{"name": "cfg", "configMap": {
        "name": "later", "items": [{"key": "nope", "path": "nope"}]}}], mounts=[{"name": "cfg", "mountPath": "/c"}]))
    event = wait_for(lambda: events(core, "nokey", "FailedMount"), "FailedMount event")[0]
    assert event.message == ('MountVolume.SetUp failed for volume "cfg" : '
                             "configmap references non-existent config key: nope")
    kubectl(sim, "delete", "pod", "nokey", "-n", NS, "--wait=true")


@needs_root
def test_projected_volume_sources_as_the_service_account_volume_has_them(sim, core):
    core.create_namespaced_config_map(NS, {"metadata": {"name": "root-ca"}, "data": {"ca.crt": "CERT"}})
    create(core, pod("projected", "cd /var/run/secrets/kubernetes.io/serviceaccount; ls; cat ca.crt; echo; "
                                  "cat namespace; echo; cat labels; echo; cat annotations",
                     volumes=[{"name": "kube-api-access-x1", "projected": {"defaultMode": 0o644, "sources": [
                         {"configMap": {"name": "root-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                         {"downwardAPI": {"items": [
                             {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
                             {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                             {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}]}}],
                     mounts=[{"name": "kube-api-access-x1",
                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}]) |
           {"metadata": {"name": "projected", "labels": {"app": "x"}, "annotations": {"note": 'say "hi"'}}})
    assert output(core, "projected").splitlines() == [
        "annotations", "ca.crt", "labels", "namespace", "CERT", NS, 'app="x"', 'note="say \\"hi\\""']


def test_service_account_token_source_asks_for_a_token_and_errors_aggregate(tmp_path):
    asked = []

    def token(service_account: str, expiration: int, audience: str | None) -> str:
        asked.append((service_account, expiration, audience))
        return "eyJ.token"

    the_pod = {"metadata": {"name": "p", "namespace": "jhub", "uid": "u1"},
               "spec": {"serviceAccountName": "hub", "containers": [{"name": "c"}]}}
    source = {"name": "kube-api-access-abcde", "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}
    found = {("ConfigMap", "kube-root-ca.crt"): {"data": {"ca.crt": "CA"}}}
    vols = volumes.PodVolumes(the_pod, tmp_path / "pod", lookup=lambda k, n: found.get((k, n)),
                              claim_dir=lambda claim: None, token=token)
    path = vols.setup(source)
    assert (path / "token").read_text() == "eyJ.token" and (path / "ca.crt").read_text() == "CA"
    assert asked == [("hub", 3607, None)]

    def refused(*args: Any) -> str:
        raise RuntimeError('serviceaccounts "hub" not found')

    vols = volumes.PodVolumes(the_pod, tmp_path / "pod2", lookup=lambda k, n: None, claim_dir=lambda claim: None,
                              token=refused)
    with pytest.raises(volumes.MountError) as err:
        vols.setup(source)
    assert str(err.value) == ('[failed to fetch token: serviceaccounts "hub" not found, '
                              'configmap "kube-root-ca.crt" not found]')


@needs_root
def test_empty_dirs_are_shared_by_the_pods_containers_and_memory_ones_are_tmpfs(sim, core):
    reader = {"name": "reader", "image": IMAGE, "volumeMounts": [
        {"name": "scratch", "mountPath": "/scratch"}, {"name": "shm", "mountPath": "/fast"}],
        "command": ["sh", "-c", "until [ -e /fast/done ]; do sleep 0.1; done; cat /scratch/a /fast/b; "
                                "stat -fc %T /fast; stat -c '%a %U' /scratch"]}
    create(core, pod("shared", "echo disk > /scratch/a; echo memory > /fast/b; touch /fast/done",
                     volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}],
                     mounts=[{"name": "scratch", "mountPath": "/scratch"}, {"name": "shm", "mountPath": "/fast"}],
                     containers=[reader]))
    finished(core, "shared")
    assert core.read_namespaced_pod_log("shared", NS, container="reader").split() == [
        "disk", "memory", "tmpfs", "777", "root"]


@needs_root
def test_a_claims_directory_outlives_its_pod_and_uid_1000_writes_there(sim, core):
    core.create_namespaced_persistent_volume_claim(NS, {"metadata": {"name": "claim-erin"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    vol = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-erin"}}]
    mount = [{"name": "home", "mountPath": "/home/jovyan"}]
    create(core, pod("write", "id -u; echo kept > ~/notes", volumes=vol, mounts=mount))
    assert output(core, "write") == "1000\n"
    create(core, pod("read", "cat ~/notes", volumes=vol, mounts=mount))
    assert output(core, "read") == "kept\n"


@needs_root
def test_a_pod_waits_for_its_claim_to_be_bound_then_mounts_its_volumes_directory(sim, core, tmp_path):
    core.create_namespaced_persistent_volume_claim(NS, {"metadata": {"name": "claim-static"}, "spec": {
        "storageClassName": "manual", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    vol = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-static"}}]
    # bound to the node by name: the real scheduler places no pod whose immediate claim is
    # unbound (its VolumeBinding filter), so only a pod bound by hand meets the kubelet's wait
    unplaced = create(core, pod("claim-unplaced", "true", volumes=vol))
    condition = wait_for(lambda: next((c for c in core.read_namespaced_pod(unplaced.metadata.name, NS).status.conditions
                                       or [] if c.type == "PodScheduled" and c.status == "False"), None),
                         "the scheduler's refusal")
    assert "unbound immediate PersistentVolumeClaims" in condition.message
    create(core, pod("claim-waits", "id -u; echo kept > ~/notes", volumes=vol,
                     mounts=[{"name": "home", "mountPath": "/home/jovyan"}], nodeName="cpu-1"))
    [event] = wait_for(lambda: events(core, "claim-waits", "FailedMount"), "FailedMount", timeout=30)
    # every volume the pod has is unattached: `home` and the ServiceAccount admission's token volume
    [token] = [v.name for v in core.read_namespaced_pod("claim-waits", NS).spec.volumes if v.name != "home"]
    assert token.startswith("kube-api-access-")
    assert (event.type, event.message) == ("Warning", "Unable to attach or mount volumes: unmounted volumes=[home], "
                                           f"unattached volumes=[home {token}]: timed out waiting for the condition")
    [cs] = core.read_namespaced_pod("claim-waits", NS).status.container_statuses
    assert cs.state.waiting.reason == "ContainerCreating"

    directory = tmp_path / "static"  # a volume an admin made: the pod gets this very directory
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    core.create_persistent_volume({"metadata": {"name": f"static-{uuid.uuid4().hex[:6]}"}, "spec": {
        "storageClassName": "manual", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": str(directory)}}})
    assert output(core, "claim-waits") == "1000\n"
    assert (directory / "notes").read_text() == "kept\n"


def test_a_subpath_stays_inside_its_volume(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir(mode=0o750)
    (vol / "config.py").write_text("c = 1")
    (vol / "etc").symlink_to("/etc")
    assert volumes.subpath_source(vol, "config.py") == vol / "config.py"
    made = volumes.subpath_source(vol, "users/alice")  # created, with the volume's mode
    assert made.is_dir() and made.stat().st_mode & 0o777 == 0o750
    with pytest.raises(volumes.MountError, match="not within volume path"):
        volumes.subpath_source(vol, "etc/passwd")


# --- stopping ----------------------------------------------------------------------------

@needs_root
def test_deleting_a_namespace_stops_its_pods_and_every_process_in_them(sim, core):
    marker = f"{time.time():.6f}"  # sleep's argument: a name for these processes on the host
    kubectl(sim, "create", "namespace", "t1")
    create(core, pod("daemon", f"setsid sleep 1{marker} & exec sleep 2{marker}"), ns="t1")
    running(core, "daemon", "t1")
    pids = wait_for(lambda: len(p := processes_with(marker)) >= 2 and p, "both processes")
    done = kubectl(sim, "delete", "namespace", "t1", "--timeout=60s", check=False)
    assert done.returncode == 0, done.stderr
    with pytest.raises(ApiException) as err:
        core.read_namespace("t1")
    assert err.value.status == 404
    wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), "the processes gone")


@needs_root
def test_a_pod_deleted_with_grace_period_zero_leaves_no_process(sim, core):
    marker = f"{time.time():.6f}"
    create(core, pod("forced", f"setsid sh -c 'sleep 3{marker}' & exec sleep 4{marker}"))
    running(core, "forced")
    pids = wait_for(lambda: len(p := processes_with(marker)) >= 2 and p, "both processes")
    kubectl(sim, "delete", "pod", "forced", "-n", NS, "--grace-period=0", "--force")
    assert gone(core, "forced")  # at once from the API ...
    wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), "the processes gone")  # ... and the host


@needs_root
@pytest.mark.skipif(not cgroups.available(), reason="no writable cgroup2 mount here")
def test_a_pods_processes_are_found_by_its_cgroup_even_in_another_session(sim, core):
    marker = f"{time.time():.6f}"
    uid = create(core, pod("tracked", f"setsid sleep 5{marker} & exec sleep 6{marker}")).metadata.uid
    running(core, "tracked")
    pids = wait_for(lambda: len(p := processes_with(marker)) >= 2 and p, "both processes")
    assert {cgroups.pod_of_pid(p) for p in pids} == {uid}
    assert set(pids) <= set(cgroups.pids(uid))
    assert cgroups.pod_of_pid(os.getpid()) is None
    assert (cgroups.NFT_ROOT / cgroups.nft_path(uid)).is_dir()
    kubectl(sim, "delete", "pod", "tracked", "-n", NS, "--wait=true")
    assert not cgroups.pod_dir(uid).exists() and not processes_with(marker)


# --- restarts ------------------------------------------------------------------------------

def test_restart_backoff_is_the_kubelets():
    b, t, delays = RestartBackoff(), 1000.0, []
    for _ in range(9):  # a container that exits at once, every time
        wait = b.wait("c", t, t)
        delays.append(wait)
        t += wait
        b.restarted("c", t - wait, t)
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300, 300]
    assert b.wait("c", t + 601, t + 601) == 0  # ran for over 10 min: at once, and from 10 s again
    b.restarted("c", t + 601, t + 601)
    assert b.wait("c", t + 602, t + 602) == 10 and b.delay("c") == 10


@needs_root
def test_crash_loop_back_off_restarts_at_once_then_waits_10s_then_20s(sim, core):
    uid = create(core, pod("crash", "echo ran; exit 3", restart="Always")).metadata.uid

    def backing_off(seconds: int) -> Any:
        statuses = core.read_namespaced_pod("crash", NS).status.container_statuses
        cs = statuses[0] if statuses else None
        waiting = cs and cs.state.waiting
        return waiting and waiting.reason == "CrashLoopBackOff" and f"back-off {seconds}s" in waiting.message and cs

    cs = wait_for(lambda: backing_off(10), "CrashLoopBackOff")
    assert cs.restart_count == 1  # the first exit was restarted at once
    assert cs.state.waiting.message == f"back-off 10s restarting failed container=crash pod=crash_{NS}({uid})"
    assert (cs.last_state.terminated.exit_code, cs.last_state.terminated.reason) == (3, "Error")
    second_end = parse_time(cs.last_state.terminated.finished_at.isoformat())
    event = events(core, "crash", "BackOff")[0]
    assert event.type == "Warning"
    assert event.message == f"Back-off restarting failed container crash in pod crash_{NS}({uid})"
    table = kubectl(sim, "get", "pod", "crash", "-n", NS).stdout.splitlines()[1].split()
    assert table[1:4] == ["0/1", "CrashLoopBackOff", "1"]
    assert kubectl(sim, "logs", "crash", "-n", NS, "--previous").stdout == "ran\n"

    cs = wait_for(lambda: backing_off(20), "the second back-off", timeout=90)
    assert cs.restart_count == 2
    third_start = parse_time(cs.last_state.terminated.started_at.isoformat())
    assert (third_start - second_end).total_seconds() >= 9  # 10 s, in whole seconds on both ends
    kubectl(sim, "delete", "pod", "crash", "-n", NS, "--wait=true")


# --- identity ----------------------------------------------------------------------------

def test_hosts_file_is_the_kubelets_with_aliases_and_service_entries():
    long_name = "jupyter-" + "a" * 54 + "-x"  # 64 characters: cut to 63, without the trailing "-"
    the_pod = {"metadata": {"name": long_name, "namespace": NS},
               "spec": {"hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.remote", "bar.remote"]}]}}
    assert hosts.pod_hostname(the_pod) == (long_name[:62], "")
    text = hosts.hosts_file(the_pod, "127.9.0.4", [("127.96.0.10", ["hub", f"hub.{NS}.svc.cluster.local"])])
    assert text.splitlines() == [
        "# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters",
        f"127.9.0.4\t{long_name[:62]}", "", "# Entries added by HostAliases.", "10.1.2.3\tfoo.remote\tbar.remote",
        "", "# Entries for Services (the simulator's stand-in for cluster DNS).",
        f"127.96.0.10\thub\thub.{NS}.svc.cluster.local"]



@needs_root
def test_the_hostname_is_the_pods_name_at_its_own_ip(sim, core):
    script = ("hostname; echo $HOSTNAME; python -c 'import socket; n = socket.gethostname(); "
              "print(socket.gethostbyname(n)); print(socket.getfqdn())'; grep -P \"\\t$(hostname)$\" /etc/hosts")
    create(core, pod("named", script))
    lines = output(core, "named").splitlines()
    ip = core.read_namespaced_pod("named", NS).status.pod_ip
    assert lines == ["named", "named", ip, "named", f"{ip}\tnamed"]

    create(core, pod("web-pod", script, hostname="web-0", subdomain="web"))
    lines = output(core, "web-pod").splitlines()
    ip = core.read_namespaced_pod("web-pod", NS).status.pod_ip
    fqdn = f"web-0.web.{NS}.svc.cluster.local"
    assert lines == ["web-0", "web-0", ip, fqdn, f"{ip}\t{fqdn}\tweb-0"]


@needs_root
def test_names_resolve_while_the_hosts_file_is_rewritten(sim, core):
    """Every Service created or deleted rewrites every pod's hosts file: a lookup made
    meanwhile still finds the names that were there (a rewrite in place once let a pod
    starting up find none, and it crashed). The pod cannot write its /etc/hosts."""
    core.create_namespaced_service(NS, {"metadata": {"name": "steady"}, "spec": {"ports": [{"port": 80}]}})
    script = ("import socket, time\n"
              "misses = looked = 0\n"
              "end = time.time() + 8\n"
              "while time.time() < end:\n"
              "    try:\n"
              "        socket.gethostbyname('steady')\n"
              "    except OSError:\n"
              "        misses += 1\n"
              "    looked += 1\n"
              "try:\n"
              "    open('/etc/hosts', 'a')\n"
              "except OSError:\n"
              "    print('not writable')\n"
              "print('misses', misses, 'of', looked > 100)\n")
    body = pod("resolver", "")
    body["spec"]["containers"][0]["command"] = ["python3", "-c", script]
    create(core, body)
    running(core, "resolver")
    for i in range(40):  # each one a rewrite of the pod's file
        name = f"churn-{i % 4}"
        if i < 4:
            core.create_namespaced_service(NS, {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}})
        else:
            core.delete_namespaced_service(name, NS, _preload_content=False)
            wait_for(lambda name=name: not core.list_namespaced_service(NS, field_selector=f"metadata.name={name}").items,
                     f"{name} gone")
            core.create_namespaced_service(NS, {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}})
    assert output(core, "resolver").splitlines() == ["not writable", "misses 0 of True"]


@needs_root
def test_a_container_runs_as_its_images_user_in_a_file_system_of_its_own(sim, core, tmp_path):
    host_marker = Path("/tmp") / f"host-only-{uuid.uuid4().hex}"
    host_marker.write_text("host")
    # the Python environment the container runs from is bound in at its own path: under /tmp
    # (a clone there) its first directory is the one other entry of the container's /tmp
    env = Path(sys.prefix).resolve().parts
    env_top = env[2] if env[1] == "tmp" else ""
    try:
        for name in ("own-a", "own-b"):  # two pods, one pid file path; $$$$: the kubelet makes $$ a $
            create(core, pod(name, f"id; echo $$$$ > /tmp/server.pid; cat /tmp/server.pid; "
                                   f"test -e {host_marker} && echo host-tmp-visible; touch ~/x && echo home-ok; "
                                   f"ls -A /tmp | grep -vxF '{env_top}' | wc -l; "
                                   "python -c 'import jupyterhub_gpu_reclaim' && echo venv-ok"))
        a, b = output(core, "own-a").splitlines(), output(core, "own-b").splitlines()
        assert a[0] == b[0] == "uid=1000(jovyan) gid=100(users) groups=100(users)"
        assert a[1] == b[1] == "1"  # each is PID 1 of its own container
        assert a[2:] == b[2:] == ["home-ok", "1", "venv-ok"]  # only its own pid file in its own /tmp
    finally:
        host_marker.unlink()

    etc_file = f"/etc/pod-{uuid.uuid4().hex}"
    create(core, pod("as-root", f"id -u; echo x > {etc_file}; mkdir -p /home/jovyan; echo x > /home/jovyan/pod-x; "
                                "grep CapBnd /proc/self/status; mount -t tmpfs t /mnt 2>/dev/null || echo no-mount",
                     security={"runAsUser": 0}))
    lines = output(core, "as-root").splitlines()
    assert lines == ["0", "CapBnd:\t00000000a80425fb", "no-mount"]  # containerd's default capabilities
    assert not Path(etc_file).exists() and not Path("/home/jovyan/pod-x").exists()


@needs_root
def test_security_context_users_groups_and_fs_group(sim, core):
    create(core, pod("ids", "id -u; id -g; id -G; touch /data/f; stat -c '%a %g' /data /data/f",
                     volumes=[{"name": "data", "emptyDir": {}}], mounts=[{"name": "data", "mountPath": "/data"}],
                     security={"runAsUser": 2000, "runAsGroup": 3000, "fsGroup": 4000, "supplementalGroups": [5000]},
                     container_security={"runAsUser": 2001, "allowPrivilegeEscalation": False}))
    assert output(core, "ids").splitlines() == ["2001", "3000", "3000 4000 5000", "2777 4000", "644 4000"]
