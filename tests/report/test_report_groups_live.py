"""The report's groups from a real JupyterHub (GET /hub/api/groups with a service token
allowed list:groups and read:groups, as docs/report.md says), joined with the usage a real
Prometheus holds (tests/support/report_history.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_reclaim_sim.launch import free_port, start_hub
from gpu_reclaim_sim.paths import REPO
from jupyterhub_gpu_reclaim.cli import main
from tests.support import live
from tests.support.prometheus_history import create_blocks, history_prometheus
from tests.support.report_history import SCHEMES, history_file

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
DAY = 86400
START = (int(time.time()) // DAY - 3) * DAY


def _time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("prometheus")
    create_blocks(history_file(workdir, START, SCHEMES["honorlabels-false_ksm-1.9"]), workdir / "data")
    with history_prometheus(workdir) as url:
        yield url


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    token = secrets.token_hex(16)
    child = start_hub(tmp_path_factory.mktemp("hub"), HERE / "jupyterhub_config_groups.py", "", python=live.HUB_PYTHON,
                      port=free_port(), env={"GPU_RECLAIM_TEST_TOKEN": secrets.token_hex(16),
                                             "GPU_RECLAIM_REPORT_TOKEN": token, "GPU_RECLAIM_REPO": str(REPO),
                                             "GPU_RECLAIM_DEMO_PASSWORD": "test-password"})
    child.info["report_token"] = token
    yield child
    child.stop(grace=30)


def report(capsys, prometheus: str, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["report", "--prometheus-url", prometheus, "--since", _time(START), "--until", _time(START + 2 * DAY),
              *args])
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_groups_from_the_hub(prometheus, hub, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.info["report_token"])
    api = hub.info["url"] + "/hub/api"
    code, out, err = report(capsys, prometheus, "--json", "--hub-api-url", api)
    assert code == 0, err
    got = json.loads(out)
    users = {r["user"]: r for r in got["by_user"]}
    assert users["alice"]["groups"] == ["ml-lab", "physics"] and users["bob"]["groups"] == ["physics"]
    assert users["carol"]["groups"] == ["(no group)"]
    groups = {r["group"]: r for r in got["by_group"]}
    # a user in two groups counts in both; a group nobody in the report belongs to is not listed
    assert set(groups) == {"physics", "ml-lab", "(no group)"}
    assert groups["physics"]["held"] == pytest.approx(users["alice"]["held"] + users["bob"]["held"], abs=0.02)
    assert groups["ml-lab"]["held"] == pytest.approx(users["alice"]["held"] + users["dave"]["held"], abs=0.02)
    assert got["source"]["groups"] == "the hub" and not any("Groups were not asked for" in n for n in got["notes"])
    code, text, err = report(capsys, prometheus, "--hub-api-url", api)
    assert code == 0 and "ml-lab, physics" in text and hub.info["report_token"] not in text + err
    code, csv_text, err = report(capsys, prometheus, "--csv", "--hub-api-url", api)
    assert code == 0 and any(line.split(",")[1:3] == ["alice", "ml-lab;physics"] for line in csv_text.splitlines())


def test_a_token_the_hub_refuses_is_one_line_and_exit_1(prometheus, hub, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "not-a-token-of-this-hub")
    code, out, err = report(capsys, prometheus, "--hub-api-url", hub.info["url"] + "/hub/api")
    assert (code, out) == (1, "")
    assert err.startswith("jupyterhub-gpu-reclaim report: the hub's groups: GET ") and "HTTP 403" in err
    assert err.count("\n") == 1 and "not-a-token-of-this-hub" not in err


class _Answers(BaseHTTPRequestHandler):
    """`redirect`: a 302 to `server.location`; else another host's answer: its own groups
    (and what Authorization it was sent, in `server.seen`)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.seen.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        if self.server.location:  # type: ignore[attr-defined]
            self.send_response(302)
            self.send_header("Location", self.server.location + self.path)  # type: ignore[attr-defined]
            self.end_headers()
            return
        body = json.dumps({"items": [{"name": "not-the-hubs", "users": ["alice", "bob", "carol", "dave"]}],
                           "_pagination": {"offset": 0, "limit": 200, "total": 1, "next": None}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def answering(location: str | None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.location, server.seen = location, []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("to", ["another host", "the hub"])
def test_a_redirect_of_the_groups_is_refused(prometheus, hub, capsys, monkeypatch, to):
    """--hub-api-url answered by a redirect (a misconfigured ingress, a hostile DNS entry):
    to another host, whose answer is no hub's, or to the hub itself: refused, one line."""
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.info["report_token"])
    with answering(None) as elsewhere:
        target = f"http://localhost:{elsewhere.server_address[1]}" if to == "another host" else hub.info["url"]
        with answering(target) as redirector:
            api = f"http://127.0.0.1:{redirector.server_address[1]}/hub/api"
            code, out, err = report(capsys, prometheus, "--json", "--hub-api-url", api)
    assert (code, out) == (1, ""), out[:2000]
    assert err == (f"jupyterhub-gpu-reclaim report: the hub's groups: GET {api}/groups: HTTP 302: a redirect to "
                   f"'{target}/hub/api/groups' (not followed: give --hub-api-url as the hub's own API URL)\n")
    assert redirector.seen == [f"token {hub.info['report_token']}"] and elsewhere.seen == []
