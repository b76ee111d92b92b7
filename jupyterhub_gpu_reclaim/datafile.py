"""Reading the YAML or JSON files admins write (a backtest's policy file, the service's
policy rules): one place that says, in one line, why a file cannot be read."""

from __future__ import annotations

import os
from typing import Any

from .errors import ConfigError


def read_data_file(path: str | os.PathLike) -> Any:
    """The YAML (or JSON, a subset) in `path`; None for an empty file. ConfigError naming
    the file when it cannot be read or parsed."""
    import yaml  # only the commands that read such a file need it

    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except OSError as e:
        raise ConfigError(f"{os.fspath(path)}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{os.fspath(path)}: not JSON or YAML: {e}") from None
