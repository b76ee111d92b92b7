"""The node agent's kubelet API (issue 37), reached as a real cluster reaches it: `kubectl`
(v1.37) asks the real API server, which proxies to the node's HTTPS server at the address and
port the Node advertises, verifying it with the run's CA and authenticating with its own
client certificate; the node lets the API server in and refuses any other client."""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from gpu_reclaim_sim.controlplane.credentials import Authority

from ..support.controlplane import BUSYBOX, busybox_pod as pod, phases
from ..support.kubeletapi import KUBECTL, direct, endpoint, kubectl, websocket_requests
from ..support.sim_cluster import wait_for

SCENARIO = {
    "name": "kubelet-api", "namespaces": [], "mode": "process", "defaultImageSize": "10MB",
    "nodeGroups": [{"name": "api", "count": 2, "cpu": "4", "memory": "8Gi", "images": [BUSYBOX]}],
}
NODES = ["api-1", "api-2"]


def test_each_node_serves_its_kubelet_api_where_its_node_says(agent, core):
    """At its own InternalIP and port, with a certificate of the run's CA for that address."""
    ends = [endpoint(core, n) for n in NODES]
    assert len(set(ends)) == 2 and all(port > 0 for _, port in ends)
    for address, port in ends:
        context = ssl.create_default_context(cafile=str(agent.plane.authority.cert))
        with pytest.raises(urllib.error.HTTPError) as anonymous:  # verified for its IP; no client cert: 401
            urllib.request.urlopen(f"https://{address}:{port}/containerLogs/a/b/c", context=context, timeout=10)
        assert anonymous.value.code == 401


def test_kubectl_logs_reads_what_the_container_wrote(agent, core, ns, control_plane):
    core.create_namespaced_pod(ns, pod("talk", "for i in 1 2 3 4 5; do echo line $i; done", node="api-2"))
    phases(core, ns, "talk", "Succeeded")
    done = kubectl(control_plane, "logs", "-n", ns, "talk")
    assert (done.returncode, done.stdout) == (0, "".join(f"line {i}\n" for i in range(1, 6))), done.stderr
    done = kubectl(control_plane, "logs", "-n", ns, "talk", "--tail=2")
    assert (done.returncode, done.stdout) == (0, "line 4\nline 5\n"), done.stderr
    done = kubectl(control_plane, "logs", "-n", ns, "talk", "--limit-bytes=8")
    assert (done.returncode, done.stdout) == (0, "line 1\nl"), done.stderr
    done = kubectl(control_plane, "logs", "-n", ns, "talk", "-c", "nope")
    assert done.returncode == 1 and 'container nope is not valid for pod talk' in done.stderr
    done = kubectl(control_plane, "logs", "-n", ns, "talk", "--previous")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert 'previous terminated container "main" in pod "talk" not found' in done.stderr, done.stderr
    done = kubectl(control_plane, "logs", "-n", ns, "talk", "--timestamps")
    assert done.returncode == 1 and "timestamps: not supported by this node" in done.stderr


def test_kubectl_logs_previous_after_a_restart(agent, core, ns, control_plane):
    # the emptyDir outlives the container's first run, as on a real node
    script = 'if [ -e /state/ran ]; then echo second run; sleep 60; fi; touch /state/ran; echo first run; exit 1'
    body = pod("again", script, node="api-1", restart="Always", volumeMounts=[{"name": "state", "mountPath": "/state"}])
    body["spec"]["volumes"] = [{"name": "state", "emptyDir": {}}]
    core.create_namespaced_pod(ns, body)
    wait_for(lambda: (s := core.read_namespaced_pod("again", ns).status.container_statuses)
             and s[0].restart_count >= 1 and s[0].state.running, "the container running again", timeout=60)
    done = kubectl(control_plane, "logs", "-n", ns, "again", "--previous")
    assert (done.returncode, done.stdout) == (0, "first run\n"), done.stderr
    wait_for(lambda: kubectl(control_plane, "logs", "-n", ns, "again").stdout == "second run\n", "the second run's log")


def test_kubectl_logs_follow_streams_while_the_pod_writes(agent, core, ns, control_plane):
    core.create_namespaced_pod(ns, pod("ticker", "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done", node="api-1"))
    phases(core, ns, "ticker", "Running")
    follower = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(control_plane.admin_kubeconfig), "logs", "-f",
                                 "-n", ns, "ticker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stdout is not None
        first = follower.stdout.readline()
        arrived = time.monotonic()
        assert first.startswith("tick ")
        rest = follower.stdout.read()  # until the container ends: kubectl -f then exits
        ended = time.monotonic()
        assert follower.wait(timeout=10) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert (first + rest).splitlines()[-1] == "tick 6"
    assert (first + rest).splitlines() == [f"tick {i}" for i in range(int(first.split()[1]), 7)]
    assert ended - arrived >= 1  # the lines came as they were written, not in one piece at the end


