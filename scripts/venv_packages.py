"""The packages scripts/setup.sh installed into a virtualenv, and whether they are still
there: `record` after the set-up's install, `check` before the set-up skips it (a package
gone makes it install again) and at the end of `make test` (no test may change the
environment it runs in). Run with the virtualenv's own Python:

    .venv/bin/python scripts/venv_packages.py record|check
"""

from __future__ import annotations

import json
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

RECORD = Path(sys.prefix) / ".setup-packages.json"


def installed() -> dict[str, str]:
    """{name: version, and where an editable or local install points} of this environment's
    own site-packages (not what a .pth file or PYTHONPATH adds)."""
    paths = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    out = {}
    for dist in metadata.distributions(path=paths):
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        editable = " editable" if direct.get("dir_info", {}).get("editable") else ""
        out[dist.metadata["Name"].lower()] = f"{dist.version} ({direct['url']}{editable})" if direct else dist.version
    return out


def changes(then: dict[str, str], now: dict[str, str]) -> list[str]:
    return ([f"{name} {then[name]}: gone" for name in sorted(then.keys() - now.keys())]
            + [f"{name} {then[name]} is now {now[name]}" for name in sorted(then.keys() & now.keys())
               if then[name] != now[name]]
            + [f"{name} {now[name]}: added" for name in sorted(now.keys() - then.keys())])


def main(command: str) -> int:
    if command == "record":
        RECORD.write_text(json.dumps(installed(), indent=1, sort_keys=True) + "\n")
        return 0
    if not RECORD.is_file():
        print(f"{sys.prefix}: no record of its set-up ({RECORD.name}): run scripts/setup.sh", file=sys.stderr)
        return 1
    diff = changes(json.loads(RECORD.read_text()), installed())
    if diff:
        print(f"{sys.prefix}: its packages changed since scripts/setup.sh installed them:\n  "
              + "\n  ".join(diff), file=sys.stderr)
    return 1 if diff else 0


if __name__ == "__main__":
    if sys.argv[1:] not in (["record"], ["check"]):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
