"""Text that users control, kept on one line wherever the service writes it.

A user's name or server name, or anything a user's server answers, may hold CR/LF and other
control characters: written raw, ``x\\r\\nINFO forged`` starts a forged line in the log or in
a notice, and cannot go in an e-mail header at all. :func:`one_line` writes each
non-printable character (controls, line and paragraph separators, bidi overrides) as its
Python escape (``\\r``, ``\\n``, ``\\x1b``, ``\\u2028``) and leaves the rest, letters of every
script included, as it is. :func:`brief` writes an untrusted value short;
:class:`LogFormatter` keeps each record of the service's log on one line.
"""

from __future__ import annotations

import logging
import reprlib

from traitlets.config.application import LevelFormatter

_brief = reprlib.Repr()
_brief.maxlevel, _brief.maxstring, _brief.maxother, _brief.maxlong = 3, 60, 60, 40


def brief(value: object) -> str:
    """A short repr of an untrusted value for logs and reasons: bounded in length and
    depth (a plain repr of deeply nested JSON raises RecursionError)."""
    return _brief.repr(value)


def one_line(value: object) -> str:
    """`value` as text on one line: non-printable characters as backslash escapes."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class LogFormatter(LevelFormatter):
    """The service's log: one record, one line, whatever users put in names or their servers
    answer. The message is written with :func:`one_line`; the lines of a traceback are
    indented, as JupyterHub indents them, so that none reads as a record of its own."""

    def format(self, record: logging.LogRecord) -> str:
        msg, args = record.msg, record.args
        record.msg, record.args = one_line(record.getMessage()), None
        try:
            text = super().format(record)
        finally:
            record.msg, record.args = msg, args
        return "\n    ".join(text.splitlines())
