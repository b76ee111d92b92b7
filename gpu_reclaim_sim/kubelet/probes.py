"""The kubelet's readiness prober (pkg/kubelet/prober): a container with a `readinessProbe`
is not ready until the probe has succeeded `successThreshold` times in a row, and no
longer ready once it has failed `failureThreshold` times in a row; a container without one
is ready once it runs. Handlers, as Kubernetes documents them ("Configure Liveness,
Readiness and Startup Probes"):

- `tcpSocket`: a TCP connection to the port opens within `timeoutSeconds`;
- `httpGet`: a GET (`path`, `httpHeaders`, `scheme` HTTP or HTTPS without verifying the
  certificate, User-Agent `kube-probe/<version>`) answers with a code from 200 to 399
  within `timeoutSeconds` (a redirect is a 3xx: success, not followed);
- `exec`: the command, run in the container, exits 0 within `timeoutSeconds`.

A port is a number or the name of one of the container's ports; the host is the pod's IP
unless the probe names one. The kubelet probes from its node: connections leave from the
node's address, which NetworkPolicy always admits (sim.network.nftables). Probing starts
`initialDelaySeconds` after the container started and repeats every `periodSeconds`
(defaults: 0, 10 s, timeout 1 s, thresholds 1 and 3).
"""

from __future__ import annotations

import asyncio
import os
import ssl
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import aiohttp

from . import containerexec, runtime


class ProbeError(ValueError):
    """A probe the kubelet cannot run (no handler, an unknown named port)."""


@dataclass(frozen=True)
class Probe:
    """One container's readinessProbe, with Kubernetes' defaults filled in."""

    spec: dict[str, Any]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Probe:
        return cls(spec=spec, initial_delay=float(spec.get("initialDelaySeconds") or 0),
                   period=float(spec.get("periodSeconds") or 10), timeout=float(spec.get("timeoutSeconds") or 1),
                   success_threshold=int(spec.get("successThreshold") or 1),
                   failure_threshold=int(spec.get("failureThreshold") or 3))


def port_of(container: dict[str, Any], port: Any) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ProbeError(f"unknown port {port!r}")


async def check(probe: Probe, container: dict[str, Any], proc: Any, pod_ip: str, node_ip: str,
                kubelet_version: str) -> str | None:
    """Run the probe once: None when it succeeded, else why not, in the kubelet's words (an
    HTTP probe says it is `kube-probe/<major.minor>` of `kubelet_version`, e.g. v1.37.2)."""
    spec = probe.spec
    try:
        if "tcpSocket" in spec:
            return await _tcp(spec["tcpSocket"], container, pod_ip, node_ip, probe.timeout)
        if "httpGet" in spec:
            return await _http(spec["httpGet"], container, pod_ip, node_ip, probe.timeout, kubelet_version)
        if "exec" in spec:
            return await _exec(spec["exec"].get("command") or [], proc, probe.timeout)
    except ProbeError as e:
        return str(e)
    except containerexec.ExecError as e:
        return f"rpc error: code = Unknown desc = {e}"
    except Exception as e:  # e.g. a path aiohttp cannot make a URL of: a failure, not a dead prober
        return f"probe error: {e}"
    return "unknown probe handler (grpc probes are not simulated)"


async def _tcp(spec: dict[str, Any], container: dict[str, Any], pod_ip: str, node_ip: str,
               timeout: float) -> str | None:
    host, port = spec.get("host") or pod_ip, port_of(container, spec.get("port"))
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, local_addr=(node_ip, 0)), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        return f"dial tcp {host}:{port}: {_why(e)}"
    writer.close()
    return None


async def _http(spec: dict[str, Any], container: dict[str, Any], pod_ip: str, node_ip: str,
                timeout: float, kubelet_version: str) -> str | None:
    port = port_of(container, spec.get("port"))
    scheme = str(spec.get("scheme") or "HTTP").lower()
    host, path = spec.get("host") or pod_ip, spec.get("path") or "/"
    url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
    major_minor = ".".join(kubelet_version.lstrip("v").split(".")[:2])
    headers = {"User-Agent": f"kube-probe/{major_minor}", "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in spec.get("httpHeaders") or []})
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    connector = aiohttp.TCPConnector(local_addr=(node_ip, 0), ssl=insecure if scheme == "https" else False)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            async with s.get(url, headers=headers, allow_redirects=False) as r:
                if 200 <= r.status < 400:
                    return None
                return f"HTTP probe failed with statuscode: {r.status}"
    except (OSError, asyncio.TimeoutError, aiohttp.ClientError) as e:
        cause = e.os_error if isinstance(e, aiohttp.ClientConnectorError) else e
        return f'Get "{url}": dial tcp {host}:{port}: {_why(cause)}'


async def _exec(command: list[str], proc: Any, timeout: float) -> str | None:
    if not isinstance(proc, runtime.ContainerProcess) or not command:
        return "no command to run"
    streams = containerexec.Streams(stdin=False, stdout=True, stderr=True, tty=False)
    process = await containerexec.start(proc, command, streams)
    try:
        out, err = await asyncio.wait_for(asyncio.gather(_read(process.stdout), _read(process.stderr)), timeout)
        code = await asyncio.wait_for(process.proc.wait(), timeout)
    except asyncio.TimeoutError:
        process.proc.kill()
        await process.proc.wait()
        return f"command {command!r} timed out"
    finally:
        process.close()
    return None if code == 0 else (out + err).decode(errors="replace")


async def _read(stream: asyncio.StreamReader | None) -> bytes:
    return await stream.read() if stream is not None else b""


def _why(e: BaseException) -> str:
    """A connection's failure as Go's net package words it."""
    if isinstance(e, asyncio.TimeoutError):
        return "i/o timeout"
    if isinstance(e, OSError) and e.errno is not None:
        return "connect: " + os.strerror(e.errno).lower()
    return str(e)


async def watch(probe: Probe, run: Callable[[], Awaitable[str | None]], report: Callable[[bool], None],
                failed: Callable[[str], None]) -> None:
    """Probe until cancelled: `failed` with each failure's message (the kubelet's
    Unhealthy event), `report` each change of readiness (it starts not ready) once a
    result has repeated as often as its threshold asks."""
    await asyncio.sleep(probe.initial_delay)
    ready, streak, last = False, 0, None
    while True:
        message = await run()
        ok = message is None
        if message is not None:
            failed(message)
        streak = streak + 1 if ok == last else 1
        last = ok
        if ok != ready and streak >= (probe.success_threshold if ok else probe.failure_threshold):
            ready = ok
            report(ready)
        await asyncio.sleep(probe.period)
