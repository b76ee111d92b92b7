"""Reading a traitlets Application's command line and config file strictly.

traitlets' own Application logs a bad value and exits 1, and ignores an unknown option
or a misspelt key of the config file. Here each of these raises
:class:`~.errors.ConfigError` with one line naming the option (``--timeout must be >= 0``,
``unknown option --timout``, ``gpu_reclaim_config.py: unknown option timout (did you mean
timeout?)``), and the caller decides the exit status. `application.GpuReclaim`'s
parse_command_line and load_config are these functions (a base class would show in
--help-all and the generated config file).
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from typing import Collection, Mapping, Sequence

from traitlets import TraitError
from traitlets.config import Application, Config, Configurable
from traitlets.config.loader import ConfigFileNotFound

from .errors import ConfigError


def _sections(app: Application, foreign: Mapping[str, Collection[str]]) -> dict[str, frozenset[str]]:
    """The sections a config of `app` may have, each with its settings: the app's class and
    its configurable bases (Application: logging), and `foreign` ones (another
    application's, read as the app's own)."""
    own = {cls.__name__: frozenset(cls.class_trait_names(config=True))
           for cls in type(app).__mro__ if issubclass(cls, Configurable) and cls is not Configurable}
    return {**own, **{name: frozenset(keys) for name, keys in foreign.items()}}


def _known_option(app: Application, arg: str, foreign: Mapping[str, Collection[str]]) -> bool:
    name = arg.lstrip("-").split("=", 1)[0]
    if "." in name:  # --Class.trait=...
        cls, _, trait = name.partition(".")
        return trait in _sections(app, foreign).get(cls, ())
    if arg.startswith("--"):
        return name in app.aliases or name in app.flags or name in ("help", "help-all", "version")
    return name in ("h",)


def parse_command_line(app: Application, argv: Sequence[str] | None = None,
                       foreign: Mapping[str, Collection[str]] | None = None) -> None:
    """Parse `argv` into `app`; raise ConfigError (not SystemExit) for unknown or bad options.
    `foreign`: other applications' classes whose settings are the app's (`--Other.name=v`
    sets the app's `name`), each with the settings it has."""
    foreign = foreign or {}
    if argv is None:
        argv = sys.argv[1:]
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1 and not _known_option(app, arg, foreign):
            raise ConfigError(f"unknown option {arg.split('=', 1)[0]} (see {app.name} --help-all)")
        cls = arg[2:].split(".", 1)[0] if arg.startswith("--") and "." in arg.split("=", 1)[0] else ""
        if cls in foreign:
            argv[i] = f"--{type(app).__name__}.{arg[len(cls) + 3:]}"
            arg = argv[i]
        name = arg[2:]
        if (arg.startswith("--") and name in app.aliases and name not in app.flags
                and (i + 1 == len(argv) or argv[i + 1].startswith("--"))):
            raise ConfigError(f"option {arg} needs a value ({arg}=VALUE)")
    try:
        # the undecorated method: traitlets' decorator logs and exits 1 on TraitError
        Application.parse_command_line.__wrapped__(app, argv)  # type: ignore[attr-defined]
    except (TraitError, ValueError) as e:
        raise ConfigError(trait_message(app, e)) from None
    if app.extra_args:
        raise ConfigError(f"unexpected argument {app.extra_args[0]!r}: options are written --name=value")
    _check_known_keys(app, app.cli_config, "the command line", foreign)


def _hint(name: str, known: Collection[str]) -> str:
    match = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def _check_known_keys(app: Application, config: Config, where: str,
                      foreign: Mapping[str, Collection[str]]) -> None:
    """Every section of `config` is one the app reads, every key in it one of its settings."""
    sections = _sections(app, foreign)
    for name, section in config.items():
        if name not in sections:
            if isinstance(section, Config):
                raise ConfigError(f"{where}: unknown section c.{name}{_hint(name, sections)}")
            raise ConfigError(f"{where}: c.{name} is not a setting: settings go in a section, "
                              f"c.{type(app).__name__}.{name}")
        unknown = sorted(k for k in section if k not in sections[name])
        if unknown:
            raise ConfigError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                              + ", ".join(unknown if name == type(app).__name__ else (f"c.{name}.{k}" for k in unknown))
                              + _hint(unknown[0], sections[name]))


