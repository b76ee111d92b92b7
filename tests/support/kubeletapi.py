"""What the tests of the node agent's kubelet API share: kubectl (v1.37, installed by the
set-up) against the worker's control plane, a node's kubelet API reached directly, the API
server's count of the streaming WebSockets it routed, and hostile SPDY frames."""

from __future__ import annotations

import ssl
import struct
import subprocess
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from kubernetes import client as k8s

from gpu_reclaim_sim.controlplane.components import ControlPlane
from gpu_reclaim_sim.nodeagent import spdyframes

from .controlplane import NodeAgentProcess

KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"


def kubectl(plane: ControlPlane, *args: str, input: str | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(plane.admin_kubeconfig), *args], input=input,
                          capture_output=True, text=True, timeout=timeout)


def endpoint(core: k8s.CoreV1Api, node: str) -> tuple[str, int]:
    """Where the Node says its kubelet API is."""
    n = core.read_node(node)
    address = next(a.address for a in n.status.addresses if a.type == "InternalIP")
    return address, n.status.daemon_endpoints.kubelet_endpoint.port


def direct(agent: NodeAgentProcess, core: k8s.CoreV1Api, path: str, cert: tuple[Path, Path] | None,
           node: str = "api-1") -> int:
    """The status `node`'s kubelet API answers a GET of `path` with, from a client with `cert`."""
    address, port = endpoint(core, node)
    context = ssl.create_default_context(cafile=str(agent.plane.authority.cert))
    if cert:
        context.load_cert_chain(*cert)
    try:
        with urllib.request.urlopen(f"https://{address}:{port}{path}", context=context, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        assert e.code != 403 or e.read().decode().startswith("Forbidden (user=")
        return e.code


def websocket_requests(plane: ControlPlane, how: str, subresource: str = "exec") -> float:
    """The API server's count of `subresource` WebSockets it routed `how` (proxied_to_kubelet
    or translated_at_apiserver)."""
    with urllib.request.urlopen(plane.server + "/metrics", context=plane._admin_tls(), timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("apiserver_websocket_streaming_requests_total{")
               and f'proxy_type="{how}"' in line and f'subresource="{subresource}"' in line)


def control(kind: int, body: bytes, flags: int = 0, version: int = 3) -> bytes:
    """A SPDY control frame with any body, as a peer may send it."""
    return struct.pack(">HHI", 0x8000 | version, kind, (flags << 24) | len(body)) + body


def header_bomb(stream_id: int = 1) -> bytes:
    """A session's first SYN_STREAM whose one header value is 64 MiB of zeros, deflated to
    some 64 KiB."""
    deflate = zlib.compressobj(zdict=spdyframes.DICTIONARY)
    head = struct.pack(">II", 1, 4) + b"port" + struct.pack(">I", 64 << 20)
    block = deflate.compress(head) + b"".join(deflate.compress(b"\0" * (1 << 20)) for _ in range(64))
    block += deflate.flush(zlib.Z_SYNC_FLUSH)
    assert len(block) < 256 * 1024
    return control(spdyframes.SYN_STREAM, struct.pack(">IIBB", stream_id, 0, 0, 0) + block)
