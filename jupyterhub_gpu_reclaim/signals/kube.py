"""Kubernetes API semantics as small pure functions on JSON-form objects (camelCase dicts).

Dependency-free (standard library only) and without I/O, so the pod facts the service and
the spawner read (`signals.pod_facts`: a pod's GPUs) and the spawner's image-locality
affinity (`spawner.affinity`) use the one implementation. (The simulated cluster has its
own, `gpu_reclaim_sim.api`.) Each function mirrors an upstream one:

* `parse_quantity`: k8s.io/apimachinery `resource.ParseQuantity` (scanner
  `parseQuantityString`, `quantitySuffixer.interpret`, round-up to 1n) with the
  `strings.TrimSpace` of `Quantity.UnmarshalJSON`.
* `pod_requests`: k8s.io/component-helpers `resource.PodRequests` (sidecar-aware init
  containers, `NonMissingContainerRequests`, overhead), after `SetDefaults_Pod`'s copy of
  limits into missing requests.
* `tolerates`: k8s.io/api/core/v1 `Toleration.ToleratesTaint`.
* `match_expression`, `match_field`, `match_node_selector_term`: component-helpers
  `nodeaffinity` (`nodeSelectorRequirementsAsSelector`, `...AsFieldSelector`) with
  apimachinery `labels.Requirement.Matches`: a requirement that fails to parse makes its
  term match no node.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, Mapping

Obj = dict[str, Any]

NODE_NAME_FIELD = "metadata.name"
TAINT_UNSCHEDULABLE: Obj = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

# --- quantities ---------------------------------------------------------------------------

# resource.ErrFormatWrong / ErrSuffix, in the apiserver's words
ERR_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
ERR_SUFFIX = "unable to parse quantity's suffix"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_INT64 = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64): optional sign, ASCII digits
_INT64_MAX = 2**63 - 1
_NANO = Fraction(1, 10**9)
_MAX_EXPONENT = 1000


def _parse_int64(s: str) -> int | None:
    """strconv.ParseInt(s, 10, 64), None for an error (Python's int() would also take
    "1_000", " 5", unicode digits and values beyond int64)."""
    if not _INT64.fullmatch(s):
        return None
    v = int(s)
    return v if -2**63 <= v <= _INT64_MAX else None


def _scan(s: str) -> tuple[bool, str, str, str]:
    """parseQuantityString: (positive, num, denom, suffix); ValueError(ERR_FORMAT)."""
    pos, end = 0, len(s)
    positive = True
    if pos < end and s[0] in "+-":
        positive = s[0] == "+"
        pos += 1
    while pos < end and s[pos] == "0":  # leading zeros; a sign or zeros alone read as 0
        pos += 1
    start = pos
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    num = s[start:pos] or "0"
    denom = ""
    if pos < end and s[pos] == ".":  # "1." and "." are accepted upstream
        pos += 1
        start = pos
        while pos < end and s[pos] in _DIGITS:
            pos += 1
        denom = s[start:pos]
    suffix_start = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise ValueError(ERR_FORMAT)
    return positive, num, denom, s[suffix_start:]


def parse_quantity(value: str | int | float | Decimal | Fraction) -> Fraction:
    """A quantity (`500m`, `2`, `4Gi`, `1G`, `1e3`, `.5`) as an exact number, as
    resource.ParseQuantity reads it; a JSON number is read from its text, as
    Quantity.UnmarshalJSON does. Raises ValueError with the apiserver's wording.
    Fractions rather than floats so `0.1 + 0.2` cpu compares exactly."""
    if isinstance(value, bool):
        raise ValueError(ERR_FORMAT)
    if isinstance(value, Fraction):
        return value
    if not isinstance(value, (str, int, float, Decimal)):
        raise TypeError(f"not a quantity: {value!r}")
    s = str(value).strip()  # str(): 0.1 stays 1/10, not the binary float
    if not s:
        raise ValueError(ERR_FORMAT)
    positive, num, denom, suffix = _scan(s)
    if suffix in _DECIMAL:
        base, exponent = 10, _DECIMAL[suffix]
    elif suffix in _BINARY:
        base, exponent = 2, _BINARY[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and (e := _parse_int64(suffix[1:])) is not None:
        base, exponent = 10, e
    else:
        raise ValueError(ERR_SUFFIX)
    mantissa = Fraction(int(num + denom), 10 ** len(denom))
    if mantissa == 0:
        return Fraction(0)
    if base == 10 and exponent < -(len(num) + 10):  # below 1n whatever the digits
        amount = _NANO
    else:
        # Exponents beyond 10**_MAX_EXPONENT are read as that: larger than any resource a
        # cluster has either way, and 10**(2**62) would not fit in memory.
        amount = mantissa * Fraction(base) ** min(exponent, _MAX_EXPONENT)
        if (amount / _NANO).denominator != 1:  # ParseQuantity rounds up to a whole 1n
            amount = Fraction(-(-amount.numerator * 10**9 // amount.denominator), 10**9)
    return amount if positive else -amount


def is_valid_quantity(value: object) -> bool:
    try:
        parse_quantity(value)  # type: ignore[arg-type]
        return True
    except (ValueError, TypeError):
        return False


# --- pod requests -------------------------------------------------------------------------


def resource_list(raw: Mapping[str, Any] | None, *, skip_invalid: bool = False,
                  keep: Callable[[str], bool] | None = None) -> dict[str, Fraction]:
    """A ResourceList as exact numbers. `skip_invalid`: an unparseable entry counts as
    absent (for specs not yet validated by an apiserver) instead of raising. `keep`: only
    the resources it names (the others are neither read nor checked)."""
    out: dict[str, Fraction] = {}
    for k, v in (raw or {}).items():
        if keep is not None and not keep(k):
            continue
        try:
            out[k] = parse_quantity(v)
        except (ValueError, TypeError):
            if not skip_invalid:
                raise
    return out


def container_requests(c: Obj, non_missing: Mapping[str, Fraction] | None = None, *,
                       skip_invalid: bool = False,
                       keep: Callable[[str], bool] | None = None) -> dict[str, Fraction]:
    """The container's requests, limits copied into missing ones (SetDefaults_Pod, a no-op
    on objects read back from an apiserver), then `applyNonMissing`."""
    res = c.get("resources") or {}
    reqs = {**resource_list(res.get("limits"), skip_invalid=skip_invalid, keep=keep),
            **resource_list(res.get("requests"), skip_invalid=skip_invalid, keep=keep)}
    for k, v in (non_missing or {}).items():
        reqs.setdefault(k, v)
    return reqs


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, Fraction(0)) + v


def _max_into(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        if k not in into or v > into[k]:
            into[k] = v


def pod_requests(pod: Obj, *, non_missing: Mapping[str, Fraction] | None = None,
                 skip_invalid: bool = False, keep: Callable[[str], bool] | None = None) -> dict[str, Fraction]:
    """resourcehelper.PodRequests, the pod's effective request (what the scheduler places
    it by and the node keeps reserved for it, even after its init containers have run):
    containers and restartable ("sidecar") init containers summed; then the max with each
    ordinary init container plus the sidecars started before it; plus spec.overhead. Takes
    a pod or just its spec. `non_missing` fills a container's missing requests (the
    scheduler's scoring view: 100m cpu, 200Mi memory); `keep`: only the resources it names."""
    spec = (pod.get("spec") or {}) if "spec" in pod or "containers" not in pod else pod

    def of(c: Obj) -> dict[str, Fraction]:
        return container_requests(c, non_missing, skip_invalid=skip_invalid, keep=keep)

    reqs: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        _add(reqs, of(c))
    sidecars: dict[str, Fraction] = {}
    init_max: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        cr = of(c)
        if c.get("restartPolicy") == "Always":
            _add(reqs, cr)
            _add(sidecars, cr)
            effective = dict(sidecars)
        else:
            effective = dict(cr)
            _add(effective, sidecars)
        _max_into(init_max, effective)
    _max_into(reqs, init_max)
    _add(reqs, resource_list(spec.get("overhead"), skip_invalid=skip_invalid, keep=keep))
    return reqs


