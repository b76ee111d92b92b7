"""The reclaim service's settings: the `GpuReclaim` traitlets Application.

`jupyterhub-gpu-reclaim` with no subcommand (or `python -m jupyterhub_gpu_reclaim`) runs
this application. It is a drop-in replacement for jupyterhub-idle-culler 2.0: it accepts
every idle-culler option with the same name, meaning and default, in the forms the z2jh
chart writes them::

    jupyterhub-gpu-reclaim --url=http://localhost:8081/hub/api --timeout=3600 \\
        --cull-every=600 --concurrency=10 --cull-users --remove-named-servers \\
        --max-age=0 --cull-admin-users=false

Boolean options take ``--name`` (sets True), ``--name=true`` or ``--name=false``. The GPU
policy settings (`GpuPolicyOptions`) are options too (``--idle-reclaim-after=2h``).
Every option can also be set in the config file ``gpu_reclaim_config.py``
(``c.GpuReclaim.timeout = 3600``); the command line wins over the file.
``--generate-config`` prints a config file with every option and its help, like the culler.

Like the culler it reads ``JUPYTERHUB_API_TOKEN`` (never logged) and, for the default
``--url``, ``JUPYTERHUB_API_URL``.

Each option is declared once, as a trait in the body of the class that reads it: the
service's in `settings.service_options.ServiceSettings`, the GPU policy's in
`settings.gpu_policy.GpuPolicyOptions` (their defaults `policy.config.PolicyConfig`'s, which
`policy_config` makes of them in one hop).
`GpuReclaim` is both, so they are its options as they are, and adds what only it knows
(defaults read from the environment, checks, the command-line aliases and flags). A bad
setting raises :class:`~.errors.ConfigError` (`command_line` reads the command line and the
file). `launcher.run_app` checks them, sets the policy's rules and the TLS context, freezes
this Application and hands it to the service as the `ServiceSettings` it is (what runs the
service never imports it), and maps errors to exit statuses.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import re
from typing import Any, Sequence
from urllib.parse import urlsplit

from traitlets import Bool, TraitError, Unicode, default, validate
from traitlets.config import Application

from . import command_line
from .datafile import read_data_file
from .errors import ConfigError
from .oneline import LogFormatter
from .policy.config import PolicyConfig, from_settings, option_of
from .policy.rules import PolicyRules, load_rules
from .settings.gpu_policy import GpuPolicyOptions
from .settings.service_options import SAVE_WAIT_MAX, ServiceSettings, declared_options, effective_cull_every, option_help
from .signals.probe_token_client import PROBE_TOKEN_MAX_LIFETIME
from .signals.prometheus import check_matchers

CONFIG_FILE = "gpu_reclaim_config.py"


def _duration_or_off(seconds: float) -> dt.timedelta | None:
    return dt.timedelta(seconds=seconds) if seconds else None


# the service's options, in command-line order: ServiceSettings' own, then the GPU policy's
_SERVICE_OPTIONS = declared_options(ServiceSettings)
_GPU_POLICY_OPTIONS = declared_options(GpuPolicyOptions)
_TRAITS = {**ServiceSettings.class_traits(config=True), **GpuPolicyOptions.class_traits(config=True)}

# The command-line options of jupyterhub-idle-culler 2.0 (trait names), in its --help order.
IDLE_CULLER_OPTIONS = tuple(name for name in _SERVICE_OPTIONS
                            if _TRAITS[name].metadata.get("idle_culler") and _TRAITS[name].metadata.get("command_line", True))

# jupyterhub-idle-culler 2.0's Application: its settings (c.IdleCuller.* in a config file,
# --IdleCuller.name=value) are ours of the same name, with the same meaning: its options,
# config_file, generate_config and Application's logging settings
IDLE_CULLER = "IdleCuller"
IDLE_CULLER_SETTINGS = frozenset(name for name in _SERVICE_OPTIONS if _TRAITS[name].metadata.get("idle_culler")) | {
    "config_file", "generate_config"} | frozenset(Application.class_trait_names(config=True))
# its default config file, read from the working directory as 2.0 reads it (before ours)
IDLE_CULLER_CONFIG_FILE = "idle_culler_config.py"

# option → PolicyConfig field, for every field: the GPU policy's options and idle-culler's
# of those names (`policy_config`)
POLICY_OPTIONS = {option_of(f.name): f.name for f in dataclasses.fields(PolicyConfig)}

# those with a --name=value alias, in command-line order (the others: config file only)
_COMMAND_LINE = [name for name in _SERVICE_OPTIONS + _GPU_POLICY_OPTIONS if _TRAITS[name].metadata.get("command_line", True)]


def _bool_flag(trait: str) -> tuple[dict, str]:
    """`--cull-users` alone sets cull_users=True."""
    return ({"GpuReclaim": {trait: True}}, f"Set {trait}=True (same as --{trait.replace('_', '-')}=true).")


class GpuReclaim(Application, ServiceSettings, GpuPolicyOptions):
    """Reclaim idle GPUs on a JupyterHub; cull idle servers without GPUs like
    jupyterhub-idle-culler."""

    name = "jupyterhub-gpu-reclaim"
    _log_formatter_cls = LogFormatter
    description = option_help("""
        Give idle GPUs on a JupyterHub back to the people waiting for them.

        Runs as a JupyterHub service in place of jupyterhub-idle-culler and takes all of
        its options (same names, meanings and defaults). Servers without GPUs are culled
        exactly as idle-culler culls them; GPU sessions follow the GPU policy (warn first,
        reclaim only on evidence of GPU idleness, honour keep-alive intents).
        """)
    raise_config_file_errors = True

    config_file = Unicode(
        CONFIG_FILE,
        help=option_help(f"""
            Config file to load.

            Default: {IDLE_CULLER_CONFIG_FILE} (jupyterhub-idle-culler 2.0's) and
            {CONFIG_FILE} in the current directory, those that exist, the second winning.
            A file named with --config must exist. In any of them, idle-culler's
            c.IdleCuller.* settings are read as c.GpuReclaim.* ones of the same name.
            Command-line options win over the files.
            """),
    ).tag(config=True)

    generate_config = Bool(
        False,
        help=option_help("""
            Generate default config file: print a config file with every option, its help
            and its default to stdout, then exit.
            """),
    ).tag(config=True)

    @classmethod
    def class_get_help(cls, inst: Any = None) -> str:
        """--help-all's section: headed "GpuReclaim(Application) options", as idle-culler's,
        the options of the two bases being the Application's own."""
        heading = f"{cls.__name__}(Application) options"
        options = super().class_get_help(inst).split("\n", 2)[2]
        return f"{heading}\n{'-' * len(heading)}\n{options}"

    # ------------------------------------------------------------------ defaults from the environment

    @default("url")
    def _url_default(self) -> str | None:
        return os.environ.get("JUPYTERHUB_API_URL")

    @default("cull_every")
    def _cull_every_default(self) -> int:
        return effective_cull_every(0, self.timeout)

    @default("api_token")
    def _api_token_default(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @default("namespace")
    def _namespace_default(self) -> str:
        if os.environ.get("POD_NAMESPACE"):
            return os.environ["POD_NAMESPACE"]
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"

    @default("keepalive_url")
    def _keepalive_default(self) -> str:
        base = os.environ.get("JUPYTERHUB_PUBLIC_URL") or os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "")
        return (base.rstrip("/") + "/keepalive") if base else ""

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

    @default("cookie_secret_file")
    def _cookie_secret_file_default(self) -> str:
        return os.environ.get("GPU_RECLAIM_COOKIE_SECRET_FILE", "")

    # ------------------------------------------------------------------ validation

    @validate("timeout", "max_age", "concurrency", "api_page_size", "cull_every", "user_writes_per_minute")
    def _non_negative(self, proposal: Any) -> int:
        value = proposal["value"]
        if value < 0:
            raise TraitError(f"--{proposal['trait'].name.replace('_', '-')} must be >= 0, "
                             f"got {value}")
        return value

    @validate("kernel_probe_token_lifetime")
    def _token_lifetime_valid(self, proposal: Any) -> float:
        value = proposal["value"]
        if not 60 <= value <= PROBE_TOKEN_MAX_LIFETIME:
            raise TraitError(f"--kernel-probe-token-lifetime must be from 60 s to {PROBE_TOKEN_MAX_LIFETIME} s "
                             f"(the most the probe-token API mints), got {value:g}")
        return value

    @validate("save_before_stop")
    def _save_wait_valid(self, proposal: Any) -> float:
        value = proposal["value"]
        if value > SAVE_WAIT_MAX:
            raise TraitError(f"--save-before-stop must be at most {SAVE_WAIT_MAX:g} s (a stop is not held longer), "
                             f"got {value:g}")
        return value

    @validate("prometheus_gpu_matchers")
    def _matchers_valid(self, proposal: Any) -> str:
        try:
            return check_matchers(proposal["value"])
        except ValueError as e:
            raise TraitError(f"--prometheus-gpu-matchers: {e}") from None

    @validate("gpu_idle_threshold")
    def _threshold_valid(self, proposal: Any) -> float:
        # PolicyConfig's check, as the value is read: the error names where it was set
        try:
            from_settings({"gpu_idle_threshold": proposal["value"]})
        except ValueError as e:
            raise TraitError(_policy_message(str(e))) from None
        return proposal["value"]

    # ------------------------------------------------------------------ command line

    aliases = {
        "log-level": "Application.log_level",
        "config": "GpuReclaim.config_file",
        **{name.replace("_", "-"): f"GpuReclaim.{name}" for name in _COMMAND_LINE},
    }

    flags = {
        "debug": (
            {"Application": {"log_level": logging.DEBUG}},
            "Set log level to logging.DEBUG (maximize logging output).",
        ),
        "generate-config": ({"GpuReclaim": {"generate_config": True}}, generate_config.help),
        # A Bool option given with no value means True (the z2jh chart writes
        # "--cull-users"); "--cull-users=false" goes through the alias of the same name.
        **{name.replace("_", "-"): _bool_flag(name)
           for name in _COMMAND_LINE if isinstance(_TRAITS[name], Bool)},
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

    def parse_command_line(self, argv: Sequence[str] | None = None) -> None:
        """Parse `argv`; raise ConfigError (not SystemExit) for unknown or bad options."""
        command_line.parse_command_line(self, argv, {IDLE_CULLER: IDLE_CULLER_SETTINGS})

    def load_config(self) -> None:
        """Load the config file: --config, else idle_culler_config.py (as idle-culler 2.0
        does) and gpu_reclaim_config.py, those present, ours winning."""
        explicit = "config_file" in self.cli_config.get(type(self).__name__, {})
        command_line.load_config_files(
            self, [self.config_file] if explicit else [IDLE_CULLER_CONFIG_FILE, self.config_file],
            explicit=explicit, foreign={IDLE_CULLER: IDLE_CULLER_SETTINGS})

    def initialize(self, argv: Sequence[str] | None = None) -> None:
        self.parse_command_line(argv)
        if self.generate_config:
            return
        self.load_config()

    # ------------------------------------------------------------------ effective settings

    def policy_config(self) -> PolicyConfig:
        """The `PolicyConfig` these options describe: the GPU policy's and idle-culler's
        timeout rule (--timeout, --max-age, --cull-*-servers). Raises ConfigError on bad values."""
        try:
            return PolicyConfig(
                gpu_idle_threshold=self.gpu_idle_threshold,
                never_used_warn_after=dt.timedelta(seconds=self.never_used_warn_after),
                never_used_reclaim_after=dt.timedelta(seconds=self.never_used_reclaim_after),
                idle_warn_after=dt.timedelta(seconds=self.idle_warn_after),
                idle_reclaim_after=dt.timedelta(seconds=self.idle_reclaim_after),
                unattended_warn_after=dt.timedelta(seconds=self.unattended_warn_after),
                unattended_reclaim_after=dt.timedelta(seconds=self.unattended_reclaim_after),
                warning_lead=dt.timedelta(seconds=self.warning_lead),
                cpu_work_keeps_unused_gpu=self.cpu_work_keeps_unused_gpu,
                cpu_work_warn_after=dt.timedelta(seconds=self.cpu_work_warn_after),
                cpu_work_reclaim_after=dt.timedelta(seconds=self.cpu_work_reclaim_after),
                intent_grace=dt.timedelta(seconds=self.intent_grace),
                bridge_gaps_up_to=dt.timedelta(seconds=self.bridge_gaps_up_to),
                max_keepalive=dt.timedelta(seconds=self.max_keepalive),
                stale_after=dt.timedelta(seconds=self.stale_after),
                max_age=_duration_or_off(self.gpu_max_age),
                pressure_only=self.pressure_only,
                exempt_users=frozenset(self.exempt_users),
                exempt_groups=frozenset(self.exempt_groups),
                exempt_profiles=frozenset(self.exempt_profiles),
                cpu_timeout=dt.timedelta(seconds=self.timeout),
                cpu_max_age=_duration_or_off(self.max_age),
                cull_admin_users=self.cull_admin_users,
                cull_default_servers=self.cull_default_servers,
                cull_named_servers=self.cull_named_servers)
        except ValueError as e:
            raise ConfigError(_policy_message(str(e))) from None

    def load_policy_rules(self, base: PolicyConfig) -> PolicyRules:
        """The rules of the --policy-rules file over `base` (none without one). Raises
        ConfigError naming the file and the rule."""
        path = self.policy_rules
        if not path:
            return PolicyRules(base)
        try:
            return load_rules(read_data_file(path), base)
        except ConfigError as e:
            raise ConfigError(f"--policy-rules {e}" if str(e).startswith(path) else
                              f"--policy-rules {path}: {e}") from None


def _policy_message(text: str) -> str:
    """PolicyConfig's message with its field names written as our options."""
    for field in sorted(POLICY_OPTIONS.values(), key=len, reverse=True):
        text = re.sub(rf"\b{field}\b", "--" + option_of(field).replace("_", "-"), text)
    return text
