"""The reclaim service's settings: the `GpuReclaim` traitlets Application.

`jupyterhub-gpu-reclaim` with no subcommand (or `python -m jupyterhub_gpu_reclaim`) runs
this application. It is a drop-in replacement for jupyterhub-idle-culler 2.0: it accepts
every idle-culler option with the same name, meaning and default, in the forms the z2jh
chart writes them::

    jupyterhub-gpu-reclaim --url=http://localhost:8081/hub/api --timeout=3600 \\
        --cull-every=600 --concurrency=10 --cull-users --remove-named-servers \\
        --max-age=0 --cull-admin-users=false

Boolean options take ``--name`` (sets True), ``--name=true`` or ``--name=false``. The GPU
policy settings (`policy_config.PolicyConfig`) are options too (``--idle-reclaim-after=2h``).
Every option can also be set in the config file ``gpu_reclaim_config.py``
(``c.GpuReclaim.timeout = 3600``); the command line wins over the file.
``--generate-config`` prints a config file with every option and its help, like the culler.

Like the culler it reads ``JUPYTERHUB_API_TOKEN`` (never logged) and, for the default
``--url``, ``JUPYTERHUB_API_URL``.

This module only declares and reads the settings: :class:`~.errors.ConfigError` for a
bad one. `launcher.run_app` checks them, hands the service a typed `ServiceSettings` and
maps errors to exit statuses; nothing that runs the service sees this Application.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import logging
import os
import re
import sys
from textwrap import dedent
from typing import Any, Sequence
from urllib.parse import urlsplit

from traitlets import (Bool, Dict, Enum, Float, Int, List, Set, TraitError, TraitType, Unicode,
                       default, validate)
from traitlets.config import Application, Config
from traitlets.config.application import LevelFormatter

from .durations import parse_duration
from .errors import ConfigError
from .oneline import one_line
from .policy_config import SETTING_TYPES, PolicyConfig, from_settings, option_of
from .signals.prometheus import DEFAULT_QUERY
from .store import DEFAULT_URL as DEFAULT_STORE_URL

CONFIG_FILE = "gpu_reclaim_config.py"

# The options of jupyterhub-idle-culler 2.0 (trait names), in its --help order.
IDLE_CULLER_OPTIONS = (
    "api_page_size", "concurrency", "cull_admin_users", "cull_default_servers",
    "cull_every", "cull_named_servers", "cull_users", "internal_certs_location",
    "max_age", "remove_named_servers", "ssl_enabled", "timeout", "url",
)

# The service's own options beyond the policy (trait names).
SERVICE_OPTIONS = (
    "namespace", "kubeconfig", "pod_label_selector", "prometheus_url", "prometheus_query",
    "prometheus_pod_label", "dcgm_exporter_urls", "gpu_request_timeout", "probe_kernels",
    "kernel_probe_credential", "kernel_probe_token_lifetime", "kernel_probe_timeout",
    "stop_timeout", "verify_pod_gone", "store_url",
    "observation_retention", "admin_recipients", "copy_admins", "notify_users_in_dry_run",
    "keepalive_url", "hub_name", "bind_url", "cookie_secret_file", "admin_scope",
    "record_retention", "user_writes_per_minute",
)

# option → PolicyConfig field, for every field: the GPU policy's options are made from
# the fields (`_policy_option`), the others are idle-culler's options of those names
POLICY_OPTIONS = {option_of(f.name): f.name for f in dataclasses.fields(PolicyConfig)}


class Duration(TraitType):
    """A duration in seconds (float). Accepts a number of seconds or a string such as
    "90", "90s", "30m", "2h", "1d", "1h30m". Never negative."""

    default_value = 0.0
    info_text = 'a duration: seconds (>= 0) or a string like "30m", "2h", "1h30m"'

    def validate(self, obj: Any, value: Any) -> float:
        try:
            seconds = parse_duration(value).total_seconds()
        except (TypeError, ValueError):
            self.error(obj, value)
        if seconds < 0:
            self.error(obj, value)
        return float(seconds)

    def from_string(self, s: str) -> Any:
        return s


def _help(text: str) -> str:
    return dedent(text).strip()


def _policy_option(option: str) -> TraitType:
    """The option of a PolicyConfig field: its type, default and help from the field."""
    (f,) = (f for f in dataclasses.fields(PolicyConfig) if f.name == POLICY_OPTIONS[option])
    kind, default, text = SETTING_TYPES[f.name], f.default, f.metadata["help"]
    trait: TraitType
    if kind is float:
        trait = Float(default, help=text)
    elif kind is bool:
        trait = Bool(default, help=text)
    elif kind == frozenset[str]:
        trait = Set(Unicode(), set(default), help=text)
    elif kind in (dt.timedelta, dt.timedelta | None):
        trait = Duration(0.0 if default is None else default.total_seconds(), help=text)  # 0: off
    else:
        raise TypeError(f"no option type for the policy setting {f.name}: {kind}")
    return trait.tag(config=True)


def _bool_flag(trait: str) -> tuple[dict, str]:
    """`--cull-users` alone sets cull_users=True."""
    return ({"GpuReclaim": {trait: True}}, f"Set {trait}=True (same as --{trait.replace('_', '-')}=true).")


class LogFormatter(LevelFormatter):
    """The service's log: one record, one line, whatever users put in names or their servers
    answer. The message is written with :func:`~.oneline.one_line`; the lines of a traceback
    are indented, as JupyterHub indents them, so that none reads as a record of its own."""

    def format(self, record: logging.LogRecord) -> str:
        msg, args = record.msg, record.args
        record.msg, record.args = one_line(record.getMessage()), None
        try:
            text = super().format(record)
        finally:
            record.msg, record.args = msg, args
        return "\n    ".join(text.splitlines())


class GpuReclaim(Application):
    """Reclaim idle GPUs on a JupyterHub; cull idle servers without GPUs like
    jupyterhub-idle-culler."""

    name = "jupyterhub-gpu-reclaim"
    _log_formatter_cls = LogFormatter
    description = _help("""
        Give idle GPUs on a JupyterHub back to the people waiting for them.

        Runs as a JupyterHub service in place of jupyterhub-idle-culler and takes all of
        its options (same names, meanings and defaults). Servers without GPUs are culled
        exactly as idle-culler culls them; GPU sessions follow the GPU policy (warn first,
        reclaim only on evidence of GPU idleness, honour keep-alive intents).
        """)
    raise_config_file_errors = True

    # ------------------------------------------------------------------ idle-culler 2.0

    url = Unicode(
        None,
        allow_none=True,
        help=_help("""
            The JupyterHub API URL.

            Default: the JUPYTERHUB_API_URL environment variable (set by JupyterHub for
            its managed services), as in jupyterhub-idle-culler.
            """),
    ).tag(config=True)

    @default("url")
    def _url_default(self) -> str | None:
        return os.environ.get("JUPYTERHUB_API_URL")

    timeout = Int(
        600,
        help=_help("""
            The idle timeout (in seconds).

            jupyterhub-idle-culler's rule, applied to servers without GPUs: a server whose
            hub last_activity is this old is stopped. GPU sessions follow the GPU policy
            instead (the hub's last_activity alone never keeps a GPU session). Default 600,
            as in jupyterhub-idle-culler (the z2jh chart passes 3600).
            """),
    ).tag(config=True)

    cull_every = Int(
        0,
        help=_help("""
            The interval (in seconds) for checking for idle servers to cull.

            Default: half of --timeout, as in jupyterhub-idle-culler.
            """),
    ).tag(config=True)

    @default("cull_every")
    def _cull_every_default(self) -> int:
        return self.timeout // 2

    concurrency = Int(
        10,
        help=_help("""
            Limit the number of concurrent requests made to the Hub.

            Deleting a lot of users at the same time can slow down the Hub, so limit the
            number of API requests we have outstanding at any given time. 0: no limit.
            """),
    ).tag(config=True)

    max_age = Int(
        0,
        help=_help("""
            The maximum age (in seconds) of servers that should be culled even if they are
            active.

            jupyterhub-idle-culler's rule, applied to servers without GPUs. 0: off. For a
            hard lifetime of GPU sessions (with warnings) see --gpu-max-age.
            """),
    ).tag(config=True)

    cull_users = Bool(
        False,
        help=_help("""
            Cull users in addition to servers.

            This is for use in temporary-user cases such as tmpnb.
            """),
    ).tag(config=True)

    cull_admin_users = Bool(
        True,
        help=_help("""
            Whether admin users should be culled (only if --cull-users=true).

            As in jupyterhub-idle-culler 2.0 this only concerns deleting users: admins'
            servers are stopped like anyone's.
            """),
    ).tag(config=True)

    remove_named_servers = Bool(
        False,
        help=_help("""
            Remove named servers in addition to stopping them.

            This is useful for a BinderHub that uses authentication and named servers.
            """),
    ).tag(config=True)

    cull_default_servers = Bool(
        True,
        help=_help("""
            Whether default servers should be culled (only if --cull-default-servers=true).

            Applies to idle-culler's timeout rule for servers without GPUs.
            """),
    ).tag(config=True)

    cull_named_servers = Bool(
        True,
        help=_help("""
            Whether named servers should be culled (only if --cull-named-servers=true).

            Applies to idle-culler's timeout rule for servers without GPUs.
            """),
    ).tag(config=True)

    api_page_size = Int(
        0,
        help=_help("""
            Number of users to request per page, when using JupyterHub 2.0's paginated
            user list API.

            Default (0): use the server-side default configured page size.
            """),
    ).tag(config=True)

    ssl_enabled = Bool(
        False,
        help=_help("""
            Whether the Jupyter API endpoint has TLS enabled.

            Uses the hub's internal-ssl key, certificate and CA from
            --internal-certs-location.
            """),
    ).tag(config=True)

    internal_certs_location = Unicode(
        "internal-ssl",
        help=_help("""
            The location of generated internal-ssl certificates (only needed with
            --ssl-enabled=true).
            """),
    ).tag(config=True)

    config_file = Unicode(
        CONFIG_FILE,
        help=_help(f"""
            Config file to load.

            Default: {CONFIG_FILE} in the current directory, if it exists. A file named
            with --config must exist. Command-line options win over the file.
            """),
    ).tag(config=True)

    generate_config = Bool(
        False,
        help=_help("""
            Generate default config file: print a config file with every option, its help
            and its default to stdout, then exit.
            """),
    ).tag(config=True)

    # ------------------------------------------------------------------ the service

    api_token = Unicode(
        help=_help("""
            The JupyterHub API token of the service.

            Default: the JUPYTERHUB_API_TOKEN environment variable, as in
            jupyterhub-idle-culler (JupyterHub sets it for managed services). Prefer the
            environment variable to writing the token into a config file. Never logged.
            """),
    ).tag(config=True)

    @default("api_token")
    def _api_token_default(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    dry_run = Bool(
        False,
        help=_help("""
            Decide, record and report everything, but stop nothing.

            Warnings go to the admins only. The recommended first step of a rollout:
            run with --dry-run for a while, read what it would have reclaimed, then turn
            it off. Default off (the service reclaims, as idle-culler culls).
            """),
    ).tag(config=True)

    # ------------------------------------------------------------------ signals

    namespace = Unicode(
        help=_help("""
            The Kubernetes namespace of the single-user pods (the hub's namespace).

            Default: the POD_NAMESPACE environment variable, else the namespace of the
            service account the service runs under, else "default".
            """),
    ).tag(config=True)

    @default("namespace")
    def _namespace_default(self) -> str:
        if os.environ.get("POD_NAMESPACE"):
            return os.environ["POD_NAMESPACE"]
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"

    kubeconfig = Unicode(
        "",
        help=_help("""
            A kubeconfig file for reading pods. Default: the in-cluster service account,
            else $KUBECONFIG / ~/.kube/config. Needs get/list/watch on pods.
            """),
    ).tag(config=True)

    pod_label_selector = Unicode(
        "component=singleuser-server",
        help=_help("""
            Label selector of the single-user pods (KubeSpawner's default labels).
            """),
    ).tag(config=True)

    prometheus_url = Unicode(
        "",
        help=_help("""
            Prometheus base URL (e.g. http://prometheus-server) to read GPU utilization
            from with one query per cycle. Leave empty to scrape --dcgm-exporter-urls
            directly. With neither, GPU sessions are held (never reclaimed) for lack of data.
            """),
    ).tag(config=True)

    prometheus_query = Unicode(
        DEFAULT_QUERY,
        help=_help("""
            The PromQL instant query for per-GPU utilization (and framebuffer use). The
            default reads DCGM_FI_DEV_GPU_UTIL, falls back to DCGM_FI_PROF_GR_ENGINE_ACTIVE
            where it is missing (MIG), and DCGM_FI_DEV_FB_USED.
            """),
    ).tag(config=True)

    prometheus_pod_label = Enum(
        ["auto", "pod", "exported_pod"], "auto",
        help=_help("""
            Which label names the pod holding a GPU: "exported_pod" when Prometheus scrapes
            dcgm-exporter with honor_labels: false (the default), "pod" with honor_labels:
            true; "auto" picks per answer.
            """),
    ).tag(config=True)

    dcgm_exporter_urls = List(
        Unicode(),
        help=_help("""
            dcgm-exporter /metrics URLs to scrape directly each cycle, for clusters without
            Prometheus (one per GPU node, or a Service).
            """),
    ).tag(config=True)

    gpu_request_timeout = Float(
        10.0,
        help=_help("""
            Seconds to wait for Prometheus or a dcgm-exporter before counting the GPU data
            of that cycle missing.
            """),
    ).tag(config=True)

    probe_kernels = Bool(
        True,
        help=_help("""
            Ask GPU sessions whose GPUs look idle for their kernels and terminals
            (GET /api/kernels?no_track_activity=1), so a busy kernel keeps the session.
            The probe goes to the pod's own address (the proxy would move the hub's
            last_activity); on z2jh the service needs the label
            hub.jupyter.org/network-access-singleuser=true. Its credential: see
            kernel_probe_credential.
            """),
    ).tag(config=True)

    kernel_probe_credential = Enum(
        ["user-token", "none"],
        default_value="user-token",
        help=_help("""
            What a kernel probe authenticates with. The service's own token never goes to a
            user's server (the user can record every request to it). "user-token": per
            probed server, a token owned by that server's user and good for that server only
            (scope access:servers!server=USER/NAME), minted from the hub and deleted when the
            server stops; the service's role needs the scope tokens. "none": no credential,
            so no probe: a session whose GPUs look idle is held, never reclaimed (no kernel
            data), and a busy kernel cannot be told from an idle one.
            """),
    ).tag(config=True)

    kernel_probe_token_lifetime = Duration(
        3600.0,
        help=_help("""
            How long a kernel-probe token lives (seconds or "1h"). It is reused until a
            quarter of this is left, then replaced; a hub whose token_expires_in_max_seconds
            is lower shortens it to that.
            """),
    ).tag(config=True)

    kernel_probe_timeout = Float(
        5.0,
        help=_help("""
            Seconds to wait for a server's kernel list; a server that does not answer has
            no kernel data and is held, not reclaimed.
            """),
    ).tag(config=True)

    # ------------------------------------------------------------------ actions, store

    stop_timeout = Duration(
        300.0,
        help=_help("""
            How long a stop may take (the hub's stop, then the pod's removal) before it is
            reported as stuck (log, metric, store) and retried next cycle (seconds or "5m").
            """),
    ).tag(config=True)

    verify_pod_gone = Bool(
        True,
        help=_help("""
            After the hub stops a server, wait until its pod is gone, so the GPU is really
            free before the reclaim counts as done.
            """),
    ).tag(config=True)

    store_url = Unicode(
        DEFAULT_STORE_URL,
        help=_help("""
            Where intents, warnings, reclaims and observations are kept: any SQLAlchemy URL
            (sqlite:///path, postgresql://...). Default: gpu_reclaim.sqlite in the working
            directory. `backtest --from-store --store URL` reads the same database.
            """),
    ).tag(config=True)

    observation_retention = Duration(
        14 * 86400.0,
        help=_help("""
            How long the observations of each cycle are kept for `backtest --from-store`
            (seconds or "14d"). Intents, warnings and reclaims are kept (--record-retention).
            """),
    ).tag(config=True)

    record_retention = Duration(
        90 * 86400.0,
        help=_help("""
            How long what has ended is kept in the store (seconds or "90d"): intents cleared
            or expired, warnings of closed episodes, admins' exemptions, and the audit log of
            what users and admins did on the web pages. Current intents, open warnings and
            reclaims are kept. Pruned once an hour.
            """),
    ).tag(config=True)

    # ------------------------------------------------------------------ notifications

    notifiers = List(
        Dict(),
        [{"type": "log"}],
        help=_help("""
            Where warnings and reclaim notices go: a list of {"type": ..., options}.
            {"type": "log"}; {"type": "webhook", "url": ...} (JSON); {"type": "slack",
            "url": ...} (Slack-compatible text); {"type": "email", "host": ..., "port":
            ..., "sender": ..., "address_template": "{user}@example.edu" (users get no
            e-mail without it; see docs/service.md for what an address must be),
            "username"/"password", "starttls", "ssl"}. See docs/service.md.
            """),
    ).tag(config=True)

    admin_recipients = List(
        Unicode(),
        help=_help("""
            Who gets a copy of every warning and reclaim notice (user names or e-mail
            addresses), and the only recipients in --dry-run.
            """),
    ).tag(config=True)

    copy_admins = Bool(
        True,
        help=_help("""
            Send --admin-recipients a copy of the notices users get.
            """),
    ).tag(config=True)

    notify_users_in_dry_run = Bool(
        False,
        help=_help("""
            In --dry-run, warn the users too (not only the admins).
            """),
    ).tag(config=True)

    keepalive_url = Unicode(
        help=_help("""
            The keep-alive page linked from every warning. Default: this service's
            keepalive page (JUPYTERHUB_PUBLIC_URL, else JUPYTERHUB_SERVICE_PREFIX, + "keepalive").
            """),
    ).tag(config=True)

    @default("keepalive_url")
    def _keepalive_default(self) -> str:
        base = os.environ.get("JUPYTERHUB_PUBLIC_URL") or os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "")
        return (base.rstrip("/") + "/keepalive") if base else ""

    hub_name = Unicode(
        "JupyterHub",
        help=_help("""
            The hub's name in notices ("Physics GPU Hub").
            """),
    ).tag(config=True)

    bind_url = Unicode(
        help=_help("""
            Where the service's web server (/metrics, the pages) listens, http://IP:PORT.
            Default: JUPYTERHUB_SERVICE_URL, set by JupyterHub from the service's url;
            empty, or a service registered without a url (as idle-culler's README
            registers the culler): no web server, the cycles run alone.
            """),
    ).tag(config=True)

    @default("bind_url")
    def _bind_url_default(self) -> str:
        url = os.environ.get("JUPYTERHUB_SERVICE_URL", "")
        # JupyterHub gives a service registered without a url http://127.0.0.1:0/
        # (Spawner.get_env): there is nothing to serve on
        try:
            no_url = urlsplit(url).port == 0
        except ValueError:
            no_url = False  # not a port: the launcher says so
        return "" if no_url else url

    cookie_secret_file = Unicode(
        help=_help("""
            A file holding the secret that signs the web pages' login cookie (hex or raw
            bytes, as JupyterHub's own cookie secret file). Empty: a new random secret at
            each start, so users go through the hub's OAuth once more after a restart
            (a redirect, no password). Default: $GPU_RECLAIM_COOKIE_SECRET_FILE if set.
            """),
    ).tag(config=True)

    @default("cookie_secret_file")
    def _cookie_secret_file_default(self) -> str:
        return os.environ.get("GPU_RECLAIM_COOKIE_SECRET_FILE", "")

    admin_scope = Unicode(
        "custom:gpu-reclaim:admin",
        help=_help("""
            The scope that opens the admin page and admin API besides the hub's admin flag.
            Define it in c.JupyterHub.custom_scopes, grant it in a role, and list it in the
            service's oauth_client_allowed_scopes so it reaches the service's login token.
            """),
    ).tag(config=True)

    user_writes_per_minute = Int(
        30,
        help=_help("""
            How many changes (keep-alive, clear, stop) each user may make per minute through
            the web pages and API, in bursts of as many; beyond it the answer is 429 with
            Retry-After. 0: no limit.
            """),
    ).tag(config=True)

    @validate("user_writes_per_minute")
    def _writes_valid(self, proposal: Any) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"--user-writes-per-minute must be >= 0, got {proposal['value']}")
        return proposal["value"]

    # ------------------------------------------------------------------ GPU policy
    # type, default and help of each: its PolicyConfig field (policy_config.py), which makes the option

    gpu_idle_threshold = _policy_option("gpu_idle_threshold")
    never_used_warn_after = _policy_option("never_used_warn_after")
    never_used_reclaim_after = _policy_option("never_used_reclaim_after")
    idle_warn_after = _policy_option("idle_warn_after")
    idle_reclaim_after = _policy_option("idle_reclaim_after")
    warning_lead = _policy_option("warning_lead")
    max_keepalive = _policy_option("max_keepalive")
    stale_after = _policy_option("stale_after")
    gpu_max_age = _policy_option("gpu_max_age")
    pressure_only = _policy_option("pressure_only")
    exempt_users = _policy_option("exempt_users")
    exempt_groups = _policy_option("exempt_groups")
    exempt_profiles = _policy_option("exempt_profiles")

    # ------------------------------------------------------------------ validation

    @validate("timeout", "max_age", "concurrency", "api_page_size")
    def _non_negative(self, proposal: Any) -> int:
        value = proposal["value"]
        if value < 0:
            raise TraitError(f"--{proposal['trait'].name.replace('_', '-')} must be >= 0, "
                             f"got {value}")
        return value

    @validate("cull_every")
    def _cull_every_valid(self, proposal: Any) -> int:
        value = proposal["value"]
        if value < 0:
            raise TraitError(f"--cull-every must be >= 0, got {value}")
        return value

    @validate("kernel_probe_token_lifetime")
    def _token_lifetime_valid(self, proposal: Any) -> float:
        value = proposal["value"]
        if value < 60:
            raise TraitError(f"--kernel-probe-token-lifetime must be at least 60 s, got {value:g}")
        return value

    @validate("gpu_idle_threshold")
    def _threshold_valid(self, proposal: Any) -> float:
        value = proposal["value"]
        if not 0 < value <= 100:
            raise TraitError(f"--gpu-idle-threshold must be a percent in (0, 100], got {value}")
        return value

    # ------------------------------------------------------------------ command line

    aliases = {
        "log-level": "Application.log_level",
        "config": "GpuReclaim.config_file",
        **{name.replace("_", "-"): f"GpuReclaim.{name}" for name in IDLE_CULLER_OPTIONS},
        "dry-run": "GpuReclaim.dry_run",
        **{name.replace("_", "-"): f"GpuReclaim.{name}" for name in SERVICE_OPTIONS},
        **{name.replace("_", "-"): f"GpuReclaim.{name}" for name in POLICY_OPTIONS
           if name not in IDLE_CULLER_OPTIONS},
    }

    flags = {
        "debug": (
            {"Application": {"log_level": logging.DEBUG}},
            "Set log level to logging.DEBUG (maximize logging output).",
        ),
        "generate-config": ({"GpuReclaim": {"generate_config": True}}, generate_config.help),
        # A Bool option given with no value means True (the z2jh chart writes
        # "--cull-users"); "--cull-users=false" goes through the alias of the same name.
        **{
            name.replace("_", "-"): _bool_flag(name)
            for name in (
                "cull_users", "cull_admin_users", "remove_named_servers",
                "cull_default_servers", "cull_named_servers", "ssl_enabled", "dry_run",
                "pressure_only", "probe_kernels", "verify_pod_gone", "copy_admins",
                "notify_users_in_dry_run",
            )
        },
    }

    @default("log_level")
    def _log_level_default(self) -> int:
        return logging.INFO

    @default("log_datefmt")
    def _log_datefmt_default(self) -> str:
        return "%Y-%m-%d %H:%M:%S"

    @default("log_format")
    def _log_format_default(self) -> str:
        return "[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s] %(message)s"

    def _known_option(self, arg: str) -> bool:
        name = arg.lstrip("-").split("=", 1)[0]
        if "." in name:  # --Class.trait=...
            cls, _, trait = name.partition(".")
            return cls != "GpuReclaim" or trait in self.class_trait_names(config=True)
        if arg.startswith("--"):
            return name in self.aliases or name in self.flags or name in (
                "help", "help-all", "version")
        return name in ("h",)

    def parse_command_line(self, argv: Sequence[str] | None = None) -> None:
        """Parse `argv`; raise ConfigError (not SystemExit) for unknown or bad options."""
        if argv is None:
            argv = sys.argv[1:]
        argv = list(argv)
        for i, arg in enumerate(argv):
            if arg == "--":
                break
            if arg.startswith("-") and len(arg) > 1 and not self._known_option(arg):
                raise ConfigError(f"unknown option {arg.split('=', 1)[0]} "
                                  f"(see jupyterhub-gpu-reclaim --help-all)")
            name = arg[2:]
            if (arg.startswith("--") and name in self.aliases and name not in self.flags
                    and (i + 1 == len(argv) or argv[i + 1].startswith("--"))):
                raise ConfigError(f"option {arg} needs a value ({arg}=VALUE)")
        try:
            # the undecorated method: traitlets' decorator logs and exits 1 on TraitError
            Application.parse_command_line.__wrapped__(self, argv)  # type: ignore[attr-defined]
        except (TraitError, ValueError) as e:
            raise ConfigError(_trait_message(e)) from None
        if self.extra_args:
            raise ConfigError(f"unexpected argument {self.extra_args[0]!r}: options are "
                              f"written --name=value")
        self._check_known_keys(self.cli_config, "the command line")

    def _check_known_keys(self, config: Config, where: str) -> None:
        known = self.class_trait_names(config=True)
        section = config.get("GpuReclaim", {})
        unknown = sorted(k for k in section if k not in known)
        if unknown:
            hint = difflib.get_close_matches(unknown[0], known, n=1)
            raise ConfigError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(unknown)}"
                              + (f" (did you mean {hint[0]}?)" if hint else ""))

    def load_config(self) -> None:
        """Load the config file (--config, else gpu_reclaim_config.py if present)."""
        explicit = "config_file" in self.cli_config.get("GpuReclaim", {})
        path = os.path.abspath(os.path.expanduser(self.config_file))
        if not os.path.isfile(path):
            if explicit:
                raise ConfigError(f"config file {self.config_file} not found")
            return
        try:
            new = Config()
            for loaded, fname in self._load_config_files(
                os.path.splitext(os.path.basename(path))[0], path=os.path.dirname(path),
                log=self.log, raise_config_file_errors=True,
            ):
                new.merge(loaded)
                if fname not in self._loaded_config_files:
                    self._loaded_config_files.append(fname)
            self._check_known_keys(new, self.config_file)
            new.merge(self.cli_config)  # the command line wins over the file
            self.update_config(new)
        except (TraitError, ValueError) as e:
            raise ConfigError(f"{self.config_file}: {_trait_message(e)}") from None
        except ConfigError:
            raise
        except Exception as e:  # a syntax or runtime error in the Python config file
            raise ConfigError(f"{self.config_file}: {type(e).__name__}: {e}") from None

    def initialize(self, argv: Sequence[str] | None = None) -> None:  # type: ignore[override]
        self.parse_command_line(argv)
        if self.generate_config:
            return
        self.load_config()

    # ------------------------------------------------------------------ effective settings

    @property
    def effective_cull_every(self) -> int:
        """Seconds between cycles: --cull-every, or half of --timeout (at least 1 s)."""
        return self.cull_every or max(1, self.timeout // 2)

    def ssl_files(self) -> tuple[str, str, str]:
        """(key, certificate, CA) under --internal-certs-location, as idle-culler uses them."""
        loc = self.internal_certs_location
        return (
            f"{loc}/hub-internal/hub-internal.key",
            f"{loc}/hub-internal/hub-internal.crt",
            f"{loc}/hub-ca/hub-ca.crt",
        )

    def policy_config(self) -> PolicyConfig:
        """The `PolicyConfig` these settings describe. Raises ConfigError on bad values."""
        try:
            return from_settings({field: getattr(self, option) for option, field in POLICY_OPTIONS.items()})
        except ValueError as e:
            raise ConfigError(_policy_message(str(e))) from None


def _trait_message(e: Exception) -> str:
    text = str(e)
    # "The 'timeout' trait of a GpuReclaim instance expected an int, not the str 'abc'."
    for name in GpuReclaim.class_trait_names(config=True):
        marker = f"The '{name}' trait of a GpuReclaim instance"
        if marker in text:
            return text.replace(marker, f"--{name.replace('_', '-')}")
    return text


def _policy_message(text: str) -> str:
    """PolicyConfig's message with its field names written as our options."""
    names = {field: name for name, field in POLICY_OPTIONS.items()}
    for field in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b{field}\b", "--" + names[field].replace("_", "-"), text)
    return text
