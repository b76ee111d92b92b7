"""Each setting is declared once: no configurable option (a traitlets trait with
`config=True`) of one name is declared by two of the product's configurables (the service's
Application, the spawner, its mixins), where the two could get different defaults or help
and an admin would have to set both (the spawn form's longest keep-alive is the service's
--max-keepalive, which the spawner asks the service for). Read from the classes themselves
(traitlets' own traits of each class, inherited ones left out: the Application has the
service's options from the classes that declare them, `ServiceSettings` and
`GpuPolicyOptions`). No two options share a help text (a declaration copied under another
name). An option that sets a field of the policy's `PolicyConfig` (the policy takes plain
typed values) takes its default from that field, read from the option's declaration in the
source: the default is written once, on the field, and the help once, on the option.

    python -m pytest tests/architecture/test_settings_once.py
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from pathlib import Path

from traitlets import HasTraits

import jupyterhub_gpu_reclaim
from jupyterhub_gpu_reclaim.application import POLICY_OPTIONS
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig

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


def shared_help(classes: list[type[HasTraits]]) -> list[list[str]]:
    """The options that share one help text (`Class.option`), each group in declaration order."""
    by_help: dict[str, list[str]] = {}
    for c in classes:
        for name, trait in c.class_own_traits(config=True).items():
            by_help.setdefault(trait.help, []).append(f"{c.__qualname__}.{name}")
    return [where for where in by_help.values() if len(where) > 1]


def declared_defaults(cls: type) -> dict[str, list[ast.expr]]:
    """Each trait `cls` declares in its body → its arguments as written that can give its
    default (the positional ones, as a container's item trait and default, and default_value=;
    not its help), `.tag(...)` unwrapped."""
    out = {}
    for node in ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        call = node.value
        while isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "tag":
            call = call.func.value
        if isinstance(call, ast.Call):
            out[node.targets[0].id] = call.args + [k.value for k in call.keywords if k.arg == "default_value"]
    return out


def defaults_written_again(classes: list[type[HasTraits]], fields: dict[str, str]) -> dict[str, str]:
    """The options (of `fields`: option → the policy field it sets) whose declaration does not
    read the field's default (written again, by value, or left to the trait's own), with
    their arguments as written."""
    out = {}
    for c in classes:
        for name, args in declared_defaults(c).items():
            field = fields.get(name)
            if field is None or name not in c.class_own_traits(config=True):
                continue
            if not any(isinstance(n, ast.Attribute) and n.attr == field for arg in args for n in ast.walk(arg)):
                out[name] = ", ".join(ast.unparse(arg) for arg in args) or "(none)"
    return out


def test_each_setting_is_declared_once():
    found = configurables(PACKAGE)
    names = {c.__name__ for c in found}
    assert {"GpuReclaim", "GPUReclaimSpawner"} <= names, names  # the check sees the Application and the spawner
    twice = {name: where for name, where in declarations(found).items() if len(where) > 1}
    assert twice == {}
    assert "idle_warn_after" in declarations(found)
    assert shared_help(found) == []


def test_a_policy_setting_has_its_default_once():
    found = configurables(PACKAGE)
    assert set(POLICY_OPTIONS.values()) == {f.name for f in dataclasses.fields(PolicyConfig)}
    declared = {name for c in found for name in c.class_own_traits(config=True)}
    assert set(POLICY_OPTIONS) <= declared, set(POLICY_OPTIONS) - declared  # each field has its option
    # idle-culler's --timeout and --max-age too: the fields have idle-culler's defaults
    assert defaults_written_again(found, POLICY_OPTIONS) == {}


def synthetic_package(tmp_path: Path, monkeypatch, name: str, **modules: str) -> Path:
    """A package `name` of `modules` ({module: source}) in `tmp_path`, importable."""
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for module, source in modules.items():
        (pkg / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg


def test_a_setting_declared_twice_is_found(tmp_path, monkeypatch):
    # the check itself, on a package of its own: a second declaration of a name, in another
    # class or a subclass, is found; inheriting one, or a trait that is not an option, is not
    pkg = synthetic_package(tmp_path, monkeypatch, "pkgsettings", service=(
        "from traitlets import Int, Unicode\nfrom traitlets.config import Application\n"
        "class App(Application):\n"
        "    keep = Unicode('12h', config=True, help='the longest keep-alive')\n"
        "    idle = Int(60, config=True, help='minutes')\n"
        "    state = Int(0)\n"), spawner=(
        "from traitlets import Int, Unicode\nfrom traitlets.config import Configurable\n"
        "from .service import App\n"
        "class Spawner(Configurable):\n"
        "    keep = Unicode('8h', config=True, help='use the same value as the service')\n"
        "    state = Int(1)\n"
        "class Inherits(App):\n"
        "    pass\n"
        "class Redeclares(App):\n"
        "    idle = Int(30, config=True, help='minutes')\n"))
    found = declarations(configurables(pkg))
    assert {name: where for name, where in found.items() if len(where) > 1} == {
        "keep": ["pkgsettings.service.App", "pkgsettings.spawner.Spawner"],
        "idle": ["pkgsettings.service.App", "pkgsettings.spawner.Redeclares"]}


def test_a_default_or_help_written_twice_is_found(tmp_path, monkeypatch):
    # the checks themselves, on a package of their own: an option of a policy field whose
    # default is a literal (even the field's value) or is missing is found, one that reads the
    # field (through the class or an instance, converted or not) is not; two options with
    # one help are found
    pkg = synthetic_package(tmp_path, monkeypatch, "pkgdefaults", policy=(
        "import dataclasses, datetime as dt\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Policy:\n"
        "    idle: dt.timedelta = dt.timedelta(hours=2)\n"
        "    grace: dt.timedelta = dt.timedelta(minutes=15)\n"
        "    admins: bool = True\n"
        "    users: bool = True\n"
        "    lead: float = 1.0\n"
        "    keep: float = 2.0\n"
        "    users_exempt: frozenset[str] = frozenset()\n"
        "    groups_exempt: frozenset[str] = frozenset()\n"), options=(
        "from traitlets import Bool, Float, HasTraits, Set, Unicode\n"
        "from .policy import Policy\n"
        "_DEFAULT = Policy()\n"
        "class Options(HasTraits):\n"
        "    idle = Float(_DEFAULT.idle.total_seconds(), help='idle').tag(config=True)\n"
        "    grace = Float(900.0, help='grace').tag(config=True)\n"
        "    admins = Bool(Policy.admins, help='admins').tag(config=True)\n"
        "    users = Bool(default_value=True, help='users', config=True)\n"
        "    lead = Float(help='lead').tag(config=True)\n"
        "    keep = Float(2.0, help='idle').tag(config=True)\n"
        "    users_exempt = Set(Unicode(), set(Policy.users_exempt), help='u').tag(config=True)\n"
        "    groups_exempt = Set(Unicode(), {'x'}, help='g').tag(config=True)\n"
        "    unrelated = Float(3.0, help='not a policy field').tag(config=True)\n"))
    found = configurables(pkg)
    fields = {name: name for name in ("idle", "grace", "admins", "users", "lead", "keep", "users_exempt",
                                      "groups_exempt")}
    assert defaults_written_again(found, fields) == {"grace": "900.0", "users": "True", "lead": "(none)",
                                                     "keep": "2.0", "groups_exempt": "Unicode(), {'x'}"}
    assert shared_help(found) == [["Options.idle", "Options.keep"]]
