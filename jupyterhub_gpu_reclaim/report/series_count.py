"""The label sets of a `/api/v1/series` answer counted while its bytes arrive, before any is
decoded, so that a list past the report's bound is refused after reading only that many
(Prometheus 2.42 ignores the `limit` parameter of later versions: it sends the whole list).

Prometheus writes each label set as a flat JSON object of strings in the answer's `data`
list, so the answer holds one `{` outside strings more than label sets. Counted at C speed:
escapes (`\\"`, `\\\\`, `\\u…`) are removed first, so that every `"` left opens or closes a
string, then the strings, and the braces left are counted; an escape or a string cut by the
end of a piece is carried over to the next."""

from __future__ import annotations

import re

_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')  # once the escapes are gone


class TooManySeries(Exception):
    """More label sets than the bound have arrived."""


class SeriesCounter:
    """Fed each piece of the answer (signals.http_source.read_capped's `watch`); raises
    TooManySeries as soon as more than `most` label sets have arrived."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._objects = 0
        self._in_string = False
        self._escape = b""  # a backslash that ended the last piece

    @property
    def series(self) -> int:
        return max(0, self._objects - 1)

    def __call__(self, piece: bytes) -> None:
        text = _ESCAPE.sub(b"", self._escape + piece)
        self._escape = b"\\" if text.endswith(b"\\") else b""
        text = text[: len(text) - len(self._escape)]
        if self._in_string:  # the string the last piece ended in
            closed = text.find(b'"')
            if closed < 0:
                return
            text = text[closed + 1:]
        between = _STRING.sub(b"", text)
        cut = between.find(b'"')  # a string this piece ends in
        self._in_string = cut >= 0
        self._objects += between.count(b"{", 0, cut if cut >= 0 else len(between))
        if self.series > self.most:
            raise TooManySeries(f"more than {self.most}")