# --- taints and node selectors ------------------------------------------------------------


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Toleration.ToleratesTaint: an empty effect or key matches any; an empty operator is
    Equal; empty key with Exists tolerates every taint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def match_expression(expr: Obj, labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement (matchExpressions) against node labels. As
    labels.NewRequirement, In/NotIn need values, Exists/DoesNotExist none, and Gt/Lt exactly
    one int64 (strconv.ParseInt, base 10), as must the label; otherwise no match."""
    key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    present = key in labels
    if op in ("In", "NotIn"):
        if not values:
            return False
        return (present and labels[key] in values) if op == "In" else (not present or labels[key] not in values)
    if op in ("Exists", "DoesNotExist"):
        return not values and present == (op == "Exists")
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, want = _parse_int64(str(labels[key])), _parse_int64(str(values[0]))
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def match_field(expr: Obj, node_name: str) -> bool:
    """One matchFields requirement: `metadata.name` (the only field allowed), In or NotIn
    with exactly one value (nodeSelectorRequirementsAsFieldSelector)."""
    values = expr.get("values") or []
    if expr.get("key") != NODE_NAME_FIELD or len(values) != 1:
        return False
    if expr.get("operator") == "In":
        return node_name == values[0]
    if expr.get("operator") == "NotIn":
        return node_name != values[0]
    return False


def match_node_selector_term(term: Obj, labels: Mapping[str, str], node_name: str) -> bool:
    """One NodeSelectorTerm: matchExpressions and matchFields ANDed; an empty term matches
    no node. (A pod's terms are ORed.)"""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(match_expression(e, labels) for e in exprs) and all(match_field(f, node_name) for f in fields)
