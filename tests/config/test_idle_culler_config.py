"""jupyterhub-idle-culler 2.0's own configuration, read as 2.0 reads it: its config file
(`idle_culler_config.py` in the working directory, or `--config`) with `c.IdleCuller.*`
settings, which are the service's settings of the same name. Each file is also read by
the real IdleCuller (its `start()` loads `config_file` after the command line) and the
values compared."""

from __future__ import annotations

import pytest
from jupyterhub_idle_culler import IdleCuller, default_cull_arbiter

from jupyterhub_gpu_reclaim import cli
from jupyterhub_gpu_reclaim.application import IDLE_CULLER_CONFIG_FILE, IDLE_CULLER_SETTINGS, GpuReclaim
from jupyterhub_gpu_reclaim.launcher import run_app, service_settings

from ..support.apps import culler
from ..support.apps import parse as ours

# idle-culler's documented hook (the help of its cull_arbiter_hook)
DOCUMENTED = '''
def my_cull_arbiter(inactive, inactive_limit, server):
    if server['state']['profile_name'] == 'unlimited':
        return False
    return inactive.total_seconds() >= inactive_limit
c.IdleCuller.cull_arbiter_hook = my_cull_arbiter
'''
CONFIG = "c.IdleCuller.timeout = 123\nc.IdleCuller.cull_every = 7\n" + DOCUMENTED
# the settings both read: every command-line option of idle-culler and its hook
COMPARED = sorted(IDLE_CULLER_SETTINGS - {"config_file", "generate_config", "logging_config", "log_format",
                                          "log_datefmt", "log_level", "show_config", "show_config_json"})


@pytest.fixture(autouse=True)
def workdir(monkeypatch, tmp_path):
    monkeypatch.delenv("JUPYTERHUB_API_URL", raising=False)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t0ken")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def theirs(argv: list[str]) -> IdleCuller:
    """What idle-culler 2.0's start() has read before it runs its first cull."""
    app = culler(argv)
    app.load_config_file(app.config_file)
    return app


def same(a: GpuReclaim, b: IdleCuller) -> None:
    for name in COMPARED:
        mine, its = getattr(a, name), getattr(b, name)
        if name == "cull_arbiter_hook" and its is default_cull_arbiter:
            assert mine is None, name  # None: the timeout rule, 2.0's default_cull_arbiter
        elif callable(its):
            assert mine.__code__.co_code == its.__code__.co_code, name  # the file's own function
        else:
            assert mine == its, name


def test_the_settings_are_idle_cullers():
    assert IDLE_CULLER_SETTINGS == set(IdleCuller.class_trait_names(config=True))


@pytest.mark.parametrize("argv", [[], ["--config=idle_culler_config.py"], ["--timeout=50"],
                                  ["--config=idle_culler_config.py", "--cull-every=3", "--cull-users=true"]])
def test_its_default_file_and_config_read_as_it_reads_them(workdir, argv):
    (workdir / IDLE_CULLER_CONFIG_FILE).write_text(CONFIG)
    argv = [*argv, "--url=http://hub:8081/hub/api"]
    a, b = ours(argv), theirs(argv)
    same(a, b)
    assert a.cull_arbiter_hook.__name__ == "my_cull_arbiter"
    settings = service_settings(a)
    assert settings.cull_arbiter_hook is a.cull_arbiter_hook
    assert (settings.timeout, settings.cull_every) == ((50, 7) if "--timeout=50" in argv else
                                                       (123, 3) if "--cull-every=3" in argv else (123, 7))
    assert settings.policy.cpu_timeout.total_seconds() == settings.timeout


def test_every_idle_culler_setting_in_its_file(workdir):
    text = ("c.IdleCuller.api_page_size = 20\nc.IdleCuller.concurrency = 3\nc.IdleCuller.cull_admin_users = False\n"
            "c.IdleCuller.cull_default_servers = False\nc.IdleCuller.cull_named_servers = False\n"
            "c.IdleCuller.cull_users = True\nc.IdleCuller.internal_certs_location = '/certs'\n"
            "c.IdleCuller.max_age = 7200\nc.IdleCuller.remove_named_servers = True\nc.IdleCuller.ssl_enabled = True\n"
            "c.IdleCuller.timeout = 900\nc.IdleCuller.url = 'http://hub:8081/hub/api'\n"
            "c.IdleCuller.log_level = 'DEBUG'\n")
    (workdir / IDLE_CULLER_CONFIG_FILE).write_text(text)
    a, b = ours([]), theirs([])
    same(a, b)
    assert (a.cull_every, a.max_age, a.log_level) == (450, 7200, 10)
    policy = a.policy_config()
    assert (policy.cull_default_servers, policy.cull_named_servers, policy.cpu_max_age.total_seconds()) == (
        False, False, 7200)


def test_ours_wins_over_idle_cullers_and_the_command_line_over_both(workdir):
    (workdir / IDLE_CULLER_CONFIG_FILE).write_text("c.IdleCuller.timeout = 123\nc.IdleCuller.max_age = 60\n")
    (workdir / "gpu_reclaim_config.py").write_text("c.GpuReclaim.timeout = 456\nc.GpuReclaim.dry_run = True\n")
    a = ours([])
    assert (a.timeout, a.max_age, a.dry_run) == (456, 60, True)
    assert ours(["--timeout=9"]).timeout == 9
    (workdir / "both.py").write_text("c.IdleCuller.timeout = 1\nc.GpuReclaim.timeout = 2\n")
    assert ours(["--config=both.py"]).timeout == 2  # within a file too
    assert ours(["--IdleCuller.timeout=77"]).timeout == 77  # its --Class.name form


@pytest.mark.parametrize("text, message", [
    ("c.IdleCuller.timout = 5\n", "unknown option c.IdleCuller.timout (did you mean timeout?)"),
    ("c.IdleCuller.dry_run = True\n", "unknown option c.IdleCuller.dry_run"),  # not one of 2.0's
    ("c.IdleCuler.timeout = 5\n", "unknown section c.IdleCuler (did you mean IdleCuller?)"),
    ("c.timeout = 5\n", "c.timeout is not a setting: settings go in a section, c.GpuReclaim.timeout"),
    ("c.IdleCuller.timeout = 'soon'\n", "c.IdleCuller.timeout expected an int"),
    ("c.IdleCuller.timeout = -1\n", "c.IdleCuller.timeout must be >= 0"),
    ("c.IdleCuller.cull_arbiter_hook = 5\n", "c.IdleCuller.cull_arbiter_hook expected a callable"),
    ("c.IdleCuller.timeout = = 3\n", "SyntaxError"),
    ("import nosuchmodule\n", "ModuleNotFoundError"),
])
def test_a_bad_idle_culler_file_stops_the_service_before_it_starts(workdir, capsys, text, message):
    (workdir / IDLE_CULLER_CONFIG_FILE).write_text("c.IdleCuller.cull_every = 7\n" + text)
    started = []

    async def run(settings):
        started.append(settings)

    assert run_app([], run=run) == 2
    err = capsys.readouterr().err
    assert started == []  # nothing half-configured runs
    assert err.startswith(f"jupyterhub-gpu-reclaim: error: {IDLE_CULLER_CONFIG_FILE}: ") and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--IdleCuller.timout=5"], "unknown option --IdleCuller.timout"),
    (["--IdleCuller.dry_run=true"], "unknown option --IdleCuller.dry_run"),
    (["--NoSuchApp.timeout=5"], "unknown option --NoSuchApp.timeout"),
])
def test_bad_idle_culler_command_line(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_without_a_file_nothing_changes(workdir):
    same(ours([]), theirs([]))  # no file: both defaults
