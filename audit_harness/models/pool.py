"""A pool of OpenAI-compatible endpoints serving one model (replicas, or the nodes of a
data-parallel deployment): requests routed by prefix group, bounded concurrency per endpoint,
work stealing, failover, and per-endpoint accounting. Knows nothing about scoring:
``openai_server`` builds the requests (``Job``) and checks each endpoint before it is admitted.

Routing: every request carries the key of its prefix group (``group_key``: an item's context,
the first cache block of a sentence). A group goes to the endpoint that ranks first for its key
among those up (rendezvous hashing: sha256 of URL and key, no Python ``hash()``, so every
process, every xdist worker and every rerun picks the same endpoint, and an endpoint that goes
away moves only its own groups), unless part of it already went elsewhere in this process (a
steal, a failover): then the rest follows it. Requests of one endpoint are packed, whole groups together,
into requests of a few prompts; a bundle (the requests of one group, or one request of several
small groups) is never split, so one server's prefix cache serves the whole group.

Concurrency and stealing: each endpoint has ``max_concurrency`` slots (threads with a request in
flight). A slot takes the next request of a bundle its endpoint started, else the endpoint's next
bundle, else, when its own queue is empty, the last unstarted bundle of the endpoint with the
longest queue among those whose every slot is busy (never a bundle of a group an endpoint already
answered in an earlier call): a slow replica keeps what it started and the others finish the rest.

Failover: a request that fails with ``ServerUnavailable`` (after its client's retries) takes its
endpoint out; every bundle the endpoint held, that request included, goes to the next endpoint
of each bundle's key, and its other in-flight requests follow as they fail. A request is answered
once: a result reaches the caller only from the one request that returned it, so whatever was
lost with a replica is sent again and nothing is counted twice. An endpoint that is out is probed
again after ``probe_s`` seconds (doubling up to ``max_probe_s``); ``admit`` decides whether it
comes back (the model re-runs its start-up checks) or stays out for the run (``ReplicaRefused``).
When every endpoint is out, the call raises ``ServerUnavailable`` naming each one and why.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Sequence, TypedDict, TypeVar

from ..errors import ModelError
from ..results_shapes import EndpointAccounting
from .server_client import ServerUnavailable

if TYPE_CHECKING:
    from .server_client import ServerClient

#: What one request (``Job``) returns, and an item a ``map`` call sends.
R = TypeVar("R")
T = TypeVar("T")

#: Tokens of one prefix-cache block (vLLM's default block size on GPU). A server caches whole
#: blocks, so a shared prefix shorter than one block is never reused: a scored context at least
#: that long is the group, a shorter one (a sentence scored from its first token) is grouped by
#: the sequence's first block.
GROUP_BLOCK = 16

UP, DOWN, REFUSED = "up", "down", "refused"


class ReplicaRefused(ModelError):
    """An endpoint serves something other than the pool's reference endpoint (another model,
    tokenizer, engine or numbers): it is never used in this run."""


def group_key(ids: Sequence[int], context: int) -> bytes:
    """The prefix-group key of a request over token ``ids`` whose first ``context`` tokens are
    what its scored (or generated) tokens condition on: those tokens when there are at least
    ``GROUP_BLOCK`` of them, else the sequence's first block. 16 bytes of sha256, the same in
    every process."""
    n = context if context >= GROUP_BLOCK else min(len(ids), GROUP_BLOCK)
    return hashlib.sha256(struct.pack(f"<{n}q", *ids[:n])).digest()[:16]


def preference(key: bytes, urls: Sequence[str]) -> list[int]:
    """Indices of ``urls`` in the order a group with ``key`` prefers them (rendezvous hashing):
    independent of the order the URLs were given in, and removing one URL leaves the others'
    relative order unchanged."""

    def score(i: int) -> bytes:
        return hashlib.sha256(urls[i].encode() + b"\0" + key).digest()

    return sorted(range(len(urls)), key=score, reverse=True)


@dataclass
class Job(Generic[R]):
    """One HTTP request for the pool to run.

    Attributes:
        fn: ``fn(client) -> result``, the request against one endpoint's ``ServerClient``;
            raises ``ServerUnavailable`` when that server is gone (then the job runs elsewhere).
        keys: the prefix groups it serves (accounting: which endpoint answered which group).
        scored: sequences whose prompt log-probabilities it returns to the engine.
        generated: generations it returns.
        tokens: prompt tokens it sends (plus ``tokens_of(result)``, e.g. the tokens generated).
    """

    fn: Callable[[ServerClient], R]
    keys: tuple[bytes, ...] = ()
    scored: int = 0
    generated: int = 0
    tokens: int = 0
    tokens_of: Callable[[R], int] | None = None


class PoolSummary(TypedDict):
    """The pool as results.json records it (``EndpointPool.summary``)."""

    routing: str
    max_concurrency_per_endpoint: int
    groups: int
    groups_split: int


class Endpoint:
    """One server of the pool: its client, state and counters (``accounting``)."""

    def __init__(self, index: int, client: ServerClient, url: str):
        self.index = index
        self.client = client
        self.url = url  # without credentials: what results and messages show
        self.state = UP
        self.reason = ""
        self.probing = False
        self.next_probe = 0.0
        self.probe_wait = 0.0
        self.inflight = 0
        self.requests = 0
        self.scored = 0
        self.generated = 0
        self.tokens = 0
        self.failures = 0
        self.seconds = 0.0
        self.stolen = 0
        self.taken_out = 0
        self.readmitted = 0
        self.groups: set[bytes] = set()

    def accounting(self) -> EndpointAccounting:
        """What results.json records of this endpoint: its URL, final state (``up``, ``down``,
        ``refused``) and why; HTTP requests answered, sequences scored, generations, tokens
        (prompt tokens sent + tokens generated), retries, failed requests (sent elsewhere),
        seconds of its requests (summed over concurrent ones), prefix groups it answered,
        bundles of prefix groups it took from a busier endpoint's queue, times it was taken out
        and admitted again."""
        return {
            "base_url": self.url,
            "state": self.state,
            "reason": self.reason,
            "requests": self.requests,
            "scored": self.scored,
            "generated": self.generated,
            "tokens": self.tokens,
            "retries": int(getattr(self.client, "retries", 0)),
            "failures": self.failures,
            "seconds": round(self.seconds, 3),
            "groups": len(self.groups),
            "stolen": self.stolen,
            "taken_out": self.taken_out,
            "readmitted": self.readmitted,
        }


class _Bundle(Generic[R]):
    """Requests that stay on one endpoint: those of one prefix group, or one request of several
    small groups."""

    __slots__ = ("key", "jobs", "pending", "results", "left", "endpoint", "started")

    def __init__(self, key: bytes | None, jobs: list[Job[R]]):
        self.key = key
        self.jobs = jobs
        self.pending = deque(range(len(jobs)))
        self.results: list[Any] = [None] * len(jobs)  # each None until its job answers: then an R
        self.left = len(jobs)
        self.endpoint: Endpoint | None = None
        self.started = False


class _Run(Generic[R]):
    """One ``EndpointPool.run`` call: per endpoint its queue of unstarted bundles and its
    started ones, the slots running, and how it ends."""

    def __init__(self, bundles: list[_Bundle[R]], n: int):
        self.bundles = bundles
        self.left = sum(b.left for b in bundles)
        self.queue: list[deque[_Bundle[R]]] = [deque() for _ in range(n)]
        self.active: list[list[_Bundle[R]]] = [[] for _ in range(n)]
        self.slots = [0] * n
        self.orphans: list[_Bundle[R]] = []
        self.error: BaseException | None = None


class EndpointPool:
    """Endpoints serving one model (see the module doc).

    Args:
        clients: one ``ServerClient`` per endpoint, in the order the user gave them (the first
            one that answers is the reference the others are checked against).
        urls: the endpoints' URLs without credentials (routing and accounting; default the
            clients' ``base_url``).
        probe_s, max_probe_s: seconds before an endpoint that went out is probed again, doubled
            after each failed probe up to ``max_probe_s``.
        probe_timeout: seconds a probe's requests may take.
    """

    def __init__(
        self,
        clients: Sequence[ServerClient],
        urls: Sequence[str] | None = None,
        *,
        probe_s: float = 5.0,
        max_probe_s: float = 60.0,
        probe_timeout: float = 10.0,
    ):
        if not clients:
            raise ValueError("an endpoint pool needs at least one endpoint")
        urls = list(urls) if urls is not None else [c.base_url for c in clients]
        self.endpoints = [Endpoint(i, c, u) for i, c, u in zip(range(len(clients)), clients, urls)]
        self.urls = urls
        self.probe_s = probe_s
        self.max_probe_s = max_probe_s
        self.probe_timeout = probe_timeout
        #: ``admit(endpoint)``: the checks an endpoint passes before it comes back (raise
        #: ``ServerUnavailable`` while it is still gone, ``ReplicaRefused`` to keep it out);
        #: default a GET of ``/v1/models``.
        self.admit: Callable[[Endpoint], None] = self._default_admit
        self._cond = threading.Condition(threading.RLock())
        self._calls = threading.Lock()
        self._run: _Run[Any] | None = None  # the call running now, whatever its requests return
        self._spread = 0
        #: prefix group -> indices of the endpoints that answered it (``summary``).
        self._group_endpoints: dict[bytes, set[int]] = {}
        self._update_failover()

    # -- state -------------------------------------------------------------------------------------
    @property
    def max_concurrency(self) -> int:
        """Requests in flight per endpoint."""
        return max(e.client.max_concurrency for e in self.endpoints)

    @property
    def slots(self) -> int:
        """Requests in flight at most, over the endpoints not refused."""
        return sum(e.client.max_concurrency for e in self.endpoints if e.state != REFUSED)

    @property
    def up(self) -> list[Endpoint]:
        return [e for e in self.endpoints if e.state == UP]

    @property
    def retries(self) -> int:
        return sum(int(getattr(e.client, "retries", 0)) for e in self.endpoints)

    def describe(self) -> str:
        """The endpoints' URLs, for messages."""
        return self.urls[0] if len(self.urls) == 1 else "the pool " + ", ".join(self.urls)

    def take_out(self, endpoint: Endpoint, reason: str, *, refused: bool = False) -> None:
        """Mark ``endpoint`` out (``refused``: for good), with the reason; its queued work goes
        to the others."""
        with self._cond:
            self._out(endpoint, reason, refused=refused, run=self._run)
            self._cond.notify_all()

    def _out(self, e: Endpoint, reason: str, *, refused: bool, run: _Run[R] | None) -> None:
        if e.state == REFUSED or (e.state == DOWN and not refused):
            return
        if e.state == UP:
            e.taken_out += 1
        e.state, e.reason = (REFUSED if refused else DOWN), reason
        e.probe_wait = self.probe_s
        e.next_probe = time.monotonic() + e.probe_wait
        self._update_failover()
        if len(self.endpoints) > 1:
            what = "refused for this run" if refused else f"probed again in {e.probe_wait:.0f} s"
            print(
                f"bias audit: WARNING: endpoint {e.url} taken out ({reason}); its requests go to "
                f"the other endpoints; {what}",
                file=sys.stderr,
            )
        if run is not None:
            moved = list(run.queue[e.index]) + run.active[e.index]
            run.queue[e.index].clear()
            run.active[e.index] = []
            for b in moved:
                self._assign(run, b)

    def _update_failover(self) -> None:
        # Fast failover only while another endpoint can take the requests.
        others = len(self.up) > 1
        for e in self.endpoints:
            e.client.failover = others

    def _route(self, key: bytes | None) -> Endpoint | None:
        up = self.up
        if not up:
            return None
        if key is None:  # no prefix to share (tokenization): spread evenly
            self._spread += 1
            return up[self._spread % len(up)]
        # The rest of a group goes where its beginning went (a steal or a failover may have
        # moved it off its first choice), while that endpoint is up.
        for i in sorted(self._group_endpoints.get(key, ())):
            if self.endpoints[i].state == UP:
                return self.endpoints[i]
        for i in preference(key, self.urls):
            if self.endpoints[i].state == UP:
                return self.endpoints[i]
        return None

    def _assign(self, run: _Run[R], b: _Bundle[R]) -> None:
        e = self._route(b.key)
        b.endpoint = e
        if e is None:
            run.orphans.append(b)
        elif b.started:
            run.active[e.index].append(b)
        else:
            run.queue[e.index].append(b)

    # -- probes ------------------------------------------------------------------------------------
    def _default_admit(self, e: Endpoint) -> None:
        e.client.get("/v1/models", retry=False, timeout=self.probe_timeout)

    def _probe_due(self) -> None:
        """Start a probe of every endpoint that is out and due (in its own thread)."""
        now = time.monotonic()
        for e in self.endpoints:
            if e.state == DOWN and not e.probing and e.next_probe <= now:
                e.probing = True
                threading.Thread(target=self._probe, args=(e,), daemon=True).start()

    def _probe(self, e: Endpoint) -> None:
        refused, reason = False, ""
        try:
            self.admit(e)
        except ReplicaRefused as err:
            refused, reason = True, str(err)
        except ModelError as err:  # still unreachable, or answering errors
            reason = str(err)
        with self._cond:
            e.probing = False
            if refused:
                self._out(e, reason, refused=True, run=None)
            elif reason:
                e.reason = reason
                e.probe_wait = min(self.max_probe_s, max(self.probe_s, 2 * e.probe_wait))
                e.next_probe = time.monotonic() + e.probe_wait
            elif e.state == DOWN:
                e.state, e.reason = UP, ""
                e.readmitted += 1
                self._update_failover()
                if len(self.endpoints) > 1:
                    print(
                        f"bias audit: endpoint {e.url} answers again and is back in the pool", file=sys.stderr
                    )
                run = self._run
                if run is not None and run.error is None and run.left:
                    orphans, run.orphans = run.orphans, []
                    for b in orphans:
                        self._assign(run, b)
                    self._start_slots(run, e)
            self._cond.notify_all()

    # -- running requests --------------------------------------------------------------------------
    def call(
        self,
        fn: Callable[[ServerClient], R],
        *,
        key: bytes | None = None,
        endpoint: Endpoint | None = None,
        **job,
    ) -> R:
        """``fn(client)`` once: on ``endpoint`` only (no failover: the per-endpoint checks), or
        routed by ``key`` with failover. ``job``: the ``Job`` accounting fields.

        Raises:
            ServerUnavailable: the endpoint (or every endpoint) is gone.
        """
        if endpoint is None:
            return self.run([_Bundle(key, [Job(fn, **job)])])[0][0]
        start = time.perf_counter()
        try:
            result = fn(endpoint.client)
        except ServerUnavailable:
            with self._cond:
                endpoint.failures += 1
                endpoint.seconds += time.perf_counter() - start
            raise
        with self._cond:
            self._account(endpoint, Job(fn, **job), result, time.perf_counter() - start)
        return result

    def map(
        self,
        fn: Callable[[ServerClient, T], R],
        items: Sequence[T],
        keys: Sequence[bytes | None] | None = None,
        *,
        scored: int = 0,
        generated: int = 0,
        tokens_of: Callable[[T, R], int] | None = None,
    ) -> list[R]:
        """``[fn(client, x) for x in items]``, each item one request routed by its key (None:
        spread evenly), concurrently, in order. ``tokens_of(item, result)``: the tokens it cost."""
        bundles: list[_Bundle[R]] = []
        for n, x in enumerate(items):
            counted = None if tokens_of is None else (lambda r, x=x: tokens_of(x, r))
            job = Job(
                lambda c, x=x: fn(c, x),
                keys=() if keys is None or keys[n] is None else (keys[n],),
                scored=scored,
                generated=generated,
                tokens_of=counted,
            )
            bundles.append(_Bundle(None if keys is None else keys[n], [job]))
        return [b[0] for b in self.run(bundles)]

    def run_grouped(
        self,
        items: Sequence[T],
        keys: Sequence[bytes],
        per_request: int,
        make_job: Callable[[list[T], tuple[bytes, ...]], Job[list[R]]],
    ) -> list[R]:
        """Run ``items`` (e.g. token sequences) grouped by prefix key: each group to its
        endpoint, small groups of one endpoint packed together into requests of at most
        ``per_request`` items (in the order given), a larger group alone in several requests
        that stay together. ``make_job(items, keys)`` builds one request whose result is a list
        with one entry per item. Returns one result per item, in order.

        Raises:
            ServerUnavailable: every endpoint went away; ModelError: a request failed otherwise.
        """
        per_request = max(1, per_request)
        groups: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(k, []).append(i)
        with self._cond:
            home = {k: self._route(k) for k in groups}
        bundles: list[_Bundle[list[R]]] = []
        carried: list[list[int]] = []  # per job, in order, the items it carries
        packing: dict[int, tuple[list[int], list[bytes]]] = {}  # endpoint -> request being packed

        def close(idx: int) -> None:
            members, ks = packing.pop(idx)
            bundles.append(_Bundle(ks[0], [make_job([items[i] for i in members], tuple(ks))]))
            carried.append(members)

        for k, members in groups.items():
            if len(members) > per_request:
                parts = [members[s : s + per_request] for s in range(0, len(members), per_request)]
                bundles.append(_Bundle(k, [make_job([items[i] for i in p], (k,)) for p in parts]))
                carried.extend(parts)
                continue
            idx = -1 if home[k] is None else home[k].index
            if idx in packing and len(packing[idx][0]) + len(members) > per_request:
                close(idx)
            members_of, keys_of = packing.setdefault(idx, ([], []))
            members_of.extend(members)
            keys_of.append(k)
        for idx in list(packing):
            close(idx)
        out: list[Any] = [None] * len(items)  # each None until the request carrying it answers
        results = [r for rows in self.run(bundles) for r in rows]
        for members, rows in zip(carried, results):
            for i, r in zip(members, rows):
                out[i] = r
        return out

    def run(self, bundles: list[_Bundle[R]]) -> list[list[R]]:
        """Run every bundle's jobs (see the module doc); per bundle its jobs' results.

        Raises:
            ServerUnavailable: every endpoint is out (each one's reason in the message).
            Exception: the first other error a job raised, once every request in flight ended.
        """
        if not bundles:
            return []
        with self._calls:  # one call at a time; its requests run concurrently
            if not self.up:  # a server may be back since the last call gave up
                self._probe_all()
            with self._cond:
                if not self.up:
                    raise self._gone()
                run = _Run(bundles, len(self.endpoints))
                for b in bundles:
                    self._assign(run, b)
                self._run = run
                try:
                    self._wait(run)
                finally:
                    self._run = None
                    if run.error is None and run.left:
                        run.error = RuntimeError("endpoint pool call interrupted")
                    self._cond.notify_all()
            if run.error is not None:
                raise run.error
            return [b.results for b in bundles]

    def _wait(self, run: _Run[R]) -> None:
        """(Holding the lock.) Start every endpoint's slots and wait until the run's jobs are
        done, one failed, or no endpoint is left (then the run's error says so); then until the
        requests in flight end."""
        for e in self.up:
            self._start_slots(run, e)
        while run.left and run.error is None:
            self._probe_due()
            if not self.up and not any(run.slots):
                break
            self._cond.wait(0.5)
        if run.error is None and run.left:
            run.error = self._gone()
        while any(run.slots):  # the requests in flight end first
            self._cond.wait(0.5)

    def _probe_all(self) -> None:
        """Probe every endpoint that is out, now (a call found none up)."""
        for e in self.endpoints:
            if e.state == DOWN and not e.probing:
                e.probing = True
                self._probe(e)

    def _gone(self) -> ServerUnavailable:
        out = self.endpoints
        if len(out) == 1:  # the server's own error, as without a pool
            return ServerUnavailable(out[0].reason or f"{out[0].url} stopped answering")
        listed = "; ".join(f"{e.url} ({e.state}): {e.reason}" for e in out)
        return ServerUnavailable(f"every endpoint of the pool is out: {listed}")

    def _start_slots(self, run: _Run[R], e: Endpoint) -> None:
        n = max(0, min(e.client.max_concurrency, run.left) - run.slots[e.index])
        for _ in range(n):
            run.slots[e.index] += 1
            threading.Thread(target=self._slot, args=(run, e), daemon=True).start()

    def _take(self, run: _Run[R], e: Endpoint) -> tuple[_Bundle[R], int] | None:
        for b in run.active[e.index]:
            if b.pending:
                return b, b.pending.popleft()
        if run.queue[e.index]:
            b = run.queue[e.index].popleft()
        else:
            b = self._steal(run, e)
            if b is None:
                return None
        b.started = True
        run.active[e.index].append(b)
        return b, b.pending.popleft()

    def _steal(self, run: _Run[R], e: Endpoint) -> _Bundle[R] | None:
        """For idle ``e``, the last unstarted bundle of the endpoint with the longest queue among
        those whose every slot is busy (one with an idle slot takes its next bundle itself; its
        slots may just be starting), skipping bundles of a group some endpoint already answered
        (the rest of a group that an earlier call began stays where it began)."""
        victims = [
            o
            for o in self.endpoints
            if o is not e and run.queue[o.index] and o.inflight >= run.slots[o.index]
        ]
        for victim in sorted(victims, key=lambda o: (-len(run.queue[o.index]), o.index)):
            queue = run.queue[victim.index]
            for pos in range(len(queue) - 1, -1, -1):  # from the tail: the victim keeps its next ones
                b = queue[pos]
                if any(k in self._group_endpoints for j in b.jobs for k in j.keys):
                    continue
                del queue[pos]
                if b.key is not None:  # a prefix group moved (keyless requests just balance)
                    e.stolen += 1
                b.endpoint = e
                return b
        return None

    def _slot(self, run: _Run[R], e: Endpoint) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    item = None
                    while item is None:
                        if run.error is not None or not run.left or e.state != UP:
                            return
                        item = self._take(run, e)
                        if item is None:
                            cond.wait(0.5)
                    bundle, j = item
                    e.inflight += 1
                job = bundle.jobs[j]
                start = time.perf_counter()
                try:
                    result = job.fn(e.client)
                except ServerUnavailable as err:
                    with cond:
                        e.inflight -= 1
                        e.failures += 1
                        e.seconds += time.perf_counter() - start
                        # Back among the bundle's pending requests before the bundle moves (or,
                        # if it moved already, where its new endpoint takes it).
                        bundle.pending.appendleft(j)
                        self._out(e, str(err), refused=False, run=run)
                        cond.notify_all()
                    return
                except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                    with cond:
                        e.inflight -= 1
                        if run.error is None:
                            run.error = err
                        cond.notify_all()
                    return
                with cond:
                    e.inflight -= 1
                    self._account(e, job, result, time.perf_counter() - start)
                    bundle.results[j] = result
                    bundle.left -= 1
                    run.left -= 1
                    if not bundle.left and bundle.endpoint is not None:
                        owner = run.active[bundle.endpoint.index]
                        if bundle in owner:
                            owner.remove(bundle)
                    cond.notify_all()
        finally:
            with cond:
                run.slots[e.index] -= 1
                cond.notify_all()

    def _account(self, e: Endpoint, job: Job[R], result: R, seconds: float) -> None:
        e.requests += 1
        e.scored += job.scored
        e.generated += job.generated
        e.tokens += job.tokens + (job.tokens_of(result) if job.tokens_of is not None else 0)
        e.seconds += seconds
        for k in job.keys:
            e.groups.add(k)
            self._group_endpoints.setdefault(k, set()).add(e.index)

    # -- provenance --------------------------------------------------------------------------------
    def accounting(self) -> list[EndpointAccounting]:
        """Per endpoint, in the order given, ``Endpoint.accounting``."""
        with self._cond:
            return [e.accounting() for e in self.endpoints]

    def summary(self) -> PoolSummary:
        """The pool as results.json records it: routing, per-endpoint concurrency, prefix groups
        answered, and how many of them more than one endpoint answered (``groups_split``: only
        after a failover moved the rest of a group one endpoint had begun)."""
        with self._cond:
            return {
                "routing": f"prefix group (context, or first {GROUP_BLOCK} tokens), rendezvous hash",
                "max_concurrency_per_endpoint": self.max_concurrency,
                "groups": len(self._group_endpoints),
                "groups_split": sum(1 for s in self._group_endpoints.values() if len(s) > 1),
            }

    def close(self) -> None:
        for e in self.endpoints:
            e.client.close()


