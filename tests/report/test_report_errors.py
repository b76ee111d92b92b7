"""Bad input to `jupyterhub-gpu-reclaim report` and a Prometheus answering garbage: one line
on stderr, exit 2 (the command's input) or 1 (what it asked), nothing on stdout, and no
password or token in what it prints. The garbage comes from a small HTTP server answering
what a broken Prometheus or proxy answers; the real Prometheus's own errors are in
test_report_prometheus.py."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyterhub_gpu_reclaim.cli import main

GOOD_SERIES = json.dumps({"status": "success", "data": [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0"}]})
ANSWERS = {
    "not-json": (200, "<html>502 Bad Gateway</html>"),
    "error-body": (200, json.dumps({"status": "error", "errorType": "execution",
                                    "error": "query processing would load too many samples into memory"})),
    "http-503": (503, "Service Unavailable"),
    "a-vector": (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})),
    "no-data": (200, json.dumps({"status": "success"})),
}


class _Broken(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        kind, _, path = self.path.removeprefix("/").partition("/")
        status, body = (200, GOOD_SERIES) if path.startswith("api/v1/series") else ANSWERS[kind]
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # a client that hung up is no error here: on an error the report cancels its other queries
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def broken():
    server = _Server(("127.0.0.1", 0), _Broken)
    server.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["report", *args])
    out, err = capsys.readouterr()
    return done.value.code, out, err


@pytest.mark.parametrize("kind, says", [
    ("not-json", "not JSON"),
    ("error-body", "answered an error: 'execution': 'query processing would load too many samples"),
    ("http-503", "HTTP 503"),
    ("a-vector", "answered a 'vector', not a matrix"),
    ("no-data", "not a query answer"),
])
def test_a_prometheus_answering_garbage_is_one_line_and_exit_1(broken, capsys, kind, says):
    port = broken.server_address[1]
    code, out, err = run(capsys, "--prometheus-url", f"http://admin:s3cret@127.0.0.1:{port}/{kind}", "--since", "2h")
    assert (code, out) == (1, "")
    assert err.startswith("jupyterhub-gpu-reclaim report: Prometheus at http://admin:***@127.0.0.1:") and says in err
    assert err.count("\n") == 1 and "s3cret" not in err
    # the query was paginated and bounded: the series were counted before the range query
    assert any("/api/v1/series" in p for p in broken.paths) and any("/api/v1/query_range" in p for p in broken.paths)


@pytest.mark.parametrize("args, says", [
    (["--prometheus-url", "prometheus:9090"], "--prometheus-url 'prometheus:9090': not an http(s) URL"),
    (["--prometheus-url", "http://p:9090/?token=abc"], "not an http(s) URL without a query"),
    (["--prometheus-url", "http://p:port/"], "the port is not a number"),
    (["--prometheus-url", "http://p", "--since", "last week"], "--since 'last week': not a duration back from now"),
    (["--prometheus-url", "http://p", "--since", "1d", "--until", "2d"], "is not before --until"),
    (["--prometheus-url", "http://p", "--since", "1000d"], "spans more than 400 days"),
    (["--prometheus-url", "http://p", "--step", "5"], "--step 5: must be from 10 to 3600 seconds"),
    (["--prometheus-url", "http://p", "--max-series", "0"], "--max-series 0: must be 1 or more"),
    (["--prometheus-url", "http://p", "--gpu-matchers", 'job="x"} or vector(1) or {'], "label matchers only"),
    (["--prometheus-url", "http://p", "--hub-api-url", "http://hub:8081/hub/api"], "needs a token in JUPYTERHUB_API_TOKEN"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, args, says):
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    code, out, err = run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("jupyterhub-gpu-reclaim report: ") and says in err and err.count("\n") == 1
    assert "abc" not in err


def test_no_token_in_what_it_prints_when_the_hub_fails(broken, capsys, monkeypatch):
    """The hub's token comes from the environment, and neither a failing hub's error nor
    anything else printed shows it."""
    from jupyterhub_gpu_reclaim.report import run as report_run

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "tok-8c1f0e")
    seen = []

    async def no_history(request):  # Prometheus is not what this test is about
        seen.append(request.hub_token)
        hub = report_run._Hub(request.hub_api_url, request.hub_token, 5)
        async with hub:
            await hub.groups()

    monkeypatch.setattr(report_run, "build_report", no_history)
    port = broken.server_address[1]
    code, out, err = run(capsys, "--prometheus-url", "http://p", "--hub-api-url", f"http://127.0.0.1:{port}/not-json")
    assert seen == ["tok-8c1f0e"]
    assert (code, out) == (1, "") and "the hub's groups" in err and "not JSON" in err
    assert "tok-8c1f0e" not in err
