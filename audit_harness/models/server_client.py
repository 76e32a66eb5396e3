"""HTTP to one OpenAI-compatible inference server (vLLM, SGLang, TGI, llama.cpp): JSON posts with
timeouts and retries with backoff on 429/5xx and connection errors. Knows nothing about models or
scoring; ``openai_server`` builds the requests and ``pool`` spreads them over several servers."""

from __future__ import annotations

import random
import threading
import time
from typing import Mapping, TypedDict

import httpx

from ..errors import ModelError
from ..redact import redact_text


class _Timeout(TypedDict, total=False):
    """A request's own timeout, when it has one (else the client's)."""

    timeout: float


#: Statuses worth retrying: rate limiting and server-side failures (an overloaded or restarting
#: server); any other 4xx is a bad request that a retry would only repeat.
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class ServerUnavailable(ModelError):
    """The server could not be reached, or kept answering a retryable status (``RETRY_STATUSES``)
    after every retry: a fault of the connection or the deployment, not an answer about what the
    server can do."""


class ServerClient:
    """A pooled ``httpx.Client`` for one server (thread-safe: ``pool.EndpointPool`` runs several
    requests on it at once).

    Args:
        base_url: the OpenAI API root, e.g. ``http://127.0.0.1:8000/v1``; server-specific
            endpoints (``/tokenize``, ``/health``, ``/version``) are looked up beside it
            (``root_url``: the same URL without a trailing ``/v1``).
        api_key: sent as ``Authorization: Bearer``; never logged (removed from every message
            this client raises). None: no header.
        max_concurrency: requests in flight at once to this server from this process (the
            pool's slots for it; also the size of the connection pool), >= 1.
        timeout: seconds for one request (connect, read, write), > 0.
        max_retries: retries of one request after a retryable failure (>= 0); the wait doubles
            from ``backoff`` seconds up to 30 s, with jitter, or follows ``Retry-After``.
        transport: an ``httpx`` transport for tests (``httpx.MockTransport``); default network.
    Raises:
        ValueError: a malformed URL or an out-of-range setting.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        max_concurrency: int = 8,
        timeout: float = 120.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ):
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(
                f"--base-url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}"
            )
        if max_concurrency < 1:
            raise ValueError(f"--max-concurrency must be >= 1, got {max_concurrency}")
        if timeout <= 0:
            raise ValueError(f"--request-timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"--max-retries must be >= 0, got {max_retries}")
        # The URL as given makes the requests (its user:password, if any, is the server's
        # Basic auth); every message and record shows it redacted (``redact``).
        self._root = str(base_url).rstrip("/").removesuffix("/v1")
        self.base_url = redact_text(str(base_url).rstrip("/"))
        self.root_url = self.base_url.removesuffix("/v1")
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff = backoff
        self._key = api_key or None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        #: retries made so far (any request), for the run's provenance.
        self.retries = 0
        self._count = threading.Lock()
        #: Set by the pool while other servers can take this one's requests: a connection error
        #: is then tried once more at once (a dropped keep-alive connection) and a timeout not
        #: at all, instead of waiting out the backoff on a server that is gone.
        self.failover = False

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _redact(self, text: str) -> str:
        return redact_text(text.replace(self._key, "***") if self._key else text)

    def url(self, path: str) -> str:
        """``path`` (``/v1/completions``, ``/tokenize``) under the server's root URL, as messages
        show it (credentials masked)."""
        return self.root_url + path

    def request(
        self,
        method: str,
        path: str,
        payload: Mapping[str, object] | None = None,
        *,
        retry: bool = True,
        timeout: float | None = None,
    ) -> httpx.Response:
        """One request with retries; returns the final response, whatever its status (the
        caller decides what a 404 means). ``timeout``: seconds for this request instead of the
        client's (the pool's probes of a server that went away).

        Raises:
            ServerUnavailable: the server could not be reached, or kept answering a retryable
                status, after ``max_retries`` retries (the message names the URL, the last
                status or error and the retries made, as the ``retries`` counter counts them).
        """
        return self._send(method, path, payload, retry=retry, timeout=timeout)[0]

    def _send(
        self,
        method: str,
        path: str,
        payload: Mapping[str, object] | None,
        *,
        retry: bool,
        timeout: float | None,
    ) -> tuple[httpx.Response, int]:
        """``request``, and the retries it made (for the message of a final failure status)."""
        url = self._root + path  # with the credentials: messages use self.url(path)
        extra: _Timeout = {} if timeout is None else {"timeout": timeout}
        attempt = 0
        while True:
            try:
                resp = self._http.request(method, url, json=payload, **extra)
                if not retry or resp.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
                    return resp, attempt
                wait = _retry_after(resp) or self._wait(attempt)
            except httpx.TransportError as e:
                limit = self.max_retries
                if self.failover:
                    limit = 0 if isinstance(e, httpx.TimeoutException) else min(1, limit)
                if not retry or attempt >= limit:
                    raise ServerUnavailable(
                        self._redact(
                            f"{method} {self.url(path)}: {type(e).__name__}: {e} ({retried(attempt)}; is the "
                            "server running, and is --base-url right?)"
                        )
                    ) from None
                wait = self._wait(attempt)
                if self.failover:
                    wait = min(wait, 0.1)
            attempt += 1
            with self._count:
                self.retries += 1
            time.sleep(wait)

    def _wait(self, attempt: int) -> float:
        # Jitter spreads the retries of many concurrent requests hitting one overloaded server.
        return min(30.0, self.backoff * 2**attempt) * (0.5 + random.random())

    def post(self, path: str, payload: Mapping[str, object]) -> dict:
        """POST JSON and return the decoded JSON body.

        Raises:
            ModelError: a non-2xx answer (status and the start of the body), a body that is not
                JSON, or the failures of ``request``.
        """
        resp, attempts = self._send("POST", path, payload, retry=True, timeout=None)
        return self._json(resp, "POST", path, attempts)

    def get(self, path: str, *, retry: bool = True, timeout: float | None = None) -> dict:
        """GET and return the decoded JSON body (errors as ``post``; ``retry`` and ``timeout``
        as ``request``)."""
        resp, attempts = self._send("GET", path, None, retry=retry, timeout=timeout)
        return self._json(resp, "GET", path, attempts)

    def _json(self, resp: httpx.Response, method: str, path: str, attempts: int) -> dict:
        if resp.status_code >= 400:
            retryable = resp.status_code in RETRY_STATUSES
            tries = f" {retried(attempts)}" if retryable else ""
            error = ServerUnavailable if retryable else ModelError
            raise error(
                self._redact(
                    f"{method} {self.url(path)}: HTTP {resp.status_code}{tries}: "
                    f"{' '.join(resp.text.split())[:400]}"
                )
            )
        try:
            return resp.json()
        except ValueError:
            raise ModelError(
                self._redact(f"{method} {self.url(path)}: the answer is not JSON: {resp.text[:200]!r}")
            ) from None


def retried(n: int) -> str:
    """How many times a request was retried, in the words every message uses: ``not retried``,
    ``after 1 retry``, ``after N retries`` (the count ``ServerClient.retries`` adds up, which
    results.json records per endpoint as ``retries``)."""
    if n == 0:
        return "not retried"
    return f"after {n} retr{'y' if n == 1 else 'ies'}"


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None
