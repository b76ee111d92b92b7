"""`kubectl port-forward` (v1.37) through the real API server to the node agent's kubelet
API (issue 37): kubectl's WebSocket tunnel (SPDY/3.1 inside it) passed on to the node as it
is, and its SPDY upgrade where it is told not to use WebSockets; several connections at
once, two ports, megabytes both ways and the client's half-close, a port nothing listens on,
a pod deleted while a connection is open, a hostile session; and nobody but the API server
gets to forward into a node's pods."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest
from kubernetes import client as k8s

from gpu_reclaim_sim.controlplane.components import ControlPlane
from gpu_reclaim_sim.nodeagent import spdyframes

from ..support.controlplane import BUSYBOX, busybox_pod as pod, phases
from ..support.kubeletapi import KUBECTL, direct, header_bomb, websocket_requests
from ..support.sim_cluster import wait_for

SCENARIO = {
    "name": "port-forward", "namespaces": [], "mode": "process", "defaultImageSize": "10MB",
    "nodeGroups": [{"name": "pf", "count": 2, "cpu": "4", "memory": "8Gi", "images": [BUSYBOX]}],
}
BIG = bytes(range(256)) * 4096  # 1 MiB: many SPDY frames, past any 64 KiB flow-control window
# two servers, one directory each: /name says which answered; /big is BIG
SERVERS = ("mkdir -p /www/a /www/b && echo a > /www/a/name && echo b > /www/b/name && "
           "python3 -c 'open(\"/www/a/big\", \"wb\").write(bytes(range(256)) * 4096)' && "
           "(python3 -m http.server 8001 -d /www/b &) && exec python3 -m http.server 8000 -d /www/a")
# a server that writes a line every 0.2 s to each connection, for as long as it runs
TICKER = ("exec python3 -c 'import socket, threading, time\n"
          "def tick(c):\n"
          "    while True:\n"
          "        c.sendall(b\"tick\\n\")\n"
          "        time.sleep(0.2)\n"
          "s = socket.create_server((\"0.0.0.0\", 8000))\n"
          "while True:\n"
          "    threading.Thread(target=tick, args=(s.accept()[0],), daemon=True).start()\n'")
# a server that sends back what it gets, and closes once its client has closed its side
ECHO = ("exec python3 -c 'import socket, threading\n"
        "def echo(c):\n"
        "    while data := c.recv(65536):\n"
        "        c.sendall(data)\n"
        "    c.close()\n"
        "s = socket.create_server((\"0.0.0.0\", 8000))\n"
        "while True:\n"
        "    threading.Thread(target=echo, args=(s.accept()[0],), daemon=True).start()\n'")


def serving(core: k8s.CoreV1Api, ns: str, name: str, script: str, ports: tuple[int, ...], node: str = "pf-1") -> str:
    """A pod running `script`, once its ports answer (a readiness probe on each); its UID."""
    listening = f"import socket\nfor p in {ports}: socket.create_connection(('127.0.0.1', p), 1).close()"
    body = pod(name, script, node=node, volumeMounts=[{"name": "www", "mountPath": "/www"}],
               readinessProbe={"exec": {"command": ["python3", "-c", listening]}, "periodSeconds": 1})
    body["spec"]["volumes"] = [{"name": "www", "emptyDir": {}}]
    core.create_namespaced_pod(ns, body)
    phases(core, ns, name, "Running")
    wait_for(lambda: (s := core.read_namespaced_pod(name, ns).status.container_statuses) and s[0].ready,
             f"pod {name} ready")
    return core.read_namespaced_pod(name, ns).metadata.uid


@contextlib.contextmanager
def forwarding(plane: ControlPlane, ns: str, name: str, *ports: int, env: dict[str, str] | None = None,
               kubeconfig: Path | None = None) -> Iterator[tuple[subprocess.Popen[str], dict[int, int]]]:
    """`kubectl port-forward pod/NAME :PORT...` (local ports of kubectl's choosing); the
    process and {pod port: local port} once it says it forwards them all."""
    config = kubeconfig or plane.admin_kubeconfig
    process = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(config), "port-forward", "-n", ns, f"pod/{name}",
                                *(f":{p}" for p in ports)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, **(env or {})})
    local: dict[int, int] = {}
    try:
        assert process.stdout is not None
        while len(local) < len(ports) and (line := process.stdout.readline()):
            if found := re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line):
                local[int(found[2])] = int(found[1])
        yield process, local
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read()


def test_kubectl_port_forward_carries_many_connections_to_two_ports(agent, core, ns, control_plane):
    """Through kubectl's WebSocket, passed on to the node as it is (counted as
    proxied_to_kubelet by the API server): one request after another and eight at once,
    each a connection of its own (a stream pair in the one session)."""
    serving(core, ns, "web", SERVERS, (8000, 8001))
    proxied = websocket_requests(control_plane, "proxied_to_kubelet", "portforward")
    with forwarding(control_plane, ns, "web", 8000, 8001) as (process, local):
        assert sorted(local) == [8000, 8001]
        for _ in range(3):
            assert (get(local[8000], "/name"), get(local[8001], "/name")) == (b"a\n", b"b\n")
        with ThreadPoolExecutor(8) as pool:
            bodies = list(pool.map(lambda i: get(local[8000], "/big") if i % 2 else get(local[8001], "/name"),
                                   range(8)))
        assert bodies == [b"b\n", BIG] * 4
        assert process.poll() is None
    assert websocket_requests(control_plane, "proxied_to_kubelet", "portforward") == proxied + 1
    assert websocket_requests(control_plane, "translated_at_apiserver", "portforward") == 0
    assert f"port-forward to {ns}/web: SPDY/3.1 in a WebSocket" in agent.log.read_text()


def test_kubectl_port_forward_over_a_spdy_upgrade(agent, core, ns, control_plane):
    """kubectl told not to use WebSockets asks for `Upgrade: SPDY/3.1`, which the API
    server passes on to the node too."""
    serving(core, ns, "web", SERVERS, (8000, 8001))
    with forwarding(control_plane, ns, "web", 8000, env={"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}) as (_, local):
        assert [get(local[8000], "/big"), get(local[8000], "/name")] == [BIG, b"a\n"]
    said = agent.log.read_text()
    assert f"port-forward to {ns}/web: SPDY/3.1 upgrade" in said
    assert f"port-forward to {ns}/web: SPDY/3.1 in a WebSocket" not in said


def test_what_the_client_sends_reaches_the_pod_and_its_close_too(agent, core, ns, control_plane):
    """8 MiB each way at once, and the client's half-close: kubectl's FIN on the data
    stream, the node's EOF to the pod, whose close ends the stream back."""
    serving(core, ns, "echo", ECHO, (8000,))
    payload = bytes(range(251)) * (8 * 4096 + 7)  # not a multiple of any buffer's size
    with forwarding(control_plane, ns, "echo", 8000) as (_, local):
        with socket.create_connection(("127.0.0.1", local[8000]), timeout=60) as conn:
            def send() -> None:
                conn.sendall(payload)
                conn.shutdown(socket.SHUT_WR)

            with ThreadPoolExecutor(1) as pool:
                sent = pool.submit(send)
                received = b"".join(iter(lambda: conn.recv(1 << 16), b""))
                sent.result()
    assert len(received) == len(payload) and received == payload


