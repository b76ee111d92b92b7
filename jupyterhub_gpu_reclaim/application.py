"""The reclaim service's settings: the `GpuReclaim` traitlets Application.

`jupyterhub-gpu-reclaim` with no subcommand (or `python -m jupyterhub_gpu_reclaim`) runs
this application. It is a drop-in replacement for jupyterhub-idle-culler 2.0: it accepts
every idle-culler option with the same name, meaning and default, in the forms the z2jh
chart writes them::

    jupyterhub-gpu-reclaim --url=http://localhost:8081/hub/api --timeout=3600 \\
        --cull-every=600 --concurrency=10 --cull-users --remove-named-servers \\
        --max-age=0 --cull-admin-users=false

Boolean options take ``--name`` (sets True), ``--name=true`` or ``--name=false``. The GPU
policy settings (`policy.config.PolicyConfig`) are options too (``--idle-reclaim-after=2h``).
Every option can also be set in the config file ``gpu_reclaim_config.py``
(``c.GpuReclaim.timeout = 3600``); the command line wins over the file.
``--generate-config`` prints a config file with every option and its help, like the culler.

Like the culler it reads ``JUPYTERHUB_API_TOKEN`` (never logged) and, for the default
``--url``, ``JUPYTERHUB_API_URL``.

Each option is declared once, as a field: the service's in `settings.ServiceSettings`
(with its trait), the GPU policy's in `policy.config.PolicyConfig`; the Application has
them as its traits and adds what only it knows (defaults read from the environment,
checks, the command-line aliases and flags). A bad setting raises
:class:`~.errors.ConfigError` (`command_line` reads the command line and the file).
`launcher.run_app` checks them, hands the service one frozen `ServiceSettings` and maps
errors to exit statuses; nothing that runs the service sees this Application.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import re
from textwrap import dedent
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import urlsplit

from traitlets import Bool, Float, Set, TraitError, TraitType, Unicode, default, validate
from traitlets.config import Application

from . import command_line
from .datafile import read_data_file
from .errors import ConfigError
from .oneline import LogFormatter
from .policy.config import SETTING_TYPES, PolicyConfig, from_settings, option_of
from .policy.rules import PolicyRules, load_rules
from .settings import SAVE_WAIT_MAX, Duration, ServiceSettings, effective_cull_every, options
from .signals.probe_token_client import PROBE_TOKEN_MAX_LIFETIME
from .signals.prometheus import check_matchers

CONFIG_FILE = "gpu_reclaim_config.py"

# the service's options, in command-line order: the fields of ServiceSettings that are options
_SERVICE_FIELDS = tuple(f for f in dataclasses.fields(ServiceSettings) if "option" in f.metadata)

# The command-line options of jupyterhub-idle-culler 2.0 (trait names), in its --help order.
IDLE_CULLER_OPTIONS = tuple(f.name for f in _SERVICE_FIELDS if f.metadata["idle_culler"] and f.metadata["command_line"])

# jupyterhub-idle-culler 2.0's Application: its settings (c.IdleCuller.* in a config file,
# --IdleCuller.name=value) are ours of the same name, with the same meaning: its options,
# config_file, generate_config and Application's logging settings
IDLE_CULLER = "IdleCuller"
IDLE_CULLER_SETTINGS = frozenset(f.name for f in _SERVICE_FIELDS if f.metadata["idle_culler"]) | {
    "config_file", "generate_config"} | frozenset(Application.class_trait_names(config=True))
# its default config file, read from the working directory as 2.0 reads it (before ours)
IDLE_CULLER_CONFIG_FILE = "idle_culler_config.py"

# option → PolicyConfig field, for every field: the GPU policy's options are made from
# the fields (`_policy_option`), the others are idle-culler's options of those names
POLICY_OPTIONS = {option_of(f.name): f.name for f in dataclasses.fields(PolicyConfig)}


def _help(text: str) -> str:
    return dedent(text).strip()


_POLICY_DEFAULTS = PolicyConfig()


def _policy_option(option: str) -> TraitType:
    """The option of a PolicyConfig field: its type, default and help from the field."""
    (f,) = (f for f in dataclasses.fields(PolicyConfig) if f.name == POLICY_OPTIONS[option])
    kind, default, text = SETTING_TYPES[f.name], getattr(_POLICY_DEFAULTS, f.name), f.metadata["help"]
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


# the GPU policy's options: the PolicyConfig fields with help (the others are idle-culler's)
_GPU_POLICY_OPTIONS = [option_of(f.name) for f in dataclasses.fields(PolicyConfig) if f.metadata["help"]]
# every option but --config and --generate-config: the service's, then the GPU policy's
_OPTIONS: dict[str, TraitType] = {**options(), **{name: _policy_option(name) for name in _GPU_POLICY_OPTIONS}}
# those with a --name=value alias, in command-line order (the others: config file only)
_COMMAND_LINE = [f.name for f in _SERVICE_FIELDS if f.metadata["command_line"]] + _GPU_POLICY_OPTIONS


def _bool_flag(trait: str) -> tuple[dict, str]:
    """`--cull-users` alone sets cull_users=True."""
    return ({"GpuReclaim": {trait: True}}, f"Set {trait}=True (same as --{trait.replace('_', '-')}=true).")


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

    # ------------------------------------------------------------------ the options
    # The declared options, in the class's own namespace: traitlets sets a trait up as the
    # class is made, and a base class holding them would show in --help-all's
    # "GpuReclaim(Application) options"; setattr afterwards skips traitlets' setup.

    locals().update(_OPTIONS)

    if TYPE_CHECKING:  # the options above, which type checkers cannot see
        def __getattr__(self, name: str) -> Any: ...

    config_file = Unicode(
        CONFIG_FILE,
        help=_help(f"""
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
        help=_help("""
            Generate default config file: print a config file with every option, its help
            and its default to stdout, then exit.
            """),
    ).tag(config=True)

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
           for name in _COMMAND_LINE if isinstance(_OPTIONS[name], Bool)},
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
        """The `PolicyConfig` these settings describe. Raises ConfigError on bad values."""
        try:
            return from_settings({field: getattr(self, option) for option, field in POLICY_OPTIONS.items()})
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
    names = {field: name for name, field in POLICY_OPTIONS.items()}
    for field in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b{field}\b", "--" + names[field].replace("_", "-"), text)
    return text
