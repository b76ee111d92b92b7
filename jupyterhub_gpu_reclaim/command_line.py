"""Reading a traitlets Application's command line and config file strictly.

traitlets' own Application logs a bad value and exits 1, and ignores an unknown option
or a misspelt key of the config file. Here each of these raises
:class:`~.errors.ConfigError` with one line naming the option (``--timeout must be >= 0``,
``unknown option --timout``, ``gpu_reclaim_config.py: unknown option timout (did you mean
timeout?)``), and the caller decides the exit status. `config.GpuReclaim`'s
parse_command_line and load_config are these functions (a base class would show in
--help-all and the generated config file).
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Sequence

from traitlets import TraitError
from traitlets.config import Application, Config

from .errors import ConfigError


def _known_option(app: Application, arg: str) -> bool:
    name = arg.lstrip("-").split("=", 1)[0]
    if "." in name:  # --Class.trait=...
        cls, _, trait = name.partition(".")
        return cls != type(app).__name__ or trait in app.class_trait_names(config=True)
    if arg.startswith("--"):
        return name in app.aliases or name in app.flags or name in ("help", "help-all", "version")
    return name in ("h",)


def parse_command_line(app: Application, argv: Sequence[str] | None = None) -> None:
    """Parse `argv` into `app`; raise ConfigError (not SystemExit) for unknown or bad options."""
    if argv is None:
        argv = sys.argv[1:]
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1 and not _known_option(app, arg):
            raise ConfigError(f"unknown option {arg.split('=', 1)[0]} (see {app.name} --help-all)")
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
    _check_known_keys(app, app.cli_config, "the command line")


def _check_known_keys(app: Application, config: Config, where: str) -> None:
    known = app.class_trait_names(config=True)
    section = config.get(type(app).__name__, {})
    unknown = sorted(k for k in section if k not in known)
    if unknown:
        hint = difflib.get_close_matches(unknown[0], known, n=1)
        raise ConfigError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown)}"
                          + (f" (did you mean {hint[0]}?)" if hint else ""))


def load_config_file(app: Application, config_file: str) -> None:
    """Load `config_file` into `app` (one named on the command line must exist), the
    command line winning over it."""
    explicit = "config_file" in app.cli_config.get(type(app).__name__, {})
    path = os.path.abspath(os.path.expanduser(config_file))
    if not os.path.isfile(path):
        if explicit:
            raise ConfigError(f"config file {config_file} not found")
        return
    try:
        new = Config()
        for loaded, fname in app._load_config_files(
            os.path.splitext(os.path.basename(path))[0], path=os.path.dirname(path),
            log=app.log, raise_config_file_errors=True,
        ):
            new.merge(loaded)
            if fname not in app._loaded_config_files:
                app._loaded_config_files.append(fname)
        _check_known_keys(app, new, config_file)
        new.merge(app.cli_config)  # the command line wins over the file
        app.update_config(new)
    except (TraitError, ValueError) as e:
        raise ConfigError(f"{config_file}: {trait_message(app, e)}") from None
    except ConfigError:
        raise
    except Exception as e:  # a syntax or runtime error in the Python config file
        raise ConfigError(f"{config_file}: {type(e).__name__}: {e}") from None


def trait_message(app: Application, e: Exception) -> str:
    """traitlets' message with the trait written as its option: "The 'timeout' trait of a
    GpuReclaim instance expected an int, not the str 'abc'." -> "--timeout expected ..."."""
    text = str(e)
    for name in app.class_trait_names(config=True):
        marker = f"The '{name}' trait of a {type(app).__name__} instance"
        if marker in text:
            return text.replace(marker, f"--{name.replace('_', '-')}")
    return text