def test_a_port_nothing_listens_on_is_reported_and_the_node_goes_on(agent, core, ns, control_plane):
    uid = serving(core, ns, "web", SERVERS, (8000, 8001))
    ip = core.read_namespaced_pod("web", ns).status.pod_ip
    with forwarding(control_plane, ns, "web", 9999) as (process, local):
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            get(local[9999], "/")
        _, err = process.communicate(timeout=30)  # kubectl gives up on the connection's error
    assert process.returncode == 1 and "lost connection to pod" in err, err
    assert f"error forwarding port 9999 to pod {uid}, uid : dial tcp4 {ip}:9999: connect: connection refused" in err
    with forwarding(control_plane, ns, "web", 8000) as (_, local):
        assert get(local[8000], "/name") == b"a\n"
    assert agent.process.poll() is None


def test_deleting_the_pod_ends_its_forwarded_connections(agent, core, ns, control_plane):
    serving(core, ns, "ticker", TICKER, (8000,))
    with forwarding(control_plane, ns, "ticker", 8000) as (process, local):
        with socket.create_connection(("127.0.0.1", local[8000]), timeout=30) as conn:
            reader = conn.makefile("rb")
            assert reader.readline() == b"tick\n"
            core.delete_namespaced_pod("ticker", ns)
            try:
                rest = reader.read()  # ticks until its process ends, then the end of the connection
            except ConnectionResetError:
                rest = b""
            assert set(rest.splitlines()) <= {b"tick"}
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # the next connection finds no pod
            get(local[8000], "/")
        _, err = process.communicate(timeout=90)  # kubectl says so and ends (slower on a loaded machine)
    assert process.returncode == 1 and "error forwarding port 8000 to pod" in err, err
    assert agent.process.poll() is None


