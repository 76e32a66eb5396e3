"""A model served by an OpenAI-compatible inference server (vLLM, SGLang, TGI, ...), or by a pool
of them serving one model (replicas, the nodes of a data-parallel deployment: ``pool.py``),
behind the suite's model interface.

The backend only runs requests; the session's engine (``engine.executor.Engine``) does dedupe,
the result cache, ordering, batching and progress, exactly as for the in-process model:

- ``forward_full``: prompt log-probabilities of whole token sequences from ``/v1/completions``
  with ``echo: true, logprobs: 1, max_tokens: 1`` and the token ids themselves as the prompt, so
  the server scores exactly the ids the boundary rule (``tokenization.encode_pair``) chose. The
  engine orders sequences lexicographically (``order_by_prefix``), so the choices of one context
  are adjacent and go out in one request of several prompts, where a server with a prefix cache
  for prompt log-probabilities can reuse the context (vLLM V1 does not: a request asking for
  prompt log-probabilities skips reading its prefix cache, so every prompt is prefilled whole).
- token ids: from the server's ``/tokenize`` (vLLM, SGLang) where it has one, else from the
  local tokenizer of the same model (``--tokenizer``, or ``--model`` when it is a zoo name or a
  local folder).
- generation (``generate_tokens``, run by the engine's generation path: dedupe, cache): greedy;
  a prompt made by ``chat_prompt`` goes to ``/v1/chat/completions`` as that one user turn (the
  server applies the model's own chat template), any other to ``/v1/completions`` as token ids.
- letter log-probs (``first_token_top``, ``chat_logprobs.py``): the user turn to
  ``/v1/chat/completions`` for one token with ``top_logprobs``; ``check_chat_logprobs`` (at
  start-up when a benchmark reads letters) settles the ``top_logprobs`` the server allows.

Before any scoring, ``check_alignment`` (``alignment.py``) verifies that the server's prompt
log-probabilities belong to the tokens sent; a server that fails it (llama.cpp's shifts them by
one) keeps only the ``generate`` capability, and a benchmark that needs scores stops the run.

With several endpoints, every one is inspected and checked at start-up and again before it comes
back after going away: it must serve the same model name with the same engine, tokenize a fixed
sentence the same way and give the alignment sentences the same log-probabilities as the first
endpoint that answered (the reference, whose fingerprint and check the results record), else it
is refused. Requests are routed by prefix group (``pool.group_key``): an item's context, so that
one server's prefix cache serves all of its choices.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypedDict, TypeVar

from ..errors import ModelError
from .base import (
    GENERATE,
    LETTER_LOGPROBS,
    LOGLIKELIHOOD,
    TOKEN_LOGPROBS,
    Backend,
    FirstTokenTop,
    Generations,
    ModelInfo,
    ScoreTokens,
    SentenceEncoding,
    TokenPrompts,
)
from .pool import Endpoint, EndpointPool, Job, ReplicaRefused, endpoint_notices, group_key
from .server_client import ServerClient, ServerUnavailable
from .tokenization import encode_pair, special_ids, texts_to_encode

if TYPE_CHECKING:
    from .alignment import AlignmentReport
    from .chat_logprobs import ChatLogprobs

T = TypeVar("T")
R = TypeVar("R")

#: Prompts per ``/v1/completions`` request: the choices of a context travel together (a BBQ item
#: has 3, EsBBQ 11) while one slow request holds back little.
PROMPTS_PER_REQUEST = 8


class ScoringUnavailable(ModelError):
    """The server cannot be trusted with log-probabilities (it failed the alignment check); a
    run that needs them stops at its first such gate (``stops_run``)."""

    stops_run = True


class OpenAIServerModel(Backend):
    """A served model (see the module doc). Made by ``connect``.

    Args:
        pool: the ``pool.EndpointPool`` of its server(s) (one endpoint without a pool).
        served_name: the model name the server serves (``--model``), sent in every request.
        info: provenance (``ModelInfo.server`` holds the reference server's metadata; ``info``
            adds each endpoint's live accounting).
        max_model_len: the servers' context window in tokens (``/v1/models``; the smallest).
        tokenizer: a local ``transformers`` tokenizer of the same model, or None.
        remote_tokenize: take token ids from the server's ``/tokenize`` (else ``tokenizer``).
        vllm: the server is vLLM (its extensions are used: token ids echoed back, checked).
        prompts_per_request: prompts per ``/v1/completions`` scoring request.
    Raises:
        ModelError: neither ``/tokenize`` nor a local tokenizer is available.
    """

    def __init__(
        self,
        pool: EndpointPool,
        served_name: str,
        info: ModelInfo,
        *,
        max_model_len: int,
        tokenizer=None,
        remote_tokenize: bool = False,
        vllm: bool = False,
        prompts_per_request: int = PROMPTS_PER_REQUEST,
    ):
        if tokenizer is None and not remote_tokenize:
            raise ModelError(
                f"model {served_name!r} at {pool.describe()}: the server has no "
                "/tokenize endpoint and no local tokenizer was found; pass "
                "--tokenizer <zoo name, folder or hub id of the same model>"
            )
        self.pool = pool
        self.served_name = served_name
        self._info = info
        self.tokenizer = tokenizer
        self.remote_tokenize = remote_tokenize
        self.vllm = vllm
        self.prompts_per_request = max(1, prompts_per_request)
        # One token of the window goes to the 1 generated token every echo request asks for.
        self.max_length = max(2, int(max_model_len) - 1)
        self._memo: dict[str, list[int]] = {}
        self._chat_turns: dict[str, str] = {}  # chat_prompt's text -> its user turn
        self._chat_ids: dict[tuple[int, ...], str] = {}  # its token ids -> the user turn
        self._warned_plain = False  # chat_prompt warned that there is no chat template
        if tokenizer is not None:
            self.bos, self.empty_prefix = special_ids(tokenizer)
        else:
            self.bos, self.empty_prefix = self._remote_specials()
        #: the ``alignment.AlignmentReport`` once checked (``check_alignment``), else None: the
        #: reference endpoint's; every other endpoint's agrees with it.
        self.alignment: AlignmentReport | None = None
        self._signature = ""
        #: per endpoint index, what ``_inspect`` found; ``reference``: the endpoint the others
        #: are checked against (the first that answered at start-up).
        self.inspected: dict[int, _Inspected] = {}
        self.reference = 0
        self._probe_ids: list[int] | None = None  # the reference's /tokenize of _PROBE
        #: the ``chat_logprobs.ChatLogprobs`` once probed (``check_chat_logprobs``), else None:
        #: until then the server is not read by letter log-probs.
        self.chat_logprobs: ChatLogprobs | None = None
        pool.admit = self._admit

    # -- engine-facing properties (see engine.executor's module doc) ------------------------------
    runs_forwards = True
    runs_generation = True
    #: the engine sends sequences in lexicographic order: one context's choices together.
    order_by_prefix = True
    vocab_size = 1  # logits stay on the server: the logits budget never binds
    #: letter log-probs come from the chat API's top candidates, not from exact forwards.
    reads_top_candidates = True
    logits_budget = 1 << 62
    token_budget = 1 << 62

    @property
    def info(self) -> ModelInfo:
        """Provenance, with every endpoint's accounting as of now (``pool.Endpoint.accounting``:
        read when the run's results are written, so they hold the whole run's counts) and a
        line for each endpoint taken out (``pool.endpoint_notices``)."""
        server = dict(self._info.server or {})
        endpoints = self.pool.accounting()
        server["endpoints"] = endpoints
        server["pool"] = self.pool.summary()
        server["notices"] = endpoint_notices(endpoints)
        return dataclasses.replace(self._info, server=server)

    @property
    def batch_size(self) -> int:
        """Sequences per engine batch: a few waves of requests filling every endpoint's slots
        (results reach the result cache after each batch, so a crash loses at most one batch)."""
        return self.pool.slots * self.prompts_per_request * 4

    @property
    def cache_key(self) -> str:
        """What besides the token ids decides a score: ``server|`` (never mixed with an
        in-process model's values), the fingerprint (``connect``), the server's engine and
        version, and a signature of the alignment sentences' log-probabilities rounded to 0.05
        nats, which changes with the weights, dtype or kernels the server runs (a restart with
        another ``--dtype`` gets new keys; float noise rarely crosses a rounding edge, and then
        only costs a recomputation)."""
        server = self._info.server or {}
        return f"server|{self._info.fingerprint}|{server.get('engine')}|{self._signature}"

    @property
    def capabilities(self) -> frozenset[str]:  # type: ignore[override]
        letters: frozenset[str] = (
            frozenset({LETTER_LOGPROBS}) if self.chat_logprobs is not None else frozenset()
        )
        if self.alignment is not None and not self.alignment.ok:
            return frozenset({GENERATE}) | letters
        return frozenset({LOGLIKELIHOOD, TOKEN_LOGPROBS, GENERATE}) | letters

    def require_scores(self, needed: frozenset[str]) -> None:
        """Raise ``ScoringUnavailable`` when ``needed`` holds a scoring capability and the
        alignment check failed (its reason in the message)."""
        if needed & {LOGLIKELIHOOD, TOKEN_LOGPROBS} and self.alignment is not None and not self.alignment.ok:
            raise ScoringUnavailable(
                f"server {self.pool.describe()} ({self.served_name}) failed the start-up alignment "
                f"check of its prompt log-probabilities: {self.alignment.reason}. Scores from it "
                "would be wrong, so audits that need log-likelihoods stop here; audits that only "
                "generate text (KoBBQ, KGQuiz in generate mode) still run against it."
            )

    # -- tokenization ---------------------------------------------------------------------------
    def _tokenize(
        self, text: str, add_special_tokens: bool = False, *, endpoint: Endpoint | None = None
    ) -> list[int]:
        if not self.remote_tokenize:
            return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
        return self.pool.call(lambda c: self._tokenize_on(c, text, add_special_tokens), endpoint=endpoint)

    def _tokenize_on(self, client: ServerClient, text: str, add_special_tokens: bool = False) -> list[int]:
        body = client.post(
            "/tokenize", {"model": self.served_name, "prompt": text, "add_special_tokens": add_special_tokens}
        )
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise ModelError(f"{client.url('/tokenize')}: no token list in the answer {body!r:.200}")
        return [int(t) for t in tokens]

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (memoized: each string is tokenized once)."""
        ids = self._memo.get(text)
        if ids is None:
            ids = self._memo[text] = self._tokenize(text)
        return list(ids)

    def _prefetch(self, texts: Sequence[str]) -> None:
        """Tokenize the not yet memoized ``texts`` (concurrently when remote)."""
        todo = list(dict.fromkeys(t for t in texts if t and t not in self._memo))
        if not todo:
            return
        if self.remote_tokenize:
            for text, ids in zip(todo, self.pool.map(self._tokenize_on, todo)):
                self._memo[text] = ids
        else:
            for text in todo:
                self._memo[text] = self._tokenize(text)

    def _remote_specials(self) -> tuple[list[int], list[int]]:
        # The ids the server's tokenizer adds by default are its BOS; without one, the empty
        # context has no known stand-in (an EOS id is not reported by /tokenize).
        plain = self._tokenize("a")
        full = self._tokenize("a", add_special_tokens=True)
        bos = full[: len(full) - len(plain)] if full[len(full) - len(plain) :] == plain else []
        return bos, list(bos[:1])

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of (context, continuation) under ``tokenization.encode_pair``.

        Raises:
            ValueError: an empty continuation, or one that encodes to no token.
        """
        return encode_pair(self.encode_text, context, continuation, self.bos, self.empty_prefix)

    def encode_pairs(self, requests: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``encode_pair`` of every request, the strings tokenized concurrently first."""
        self._prefetch([t for c, x in requests for t in texts_to_encode(c, x)])
        return [self.encode_pair(c, x) for c, x in requests]

    def encode_sentence(self, text: str) -> SentenceEncoding:
        """The conditioning prefix (BOS, else EOS) + the tokens of ``text``, as the in-process
        backend encodes it.

        Raises:
            ValueError: ``text`` encodes to no token. ModelError: no BOS/EOS id is known.
        """
        if not self.empty_prefix:
            raise ModelError(
                f"{self.served_name}: the server's tokenizer adds no BOS token and "
                "its EOS id is unknown without a local tokenizer; pass --tokenizer"
            )
        ids = self.encode_text(text)
        if not ids:
            raise ValueError(f"sentence {text!r} encodes to no token")
        prefix = list(self.empty_prefix)
        return SentenceEncoding(tuple(prefix + ids), tuple([True] * len(prefix) + [False] * len(ids)))

    def echo(
        self,
        sequences: Sequence[Sequence[int]],
        extra: dict | None = None,
        *,
        keys: Sequence[bytes] | None = None,
        endpoint: Endpoint | None = None,
    ) -> list[dict]:
        """Prompt log-probabilities of whole sequences, as the server reports them, several
        prompts per request: routed by prefix group (``keys``, one per sequence; default each
        sequence's first cache block), or all to ``endpoint`` (the start-up checks: then no
        sequence counts as scored).

        Returns:
            per sequence ``{"logprobs": [float | None per position, then the generated token],
            "tokens": [echoed token ids] or None}``; ids are echoed by vLLM only.
        Raises:
            ModelError: the request failed, or the answer lacks log-probabilities.
        """
        payload = {
            "model": self.served_name,
            "echo": True,
            "logprobs": 1,
            "max_tokens": 1,
            "temperature": 0,
            **(extra or {}),
        }
        if self.vllm:
            payload["return_tokens_as_token_ids"] = True

        def one(client: ServerClient, group) -> list[dict]:
            body = client.post("/v1/completions", {**payload, "prompt": [list(s) for s in group]})
            return _echoed(body, len(group), client.url("/v1/completions"))

        def job(group: list, group_keys: tuple[bytes, ...] = ()) -> Job:
            return Job(
                lambda c: one(c, group),
                keys=group_keys,
                scored=0 if endpoint is not None else len(group),
                tokens=sum(len(s) + 1 for s in group),  # each prompt, and its 1 generated token
            )

        if endpoint is not None:
            per = self.prompts_per_request
            pinned = [job(list(sequences[i : i + per])) for i in range(0, len(sequences), per)]
            return [r for j in pinned for r in self.pool.call(j.fn, endpoint=endpoint, tokens=j.tokens)]
        if keys is None:
            keys = [group_key(s, 0) for s in sequences]
        return self.pool.run_grouped(list(sequences), list(keys), self.prompts_per_request, job)

    def forward_full(self, seqs: list[list[int]], positions) -> list[list[float]]:
        """log P(ids[p] | ids[:p]) at ``positions`` of each sequence, from the server's prompt
        log-probabilities (``echo``); the engine's full-sequence path calls this.

        Raises:
            ModelError: a requested position has no finite value, or the server echoed other
                token ids than were sent.
        """
        # An item's choices share their context (the tokens before the first scored one): one
        # group, one server.
        keys = [group_key(s, min(p) if len(p) else len(s)) for s, p in zip(seqs, positions)]
        rows = self.echo(seqs, keys=keys)
        out = []
        for seq, pos, row in zip(seqs, positions, rows):
            if row["tokens"] is not None and row["tokens"][: len(seq)] != list(seq):
                raise ModelError(
                    f"{self.pool.describe()}: the server scored other tokens than it was "
                    f"sent (first 8 sent {list(seq)[:8]}, echoed {row['tokens'][:8]})"
                )
            lps = row["logprobs"]
            values = []
            for p in pos:
                v = lps[p] if p < len(lps) else None
                if v is None or not math.isfinite(v):
                    raise ModelError(
                        f"{self.pool.describe()}: no prompt log-probability at position "
                        f"{p} of a {len(seq)}-token prompt (got {len(lps)} values)"
                    )
                values.append(float(v))
            out.append(values)
        return out

    def next_token(
        self, ids: Sequence[int], *, endpoint: Endpoint | None = None
    ) -> tuple[int | None, float, str]:
        """The greedy next token after ``ids`` as the server (``endpoint``, else any) generates
        it: (its id when the server reports ids, else None; its log-probability from the
        generation path; its text).

        Raises:
            ModelError: the request failed or the answer has no log-probability.
        """
        payload = {
            "model": self.served_name,
            "prompt": [list(ids)],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": 1,
        }
        if self.vllm:
            payload["return_tokens_as_token_ids"] = True
        body, where = self.pool.call(
            lambda c: (c.post("/v1/completions", payload), c.url("/v1/completions")),
            endpoint=endpoint,
            tokens=len(ids) + 1,
        )
        try:
            choice = body["choices"][0]
            lp = choice["logprobs"]
            token, value = lp["tokens"][0], lp["token_logprobs"][0]
        except (KeyError, IndexError, TypeError):
            raise ModelError(
                f"{where}: no log-probability of the generated token in {json.dumps(body)[:300]}"
            ) from None
        token_id = _token_id(token)
        return token_id, float(value), choice.get("text", "")

    def check_alignment(self) -> None:
        """Run the start-up alignment check once (``alignment.check_alignment``) on every
        endpoint that is up, concurrently. The report of the first endpoint that answers (the
        reference) is the model's; every other endpoint must agree with it
        (``alignment.compare_replicas``). On a failed check the model keeps only the
        ``generate`` capability and a warning goes to stderr.

        Raises:
            ModelError: an endpoint disagrees with the reference (it is named, with the reason).
            ServerUnavailable: no endpoint answered (each one is named, with why): endpoints
                that cannot be reached are taken out, as at start-up, and the reference moves
                to the first one that answered.
        """
        from .alignment import check_alignment, compare_replicas

        if self.alignment is not None:
            return
        answered = self._answering(lambda e: check_alignment(_Pinned(self, e)))
        reference, report = answered[0]
        for e, other in answered[1:]:
            why = compare_replicas(report, other)
            if why:
                raise ModelError(_refusal(e.url, reference.url, why))
        self.alignment = report
        self._signature = report.signature
        server = dict(self._info.server or {})
        server["alignment"] = report.to_dict()
        self._info = dataclasses.replace(self._info, server=server)
        if not report.ok:
            print(
                f"bias audit: WARNING: {self.pool.describe()} failed the prompt log-probability "
                f"alignment check ({report.reason}); only generation audits can run against it",
                file=sys.stderr,
            )

    def check_replica_tokenizers(self) -> None:
        """Every endpoint's ``/tokenize`` of a fixed sentence must be the reference's (the first
        endpoint that answers it: ``_answering``).

        Raises:
            ModelError: one differs (it is named, with both token lists).
            ServerUnavailable: no endpoint answered.
        """
        if not self.remote_tokenize:
            return
        answered = self._answering(lambda e: self._tokenize(_PROBE, endpoint=e))
        reference, self._probe_ids = answered[0]
        for e, ids in answered[1:]:
            if ids != self._probe_ids:
                raise ModelError(_refusal(e.url, reference.url, _tokenizer_differs(ids, self._probe_ids)))

    def _answering(self, check: Callable[[Endpoint], R]) -> list[tuple[Endpoint, R]]:
        """``check(endpoint)`` on every endpoint up, concurrently: (endpoint, result) of those
        that answered, in the order given. One that cannot be reached is taken out, its reason
        recorded (it is probed again later), as at start-up; the first that answered becomes
        the reference (``_set_reference``): a reference that stops answering during the
        start-up checks hands over to the next endpoint instead of stopping the run.

        Raises:
            ServerUnavailable: none answered (``_none_answered``: each endpoint and why; a
                single server's own error). Exception: another error of an endpoint's check.
        """
        up = self.pool.up
        answered: list[tuple[Endpoint, R]] = []
        for e, result in zip(up, _each(check, up)):
            if isinstance(result, ServerUnavailable) and len(self.pool.endpoints) > 1:
                self.pool.take_out(e, str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                answered.append((e, result))
        if not answered:
            raise _none_answered(self.pool)
        self._set_reference(answered[0][0])
        return answered

    def _set_reference(self, e: Endpoint) -> None:
        """Make ``e`` the reference: the provenance (``info``: URL, model folder, context
        window, fingerprint) becomes its own."""
        if e.index == self.reference:
            return
        self.reference = e.index
        fingerprint, fields = _reference_fields(self.inspected[e.index], e.url, self.served_name)
        server = {**(self._info.server or {}), **fields}
        self._info = dataclasses.replace(self._info, fingerprint=fingerprint, server=server)

    def _admit(self, e: Endpoint) -> None:
        """The checks an endpoint that went away passes before it takes requests again: the
        start-up ones (``_inspect``, the same tokenization, the alignment check agreeing with the
        reference's).

        Raises:
            ServerUnavailable: it still cannot be reached. ReplicaRefused: it now serves
                something else (it stays out for the rest of the run).
        """
        from .alignment import check_alignment, compare_replicas

        try:
            found = _inspect(e.client, self.served_name, timeout=self.pool.probe_timeout)
        except ServerUnavailable:
            raise
        except ModelError as err:
            raise ReplicaRefused(str(err)) from None
        reference = self.inspected[self.reference]
        why = _static_difference(reference, found)
        if not why and self.remote_tokenize and self._probe_ids is not None:
            ids = self._tokenize(_PROBE, endpoint=e)
            why = _tokenizer_differs(ids, self._probe_ids) if ids != self._probe_ids else ""
        if not why and self.alignment is not None:
            why = compare_replicas(self.alignment, check_alignment(_Pinned(self, e)))
        if why:
            raise ReplicaRefused(_refusal(e.url, self.pool.endpoints[self.reference].url, why))
        self.inspected[e.index] = found

    # -- letter log-probs ------------------------------------------------------------------------
    def check_chat_logprobs(self, top_logprobs: int | None = None) -> None:
        """Probe the reference endpoint's chat log-probabilities once (``chat_logprobs.probe``):
        the ``top_logprobs`` it allows (lowered from ``top_logprobs`` with a note on stderr),
        recorded in ``info.server["letter_read"]``.

        Raises:
            ModelError: the server gives no log-probabilities for chat (the message names the
                endpoint and the generate mode), or the probe failed.
        """
        from .chat_logprobs import DEFAULT_TOP_LOGPROBS, probe

        if self.chat_logprobs is not None:
            return
        k = top_logprobs or DEFAULT_TOP_LOGPROBS
        found = self.pool.call(
            lambda c: probe(c, self.served_name, k), endpoint=self.pool.endpoints[self.reference]
        )
        if found.note:
            print(f"bias audit: NOTE: {found.note}", file=sys.stderr)
        self.chat_logprobs = found
        server = dict(self._info.server or {})
        server["letter_read"] = self.letter_read_info()
        self._info = dataclasses.replace(self._info, server=server)

    def letter_read_info(self) -> dict | None:
        """The endpoint's model name, the chat path and the ``top_logprobs`` used (None before
        ``check_chat_logprobs``)."""
        if self.chat_logprobs is None:
            return None
        return {
            "via": "/v1/chat/completions top_logprobs",
            "served_model": self.served_name,
            "endpoint": self.pool.endpoints[self.reference].url,
            **self.chat_logprobs.to_dict(),
        }

    def first_token_top(self, prompts: Sequence[str]) -> list[FirstTokenTop]:
        """Per prompt made by ``chat_prompt``, its user turn read for one token with the
        probed ``top_logprobs`` (concurrently; ``chat_logprobs.read``).

        Raises:
            ModelError: not probed, a prompt ``chat_prompt`` did not make (no local chat template,
                or ``--chat-template FILE``: the server applies its own), or a failed request.
        """
        from .chat_logprobs import read

        if self.chat_logprobs is None:
            raise ModelError(f"{self.pool.describe()}: chat log-probabilities were not probed at start-up")
        turns = [self._chat_turns.get(p) for p in prompts]
        if any(t is None for t in turns):
            raise ModelError(
                f"{self.served_name}: letter log-probs go through /v1/chat/completions, which applies "
                "the server's own chat template: they need the served model's local chat template "
                "(--tokenizer) and no --chat-template FILE"
            )
        k = self.chat_logprobs.top_logprobs
        return self.pool.map(
            lambda c, turn: read(c, self.served_name, turn, k),
            turns,
            keys=[hashlib.sha256(t.encode("utf-8")).digest()[:16] for t in turns],  # type: ignore[union-attr]
            generated=1,
        )

    # -- generation ------------------------------------------------------------------------------
    def chat_prompt(self, user_message: str) -> str | None:
        """The local tokenizer's rendering of one user turn (what records hash); ``generate``
        sends such a prompt to ``/v1/chat/completions`` as the user turn itself, so the server
        applies the same template. None without a local chat template."""
        template = self.chat_template
        if not template:
            if not self._warned_plain and self._template_choice == "auto":
                # An instruct model prompted without its template answers another task: say so.
                self._warned_plain = True
                print(
                    f"bias audit: WARNING: no local chat template for {self.served_name!r} (pass "
                    "--tokenizer with the served model's tokenizer): generation prompts go to "
                    "/v1/completions as plain text, records say prompt_format: plain",
                    file=sys.stderr,
                )
            return None
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user_message}],
            chat_template=template,
            tokenize=False,
            add_generation_prompt=True,
        )
        if self._template_text is None:
            # The server applies the model's own template to a chat turn; a template of the
            # user's (--chat-template FILE) is sent rendered, as a plain completion.
            self._chat_turns[text] = user_message
        return text

    @property
    def chat_template(self) -> str | None:
        return self._chosen_template(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a generation prompt as the in-process backend reads it: BOS (when the
        tokenizer adds one and the prompt does not already start with it) + ``prompt``."""
        ids = self.encode_text(prompt)
        if self.bos and ids[: len(self.bos)] != self.bos:
            ids = list(self.bos) + ids
        turn = self._chat_turns.get(prompt)
        if turn is not None:
            self._chat_ids[tuple(ids)] = turn
        return ids

    def encode_continuation(self, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
        """``Backend.encode_continuation`` (the in-process backend's rule: no whitespace moves),
        both strings tokenized concurrently first.

        Raises:
            ValueError: an empty prompt or continuation.
        """
        if prompt and continuation:
            self._prefetch([prompt, prompt + continuation])
        return super().encode_continuation(prompt, continuation)

    def generate_tokens(
        self, prompts: TokenPrompts, max_new_tokens: int, score_tokens: ScoreTokens = None
    ) -> Generations:
        """Greedy completions (``temperature: 0``) of a batch of token-id prompts, concurrently
        (the engine's generation contract, ``engine.generation``): the text after each prompt
        (no stop string applied), the tokens the server ran (prompt tokens + generated ones it
        reports), and, with ``score_tokens``, each token's log-probability right after its
        prompt from the prompt path (one echo request per token, as a scoring request would).

        A prompt ``chat_prompt`` made goes to ``/v1/chat/completions`` as its user turn (the
        server applies the model's template); any other goes to ``/v1/completions`` as token ids.

        Raises:
            ValueError: ``max_new_tokens < 1``. ModelError: a request failed.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        results = self.pool.map(
            lambda c, ids: self._generate_one(c, ids, max_new_tokens),
            prompts,
            keys=[group_key(p, len(p)) for p in prompts],
            generated=1,
            tokens_of=lambda ids, result: len(ids) + result[1],
        )
        texts = [t for t, _ in results]
        forwarded = sum(len(p) for p in prompts) + sum(n for _, n in results)
        first = None
        if score_tokens is not None:
            self.require_scores(frozenset({LOGLIKELIHOOD}))
            seqs = [list(p) + [t] for p, toks in zip(prompts, score_tokens) for t in toks]
            values = iter(self.forward_full(seqs, [[len(s) - 1] for s in seqs]) if seqs else [])
            first = [[next(values)[0] for _ in toks] for toks in score_tokens]
        return texts, forwarded, first

    def _generate_one(self, client: ServerClient, ids: list[int], max_new_tokens: int) -> tuple[str, int]:
        common = {"model": self.served_name, "max_tokens": max_new_tokens, "temperature": 0}
        turn = self._chat_ids.get(tuple(ids))
        if turn is not None:
            path = "/v1/chat/completions"
            body = client.post(path, {**common, "messages": [{"role": "user", "content": turn}]})
            text = _first(body, ("message", "content"))
        else:
            path = "/v1/completions"
            body = client.post(path, {**common, "prompt": [list(ids)]})
            text = _first(body, ("text",))
        if text is None:
            raise ModelError(f"{client.url(path)}: no generated text in {json.dumps(body)[:300]}")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return text, int(usage.get("completion_tokens") or 0)


def _first(body: dict, keys: tuple[str, ...]):
    try:
        value = body["choices"][0]
        for k in keys:
            value = value[k]
        return value if isinstance(value, str) else ("" if value is None else None)
    except (KeyError, IndexError, TypeError):
        return None


def _token_id(token) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token.removeprefix("token_id:"))
        except ValueError:
            return None
    return None


def _echoed(body: dict, n: int, where: str) -> list[dict]:
    """Per prompt of one echo request (in prompt order): its log-probabilities and echoed ids."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != n:
        raise ModelError(f"{where}: expected {n} choices, got {json.dumps(body)[:300]}")
    rows = []
    for choice in sorted(choices, key=lambda c: c.get("index", 0)):
        lp = choice.get("logprobs") or {}
        values = lp.get("token_logprobs")
        if not isinstance(values, list):
            raise ModelError(
                f"{where}: the server returned no prompt log-probabilities (echo with "
                f"logprobs unsupported?): {json.dumps(choice)[:300]}"
            )
        ids = [_token_id(t) for t in lp.get("tokens") or []]
        rows.append(
            {
                "logprobs": [None if v is None else float(v) for v in values],
                "tokens": ids if ids and all(i is not None for i in ids) else None,
            }
        )
    return rows


class _Pinned:
    """The model's requests pinned to one endpoint, for ``alignment.check_alignment``."""

    def __init__(self, model: OpenAIServerModel, endpoint: Endpoint):
        self.model = model
        self.endpoint = endpoint
        self.empty_prefix = model.empty_prefix

    def encode_text(self, text: str) -> list[int]:
        return self.model.encode_text(text)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        return self.model.encode_pair(context, continuation)

    def echo(self, sequences, extra: dict | None = None) -> list[dict]:
        return self.model.echo(sequences, extra, endpoint=self.endpoint)

    def next_token(self, ids):
        return self.model.next_token(ids, endpoint=self.endpoint)


def _each(fn: Callable[[T], R], items: Sequence[T]) -> list[R | BaseException]:
    """``fn(x)`` for every item at once (one thread each: start-up checks of each endpoint);
    per item its result or the exception it raised."""
    if len(items) <= 1:
        out: list[R | BaseException] = []
        for x in items:
            try:
                out.append(fn(x))
            except Exception as e:  # noqa: BLE001 - returned to the caller, who decides
                out.append(e)
        return out
    with ThreadPoolExecutor(len(items), thread_name_prefix="bias-audit-endpoint") as ex:
        futures = [ex.submit(fn, x) for x in items]
        return [f.exception() or f.result() for f in futures]


def _none_answered(pool: EndpointPool) -> ServerUnavailable:
    """Start-up found no endpoint that answers: each one and why (one server: its own error)."""
    if len(pool.endpoints) == 1:
        e = pool.endpoints[0]
        return ServerUnavailable(e.reason or f"{e.url} does not answer")
    listed = "; ".join(f"{e.url}: {e.reason or e.state}" for e in pool.endpoints)
    return ServerUnavailable(f"no endpoint of the pool answers the start-up checks: {listed}")


def _reference_fields(ref: "_Inspected", url: str, model: str) -> tuple[str, dict[str, object]]:
    """The fingerprint and the reference's own entries of ``ModelInfo.server``, from what the
    reference endpoint at ``url`` said about itself.

    Fingerprint (``ModelInfo.fingerprint``, part of the cache key): the sha256 of the weight
    files when the folder the reference server reports as the model's ``root`` exists on this
    machine (a local server, as in the suite's tests), else ``server-metadata:sha256:<hex>`` of
    the served name, ``root`` and ``max_model_len`` from ``/v1/models`` and the server's version:
    that identifies the deployment, not the weights, which a remote server does not disclose.
    """
    weights = ref.root if ref.root and Path(ref.root).is_dir() else None
    if weights is not None:
        from .zoo import weights_fingerprint

        fingerprint = weights_fingerprint(Path(weights))
    else:
        meta = json.dumps(
            {"id": model, "root": ref.root, "max_model_len": ref.max_len, "engine": ref.engine},
            sort_keys=True,
        )
        fingerprint = f"server-metadata:sha256:{hashlib.sha256(meta.encode()).hexdigest()}"
    return fingerprint, {
        "base_url": url,
        "root": ref.root,
        "max_model_len": ref.max_len,
        "fingerprint_basis": "weights in the server's model folder" if weights else "server metadata",
    }


def _refusal(url: str, reference: str, why: str) -> str:
    return (
        f"endpoint {url} is refused: {why} (the first endpoint that answered, {reference}, is the "
        "reference; every endpoint of a pool must serve the same model with the same engine, "
        "tokenizer and dtype)"
    )


def _tokenizer_differs(ids: list[int], reference: list[int]) -> str:
    return (
        f"its /tokenize splits a fixed sentence otherwise ({ids[:8]}... vs {reference[:8]}...): "
        "another tokenizer, so another model"
    )


# -- connecting -------------------------------------------------------------------------------------
def _local_tokenizer(name: str | None, root: str | None):
    """(tokenizer, where it came from, why none loaded) for ``name`` (a zoo name, folder or hub
    id in the local Hugging Face cache), else the server's model folder when it exists here;
    (None, None, the last failure's message) when none loads."""
    from transformers import AutoTokenizer

    from .zoo import ZOO, materialize

    candidates = []
    if name:
        if name in ZOO:
            candidates.append((lambda: materialize(name), f"zoo:{name}"))
        elif Path(name).expanduser().is_dir():
            candidates.append((lambda: Path(name).expanduser(), f"folder:{name}"))
        elif "/" in name:
            candidates.append((lambda: name, f"hub:{name}"))
    if root and Path(root).is_dir():
        candidates.append((lambda: Path(root), f"server folder:{root}"))
    why = None
    for get, where in candidates:
        try:
            return AutoTokenizer.from_pretrained(str(get())), where, None
        except (OSError, ValueError, ModelError) as e:
            why = f"{where}: {' '.join(str(e).split())[:300]}"
    return None, None, why


def connect(
    base_url: str | Sequence[str],
    model: str | None,
    *,
    api_key_env: str = "OPENAI_API_KEY",
    tokenizer: str | None = None,
    max_concurrency: int = 8,
    timeout: float = 120.0,
    max_retries: int = 5,
    transport=None,
    check: bool = True,
    letters: bool = False,
) -> OpenAIServerModel:
    """Connect to the server(s) at ``base_url`` serving ``model`` and run the alignment check.

    Several URLs make a pool (``pool.EndpointPool``), checked concurrently as the module doc
    says: one that cannot be reached is taken out (probed again during the run), one that
    differs from the reference is refused (``ModelError``); only when none answers does start-up
    fail for being unreachable (``ServerUnavailable`` naming each endpoint and why).
    The fingerprint (``ModelInfo.fingerprint``, part of the cache key) is ``_reference_fields``'.

    Args:
        base_url: the API root, ``http://host:port/v1``, or several (a pool).
        model: the served model name (``--model``), also tried as a local tokenizer; None: the
            server's only model.
        api_key_env: the environment variable holding the API key (unset: no key sent); the
            same key goes to every endpoint.
        tokenizer: a zoo name, folder or hub id of the same model's tokenizer (default: try
            ``model``, then the server's model folder).
        max_concurrency: requests in flight per endpoint; timeout, max_retries: per request
            (see ``ServerClient``).
        transport: an ``httpx`` transport (tests). check: run the alignment check now.
        letters: probe the chat log-probabilities now (``check_chat_logprobs``).
    Raises:
        ModelError: no endpoint can be reached (``ServerUnavailable``), one does not serve
            ``model`` (the served names are listed) or disagrees with the reference, neither
            ``/tokenize`` nor a local tokenizer exists, or the two disagree on a fixed sentence.
        ConfigError: a malformed URL or setting, or a URL given twice.
    """
    settings: _Settings = {"max_concurrency": max_concurrency, "timeout": timeout, "max_retries": max_retries}
    pool = _pool(base_url, os.environ.get(api_key_env) or None, transport, settings)
    found = _inspect_pool(pool, model)
    reference = pool.up[0]
    ref: _Inspected = found[reference.index]
    tok, tok_source = _tokenizer_for(tokenizer, ref)
    m = OpenAIServerModel(
        pool,
        ref.model,
        _server_info(ref, reference.url, pool.urls, tok_source, api_key_env),
        max_model_len=min(found[e.index].max_len for e in pool.up),
        tokenizer=tok,
        remote_tokenize=ref.remote,
        vllm=ref.vllm,
    )
    m.reference = reference.index
    m.inspected = {e.index: found[e.index] for e in pool.up}
    m.check_replica_tokenizers()
    if ref.remote and tok is not None:
        _check_same_tokenizer(m, tok, tok_source)
    return _checked(m, check, letters)


def _checked(m: OpenAIServerModel, check: bool, letters: bool) -> OpenAIServerModel:
    """``m`` after the start-up checks asked: the alignment check (``check``), the chat
    log-probabilities' probe (``letters``: a benchmark reads letter log-probs)."""
    if check:
        m.check_alignment()
    if letters:
        m.check_chat_logprobs()
    return m


def _tokenizer_for(tokenizer: str | None, ref: "_Inspected"):
    """(local tokenizer or None, where it came from): ``tokenizer`` when given, else the served
    model's (``_local_tokenizer``).

    Raises:
        ModelError: ``tokenizer`` was given and does not load.
    """
    tok, tok_source, why = _local_tokenizer(tokenizer or ref.model, ref.root)
    if tokenizer and tok is None:
        raise ModelError(
            f"--tokenizer {tokenizer!r}: no tokenizer could be loaded from it ({why}; "
            "a hub id must be in the local Hugging Face cache under HF_HUB_OFFLINE=1, "
            "or pass a local folder)"
        )
    return tok, tok_source


class _Settings(TypedDict):
    """A ``ServerClient``'s settings, the same for every endpoint of a pool."""

    max_concurrency: int
    timeout: float
    max_retries: int


def _pool(base_url: str | Sequence[str], key: str | None, transport, settings: _Settings) -> EndpointPool:
    """The pool of the server(s) at ``base_url`` (their URLs with credentials masked).

    Raises:
        ConfigError: no URL, a malformed URL or setting, or a URL given twice.
    """
    from ..errors import ConfigError

    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    if not urls:
        raise ConfigError("--backend openai needs --base-url (the server's API root)")
    try:
        clients = [ServerClient(url, key, transport=transport, **settings) for url in urls]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    public = [_public_url(c.base_url) for c in clients]
    twice = sorted({u for u in public if public.count(u) > 1})
    if twice:
        raise ConfigError(f"--base-url {twice[0]} is given twice (each endpoint once)")
    return EndpointPool(clients, public)


def _inspect_pool(pool: EndpointPool, model: str | None) -> list[Any]:
    """Every endpoint's ``_inspect``, concurrently: in a pool, one that cannot be reached is
    taken out (probed again during the run); every endpoint up must agree with the first one up
    (``_static_difference``), the reference for now: the later start-up checks move it to the
    next endpoint when it stops answering (``OpenAIServerModel._answering``). Returns per
    endpoint index what it said (or its error).

    Raises:
        ServerUnavailable: none answered. ModelError: one does not serve ``model`` or differs.
    """
    many = len(pool.endpoints) > 1
    found = _each(lambda e: _inspect(e.client, model), pool.endpoints)
    for e, f in zip(pool.endpoints, found):
        if isinstance(f, ServerUnavailable) and many:
            pool.take_out(e, str(f))
        elif isinstance(f, BaseException):
            if many and isinstance(f, ModelError):
                raise ModelError(f"endpoint {e.url} is refused: {f}") from None
            raise f
    if not pool.up:
        raise _none_answered(pool)
    reference = pool.up[0]
    for e in pool.up[1:]:
        why = _static_difference(found[reference.index], found[e.index])
        if why:
            raise ModelError(_refusal(e.url, reference.url, why))
    return found


def _server_info(ref: "_Inspected", url: str, public: list[str], tok_source, api_key_env: str) -> ModelInfo:
    """The model's provenance from the reference endpoint (at ``url``) of the pool ``public``."""
    fingerprint, fields = _reference_fields(ref, url, ref.model)
    server = {
        **fields,
        "served_model": ref.model,
        "engine": ref.engine,
        "tokenizer": "server /tokenize" if ref.remote else tok_source,
        "local_tokenizer": tok_source,
        "api_key_env": api_key_env,
        "api_key_set": bool(os.environ.get(api_key_env)),
    }
    where = url if len(public) == 1 else ", ".join(public)
    return ModelInfo(
        name=ref.model,
        source=f"server:{where} ({ref.engine})"
        if len(public) == 1
        else f"server pool:{where} ({ref.engine})",
        fingerprint=fingerprint,
        dtype="server-side (not reported)",
        device=where,
        n_parameters=0,
        kind="causal",
        server=server,
    )


@dataclasses.dataclass
class _Inspected:
    """What one endpoint says about itself (``_inspect``)."""

    model: str
    engine: str
    vllm: bool
    root: str | None
    max_len: int
    remote: bool


def _inspect(client: ServerClient, model: str | None, timeout: float | None = None) -> _Inspected:
    """The model ``client``'s server serves as ``model`` (None: its only one), its engine and
    version, context window and whether it has ``/tokenize``.

    Raises:
        ServerUnavailable: it cannot be reached. ModelError: it does not serve ``model``.
    """
    listing = client.get("/v1/models", retry=timeout is None, timeout=timeout)
    entries = [m for m in listing.get("data", []) if isinstance(m, dict)]
    if model is None and len(entries) == 1:  # no --model: the one model the server serves
        model = str(entries[0].get("id"))
    entry = next((m for m in entries if m.get("id") == model), None)
    if entry is None:
        served = ", ".join(str(m.get("id")) for m in entries) or "none"
        raise ModelError(
            f"server {client.base_url} does not serve model {model!r}; it serves: "
            f"{served} (pass one of them as --model)"
        )
    version = _server_version(client)
    vllm = entry.get("owned_by") == "vllm" and version is not None
    engine = f"vllm {version}" if vllm else (f"{entry.get('owned_by') or 'unknown'} {version or ''}").strip()
    root = entry.get("root") if isinstance(entry.get("root"), str) else None
    return _Inspected(
        model=str(model),
        engine=engine,
        vllm=vllm,
        root=root,
        max_len=int(entry.get("max_model_len") or 2048),
        remote=_has_tokenize(client, str(model)),
    )


def _static_difference(reference: _Inspected, other: _Inspected) -> str:
    """Why ``other`` cannot stand in for ``reference`` by what the servers say about themselves
    ('' when nothing differs). A different context window or model folder is allowed: replicas
    on other machines, with other memory, serve the same weights."""
    if other.model != reference.model:
        return f"it serves {other.model!r}, the reference {reference.model!r}"
    if other.engine != reference.engine:
        return (
            f"it runs {other.engine!r}, the reference {reference.engine!r} (another engine or version "
            "computes other numbers, which one result cache would mix)"
        )
    if other.remote != reference.remote:
        return "one of them has a /tokenize endpoint and the other not"
    return ""


def _server_version(client: ServerClient) -> str | None:
    resp = client.request("GET", "/version", retry=False)
    if resp.status_code != 200:
        return None
    try:
        value = resp.json().get("version")
    except (ValueError, AttributeError):
        return None
    return str(value) if value else None


def _has_tokenize(client: ServerClient, model: str) -> bool:
    resp = client.request("POST", "/tokenize", {"model": model, "prompt": "a", "add_special_tokens": False})
    if resp.status_code != 200:
        return False
    try:
        return isinstance(resp.json().get("tokens"), list)
    except (ValueError, AttributeError):
        return False


#: Tokenized by the local tokenizer and by the server's: any difference means --model (or
#: --tokenizer) names another model than the one served.
_PROBE = "The grandfather and the grandson were trying to book a cab on Uber. Who was not comfortable?"


def _check_same_tokenizer(model: OpenAIServerModel, tok, where: str) -> None:
    mine = list(tok(_PROBE, add_special_tokens=False)["input_ids"])
    theirs = model.encode_text(_PROBE)
    if mine != theirs:
        raise ModelError(
            f"the local tokenizer ({where}) and the server's /tokenize disagree on a "
            f"fixed sentence ({mine[:8]}... vs {theirs[:8]}...): the server does not "
            f"serve that model; pass --tokenizer for the served one"
        )


def _public_url(url: str) -> str:
    """``url`` with its credentials masked (``redact``: ``http://u:***@host/v1``), so they never
    reach a results file or a message."""
    from ..redact import redact_text

    return redact_text(url)