def endpoint_notices(endpoints: Sequence[Mapping[str, object]]) -> list[str]:
    """One line per endpoint of a pool that was taken out during the run (start-up included),
    from the endpoints' accounting (``Endpoint.accounting``, summed over xdist workers by
    ``merge_worker_models``). results.json keeps them as ``model.server.notices`` and the
    terminal prints them with the run's end-of-run notes: the warning printed when it happened
    sits in one test's captured output, or a worker's. Worded as the accounting: state, reason
    (which says how often the failed request was retried), ``taken_out``, ``retries``,
    ``failures``. None for one server (its failure is the run's error) or a pool that lost none."""
    if len(endpoints) < 2:
        return []
    out = []
    for e in endpoints:
        if e.get("state") == UP and not e.get("taken_out"):
            continue
        state = {
            UP: f"back in the pool (readmitted {e.get('readmitted', 0)} time(s))",
            DOWN: "down at the end of the run",
            REFUSED: "refused for the run",
        }.get(e.get("state"), str(e.get("state")))
        why = f": {e['reason']}" if e.get("reason") else ""
        out.append(
            f"endpoint {e.get('base_url')} taken out {e.get('taken_out', 0)} time(s), {state}{why}; "
            f"requests: {e.get('requests', 0)}, scored: {e.get('scored', 0)}, retries: "
            f"{e.get('retries', 0)}, failures: {e.get('failures', 0)} (model.server.endpoints)"
        )
    return out


