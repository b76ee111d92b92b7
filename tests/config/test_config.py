"""The service's command line and config file: a drop-in for jupyterhub-idle-culler 2.0."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import subprocess
import sys

import pytest
from jupyterhub_idle_culler import IdleCuller

from jupyterhub_gpu_reclaim import cli
from jupyterhub_gpu_reclaim.application import IDLE_CULLER_OPTIONS, POLICY_OPTIONS, GpuReclaim
from jupyterhub_gpu_reclaim.errors import ConfigError
from jupyterhub_gpu_reclaim.launcher import loggable_settings, run_app, service_settings
from jupyterhub_gpu_reclaim.oneline import LogFormatter
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig, option_of
from jupyterhub_gpu_reclaim.settings.gpu_policy import GpuPolicyOptions
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings, declared_options

from ..support.apps import culler, parse

TOKEN = "s3cr3t-token-value"
URL = "http://localhost:8081/hub/api"
BOOL_OPTIONS = ["cull_users", "cull_admin_users", "remove_named_servers",
                "cull_default_servers", "cull_named_servers", "ssl_enabled"]
INT_OPTIONS = ["timeout", "cull_every", "concurrency", "max_age", "api_page_size"]
# what the z2jh chart's hub config runs (cull.users, cull.removeNamedServers on,
# cull.adminUsers off)
Z2JH_ARGV = ["--url=http://localhost:8081/hub/api", "--timeout=3600", "--cull-every=600",
             "--concurrency=10", "--cull-users", "--remove-named-servers", "--max-age=0",
             "--cull-admin-users=false"]


def opt(name: str) -> str:
    return "--" + name.replace("_", "-")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    monkeypatch.delenv("JUPYTERHUB_API_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray gpu_reclaim_config.py


def run(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


# --------------------------------------------------------------------------- the options


def test_every_idle_culler_option_is_accepted():
    ours = set(GpuReclaim.class_trait_names(config=True))
    theirs = set(IdleCuller.class_trait_names(config=True)) - set(
        IdleCuller.__mro__[1].class_trait_names(config=True))  # minus Application's own
    assert theirs - ours == set()
    # cull_arbiter_hook, a Python callable, goes in a config file only (in 2.0 too)
    assert set(IDLE_CULLER_OPTIONS) | {"config_file", "generate_config", "cull_arbiter_hook"} == theirs
    for alias in IdleCuller.aliases:
        assert alias in GpuReclaim.aliases
        assert GpuReclaim.aliases[alias] == IdleCuller.aliases[alias].replace(
            "IdleCuller.", "GpuReclaim.")
    assert "generate-config" in GpuReclaim.flags


def test_defaults_equal_idle_cullers():
    ours, theirs = parse([]), culler([])
    for name in IDLE_CULLER_OPTIONS:
        if name != "url":
            assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.cull_every == theirs.cull_every == 300  # half of the 600 s timeout
    # derived default follows --timeout in both
    ours, theirs = parse(["--timeout=100"]), culler(["--timeout=100"])
    assert ours.cull_every == theirs.cull_every == 50


def test_same_values_as_idle_culler_for_the_same_argv():
    argv = ["--timeout=3600", "--cull-every=600", "--concurrency=3", "--max-age=7200",
            "--api-page-size=50", "--cull-users=true", "--cull-admin-users=false",
            "--remove-named-servers=true", "--cull-default-servers=false",
            "--cull-named-servers=false", "--ssl-enabled=true",
            "--internal-certs-location=/certs", "--url=http://hub:8081/hub/api"]
    ours, theirs = parse(argv), culler(argv)
    for name in IDLE_CULLER_OPTIONS:
        assert getattr(ours, name) == getattr(theirs, name), name


def test_url_and_token_from_environment(monkeypatch):
    assert parse([]).url is None and parse([]).api_token == ""
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    app = parse([])
    assert app.url == "http://hub:8081/hub/api"
    assert app.api_token == TOKEN
    assert parse(["--url=http://other/hub/api"]).url == "http://other/hub/api"


def test_z2jh_command_line():
    app = parse(Z2JH_ARGV)
    assert (app.url, app.timeout, app.cull_every, app.concurrency, app.max_age) == (
        URL, 3600, 600, 10, 0)
    assert app.cull_users is True
    assert app.remove_named_servers is True
    assert app.cull_admin_users is False
    assert app.cull_default_servers is True and app.cull_named_servers is True
    # the flag-without-value form works anywhere, also last
    assert parse(["--timeout=3600", "--cull-users"]).cull_users is True


@pytest.mark.parametrize("name", BOOL_OPTIONS + ["dry_run", "pressure_only"])
def test_bool_option_forms(name):
    flag = opt(name)
    assert getattr(parse([flag]), name) is True
    assert getattr(parse([flag, "--timeout=5"]), name) is True
    for text, value in (("true", True), ("True", True), ("1", True),
                        ("false", False), ("False", False), ("0", False)):
        assert getattr(parse([f"{flag}={text}"]), name) is value, text
    assert getattr(parse([flag, "false"]), name) is False


@pytest.mark.parametrize("name", INT_OPTIONS)
def test_int_option_forms(name):
    assert getattr(parse([f"{opt(name)}=123"]), name) == 123
    assert getattr(parse([opt(name), "45"]), name) == 45
    assert getattr(parse([f"--GpuReclaim.{name}=7"]), name) == 7


def test_string_options():
    assert parse(["--internal-certs-location=/srv/certs"]).internal_certs_location == "/srv/certs"
    assert parse(["--url", URL]).url == URL


def test_every_option_has_help():
    for name, trait in GpuReclaim.class_traits(config=True).items():
        assert trait.help and trait.help.strip(), name


# --------------------------------------------------------------------------- policy settings


def test_policy_defaults_follow_policyconfig():
    app = parse([])
    policy = app.policy_config()
    # idle-culler's --timeout default (600 s) replaces PolicyConfig's z2jh-like 3600 s
    assert policy == dataclasses.replace(PolicyConfig(), cpu_timeout=dt.timedelta(seconds=600))
    assert app.dry_run is False


def test_policy_config_mapping():
    app = parse(Z2JH_ARGV + [
        "--gpu-idle-threshold=5", "--never-used-warn-after=20m", "--never-used-reclaim-after=1h",
        "--idle-warn-after=5400", "--idle-reclaim-after=3h", "--warning-lead=10m",
        "--max-keepalive=1d", "--stale-after=90s", "--gpu-max-age=7d", "--pressure-only",
        "--exempt-users=alice", "--exempt-users=bob", "--exempt-groups=staff",
        "--exempt-profiles=big-gpu", "--cull-default-servers=false",
    ])
    p = app.policy_config()
    minutes = lambda m: dt.timedelta(minutes=m)  # noqa: E731
    assert p.gpu_idle_threshold == 5.0
    assert p.never_used_warn_after == minutes(20)
    assert p.never_used_reclaim_after == minutes(60)
    assert p.idle_warn_after == minutes(90)
    assert p.idle_reclaim_after == minutes(180)
    assert p.warning_lead == minutes(10)
    assert p.max_keepalive == dt.timedelta(days=1)
    assert p.stale_after == dt.timedelta(seconds=90)
    assert p.max_age == dt.timedelta(days=7)
    assert p.pressure_only is True
    assert p.exempt_users == {"alice", "bob"}
    assert p.exempt_groups == {"staff"} and p.exempt_profiles == {"big-gpu"}
    assert p.cpu_timeout == dt.timedelta(seconds=3600)
    assert p.cpu_max_age is None  # --max-age=0 is off
    assert p.cull_admin_users is False
    assert p.cull_default_servers is False and p.cull_named_servers is True
    assert parse(["--max-age=7200"]).policy_config().cpu_max_age == dt.timedelta(hours=2)
    assert parse(["--gpu-max-age=0"]).policy_config().max_age is None
    assert set(POLICY_OPTIONS.values()) == {f.name for f in dataclasses.fields(PolicyConfig)}


def test_each_policy_setting_is_declared_once_in_policyconfig():
    """Each PolicyConfig field is set by one option: the GPU policy's, declared with their help
    by GpuPolicyOptions, defaults PolicyConfig's; the others by idle-culler's options of the
    names they give."""
    ours = set(declared_options(GpuPolicyOptions))
    defaults = GpuReclaim().policy_config()
    for f in dataclasses.fields(PolicyConfig):
        option = option_of(f.name)
        if option in ours:
            assert GpuPolicyOptions.class_traits()[option].help and option not in IDLE_CULLER_OPTIONS
            assert getattr(defaults, f.name) == getattr(PolicyConfig(), f.name), f.name
        else:
            assert option in IDLE_CULLER_OPTIONS, f.name
    assert ours == {option_of(f.name) for f in dataclasses.fields(PolicyConfig)} - set(IDLE_CULLER_OPTIONS)


def test_the_service_and_the_backtest_read_policy_settings_alike(tmp_path):
    """One converter: the same settings as options and in a backtest policy file make the
    same PolicyConfig."""
    from jupyterhub_gpu_reclaim.replay.backtest import load_policy_config

    settings = {"gpu_idle_threshold": 9, "idle_warn_after": "90m", "idle_reclaim_after": "3h",
                "max_keepalive": 86400, "max_age": "7d", "pressure_only": True,
                "exempt_users": ["alice", "bob"], "cpu_timeout": 3600, "cpu_max_age": 0,
                "cull_named_servers": False}
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps(settings))
    argv = [f"--{option_of(k).replace('_', '-')}={v}" for k, v in settings.items()
            if not isinstance(v, (list, bool))]
    argv += ["--pressure-only", "--exempt-users=alice", "--exempt-users=bob", "--cull-named-servers=false"]
    assert parse(argv).policy_config() == load_policy_config(path)
    assert load_policy_config(path).cpu_max_age is None  # 0: off, in a file as in an option


# --------------------------------------------------------------------------- config files


def test_default_config_file_is_loaded_and_cli_wins(tmp_path):
    (tmp_path / "gpu_reclaim_config.py").write_text(
        "c.GpuReclaim.timeout = 1234\nc.GpuReclaim.cull_users = True\n"
        "c.GpuReclaim.idle_reclaim_after = '90m'\nc.GpuReclaim.exempt_users = {'carol'}\n")
    app = parse([])
    assert (app.timeout, app.cull_users, app.idle_reclaim_after) == (1234, True, 5400.0)
    assert app.exempt_users == {"carol"}
    app = parse(["--timeout=99", "--cull-users=false"])
    assert (app.timeout, app.cull_users) == (99, False)


def test_named_config_file(tmp_path):
    path = tmp_path / "sub" / "mine.py"
    path.parent.mkdir()
    path.write_text("c.GpuReclaim.max_age = 600\nc.GpuReclaim.dry_run = True\n")
    app = parse([f"--config={path}"])
    assert app.max_age == 600 and app.dry_run is True


@pytest.mark.parametrize("text, message", [
    ("c.GpuReclaim.timeout = 'abc'\n", "--timeout"),
    ("c.GpuReclaim.timeout = -5\n", "--timeout must be >= 0"),
    ("c.GpuReclaim.no_such_option = 1\n", "no_such_option"),
    ("c.GpuReclaim.cull_user = True\n", "did you mean cull_users?"),
    ("c.GpuReclaim.timeout = = 3\n", "SyntaxError"),
    ("c.GpuReclaim.warning_lead = 'soon'\n", "--warning-lead"),
])
def test_bad_config_file(tmp_path, capsys, text, message):
    (tmp_path / "bad.py").write_text(text)
    code, out, err = run(["--config=bad.py"], capsys)
    assert code == 2
    assert message in err and "bad.py" in err
    assert err.startswith("jupyterhub-gpu-reclaim: error: ")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_named_config_file_is_an_error(capsys):
    code, _, err = run(["--config=nope.py"], capsys)
    assert code == 2 and "nope.py not found" in err


def test_generate_config_has_every_option_and_loads_back(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    monkeypatch.setenv("JUPYTERHUB_API_URL", URL)
    code, out, err = run(["--generate-config"], capsys)
    assert code == 0
    assert TOKEN not in out
    for name, trait in GpuReclaim.class_traits(config=True).items():
        assert f"# c.GpuReclaim.{name} = " in out, name
        first_line = trait.help.strip().splitlines()[0].strip()
        assert first_line[:40] in " ".join(out.split()), name
    # uncomment everything and load it back: the same settings as the defaults
    text = re.sub(r"^# (c\.\w+\.\w+ = )", r"\1", out, flags=re.M)
    text = text.replace("c.GpuReclaim.generate_config = False", "")
    (tmp_path / "gpu_reclaim_config.py").write_text(text)
    loaded = parse([])
    assert "c.GpuReclaim.timeout = 600" in text
    monkeypatch.delenv("JUPYTERHUB_API_URL")
    (tmp_path / "gpu_reclaim_config.py").unlink()
    baseline = parse([])
    for name in IDLE_CULLER_OPTIONS + tuple(POLICY_OPTIONS) + ("dry_run",):
        if name not in ("url", "cull_every"):
            assert getattr(loaded, name) == getattr(baseline, name), name
    assert loaded.url is None  # the generated file holds the class default, not the env
    assert loaded.cull_every == 0 and baseline.cull_every == 300  # 0: half of --timeout, as the default is
    assert loggable_settings(loaded)["cull_every"] == loggable_settings(baseline)["cull_every"] == 300
    assert loaded.policy_config() == baseline.policy_config()


def test_generate_config_edited_file_loads(tmp_path, capsys):
    code, out, _ = run(["--generate-config"], capsys)
    text = out.replace("# c.GpuReclaim.timeout = 600", "c.GpuReclaim.timeout = 3600")
    text = text.replace("# c.GpuReclaim.gpu_idle_threshold = 1.0",
                        "c.GpuReclaim.gpu_idle_threshold = 2.5")
    (tmp_path / "gpu_reclaim_config.py").write_text(text)
    app = parse([])
    assert app.timeout == 3600 and app.gpu_idle_threshold == 2.5


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, message", [
    (["--timeout=-1"], "--timeout must be >= 0"),
    (["--max-age=-3"], "--max-age must be >= 0"),
    (["--concurrency=-1"], "--concurrency must be >= 0"),
    (["--cull-every=-1"], "--cull-every must be >= 0"),
    (["--timeout=abc"], "--timeout expected an int"),
    (["--timeout"], "--timeout needs a value"),
    (["--timeout", "--cull-users"], "--timeout needs a value"),
    (["--no-such-option=1"], "unknown option --no-such-option"),
    (["--cull-users", "--frobnicate"], "unknown option --frobnicate"),
    (["--GpuReclaim.nonsense=1"], "unknown option --GpuReclaim.nonsense"),
    (["--cull-users=maybe"], "--cull-users expected a boolean"),
    (["--timeout=5", "stray"], "unexpected argument 'stray'"),
    (["--idle-reclaim-after=soon"], "--idle-reclaim-after expected a duration"),
    (["--idle-reclaim-after=99999999999h"], "--idle-reclaim-after expected a duration"),  # past timedelta
    (["--idle-reclaim-after=nan"], "--idle-reclaim-after expected a duration"),
    (["--idle-reclaim-after=1e308"], "--idle-reclaim-after expected a duration"),
    (["--warning-lead=-5"], "--warning-lead"),
    (["--gpu-idle-threshold=0"], "--gpu-idle-threshold must be a percent"),
    (["--gpu-idle-threshold=101"], "--gpu-idle-threshold must be a percent"),
    (["--idle-warn-after=3h", "--idle-reclaim-after=2h"], "--idle-warn-after must not exceed --idle-reclaim-after"),
    (["--stale-after=0"], "--stale-after must be > 0"),
    (["--kernel-probe-token-lifetime=30"], "--kernel-probe-token-lifetime must be from 60 s to 3600 s"),
    # the probe-token API mints none longer (spawner/probe_tokens.py)
    (["--kernel-probe-token-lifetime=2h"], "--kernel-probe-token-lifetime must be from 60 s to 3600 s"),
    (['--prometheus-gpu-matchers=job="x"} or vector(1) or {'], "--prometheus-gpu-matchers: label matchers only"),
])
def test_bad_input_exits_2_without_traceback(argv, message, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    code, out, err = run([f"--url={URL}"] + argv, capsys)
    assert code == 2
    assert message in err, err
    assert err.startswith("jupyterhub-gpu-reclaim: error: ")
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_missing_url_and_token(capsys, monkeypatch):
    code, _, err = run(["--timeout=3600"], capsys)
    assert code == 2 and "--url" in err and "JUPYTERHUB_API_URL" in err
    code, _, err = run([f"--url={URL}"], capsys)
    assert code == 2 and "JUPYTERHUB_API_TOKEN is not set" in err
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    code, _, err = run(["--url=localhost:8081"], capsys)
    assert code == 2 and "http(s) URL" in err


def test_ssl_files_are_checked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    code, _, err = run([f"--url={URL}", "--ssl-enabled=true"], capsys)
    assert code == 2 and "internal-ssl/hub-internal/hub-internal.key" in err
    for rel in ("hub-internal/hub-internal.key", "hub-internal/hub-internal.crt",
                "hub-ca/hub-ca.crt"):
        (tmp_path / "certs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "certs" / rel).write_text("x")
    code, _, err = run([f"--url={URL}", "--ssl-enabled",
                        f"--internal-certs-location={tmp_path / 'certs'}"], capsys)
    assert code == 2 and "cannot load the internal-ssl files" in err  # "x" is no certificate


def test_a_service_registered_without_url_runs_without_web_server(capsys, monkeypatch):
    """JupyterHub gives a service without a url (idle-culler's README registration)
    JUPYTERHUB_SERVICE_URL=http://127.0.0.1:0/: no web server, not an error. A service with
    a url listens there; a bad --bind-url given explicitly is still an error."""
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:0/")
    app = parse([f"--url={URL}"])
    assert app.bind_url == "" and service_settings(app).bind_url == ""
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101/services/gpu-reclaim/")
    assert parse([f"--url={URL}"]).bind_url == "http://127.0.0.1:10101/services/gpu-reclaim/"
    for bad in ("http://127.0.0.1:0/", "127.0.0.1:10101", "http://127.0.0.1:99999/"):
        code, _, err = run([f"--url={URL}", f"--bind-url={bad}"], capsys)
        assert code == 2 and f"--bind-url must be http://IP:PORT, got {bad!r}" in err, err


def test_config_error_is_raised_by_the_app():
    with pytest.raises(ConfigError, match="unknown option"):
        GpuReclaim().initialize(["--nope"])


# --------------------------------------------------------------------------- running


def test_start_logs_settings_without_token_then_a_store_it_cannot_open(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    missing = tmp_path / "no-such-dir" / "store.sqlite"
    code, out, err = run(Z2JH_ARGV + ["--dry-run", f"--store-url=sqlite:///{missing}"], capsys)
    assert code == 1
    assert f"store sqlite:///{missing}: cannot open the database" in err
    assert not missing.parent.exists()
    assert "Traceback" not in err
    assert TOKEN not in out + err
    assert "timeout = 3600" in err and "cull_users = True" in err and "DRY RUN" in err


def test_the_services_log_is_one_line_per_record():
    """Names and server answers in log messages cannot forge a record: the application's
    log format keeps the message on one line and indents the lines of a traceback (as
    JupyterHub indents them)."""
    import io
    import logging

    app = parse([])
    assert {type(h.formatter) for h in app.log.handlers} == {LogFormatter}
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogFormatter(app.log_format, app.log_datefmt))
    log = logging.getLogger("jupyterhub_gpu_reclaim.test_one_line")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("warn %s (%s): %s", "x\r\nINFO forged/", "gpu-idle", "idle\u2028INFO forged")
        try:
            raise ValueError("bad answer\r\n[I 2026-01-01 00:00:00.000 forged] yes")
        except ValueError:
            log.exception("the cycle failed for %s", "x\nINFO forged")
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    records = [line for line in lines if not line.startswith("    ")]
    assert len(records) == 2 and all(line.startswith("[") for line in records), lines
    assert "warn x\\r\\nINFO forged/ (gpu-idle): idle\\u2028INFO forged" in records[0]
    assert "the cycle failed for x\\nINFO forged" in records[1]
    assert "    ValueError: bad answer" in lines and "    [I 2026-01-01 00:00:00.000 forged] yes" in lines


def test_the_service_reads_the_options_it_was_configured_with(monkeypatch):
    """run_app hands the service the Application it configured, as the read-only
    ServiceSettings it is (one hop: no copy of the options); their repr holds no secret."""
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    seen = []

    async def run(settings):
        seen.append(settings)

    assert run_app(Z2JH_ARGV + ["--store-url=postgresql://reclaim:s3cret@db/reclaim"], run=run) == 0
    (settings,) = seen
    assert isinstance(settings, GpuReclaim) and isinstance(settings, ServiceSettings)
    assert settings.policy.cpu_timeout == dt.timedelta(hours=1)
    assert settings.cycle_interval == dt.timedelta(seconds=600)
    assert settings.cull_users is True and settings.remove_named_servers is True
    assert (settings.url, settings.api_token, settings.concurrency) == (URL, TOKEN, 10)
    assert settings.dcgm_exporter_urls == [] and settings.notifiers == [{"type": "log"}]
    with pytest.raises(AttributeError, match="read-only"):
        settings.url = "http://elsewhere"
    assert TOKEN not in repr(settings) and "s3cret" not in repr(settings)


def test_cli_routing(capsys, monkeypatch):
    called = []
    monkeypatch.setattr("jupyterhub_gpu_reclaim.launcher.run_app",
                        lambda argv: called.append(list(argv)) or 0)
    for argv in ([], ["--timeout=3600"], ["--cull-users"], ["--generate-config"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0 and called[-1] == argv
    assert not cli.runs_service(["backtest", "--trace", "x"])
    assert not cli.runs_service(["--help"]) and not cli.runs_service(["-h"])


def test_help_and_subcommands_still_work(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for word in ("backtest", "--help-all", "idle-culler"):
        assert word in out
    code, out, _ = run(["backtest", "--help"], capsys)
    assert code == 0 and "--trace" in out
    code, out, _ = run(["--help-all"], capsys)
    assert code == 0
    for name in IDLE_CULLER_OPTIONS:
        assert f"{opt(name)}" in out, name
    assert "--dry-run" in out and "--idle-reclaim-after" in out


def test_python_m_runs_the_service(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpu_reclaim", "--timeout=-1"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2
    assert "--timeout must be >= 0" in proc.stderr and "Traceback" not in proc.stderr


def test_settings_hide_secrets():
    app = GpuReclaim()
    app.initialize(["--store-url=postgresql://reclaim:s3cret@db/reclaim",
                    "--prometheus-url=http://user:pw-secret@prom:9090"])
    app.notifiers = [{"type": "slack", "url": "https://hooks.slack.com/services/T0/B0/XYZSECRET"},
                     {"type": "email", "host": "smtp", "password": "mailsecret"}]
    text = repr(loggable_settings(app))
    assert "api_token" not in loggable_settings(app)
    for secret in ("s3cret", "pw-secret", "XYZSECRET", "mailsecret"):
        assert secret not in text
    assert "postgresql://reclaim:***@db/reclaim" in text and "hooks.slack.com" in text
