"""Each setting is declared once: no configurable option (a traitlets trait with
`config=True`) of one name is declared by two of the product's configurables (the service's
Application, the spawner, its mixins), where the two could get different defaults or help
and an admin would have to set both (the spawn form's longest keep-alive is the service's
--max-keepalive, which the spawner asks the service for). Read from the classes themselves
(traitlets' own traits of each class, inherited ones left out: the Application has the
service's options from the classes that declare them, `ServiceSettings` and
`GpuPolicyOptions`).

    python -m pytest tests/architecture/test_settings_once.py
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from traitlets import HasTraits

import jupyterhub_gpu_reclaim

from ..support.imports import module_files

PACKAGE = Path(jupyterhub_gpu_reclaim.__file__).parent


def configurables(package: Path) -> list[type[HasTraits]]:
    """The traitlets classes the package's modules define (modules that import traitlets or a
    spawner; imported to read them)."""
    found = []
    for module, path in sorted(module_files(package).items()):
        text = path.read_text()
        if "traitlets" not in text and "Spawner" not in text:
            continue
        loaded = importlib.import_module(module)
        found += [c for _, c in inspect.getmembers(loaded, inspect.isclass)
                  if issubclass(c, HasTraits) and c.__module__ == module]
    return found


def declarations(classes: list[type[HasTraits]]) -> dict[str, list[str]]:
    """Each option's name → the classes that declare it themselves (`module.Class`)."""
    out: dict[str, list[str]] = {}
    for c in classes:
        for name in c.class_own_traits(config=True):
            out.setdefault(name, []).append(f"{c.__module__}.{c.__qualname__}")
    return out


def test_each_setting_is_declared_once():
    found = configurables(PACKAGE)
    names = {c.__name__ for c in found}
    assert {"GpuReclaim", "GPUReclaimSpawner"} <= names, names  # the check sees the Application and the spawner
    twice = {name: where for name, where in declarations(found).items() if len(where) > 1}
    assert twice == {}
    assert "idle_warn_after" in declarations(found)


def test_a_setting_declared_twice_is_found(tmp_path, monkeypatch):
    # the check itself, on a package of its own: a second declaration of a name, in another
    # class or a subclass, is found; inheriting one, or a trait that is not an option, is not
    pkg = tmp_path / "pkgsettings"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "service.py").write_text(
        "from traitlets import Int, Unicode\nfrom traitlets.config import Application\n"
        "class App(Application):\n"
        "    keep = Unicode('12h', config=True, help='the longest keep-alive')\n"
        "    idle = Int(60, config=True, help='minutes')\n"
        "    state = Int(0)\n")
    (pkg / "spawner.py").write_text(
        "from traitlets import Int, Unicode\nfrom traitlets.config import Configurable\n"
        "from .service import App\n"
        "class Spawner(Configurable):\n"
        "    keep = Unicode('8h', config=True, help='use the same value as the service')\n"
        "    state = Int(1)\n"
        "class Inherits(App):\n"
        "    pass\n"
        "class Redeclares(App):\n"
        "    idle = Int(30, config=True, help='minutes')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = declarations(configurables(pkg))
    assert {name: where for name, where in found.items() if len(where) > 1} == {
        "keep": ["pkgsettings.service.App", "pkgsettings.spawner.Spawner"],
        "idle": ["pkgsettings.service.App", "pkgsettings.spawner.Redeclares"]}
