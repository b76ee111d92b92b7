"""`jupyterhub-gpu-reclaim-sim run --plane real` (issue 37): the scenario's cluster on the real
control plane, started as the demo and the test harnesses start the simulator (launch.start_sim):
the same info file, a kubeconfig the official client uses, the scenario's namespaces ready for
pods and its priority classes, a GPU pod placed by the real scheduler that gets its device, a
claim of the default StorageClass bound, a Service offered at a port of the machine (--publish),
a port of the machine offered to the pods where an EndpointSlice may name it (--reach);
SIGTERM stops every process it started. And the relays by which a run in a network namespace
of its own is reached from outside, and reaches out."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import threading
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gpu_reclaim_sim.kubelet import cgroups
from gpu_reclaim_sim.launch import Child, free_port, spawn, start_sim

from ..support.controlplane import BUSYBOX, admin_api, busybox_pod, phases
from ..support.sim_cluster import sim_running, wait_for

SCENARIO = {
    "name": "real-run", "namespaces": ["jhub"], "mode": "process", "defaultImageSize": "10MB",
    "priorityClasses": [{"name": "jhub-default-priority", "value": 0, "globalDefault": True}],
    "nodeGroups": [{"name": "gpu", "count": 1, "cpu": "8", "memory": "32Gi", "gpus": 1,
                    "gpuModel": "NVIDIA A100-SXM4-40GB", "gpuMemory": "40GiB", "images": [BUSYBOX]}],
}
# what launch.start_sim's callers read, as the old simulator writes it
INFO_KEYS = {"scenario", "api", "api_secure", "ca_file", "control", "metrics", "nodes", "pod_network",
             "service_network", "namespaces", "data_dir", "kubeconfig"}


class Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.wfile.write(b"outside " + self.rfile.readline())


@pytest.fixture(scope="module")
def outside() -> Iterator[int]:
    """A port of this namespace's loopback that answers `outside LINE` to a LINE."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def echo(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"hello\n")
        return s.makefile().readline()


@pytest.fixture(scope="module")
def run(tmp_path_factory, outside) -> Iterator[Child]:
    work = tmp_path_factory.mktemp("real-run")
    (work / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
    child = start_sim(work, work / "scenario.yaml", timeout=120,
                      extra_args=["--publish", f"{free_port()}=jhub/web:80", "--reach", str(outside)])
    try:
        yield child
    finally:
        child.stop()


@pytest.fixture(scope="module")
def core(run) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(run.info["kubeconfig"]))


def test_the_run_writes_the_simulators_info_and_a_working_kubeconfig(run, core):
    info = run.info
    assert INFO_KEYS <= set(info)
    assert info["api"] == info["api_secure"] and info["api"].startswith("https://")
    assert info["nodes"] == ["gpu-1"] and info["namespaces"] == ["default", "kube-system", "jhub"]
    version = k8s.VersionApi(core.api_client).get_code()
    assert version.git_version == "v1.37.2"
    # the scenario's namespace is the kubeconfig's, and ready for pods
    assert k8s_config.list_kube_config_contexts(info["kubeconfig"])[1]["context"]["namespace"] == "jhub"
    assert core.read_namespaced_service_account("default", "jhub").metadata.name == "default"
    priority = k8s.SchedulingV1Api(core.api_client).read_priority_class("jhub-default-priority")
    assert priority.global_default is True and priority.value == 0
    [storage_class] = k8s.StorageV1Api(core.api_client).list_storage_class().items
    assert storage_class.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    with urllib.request.urlopen(info["control"] + "/healthz", timeout=10) as r:
        assert r.read() == b"ok"


