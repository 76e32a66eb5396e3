"""The first answer token's top candidates through ``/v1/chat/completions`` (letter log-probs
on a server: ``OpenAIServerModel.first_token_top``), and the start-up probe that settles the
``top_logprobs`` a server allows.

A request is the user turn, ``max_tokens: 1``, ``temperature: 0``, ``logprobs: true`` and
``top_logprobs: k``; the answer's ``choices[0].logprobs.content[0]`` holds the generated token
and its ``top_logprobs`` (OpenAI's shape, which vLLM and SGLang serve). ``k`` is the largest the
server allows: vLLM refuses more than its ``--max-logprobs`` (default 20) with HTTP 400 naming
the limit; the probe lowers ``k`` to it with a note. A server that answers without
log-probabilities (some do not implement them for chat) cannot be read so: the probe raises,
naming the endpoint and the generate mode.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from ..errors import ModelError
from .base import FirstTokenTop

if TYPE_CHECKING:
    from .server_client import ServerClient

#: ``top_logprobs`` asked first: OpenAI's own maximum and vLLM's default ``--max-logprobs``.
DEFAULT_TOP_LOGPROBS = 20
#: The probe's user turn (any short question does: only the answer's shape is read).
PROBE_TURN = "Answer with the letter of the correct option (A, B or C).\n\nA. yes\nB. no\nC. maybe"
_PATH = "/v1/chat/completions"
#: How servers name their limit in a refusal (vLLM: "... greater than max allowed: 20").
_LIMIT = (
    re.compile(r"max(?:imum)?\s+allowed\D{0,5}(\d+)", re.I),
    re.compile(r"max_logprobs\D{0,20}(\d+)", re.I),
    re.compile(r"top_logprobs\D{0,40}(?:<=|at most|between 0 and)\s*(\d+)", re.I),
)


class _Message(TypedDict):
    role: str
    content: str


class ChatRequest(TypedDict):
    """The body of one first-token read (``payload``)."""

    model: str
    messages: list[_Message]
    max_tokens: int
    temperature: float
    logprobs: bool
    top_logprobs: int


class _TopLogprob(TypedDict):
    token: str
    logprob: float


class _TokenLogprobs(TypedDict):
    token: str
    logprob: float
    top_logprobs: list[_TopLogprob]


class _ChoiceLogprobs(TypedDict):
    content: list[_TokenLogprobs]


class _ChatChoice(TypedDict):
    logprobs: _ChoiceLogprobs


class ChatCompletion(TypedDict):
    """The part of a ``/v1/chat/completions`` answer a read uses (OpenAI's shape). A server may
    leave any of it out, or send something else: ``first_token`` checks as it reads."""

    choices: list[_ChatChoice]


class _Settled(TypedDict):
    top_logprobs: int
    requested: int


class ChatLogprobsRecord(_Settled, total=False):
    """``ChatLogprobs.to_dict``: ``note`` only when the two differ."""

    note: str


@dataclass(frozen=True)
class ChatLogprobs:
    """What the probe settled for one server: the ``top_logprobs`` used, the one asked, and a
    note when the two differ."""

    top_logprobs: int
    requested: int
    note: str | None = None

    def to_dict(self) -> ChatLogprobsRecord:
        out: ChatLogprobsRecord = {"top_logprobs": self.top_logprobs, "requested": self.requested}
        if self.note:
            out["note"] = self.note
        return out


def payload(model: str, turn: str, k: int) -> ChatRequest:
    """The request body of one first-token read."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": turn}],
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": k,
    }


def first_token(body: ChatCompletion, where: str) -> FirstTokenTop | None:
    """The generated token and its top candidates from a chat answer; None when the answer holds
    no log-probabilities."""
    try:
        entry = body["choices"][0]["logprobs"]["content"][0]
        tops = entry["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(tops, list):
        return None
    try:
        cands = tuple((str(t["token"]), float(t["logprob"])) for t in tops)
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{where}: malformed top_logprobs in {json.dumps(body)[:300]}") from None
    token = entry.get("token")
    return FirstTokenTop(token if isinstance(token, str) else None, cands)


def read(client: ServerClient, model: str, turn: str, k: int) -> FirstTokenTop:
    """One first-token read of ``turn`` with ``top_logprobs: k``.

    Raises:
        ModelError: the request failed, or the answer holds no log-probabilities.
    """
    body = client.post(_PATH, payload(model, turn, k))
    top = first_token(body, client.url(_PATH))
    if top is None:
        raise ModelError(no_logprobs(client.url(_PATH), body))
    return top


def no_logprobs(where: str, body: object) -> str:
    """The message of a server that gives no chat log-probabilities."""
    return (
        f"{where} returned no log-probabilities for a chat request with logprobs: true "
        f"(answer: {json.dumps(body)[:200]}): this server cannot be read by letter log-probs; "
        "use --bbq-answer-mode generate (KoBBQ: --kobbq-mode generate) to read its generated text"
    )


def limit_in(message: str) -> int | None:
    """The ``top_logprobs`` limit a server's refusal names, or None.

    Examples
    --------
    >>> limit_in("Requested sample logprobs of 25, which is greater than max allowed: 20")
    20
    >>> limit_in("top_logprobs must be between 0 and 5")
    5
    """
    for pattern in _LIMIT:
        m = pattern.search(message)
        if m:
            return int(m.group(1))
    return None


def probe(client: ServerClient, model: str, k: int = DEFAULT_TOP_LOGPROBS) -> ChatLogprobs:
    """Ask one read with ``top_logprobs: k``; on a refusal that names a lower limit, ask again
    at it (with a note).

    Raises:
        ModelError: the server gives no log-probabilities for chat (naming the endpoint and the
            generate mode), refuses without naming a usable limit, or fails otherwise.
    """
    asked = k
    for _ in range(3):
        try:
            read(client, model, PROBE_TURN, k)
        except ModelError as e:
            limit = limit_in(str(e)) if "HTTP 400" in str(e) else None
            if limit is None or not 1 <= limit < k:
                raise
            k = limit
            continue
        note = None
        if k != asked:
            note = (
                f"top_logprobs {asked} is above what {client.url(_PATH)} allows; lowered to {k} "
                "(vLLM: --max-logprobs)"
            )
        return ChatLogprobs(k, asked, note)
    raise ModelError(f"{client.url(_PATH)}: top_logprobs refused at {k} and below")
