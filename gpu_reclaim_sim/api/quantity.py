"""Kubernetes resource quantities (`500m`, `2Gi`, `1.5`, `1e3`) as exact numbers, read as
the API documents the Quantity serialization format
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):

    <quantity>        ::= <signedNumber><suffix>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <signedNumber>    ::= <number> | <sign><number>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

"No quantity may represent a number greater than 2^63-1 in magnitude, nor may it have more
than 3 decimal places. Numbers larger or more precise will be capped or rounded up (e.g.:
0.1m will rounded up to 1m)." An exponent is a whole number (the apiserver refuses `1e1.5`).
A JSON number in a manifest (`cpu: 2`, `cpu: 0.5`) is read from its text."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

__all__ = ["parse", "is_valid"]

_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6),
            "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18)}
_MAX = Fraction(2**63 - 1)


def parse(value: str | int | float | Decimal | Fraction) -> Fraction:
    """The quantity's value, capped at 2^63-1 and rounded up to thousandths; ValueError for
    anything the format does not allow."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, Fraction):
        number = value
    elif isinstance(value, (int, float, Decimal)):
        if isinstance(value, (float, Decimal)) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a quantity")
        return parse(str(value))
    elif isinstance(value, str):
        m = _QUANTITY.fullmatch(value)
        if m is None:
            raise ValueError(f"quantities must match the regular expression "
                             f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
        number, suffix = Fraction(Decimal(m[1])), m[2] or ""
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            number *= _DECIMAL[suffix]
        else:
            number *= Fraction(10) ** int(suffix[1:])
    else:
        raise ValueError(f"{value!r} is not a quantity")
    magnitude = min(abs(number), _MAX)
    magnitude = Fraction(math.ceil(magnitude * 1000), 1000)  # 0.1m is 1m
    return magnitude if number >= 0 else -magnitude


def is_valid(value: object) -> bool:
    """Whether `value` is a quantity (a string of the format or a JSON number)."""
    try:
        parse(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True
