"""Credentials out of everything a run records or shows: ``http://user:PASS@host/v1`` (a
``--base-url``, an endpoint of a pool, an MLflow tracking URI, a data mirror) is kept as
``http://user:***@host/v1``; a user name alone (``https://TOKEN@host``, the way many tokens are
passed) as ``https://***@host``; the value of a query parameter that names a secret
(``?api_key=...``, ``token``, ``password``, ``sig``, ...) as ``***``.

Only the displayed form is changed: the request itself is made with the URL as given
(``models.server_client``). The run's record (``run.finish``: options and invocation) is redacted
where it is built, and ``report.results.build_results`` passes the whole document through
``redact`` again as a guard, so results.json and every file rendered from it (reports, JUnit
properties, model card, MLflow params) hold no credential whatever field a URL reached.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, TypeVar, overload

MASK = "***"

#: A JSON-like value handed back in the same shape.
_T = TypeVar("_T")

#: ``scheme://userinfo@``: the userinfo ends at the last ``@`` before the host (``/``, ``?``,
#: ``#``, whitespace, a quote or the end of the text ends the authority).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s'\"<>]*)@")

#: Query parameters whose value is a secret (the name, any case, ``-`` or ``_``).
_SECRET_PARAM = re.compile(
    r"(?P<key>[?&;](?:api[-_]?key|access[-_]?token|token|auth|password|passwd|pwd|secret|"
    r"client[-_]?secret|sig|signature|key)=)(?P<value>[^&#\s'\"<>]+)",
    re.IGNORECASE,
)


def _userinfo(m: re.Match) -> str:
    user, sep, password = m.group("userinfo").partition(":")
    if sep and password == MASK or not sep and user == MASK:
        return m.group(0)  # already redacted
    # A user name with a password is who connected: kept. A name alone may be the token.
    shown = f"{user}:{MASK}" if sep and user else MASK
    return f"{m.group('scheme')}{shown}@"


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it masked (see the module doc).

    Examples
    --------
    >>> redact_text("--base-url http://u:SECRET@127.0.0.1:8000/v1")
    '--base-url http://u:***@127.0.0.1:8000/v1'
    >>> redact_text("https://ghp_TOKEN@example.org/x?api_key=abc&n=1")
    'https://***@example.org/x?api_key=***&n=1'
    >>> redact_text("http://127.0.0.1:8000/v1 and me@example.org")
    'http://127.0.0.1:8000/v1 and me@example.org'
    >>> redact_text(redact_text("http://u:p@h/v1")) == redact_text("http://u:p@h/v1")
    True
    """
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(_userinfo, text)
    if "://" in text:
        text = _SECRET_PARAM.sub(lambda m: m.group("key") + MASK, text)
    return text


@overload
def map_strings(value: str, fn: Callable[[str], str]) -> str: ...
@overload
def map_strings(value: _T, fn: Callable[[str], str]) -> _T: ...
def map_strings(value: object, fn: Callable[[str], str]) -> object:
    """``value`` (JSON-like: mappings, lists, tuples, strings, numbers) with ``fn`` applied to
    every string in it, keys included; other values as they are. Returns a new object of the
    same shape (a tuple stays a tuple; a mapping becomes a plain dict)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {map_strings(k, fn): map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_strings(v, fn) for v in value)
    return value


@overload
def redact(value: str) -> str: ...
@overload
def redact(value: _T) -> _T: ...
def redact(value: object) -> object:
    """``value`` (JSON-like: dicts, lists, tuples, strings, numbers) with ``redact_text`` applied
    to every string in it, keys included (``map_strings``); other values as they are. Returns a
    new object of the same shape (a tuple stays a tuple; a dict subclass becomes a plain dict)."""
    return map_strings(value, redact_text)


def has_credentials(value: object) -> bool:
    """Whether any string in ``value`` still holds a credential ``redact`` would mask."""
    return redact(value) != value