def test_a_gpu_pod_with_a_claim_runs_on_the_run(run, core):
    core.create_namespaced_persistent_volume_claim("jhub", {"metadata": {"name": "claim-alice"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    core.create_namespaced_pod("jhub", {"metadata": {"name": "jupyter-alice"}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "notebook", "image": BUSYBOX, "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        "command": ["sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES > /home/jovyan/devices"],
                        "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}]}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}}]}})
    assert phases(core, "jhub", "jupyter-alice", "Succeeded")[-1] == "Succeeded"
    pvc = core.read_namespaced_persistent_volume_claim("claim-alice", "jhub")
    directory = Path(core.read_persistent_volume(pvc.spec.volume_name).spec.host_path.path)
    assert directory.is_relative_to(run.info["data_dir"])
    with urllib.request.urlopen(run.info["control"] + "/gpus", timeout=10) as r:
        [gpu] = json.load(r)
    assert (directory / "devices").read_text() == gpu["uuid"] + "\n"


def test_a_published_service_answers_at_its_port_of_the_machine(run, core):
    """`run --publish PORT=jhub/web:80`: as the demo offers the release's proxy-public to a browser."""
    script = ("mkdir -p /tmp/www && echo published > /tmp/www/index.html && cd /tmp/www && "
              "exec python3 -m http.server --bind 0.0.0.0 8080")
    core.create_namespaced_pod("jhub", {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {
        "terminationGracePeriodSeconds": 1, "containers": [{"name": "web", "image": BUSYBOX, "command": ["sh", "-c", script],
                                                            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}})
    core.create_namespaced_service("jhub", {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    address = run.info["published"]["jhub/web:80"]

    def answer() -> str | None:
        try:
            with urllib.request.urlopen(f"http://{address}/", timeout=5) as r:
                return r.read().decode()
        except OSError:  # the relay closes at once while the Service has no ready endpoint
            return None
    assert wait_for(answer, "the published Service's answer") == "published\n"


def test_a_reached_port_is_offered_where_an_endpointslice_may_name_it(run, core, outside):
    """`run --reach PORT`: as the demo offers its Prometheus to the release's service. The run
    stays in this worker's namespace, whose loopback it shares; the address is the node
    network's, which the real API server takes where it refuses 127.0.0.1."""
    host, port = run.info["reached"][str(outside)].rsplit(":", 1)
    assert host == "10.0.0.1" and echo(host, int(port)) == "outside hello\n"
    slice_ = {"metadata": {"name": "outside", "labels": {"kubernetes.io/service-name": "outside"}},
              "addressType": "IPv4", "ports": [{"port": int(port), "protocol": "TCP"}],
              "endpoints": [{"addresses": [host], "conditions": {"ready": True}}]}
    k8s.DiscoveryV1Api(core.api_client).create_namespaced_endpoint_slice("jhub", slice_)
    slice_["metadata"]["name"], slice_["endpoints"][0]["addresses"] = "loopback", ["127.0.0.1"]
    with pytest.raises(k8s.ApiException, match="loopback"):
        k8s.DiscoveryV1Api(core.api_client).create_namespaced_endpoint_slice("jhub", slice_)


def test_sigterm_stops_every_process_the_run_started(run):
    pids = run.info["pids"]
    assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}
    assert run.stop() == 0
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), name


def test_a_run_killed_on_a_shared_control_plane_leaves_the_next_run_no_node_or_namespace(control_plane, tmp_path):
    """SIGKILL gives a run on the worker's control plane no chance to take its nodes, namespace
    and priority classes away: the next run deletes them first (a second global default
    PriorityClass is refused), and its pod runs on its own node, never on one nobody runs (the
    scheduler would place it there until the node's Lease expired)."""
    first = {**SCENARIO, "name": "killed", "nodeGroups": [{**SCENARIO["nodeGroups"][0], "name": "left"}]}
    second = {**SCENARIO, "name": "next", "nodeGroups": [{**SCENARIO["nodeGroups"][0], "name": "next"}]}
    core = k8s.CoreV1Api(admin_api(control_plane))
    for name in ("killed", "next"):
        (tmp_path / name).mkdir()
    with sim_running(tmp_path / "killed", first, control_plane) as killed:
        killed.proc.kill()
        killed.proc.wait()
    assert [n.metadata.name for n in core.list_node().items] == ["left-1"]  # left behind
    left = core.read_namespace("jhub").metadata.uid
    with sim_running(tmp_path / "next", second, control_plane) as run:
        assert [n.metadata.name for n in core.list_node().items] == ["next-1"]
        assert core.read_namespace("jhub").metadata.uid != left
        log = run.log_tail(200)
        for left_behind in ("node left-1", "priority class jhub-default-priority"):
            assert f"{left_behind} is an earlier run's, left behind: deleting it first" in log
        core.create_namespaced_pod("jhub", busybox_pod("after", "true", node="next-1"))
        assert phases(core, "jhub", "after", "Succeeded")[-1] == "Succeeded"


RELAYED = textwrap.dedent("""
    import asyncio, sys
    from gpu_reclaim_sim.network import namespace
    from gpu_reclaim_sim.network.relay import Relay

    async def main():
        relay = Relay()  # bound here, outside
        namespace.enter()
        async def answer(reader, writer):
            writer.write(b"inside " + await reader.readline())
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(answer, "10.0.0.7", 0)
        await relay.start("10.0.0.7", server.sockets[0].getsockname()[1])
        print(relay.port, server.sockets[0].getsockname()[1], flush=True)
        await asyncio.sleep(60)
    asyncio.run(main())
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs root")
def test_a_relay_leads_from_outside_into_the_namespace_entered_after_it(tmp_path):
    import socket

    child = subprocess.Popen([sys.executable, "-c", RELAYED], stdout=subprocess.PIPE, text=True)
    try:
        port, inner = map(int, child.stdout.readline().split())  # type: ignore[union-attr]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"hello\n")
            assert s.makefile().readline() == "inside hello\n"
        # the server itself is out of reach from here: its 10.0.0.7 is the child's namespace's
        with pytest.raises(OSError):
            socket.create_connection(("10.0.0.7", inner), timeout=2).close()
    finally:
        child.terminate()
        child.wait()


REACHED = textwrap.dedent("""
    import asyncio, socket, sys
    from gpu_reclaim_sim.network import namespace
    from gpu_reclaim_sim.network.relay import Outward

    async def main(port):
        namespace.enter()
        relay = Outward("10.0.0.1", namespace.origin())  # bound here, inside
        await relay.start("127.0.0.1", port)
        reader, writer = await asyncio.open_connection("10.0.0.1", relay.port)
        writer.write(b"hello\\n")
        print((await reader.readline()).decode(), end="", flush=True)
        try:  # this namespace's own loopback has nothing at the port
            await asyncio.open_connection("127.0.0.1", port)
            print("reached directly")
        except OSError:
            print("not reached directly")
        await relay.stop()
    asyncio.run(main(int(sys.argv[1])))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs root")
def test_an_outward_relay_leads_from_the_namespace_to_the_loopback_it_was_entered_from(outside):
    """The other way (`run --reach` in a namespace of its own: the demo's by hand): the child
    enters a namespace of its own from this worker's, whose loopback has the echo server."""
    done = subprocess.run([sys.executable, "-c", REACHED, str(outside)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "outside hello\nnot reached directly\n"), done.stderr


@pytest.mark.parametrize(("args", "error"), [
    (["--publish", "8000=proxy-public"], "--publish: '8000=proxy-public' is not "
                                         "PORT=NAMESPACE/SERVICE:PORT (e.g. 8000=jhub/proxy-public:80)"),
    (["--reach", "0"], "--reach 0: a port a program listens at (1-65535)"),
    (["--control-plane", "/nonexistent"], "--control-plane /nonexistent: no control plane there (its admin.kubeconfig)"),
])
def test_a_bad_publish_reach_or_control_plane_is_refused_before_anything_starts(tmp_path, args, error):
    done = subprocess.run([sys.executable, "-m", "gpu_reclaim_sim", "run", "--kubeconfig", str(tmp_path / "kc"),
                           "--data-dir", str(tmp_path / "data"), *args], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (2, f"jupyterhub-gpu-reclaim-sim run: {error}")
    assert list(tmp_path.iterdir()) == []


LEAVES_A_DAEMON = """
import subprocess, sys
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(daemon.pid, flush=True)
sys.exit(1)  # as a hub that failed to start, its proxy and managed services still running
"""


@pytest.mark.skipif(not cgroups.available(), reason="a cgroup of its own needs root and a writable cgroup2")
def test_what_a_launched_program_leaves_behind_ends_with_it(tmp_path):
    child = spawn("leaver", [sys.executable, "-c", LEAVES_A_DAEMON], tmp_path / "leaver.log", dict(os.environ), tmp_path)
    assert child.proc.wait(30) == 1
    daemon = int(wait_for(lambda: child.log_path.read_text().strip(), "the daemon's pid"))
    assert Path(f"/proc/{daemon}").exists()  # in a session of its own, reparented
    assert child.cgroup is not None and daemon in map(int, (child.cgroup / "cgroup.procs").read_text().split())
    child.stop()
    wait_for(lambda: not Path(f"/proc/{daemon}").exists() or "zombie" in Path(f"/proc/{daemon}/status").read_text(),
             "the daemon ended with the program that left it", timeout=10)
    assert not child.cgroup.exists()
