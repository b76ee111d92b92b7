"""The errors that end a command, in one place: what its user got wrong (`ConfigError`,
exit status 2) and what keeps the service from running (`ServiceError`, exit status 1).
The message of each says which setting, file or resource, in one line."""

from __future__ import annotations


class ConfigError(Exception):
    """A bad setting: the service's command line, config file or environment, or a
    backtest's policy file. The message says which."""


class ServiceError(RuntimeError):
    """The service cannot run (its store cannot be opened, ...)."""