def test_a_hostile_session_is_ended_and_the_node_goes_on(agent, core, ns, control_plane):
    """What a user allowed pods/portforward sends reaches the node as it is: a header block
    that would inflate to 64 MiB is answered with GOAWAY and the end of the connection."""
    serving(core, ns, "web", SERVERS, (8000, 8001))

    async def hostile() -> list[spdyframes.Frame]:
        url = f"{control_plane.server}/api/v1/namespaces/{ns}/pods/web/portforward"
        answered = b""
        async with aiohttp.ClientSession() as session, session.ws_connect(
                url, protocols=("SPDY/3.1+portforward.k8s.io",), ssl=control_plane._admin_tls()) as ws:
            await ws.send_bytes(header_bomb())
            async for message in ws:
                answered += message.data
        return spdyframes.FrameReader().feed(answered)

    assert asyncio.run(asyncio.wait_for(hostile(), 60)) == [spdyframes.GoAway(0, spdyframes.GOAWAY_PROTOCOL_ERROR)]
    assert "header block of more than" in agent.log.read_text()
    with forwarding(control_plane, ns, "web", 8000) as (_, local):
        assert get(local[8000], "/name") == b"a\n"


def test_only_the_api_server_may_forward_into_a_nodes_pods(agent, core, ns, control_plane, tmp_path):
    """The node's kubelet API lets the API server in (no upgrade asked: 400) and nobody
    else; through the API server a node may not port-forward (the Node authorizer)."""
    serving(core, ns, "web", SERVERS, (8000, 8001), node="pf-1")
    path, pki = f"/portForward/{ns}/web", control_plane.authority
    apiserver = (pki.directory / "apiserver-kubelet-client.crt", pki.directory / "apiserver-kubelet-client.key")
    assert direct(agent, core, path, apiserver, "pf-1") == 400
    other_node = pki.issue("node-pf-2-forward", "system:node:pf-2", ("system:nodes",))
    assert direct(agent, core, path, (other_node.cert, other_node.key), "pf-1") == 403
    user = pki.issue("forwarder", "forwarder", ("developers",))
    assert direct(agent, core, path, (user.cert, user.key), "pf-1") == 403
    assert direct(agent, core, path, None, "pf-1") == 401
    for node, cert, refusal in (  # the pod's own node gets the pod, but no further; another not even that
            ("pf-1", pki.issue("node-pf-1-forward", "system:node:pf-1", ("system:nodes",)), 'resource "pods/portforward"'),
            ("pf-2", other_node, "no relationship found between node 'pf-2' and this object")):
        as_node = pki.kubeconfig(tmp_path / f"{node}.kubeconfig", control_plane.server, f"system:node:{node}",
                                 client=cert)
        with forwarding(control_plane, ns, "web", 8000, kubeconfig=as_node) as (process, local):
            _, err = process.communicate(timeout=30)
        assert process.returncode == 1 and local == {}
        assert f'User "system:node:{node}" cannot' in err and refusal in err, err
