"""The transfer floor of benchmarks/sim_scale.py: what a list's bytes cost over HTTPS
between two processes with no simulator at all."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_reclaim_sim.launch import Child

from benchmarks.scale.scene import NAMESPACE


def _static_server(conn: Any, body: bytes, encoding: str | None, tls_dir: str) -> None:
    """An aiohttp HTTPS server answering every GET with `body` (the floor's other end),
    written as the simulator writes a list body, and with `Content-Encoding: encoding`."""
    from aiohttp import web

    from gpu_reclaim_sim.rbac import certificates

    async def main() -> None:
        async def handler(request: web.Request) -> web.StreamResponse:
            # written as the simulator writes a list: 1 MiB pieces, each waiting for the client
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            if encoding:
                response.headers["Content-Encoding"] = encoding
            response.content_length = len(body)
            await response.prepare(request)
            view = memoryview(body)
            for start in range(0, len(view), 1 << 20):
                await response.write(view[start:start + (1 << 20)])
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_get("/", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ssl_context, _ = certificates.server_context(Path(tls_dir), "127.0.0.1")
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        conn.send(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until the parent is done
        await runner.cleanup()

    asyncio.run(main())


async def transfer_floor(body: bytes, n: int, pause: float, encoding: str | None = None,
                         warmup: int = 0) -> list[float]:
    """Seconds to fetch `body` n times (after `warmup` untimed fetches) over HTTPS from a static aiohttp server in another
    process, with the benchmark's client library (which decodes a gzipped body as it reads
    it): what a list costs with no simulator work at all (TLS, moving the bytes between two
    processes, and decompressing them)."""
    import ssl

    import aiohttp

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    tls_dir = tempfile.mkdtemp(prefix="gpu-reclaim-floor-")
    proc = ctx.Process(target=_static_server, args=(child, body, encoding, tls_dir), daemon=True)
    proc.start()
    try:
        port = await asyncio.get_running_loop().run_in_executor(None, parent.recv)
        ca = ssl.create_default_context(cafile=str(Path(tls_dir) / "apiserver.crt"))
        times = []
        async with aiohttp.ClientSession() as session:
            for i in range(warmup + n):
                started = time.perf_counter()
                async with session.get(f"https://127.0.0.1:{port}/", ssl=ca) as resp:
                    await resp.read()
                if i >= warmup:
                    times.append(time.perf_counter() - started)
                await asyncio.sleep(pause)
        return times
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
        shutil.rmtree(tls_dir, ignore_errors=True)


async def raw_list(sim: Child, label_selector: str) -> bytes:
    """The gzipped bytes of a full list as the simulator sends them (for the floor)."""
    import ssl
    import urllib.parse

    import aiohttp

    config = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    token = config["users"][0]["user"]["token"]
    ca = ssl.create_default_context(cafile=sim.info["ca_file"])
    url = (f"{sim.info['api_secure']}/api/v1/namespaces/{NAMESPACE}/pods?"
           + urllib.parse.urlencode({"labelSelector": label_selector}))
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(url, ssl=ca, headers={"Authorization": f"Bearer {token}",
                                                     "Accept-Encoding": "gzip"}) as resp:
            assert resp.headers.get("Content-Encoding") == "gzip", resp.headers
            return await resp.read()
