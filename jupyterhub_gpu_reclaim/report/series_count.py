"""The label sets of a `/api/v1/series` answer counted while its bytes arrive, before any is
decoded, so that a list past the report's bound is refused after reading only that many
(Prometheus 2.42 ignores the `limit` parameter of later versions: it sends the whole list).

Prometheus writes each label set as a flat JSON object of strings in the answer's `data`
list, so the answer holds one `{` outside strings more than label sets. Counted at C speed:
escapes (`\\"`, `\\\\`, `\\u…`) are removed first, so that every `"` left opens or closes a
string, and the braces between strings are counted; an escape or a string cut by the end of
a piece is carried over to the next."""

from __future__ import annotations

import re
from collections.abc import Callable

_ESCAPE = re.compile(rb"\\.", re.DOTALL)


class SeriesCounter:
    """Fed each piece of the answer (signals.base.read_capped's `watch`); raises
    `too_many(most)` as soon as more than `most` label sets have arrived."""

    def __init__(self, most: int, too_many: Callable[[int], Exception]) -> None:
        self.most = most
        self.too_many = too_many
        self._objects = 0
        self._in_string = False
        self._escape = b""  # a backslash that ended the last piece

    @property
    def series(self) -> int:
        return max(0, self._objects - 1)

    def __call__(self, piece: bytes) -> None:
        text = _ESCAPE.sub(b"", self._escape + piece)
        self._escape = b"\\" if text.endswith(b"\\") else b""
        strings = text[: len(text) - len(self._escape)].split(b'"')
        self._objects += b"".join(strings[1::2] if self._in_string else strings[::2]).count(b"{")
        self._in_string ^= len(strings) % 2 == 0
        if self.series > self.most:
            raise self.too_many(self.most)