def load_config_files(app: Application, config_files: Sequence[str], *, explicit: bool,
                      foreign: Mapping[str, Collection[str]] | None = None) -> None:
    """Load `config_files` into `app`, in order, a later file winning over an earlier one
    and the command line over them all; those that do not exist are skipped, unless
    `explicit` (named on the command line): then each must exist. The settings of a
    `foreign` section (c.Other.name) are the app's, its own section's winning within a
    file. Nothing is applied unless every file can be read and every setting is known."""
    foreign = foreign or {}
    own = type(app).__name__
    new = Config()
    loaded: list[tuple[str, Config, dict[str, str]]] = []
    for config_file in config_files:
        path = os.path.abspath(os.path.expanduser(config_file))
        if not os.path.isfile(path):
            if explicit:
                raise ConfigError(f"config file {config_file} not found")
            continue
        try:
            config = _read_config_file(app, path)
        except Exception as e:  # a syntax or runtime error in the Python config file
            raise ConfigError(f"{config_file}: {type(e).__name__}: {e}") from None
        _check_known_keys(app, config, config_file, foreign)
        written = {}  # the settings of a foreign section, as the file writes them
        for name in foreign:
            if name in config:
                written.update({key: f"c.{name}.{key}" for key in config[name] if key not in config.get(own, {})})
                config[own] = Config({**config.pop(name), **config.get(own, {})})
        loaded.append((config_file, config, written))
        new.merge(config)
    if not loaded:
        return
    new.merge(app.cli_config)  # the command line wins over the files
    try:
        app.update_config(new)
    except (TraitError, ValueError) as e:
        trait = _trait_of(app, e)
        *_, (where, _, written) = [f for f in loaded if trait and trait in f[1].get(own, {})] or loaded
        message = trait_message(app, e)
        if trait in written:
            message = message.replace(f"--{trait.replace('_', '-')}", written[trait], 1)
        raise ConfigError(f"{where}: {message}") from None


def _read_config_file(app: Application, path: str) -> Config:
    """The settings of the config file `path` and of its JSON twin (name.py, then name.json,
    those that exist), read with the app's public loader classes as traitlets reads them."""
    name, directory = os.path.splitext(os.path.basename(path))[0], os.path.dirname(path)
    config = Config()
    loaded: list[tuple[str, Config]] = []
    for loader_class, ext in ((app.python_config_loader_class, ".py"), (app.json_config_loader_class, ".json")):
        loader = loader_class(name + ext, path=directory, log=app.log)
        try:
            part = loader.load_config()
        except ConfigFileNotFound:
            continue
        for earlier_file, earlier in loaded:  # as traitlets warns of them
            collisions = earlier.collisions(part)
            if collisions:
                app.log.warning("Collisions detected in %s and %s config files. %s has higher priority: %s",
                                earlier_file, loader.full_filename, loader.full_filename,
                                json.dumps(collisions, indent=2))
        loaded.append((loader.full_filename, part))
        config.merge(part)
    return config


def _trait_of(app: Application, e: Exception) -> str | None:
    """The option the message names (traitlets' or a validator's "--name ..."), if any."""
    text = str(e)
    return next((name for name in app.class_trait_names(config=True)
                 if f"The '{name}' trait of a {type(app).__name__} instance" in text
                 or text.startswith(f"--{name.replace('_', '-')} ")), None)


def trait_message(app: Application, e: Exception) -> str:
    """traitlets' message with the trait written as its option: "The 'timeout' trait of a
    GpuReclaim instance expected an int, not the str 'abc'." -> "--timeout expected ..."."""
    text = str(e)
    for name in app.class_trait_names(config=True):
        marker = f"The '{name}' trait of a {type(app).__name__} instance"
        if marker in text:
            return text.replace(marker, f"--{name.replace('_', '-')}")
    return text
