"""The context/continuation boundary rule, shared by every causal backend so that an in-process
model and a server scoring the same model send the same token ids (and so hit the same numbers).

The rule (as lm-evaluation-harness, so numbers are comparable): trailing whitespace of the
context moves to the continuation; the context is encoded on its own, and the continuation tokens
are the tokens of ``context + continuation`` after the context's tokens. If that whole encoding
does not start with the context's tokens (a merge across the boundary), the continuation is
encoded on its own instead, so the context is never re-tokenized and only continuation tokens are
ever scored. ``bos`` is prepended to non-empty contexts (tokenizers that add a BOS by default,
Gemma); an empty context is replaced by ``empty_prefix`` (BOS, or EOS when there is none).
"""

from __future__ import annotations

from typing import Callable, Sequence


def split_boundary(context: str, continuation: str) -> tuple[str, str]:
    """(context without its trailing whitespace, that whitespace + continuation)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        return context[:-n_spaces], context[-n_spaces:] + continuation
    return context, continuation


def encode_pair(
    encode: Callable[[str], list[int]],
    context: str,
    continuation: str,
    bos: Sequence[int],
    empty_prefix: Sequence[int],
) -> tuple[list[int], list[int]]:
    """Token ids of (context, continuation) under the module's boundary rule.

    Args:
        encode: text -> token ids without special tokens (a local tokenizer, or a server's
            ``/tokenize`` endpoint).
        context, continuation: the strings of one request.
        bos: ids prepended to a non-empty context (``[]`` when the tokenizer adds none).
        empty_prefix: ids standing for an empty context (BOS, else EOS); must be non-empty.
    Returns:
        (context ids, continuation ids), both non-empty.
    Raises:
        ValueError: the continuation is empty or encodes to no token, or ``empty_prefix`` is
            empty while the context is.
    """
    if not continuation:
        raise ValueError("empty continuation: nothing to score")
    context, continuation = split_boundary(context, continuation)
    ctx = list(bos) + encode(context) if context else []
    whole = list(bos) + encode(context + continuation) if context else []
    if ctx and len(whole) > len(ctx) and whole[: len(ctx)] == ctx:
        cont = whole[len(ctx) :]
    else:
        cont = encode(continuation)
    if not ctx:
        if not empty_prefix:
            raise ValueError("empty context, and no BOS or EOS id is known to condition on")
        ctx = list(empty_prefix)
    if not cont:
        raise ValueError(f"continuation {continuation!r} encodes to no token")
    return ctx, cont


def texts_to_encode(context: str, continuation: str) -> list[str]:
    """The strings ``encode_pair`` encodes for one request in the common case (context and
    context + continuation; the continuation alone only after a boundary merge), so a backend
    whose ``encode`` is a network call can fetch them all concurrently first."""
    context, continuation = split_boundary(context, continuation)
    return [context, context + continuation] if context else [continuation]


def special_ids(tokenizer) -> tuple[list[int], list[int]]:
    """(``bos``, ``empty_prefix``) of ``encode_pair`` for a ``transformers`` tokenizer: BOS is
    prepended only when the tokenizer adds it by default; the empty prefix is BOS, else EOS.

    Raises:
        ValueError: the tokenizer has neither a BOS nor an EOS token.
    """
    probe = tokenizer("a")["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    bos_id = tokenizer.bos_token_id
    bos = [bos_id] if bos_id is not None and probe[: len(probe) - len(plain)] == [bos_id] else []
    prefix = bos_id if bos_id is not None else tokenizer.eos_token_id
    if prefix is None:
        raise ValueError("tokenizer has neither a BOS nor an EOS token to condition on")
    return bos, [prefix]