def test_the_node_lets_only_the_api_server_in(agent, core, ns, control_plane, tmp_path):
    core.create_namespaced_pod(ns, pod("secretive", "echo only for the api server", node="api-1"))
    phases(core, ns, "secretive", "Succeeded")
    path = f"/containerLogs/{ns}/secretive/main"
    pki = control_plane.authority
    apiserver = (pki.directory / "apiserver-kubelet-client.crt", pki.directory / "apiserver-kubelet-client.key")
    assert direct(agent, core, path, apiserver) == 200
    user = pki.issue("someone", "someone", ("developers",))  # of the run's CA, not allowed nodes/proxy
    assert direct(agent, core, path, (user.cert, user.key)) == 403
    other_node = pki.issue("node-api-2-probe", "system:node:api-2", ("system:nodes",))
    assert direct(agent, core, path, (other_node.cert, other_node.key)) == 403
    assert direct(agent, core, path, None) == 401
    stranger = Authority.create(tmp_path / "other-ca")  # a certificate the run's CA did not sign
    foreign = stranger.issue("admin", "admin", ("system:masters",))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionResetError)):
        direct(agent, core, path, (foreign.cert, foreign.key))


def test_kubectl_exec_runs_a_command_in_the_container(agent, core, ns, control_plane):
    """kubectl's WebSocket goes through to the node as it is (the node declares
    ExtendWebSocketsToKubelet): its output, its stdin and its exit code."""
    assert control_plane.get("/api/v1/nodes/api-1")[1]["status"]["declaredFeatures"] == ["ExtendWebSocketsToKubelet"]
    body = pod("shell", "echo inside > /data/mark; sleep 120", node="api-1",
               volumeMounts=[{"name": "data", "mountPath": "/data"}])
    body["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    core.create_namespaced_pod(ns, body)
    phases(core, ns, "shell", "Running")
    wait_for(lambda: kubectl(control_plane, "exec", "-n", ns, "shell", "--", "cat", "/data/mark").stdout == "inside\n",
             "the container's file through exec")
    proxied = websocket_requests(control_plane, "proxied_to_kubelet")
    done = kubectl(control_plane, "exec", "-n", ns, "shell", "--", "sh", "-c", 'echo "out $HOSTNAME"; echo err >&2')
    assert (done.returncode, done.stdout, done.stderr) == (0, "out shell\n", "err\n")
    assert websocket_requests(control_plane, "proxied_to_kubelet") == proxied + 1
    assert websocket_requests(control_plane, "translated_at_apiserver") == 0
    done = kubectl(control_plane, "exec", "-i", "-n", ns, "shell", "--", "sh", "-c", "tr a-z A-Z; echo done",
                   input="hello\nworld\n")
    assert (done.returncode, done.stdout) == (0, "HELLO\nWORLD\ndone\n"), done.stderr
    done = kubectl(control_plane, "exec", "-n", ns, "shell", "--", "sh", "-c", "echo failing; exit 7")
    assert (done.returncode, done.stdout) == (7, "failing\n")
    assert "command terminated with exit code 7" in done.stderr
    done = kubectl(control_plane, "exec", "-n", ns, "shell", "--", "no-such-command")
    assert done.returncode != 0 and 'exec: "no-such-command": executable file not found in $PATH' in done.stderr


def test_kubectl_exec_into_a_finished_container_is_refused(agent, core, ns, control_plane):
    core.create_namespaced_pod(ns, pod("over", "true", node="api-2"))
    phases(core, ns, "over", "Succeeded")
    done = kubectl(control_plane, "exec", "-n", ns, "over", "--", "true")
    assert done.returncode == 1 and "cannot exec into a container in a completed pod" in done.stderr, done.stderr


def test_kubectl_attach_streams_what_the_container_writes_from_then_on(agent, core, ns, control_plane):
    script = "echo before; while [ ! -e /data/go ]; do sleep 0.1; done; for i in 1 2 3; do echo after $i; sleep 0.3; done"
    body = pod("talker", script, node="api-2", volumeMounts=[{"name": "data", "mountPath": "/data"}])
    body["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    core.create_namespaced_pod(ns, body)
    phases(core, ns, "talker", "Running")
    wait_for(lambda: kubectl(control_plane, "logs", "-n", ns, "talker").stdout == "before\n", "the first line")
    before = websocket_requests(control_plane, "proxied_to_kubelet", "attach")
    attached = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(control_plane.admin_kubeconfig), "attach", "-n",
                                 ns, "talker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: websocket_requests(control_plane, "proxied_to_kubelet", "attach") > before,
                 "the attach proxied to the node")
        time.sleep(0.5)  # and the node's answer on its way back (kubectl says nothing once attached)
        assert kubectl(control_plane, "exec", "-n", ns, "talker", "--", "touch", "/data/go").returncode == 0
        out, err = attached.communicate(timeout=30)  # it ends with the container
    finally:
        if attached.poll() is None:
            attached.kill()
            attached.wait()
    assert attached.returncode == 0, err
    assert out == "after 1\nafter 2\nafter 3\n"  # from then on: not what it wrote before
