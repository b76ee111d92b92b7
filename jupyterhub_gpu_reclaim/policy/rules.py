"""Policy rules: policy settings by profile, GPU type, group, user or server, without code.

An ordered list of rules, each a `Match` on the session (profile, GPU type, group, user,
default or named server) and the settings it overrides; the first rule that matches a
session gives its settings, a session no rule matches has the base policy. As written in
a rules file (the service's --policy-rules, the backtest's ``rules:``)::

    - name: gpu-course
      match: {profiles: [gpu-course], server: default}
      set: {idle_warn_after: 20m, idle_reclaim_after: 40m}

`load_rules` checks everything when the rules are loaded (ConfigError naming the rule)
and builds each rule's PolicyConfig once, through the settings' one converter
(`config.from_settings`); `PolicyRules.resolve` only picks one. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from .observations import Session
from .config import SETTING_TYPES, PolicyConfig, from_settings

ServerKind = Literal["default", "named"]

# settings that are the service's, not a session's: the age of the GPU data, the keep-alive
# pages' cap (offered to every user alike), and deleting users (not servers)
SERVICE_WIDE = {
    "stale_after": "how old GPU data may be is the same for every session",
    "max_keepalive": "the keep-alive pages offer every session the same cap",
    "cull_admin_users": "it concerns deleting users, not their servers",
}


@dataclass(frozen=True)
class Match:
    """What a rule matches: each given criterion must match (empty: any); within one, any
    of its values. `groups`: the session's user is in any of them; `server`: the default
    server ("") or a named one."""

    profiles: frozenset[str] = frozenset()
    gpu_types: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    server: ServerKind | None = None

    def matches(self, session: Session) -> bool:
        return ((not self.profiles or session.profile in self.profiles)
                and (not self.gpu_types or session.gpu_type in self.gpu_types)
                and (not self.groups or not self.groups.isdisjoint(session.groups))
                and (not self.users or session.user in self.users)
                and (self.server is None or (self.server == "named") == bool(session.server)))


@dataclass(frozen=True)
class PolicyRule:
    """One rule as loaded: what it matches, its settings as written, and the policy they make."""

    name: str
    match: Match
    overrides: dict[str, Any]  # the settings as written
    config: PolicyConfig  # the base policy with the overrides


@dataclass(frozen=True)
class AppliedPolicy:
    """The settings a session is decided under: its first matching policy rule's (`rule`;
    None: the base policy); `under_rules` when policy rules are in force at all (only then
    does a decision name its rule)."""

    config: PolicyConfig
    rule: str | None = None
    under_rules: bool = False


@dataclass(frozen=True)
class PolicyRules:
    """The base policy and the rules, in order."""

    base: PolicyConfig
    rules: tuple[PolicyRule, ...] = ()
    # each rule's AppliedPolicy, then the base policy's: made once, not once a session a cycle
    _applied: tuple[AppliedPolicy, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        under = bool(self.rules)
        object.__setattr__(self, "_applied", (*(AppliedPolicy(r.config, r.name, under) for r in self.rules),
                                              AppliedPolicy(self.base, None, under)))

    def _first(self, session: Session) -> int:
        """The index of the first rule that matches `session`, else the number of rules."""
        return next((i for i, rule in enumerate(self.rules) if rule.match.matches(session)), len(self.rules))

    def applied(self, session: Session) -> AppliedPolicy:
        """The settings `policy.step` decides `session` under: its first matching rule's, else
        the base policy's (`base` itself, not a copy)."""
        return self._applied[self._first(session)]

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    @property
    def configs(self) -> list[PolicyConfig]:
        """Every policy a session may have: the base, then each rule's."""
        return [self.base, *(r.config for r in self.rules)]


_RULE_KEYS = ("name", "match", "set")
_CRITERIA = tuple(f.name for f in dataclasses.fields(Match))


def load_rules(data: Any, base: PolicyConfig) -> PolicyRules:
    """Rules as written (a list of mappings: name, match, set) over `base`. ConfigError,
    naming the rule, for anything not understood."""
    if data is None:
        data = []
    if not isinstance(data, list):
        raise ConfigError(f"policy rules must be a list of rules, not {type(data).__name__}")
    rules: list[PolicyRule] = []
    for i, item in enumerate(data, 1):
        rule = _rule(i, item, base)
        if rule.name in {r.name for r in rules}:
            raise ConfigError(f'policy rule "{rule.name}": a second rule of that name (rule {i})')
        rules.append(rule)
    return PolicyRules(base, tuple(rules))


def _rule(i: int, item: Any, base: PolicyConfig) -> PolicyRule:
    if not isinstance(item, dict):
        raise ConfigError(f"policy rule {i}: must be a mapping with name, match and set, not {item!r}")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"policy rule {i}: needs a name (a non-empty string), not {name!r}")

    def fail(message: str) -> ConfigError:
        return ConfigError(f'policy rule "{name}": {message}')

    unknown = sorted(str(k) for k in item if k not in _RULE_KEYS)
    if unknown:
        raise fail(f'unknown key "{unknown[0]}" (a rule has {", ".join(_RULE_KEYS)})')
    match = item.get("match") or {}
    if not isinstance(match, dict):
        raise fail(f"match must be a mapping of criteria, not {match!r}")
    overrides = item.get("set") or {}
    if not isinstance(overrides, dict):
        raise fail(f"set must be a mapping of policy settings, not {overrides!r}")
    for key in match:
        if key not in _CRITERIA:
            raise fail(f'unknown criterion "{key}" (known: {", ".join(_CRITERIA)})')
    for key in overrides:
        if key not in SETTING_TYPES:
            raise fail(f'unknown setting "{key}"')
        if key in SERVICE_WIDE:
            raise fail(f'"{key}" cannot be set by a rule: {SERVICE_WIDE[key]}')
    criteria: dict[str, Any] = {}
    for key, value in match.items():
        if key == "server":
            if value not in ("default", "named", None):
                raise fail(f'match server must be "default" or "named", not {value!r}')
            criteria[key] = value
        else:
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise fail(f"match {key} must be a list of strings, not {value!r}")
            criteria[key] = frozenset(values)
    try:
        config = from_settings(overrides, base)
    except (TypeError, ValueError) as e:
        raise fail(str(e)) from None
    return PolicyRule(name=name, match=Match(**criteria), overrides=dict(overrides), config=config)