#: Counters of an endpoint that add up over the processes of a run (xdist workers).
_SUMMED = (
    "requests",
    "scored",
    "generated",
    "tokens",
    "retries",
    "failures",
    "seconds",
    "groups",
    "stolen",
    "taken_out",
    "readmitted",
)


def merge_worker_models(models: Sequence[dict | None]) -> dict | None:
    """The exported model dicts of a run's processes (controller and xdist workers) as one:
    the first one, with each endpoint's counters and the pool's group counts summed over the
    processes that used the pool (each worker has its own pool; they route alike). An endpoint
    out in any process keeps that state and reason."""
    models = [m for m in models if m]
    if not models:
        return None
    first = dict(models[0])
    servers = [m.get("server") for m in models if isinstance(m.get("server"), dict)]
    if not servers or not all("endpoints" in s for s in servers):
        return first
    endpoints: dict[str, dict[str, Any]] = {}
    for s in servers:
        for e in s["endpoints"]:
            have = endpoints.get(e["base_url"])
            if have is None:
                endpoints[e["base_url"]] = dict(e)
                continue
            for k in _SUMMED:
                have[k] = have.get(k, 0) + e.get(k, 0)
            if e.get("state") != UP and have.get("state") != REFUSED:
                have["state"], have["reason"] = e.get("state"), e.get("reason")
    for e in endpoints.values():
        e["seconds"] = round(e.get("seconds", 0.0), 3)
    server = dict(servers[0])
    server["endpoints"] = list(endpoints.values())
    pool = dict(server.get("pool") or {})
    for k in ("groups", "groups_split"):
        pool[k] = sum((s.get("pool") or {}).get(k, 0) for s in servers)
    pool["processes"] = len(servers)
    server["pool"] = pool
    server["notices"] = endpoint_notices(server["endpoints"])
    first["server"] = server
    return first
