"""The prefix tree of a set of log-likelihood requests: every token position any request feeds
appears once, so a context shared by several requests, or a prefix shared by several contexts (a
BBQ ambiguous context is a prefix of its disambiguated one; the negative and non-negative
questions share the context), is run through the model once.

A request (context ids, continuation ids) feeds ``context + continuation[:-1]`` (the last token is
never an input) and needs the next-token log-probability at positions ``len(context) - 1`` ..
``len(context) + len(continuation) - 2``, each of one target token. A *query* is one such
(prefix, target) pair; requests that share a prefix share its queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(eq=False)
class Segment:
    """A run of tokens fed in one forward after the key/value state of its ancestors.

    Attributes:
        tokens: the ids fed (>= 1).
        depth: number of tokens before it (its ancestors' lengths summed).
        queries: ``(offset in tokens, target id, query id)``: the log-probability of ``target``
            after ``tokens[:offset + 1]`` (and the ancestors) is query ``query id``.
        children: segments continuing this one.
    """

    tokens: list[int]
    depth: int = 0
    queries: list[tuple[int, int, int]] = field(default_factory=list)
    children: list["Segment"] = field(default_factory=list)


@dataclass
class PrefixTree:
    """Roots of the tree, and per request the query ids whose log-probabilities it sums.

    Attributes:
        roots: top-level segments (each starts a sequence).
        request_queries: per request (input order), its query ids.
        n_queries: number of distinct queries.
    """

    roots: list[Segment]
    request_queries: list[list[int]]
    n_queries: int

    def tokens(self) -> int:
        """Tokens the tree feeds in total (each position once)."""
        total, stack = 0, list(self.roots)
        while stack:
            s = stack.pop()
            total += len(s.tokens)
            stack.extend(s.children)
        return total


def build_tree(
    requests: Sequence[tuple[Sequence[int], Sequence[int]]], *, min_shared: int = 4, two_level: bool = False
) -> PrefixTree:
    """The prefix tree of ``requests`` ((context ids, continuation ids), both non-empty).

    Args:
        min_shared: a prefix shared by several sequences becomes its own segment only when it is
            at least this long; a shorter one is fed again in each branch (an extra forward costs
            more than a few repeated tokens).
        two_level: share whole contexts only: one segment per distinct context, one child per
            distinct ``continuation[:-1]``. For models whose key/value cache must stay free of
            padding holes between real tokens (sliding-window attention counts cache slots).
    Returns:
        the tree; every query of every request is on exactly one segment.
    Raises:
        ValueError: an empty context or continuation, or min_shared < 1.
    """
    if min_shared < 1:
        raise ValueError(f"min_shared must be >= 1, got {min_shared}")
    for n, (ctx, cont) in enumerate(requests):
        if not ctx or not cont:
            raise ValueError(f"request {n}: empty context or continuation ids")
    if two_level:
        return _two_level(requests)
    feeds = []
    for ctx, cont in requests:
        first = len(ctx) - 1
        feeds.append((list(ctx) + list(cont[:-1]), [(first + k, t) for k, t in enumerate(cont)], first))
    return _trie_tree(feeds, min_shared)


def build_position_tree(
    requests: Sequence[tuple[Sequence[int], Sequence[int]]], *, min_shared: int = 4
) -> PrefixTree:
    """The prefix tree of per-token requests (token ids, positions): position ``p`` asks for
    log P(ids[p] | ids[:p]), a query on the prefix ``ids[:p]``. Sentences that share a prefix
    (WinoQueer's templates, the words before a CrowS pair's first difference) feed it once, and
    only ``ids[:max(positions)]`` is fed: tokens after the last scored one are never inputs.

    Args:
        requests: (ids, positions), every position in ``[1, len(ids))``; positions may be empty
            (the request then has no query).
        min_shared: as ``build_tree``.
    Returns:
        the tree; ``request_queries[r]`` lists one query id per position, in the order given.
    Raises:
        ValueError: a position outside ``[1, len(ids))``, or min_shared < 1.
    """
    if min_shared < 1:
        raise ValueError(f"min_shared must be >= 1, got {min_shared}")
    feeds = []
    for n, (ids, positions) in enumerate(requests):
        bad = [p for p in positions if not 1 <= p < len(ids)]
        if bad:
            raise ValueError(f"request {n}: position {bad[0]} is outside [1, {len(ids)})")
        fed = list(ids[: max(positions)]) if positions else []
        feeds.append((fed, [(p - 1, ids[p]) for p in positions], None))
    return _trie_tree(feeds, min_shared)


def _trie_tree(feeds, min_shared: int) -> PrefixTree:
    """The tree of ``feeds``: (tokens fed, queries as (offset of the prefix's last token, target)
    in request order, offset where a context ends or None). A context's end closes its segment
    so its continuations run as children after the context's one forward."""
    # Token trie: node = [children {token: node}, {target: query id}, ends a context]
    root: list = [{}, {}, False]
    request_queries: list[list[int]] = []
    n_queries = 0
    for fed, queries, context_end in feeds:
        nodes, node = [], root
        for pos, tok in enumerate(fed):
            node = node[0].setdefault(tok, [{}, {}, False])
            if pos == context_end:
                node[2] = True
            nodes.append(node)
        qids = []
        for offset, target in queries:
            at = nodes[offset][1]
            qid = at.get(target)
            if qid is None:
                qid = at[target] = n_queries
                n_queries += 1
            qids.append(qid)
        request_queries.append(qids)
    roots = [_compress(tok, child, 0) for tok, child in root[0].items()]
    roots = [s for r in roots for s in _push_down(r, min_shared, is_root=True)]
    return PrefixTree(roots, request_queries, n_queries)


def _compress(token: int, node: list, depth: int) -> Segment:
    """The radix segment starting at trie ``node`` (reached by ``token``): follows single-child
    chains up to a branch or a context's end (a context's continuations then run as its
    children, after the context's one forward). Recursive only at boundaries."""
    seg = Segment([token], depth)
    offset = 0
    while True:
        seg.queries.extend((offset, t, q) for t, q in node[1].items())
        if len(node[0]) != 1 or node[2]:
            break
        ((token, node),) = node[0].items()
        seg.tokens.append(token)
        offset += 1
    seg.children = [_compress(t, child, depth + len(seg.tokens)) for t, child in node[0].items()]
    return seg


def _push_down(seg: Segment, min_shared: int, is_root: bool = False) -> list[Segment]:
    """``seg`` with short shared segments folded into their children (see ``build_tree``);
    returns the segments that take its place."""
    seg.children = [c for child in seg.children for c in _push_down(child, min_shared)]
    # Only a pure shared prefix folds: a segment with queries ends a context, which runs once.
    if len(seg.children) < 2 or len(seg.tokens) >= min_shared or seg.queries:
        return [seg]
    n = len(seg.tokens)
    return [
        Segment(
            seg.tokens + child.tokens, seg.depth, [(o + n, t, q) for o, t, q in child.queries], child.children
        )
        for child in seg.children
    ]


def _two_level(requests) -> PrefixTree:
    contexts: dict[tuple[int, ...], Segment] = {}
    conts: dict[tuple[tuple[int, ...], tuple[int, ...]], Segment] = {}
    qid_of: dict[tuple, int] = {}
    request_queries = []
    for ctx, cont in requests:
        ctx = tuple(ctx)
        seg = contexts.get(ctx)
        if seg is None:
            seg = contexts[ctx] = Segment(list(ctx), 0)
        qids = []
        key = (ctx, (), cont[0])
        if key not in qid_of:
            qid_of[key] = len(qid_of)
            seg.queries.append((len(ctx) - 1, cont[0], qid_of[key]))
        qids.append(qid_of[key])
        if len(cont) > 1:
            fed = tuple(cont[:-1])
            child = conts.get((ctx, fed))
            if child is None:
                child = conts[(ctx, fed)] = Segment(list(fed), len(ctx))
                seg.children.append(child)
            for off, target in enumerate(cont[1:]):
                key = (ctx, fed[: off + 1], target)
                if key not in qid_of:
                    qid_of[key] = len(qid_of)
                    child.queries.append((off, target, qid_of[key]))
                qids.append(qid_of[key])
        request_queries.append(qids)
    return PrefixTree(list(contexts.values()), request_queries, len(qid_of))
