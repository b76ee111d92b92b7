"""Label and field selectors with the apiserver's grammar and error messages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from .errors import bad_request

# key: optional DNS prefix + "/" + name (63 chars of [A-Za-z0-9._-]); values the same chars
_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_TOKEN = re.compile(
    rf"\s*(?:(?P<notexists>!)\s*(?P<nkey>{_KEY})"
    rf"|(?P<key>{_KEY})\s*(?:(?P<op>==|!=|=)\s*(?P<value>{_VALUE})"
    rf"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)"
)


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        return not present or value not in self.values  # notin


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h` (an empty selector matches everything)."""
    if not text or not text.strip():
        return []
    reqs: list[Requirement] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise bad_request(f"unable to parse requirement: invalid label selector: {text!r}")
        pos = m.end()
        if m.group("notexists"):
            reqs.append(Requirement(m.group("nkey"), "!"))
        elif m.group("op"):
            op = "=" if m.group("op") in ("=", "==") else "!="
            reqs.append(Requirement(m.group("key"), op, (m.group("value"),)))
        elif m.group("setop"):
            values = tuple(v.strip() for v in m.group("values").split(",") if v.strip())
            if not values:
                raise bad_request(
                    f"unable to parse requirement: for 'in', 'notin' operators, values set can't be empty: {text!r}"
                )
            for v in values:
                if not re.fullmatch(_VALUE, v):
                    raise bad_request(f"unable to parse requirement: invalid label value: {v!r}")
            reqs.append(Requirement(m.group("key"), m.group("setop"), values))
        else:
            reqs.append(Requirement(m.group("key"), "exists"))
    return reqs


def label_matcher(text: str | None) -> Callable[[Mapping[str, str]], bool]:
    return requirements_matcher(parse_label_selector(text))


def requirements_matcher(reqs: list[Requirement]) -> Callable[[Mapping[str, str]], bool]:
    """All requirements hold (none: everything matches)."""
    if not reqs:
        return lambda labels: True
    if all(r.op == "=" for r in reqs):  # the common `a=b,c=d`: plain look-ups (list of 5,000 pods)
        pairs = [(r.key, r.values[0]) for r in reqs]
        if len(pairs) == 1:
            (key, value), = pairs
            return lambda labels: labels.get(key) == value
        return lambda labels: all(labels.get(k) == v for k, v in pairs)
    return lambda labels: all(r.matches(labels) for r in reqs)


def parse_field_selector(
    text: str | None, allowed: tuple[str, ...], resource: str
) -> list[tuple[str, bool, str]]:
    """Parse `a=b,c!=d,e==f` into (field, equal?, value), refusing fields the resource lacks."""
    if not text or not text.strip():
        return []
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "!=" in part:
            key, value = part.split("!=", 1)
            equal = False
        elif "==" in part:
            key, value = part.split("==", 1)
            equal = True
        elif "=" in part:
            key, value = part.split("=", 1)
            equal = True
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        key = key.strip()
        if key not in allowed:
            raise bad_request(f'field label not supported: {key}')
        terms.append((key, equal, value.strip()))
    return terms


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_requirements(selector: Mapping | None) -> list[Requirement] | None:
    """A `metav1.LabelSelector` (matchLabels and matchExpressions, ANDed) as requirements, as
    LabelSelectorAsSelector reads it: None for a null selector or an operator it refuses
    (matches nothing), [] for an empty one (matches everything)."""
    if selector is None:
        return None
    reqs = [Requirement(k, "=", (str(v),)) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(e.get("operator"))
        if op is None:
            return None
        reqs.append(Requirement(e.get("key", ""), op, tuple(e.get("values") or ())))
    return reqs


def object_label_matcher(selector: Mapping | None) -> Callable[[Mapping[str, str]], bool]:
    """A matcher for a `metav1.LabelSelector` object (see selector_requirements)."""
    reqs = selector_requirements(selector)
    if reqs is None:
        return lambda labels: False
    return requirements_matcher(reqs)


def selector_string(selector: Mapping | None) -> str:
    """The selector in the string form (`a=b,c in (x,y)`), as Scale.status.selector and the
    SELECTOR column print it."""
    out = []
    for r in selector_requirements(selector) or []:
        if r.op in ("=", "!="):
            out.append(f"{r.key}{r.op}{r.values[0]}")
        elif r.op in ("in", "notin"):
            out.append(f"{r.key} {r.op} ({','.join(sorted(r.values))})")
        else:
            out.append(r.key if r.op == "exists" else f"!{r.key}")
    return ",".join(out)
