"""A half-installed JupyterLab extension is said, not left to a 404 every 10 s: the check an
admin runs in the user image (and the set-up and the demo run) names the missing half and
exits 1; the server side says in the server's log when the frontend is missing (issue 39)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from jupyterhub_gpu_reclaim_lab import install_check


def check(env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu_reclaim_lab.install_check"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_both_halves_installed_pass():
    done = check()
    assert done.returncode == 0 and "the server side are installed" in done.stdout, done


def test_the_server_side_not_enabled_is_said_with_what_to_do(tmp_path):
    # an admin's config that turns the server side off (as a half install leaves it: not enabled)
    (tmp_path / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {install_check.MODULE: False}}}))
    # the user's config first (JUPYTER_PREFER_ENV_PATH=0), as jupyter-server would read it
    done = check({"JUPYTER_CONFIG_DIR": str(tmp_path), "JUPYTER_PREFER_ENV_PATH": "0"})
    assert done.returncode == 1, done
    assert install_check.SERVER_MISSING in done.stderr and "404" in done.stderr


def test_the_frontend_missing_is_said(tmp_path, monkeypatch):
    monkeypatch.setattr(install_check, "jupyter_path", lambda *parts: [str(tmp_path)])
    assert install_check.problems() == [install_check.FRONTEND_MISSING.format(where=str(tmp_path))]


def test_a_server_without_the_frontend_says_so_once_in_its_log(tmp_path):
    """A real jupyter-server with the server side enabled and the frontend absent (the one
    thing left out: `frontend_folder` finds none) says so once, as it loads the extension,
    and starts."""
    absent = ("import jupyterhub_gpu_reclaim_lab.install_check as c; c.frontend_folder = lambda: None; "
              "from jupyter_server.serverapp import main; main()")
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "run")}
    server = subprocess.Popen([sys.executable, "-c", absent, "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",
                               "--ServerApp.open_browser=False", "--allow-root", f"--ServerApp.root_dir={tmp_path}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    log: list[str] = []
    try:
        assert server.stderr is not None
        for line in server.stderr:  # until it has started (or exited: the lines end)
            log.append(line)
            if "is running at" in line:
                break
    finally:
        server.terminate()
        server.wait(timeout=60)
    said = [line for line in log if "jupyterhub-gpu-reclaim-lab: " in line]
    assert len(said) == 1 and install_check.FRONTEND_MISSING.split("(")[0] in said[0], log
    assert said[0].startswith("[W ") and any("is running at" in line for line in log), log
