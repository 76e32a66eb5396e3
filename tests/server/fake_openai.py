"""A small OpenAI-compatible server backed by an in-process model, for the backend's unit tests:
/v1/models, /version, /tokenize, /v1/completions (echo + logprobs, token-id prompts, greedy
generation), /v1/chat/completions. Faults on demand: failures before success (``fail_next``),
prompt log-probabilities shifted by one position (``shift``, as llama.cpp's server returns them),
no /tokenize (``tokenize``), a slow server (``delay``), a server that dies after answering a number
of completion requests (``die_after``: the requests in flight then get no answer and new
connections are refused, as when its process is killed), a server that takes connections and
answers its listing but never a completion (``hang``: a cold vLLM compiling its kernels).
Listens on 127.0.0.1 only; ``stop()`` ends it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch


class FakeServer:
    """Serve ``model`` (an ``HFCausalLM``) as ``name`` on a free port of 127.0.0.1 (or ``port``:
    a server restarted where one stopped).

    Attributes:
        url: the API root (``http://127.0.0.1:PORT/v1``).
        requests: (method, path, JSON body) of every request, in arrival order.
        headers: the headers of every request, in the same order.
        fail_next: list of HTTP statuses to answer the next requests with (then normal again).
        shift: return prompt log-probabilities shifted by one position.
        echo: answer echo requests (False: HTTP 400, as a server without prompt log-probabilities).
        chat_logprobs: answer chat requests' ``logprobs``/``top_logprobs`` with the model's exact
            first-token candidates (False: the answer holds none, as some servers do).
        max_logprobs: the largest ``top_logprobs`` allowed (vLLM's ``--max-logprobs``); above it,
            HTTP 400 with vLLM's message.
        tokenize: serve /tokenize.
        owned_by: ``/v1/models``' owned_by (``vllm`` turns on the vLLM extensions).
        delay: seconds each /v1/completions request waits before it is computed.
        hang: /v1/completions requests get no answer until the server stops (the client's
            timeout ends them); the other routes answer.
        die_after: after answering this many /v1/completions requests (counted from the start),
            the server dies: what is in flight is dropped unanswered, new connections refused.
        answered: (path, JSON body) of every request answered with 200, in order.
        dead: whether it died (``die_after``, ``kill``).
    """

    def __init__(
        self,
        model,
        name: str = "fake-model",
        *,
        shift: bool = False,
        tokenize: bool = True,
        owned_by: str = "vllm",
        root: str | None = None,
        echo: bool = True,
        port: int = 0,
        chat_logprobs: bool = True,
        max_logprobs: int = 20,
    ):
        self.chat_logprobs, self.max_logprobs = chat_logprobs, max_logprobs
        self.model, self.name, self.shift, self.tokenize = model, name, shift, tokenize
        self.echo = echo
        self.owned_by, self.root = owned_by, root
        self.requests: list[tuple[str, str, dict | None]] = []
        self.headers: list[dict] = []
        self.fail_next: list[int] = []
        self.delay = 0.0
        self.hang = False
        self._stopping = threading.Event()  # ends the requests ``hang`` holds
        self.die_after: int | None = None
        self.answered: list[tuple[str, dict | None]] = []
        self.dead = False
        self._completions_answered = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if server.dead:
                    self.close_connection = True  # no answer at all, as from a killed process
                    return
                with server._lock:
                    server.requests.append((method, self.path, body))
                    server.headers.append(dict(self.headers))
                    status = server.fail_next.pop(0) if server.fail_next else None
                if status is not None:
                    self._reply(status, {"error": {"message": f"injected {status}"}})
                    return
                completion = self.path == "/v1/completions"
                if completion and server.hang:
                    server._stopping.wait()
                    self.close_connection = True
                    return
                if completion and server.delay:
                    time.sleep(server.delay)
                try:
                    status, answer = server.answer(method, self.path, body, dict(self.headers))
                except Exception as e:  # noqa: BLE001 - a test server reports, never dies
                    status, answer = 500, {"error": {"message": f"{type(e).__name__}: {e}"}}
                with server._lock:
                    if server.dead:  # died while this request was being computed
                        self.close_connection = True
                        return
                    if status == 200:
                        server.answered.append((self.path, body))
                    if completion and status == 200:
                        server._completions_answered += 1
                        if server.die_after is not None and server._completions_answered >= server.die_after:
                            server.kill()
                self._reply(status, answer)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.dead = True
        self._stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def kill(self) -> None:
        """Die now: requests in flight and later ones get no answer, new connections are
        refused (the listening socket closes)."""
        self.dead = True
        # shutdown() waits for the serving loop, which may be this very request's caller chain:
        # from another thread.
        threading.Thread(target=self.stop, daemon=True).start()

    def completions(self, answered: bool = True) -> list[dict]:
        """Bodies of the /v1/completions requests answered (or, ``answered=False``, received)."""
        if answered:
            return [b for p, b in self.answered if p == "/v1/completions"]
        return self.paths("/v1/completions")

    def paths(self, path: str) -> list[dict]:
        """Bodies of the requests to ``path``."""
        return [b for _, p, b in self.requests if p == path]

    # -- the model behind it ---------------------------------------------------------------------
    def answer(self, method: str, path: str, body: dict | None, headers: dict) -> tuple[int, dict]:
        m = self.model
        if path == "/v1/models":
            return 200, {
                "object": "list",
                "data": [
                    {
                        "id": self.name,
                        "object": "model",
                        "owned_by": self.owned_by,
                        "root": self.root,
                        "max_model_len": 1024,
                    }
                ],
            }
        if path == "/version":
            return 200, {"version": "0.0-fake"}
        if path == "/health":
            return 200, {}
        if path == "/tokenize" and self.tokenize:
            ids = m.tokenizer(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))[
                "input_ids"
            ]
            return 200, {"count": len(ids), "tokens": list(ids), "max_model_len": 1024}
        if path == "/v1/completions":
            if body.get("echo") and not self.echo:
                return 400, {"error": {"message": "echo is not supported"}}
            return 200, self._completions(body)
        if path == "/v1/chat/completions":
            prompt = m.tokenizer.apply_chat_template(
                body["messages"], tokenize=False, add_generation_prompt=True
            )
            k = body.get("top_logprobs")
            if body.get("logprobs") and k is not None and k > self.max_logprobs:
                message = f"Requested sample logprobs of {k}, which is greater than max allowed: {self.max_logprobs}"
                return 400, {"error": {"message": message, "type": "BadRequestError"}}
            if body.get("logprobs") and self.chat_logprobs:
                return 200, self._chat_top(m.encode_prompt(prompt), int(k or 0))
            text = self._generate(m.encode_prompt(prompt), body.get("max_tokens", 16), False)[1]
            return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        return 404, {"error": {"message": f"no route {path}"}}

    @torch.inference_mode()
    def _chat_top(self, ids: list[int], k: int) -> dict:
        """One greedy token with its ``k`` best candidates, in OpenAI's chat shape."""
        lp = torch.log_softmax(self.model.model(torch.tensor([ids])).logits[0, -1].float(), -1)
        values, tokens = lp.topk(max(k, 1))
        decode = self.model.tokenizer.decode
        tops = [{"token": decode([int(t)]), "logprob": float(v)} for v, t in zip(values, tokens)][:k]
        best = {"token": decode([int(tokens[0])]), "logprob": float(values[0]), "top_logprobs": tops}
        message = {"role": "assistant", "content": best["token"]}
        return {"choices": [{"index": 0, "message": message, "logprobs": {"content": [best]}}]}

    @torch.inference_mode()
    def _logprobs(self, ids: list[int]) -> list[float | None]:
        """[None, log P(ids[1] | ids[:1]), ...] from one plain forward."""
        logits = self.model.model(torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        return [None] + [float(lp[p - 1, ids[p]]) for p in range(1, len(ids))]

    @torch.inference_mode()
    def _generate(
        self, ids: list[int], n: int, with_logprobs: bool = True
    ) -> tuple[list[tuple[int, float]], str]:
        if not with_logprobs:  # text only: the model's own cached greedy decoding, far faster
            return [], self.model.generate_tokens([list(ids)], n)[0][0]
        out, cur = [], list(ids)
        for _ in range(n):
            lp = torch.log_softmax(self.model.model(torch.tensor([cur])).logits[0, -1].float(), -1)
            tok = int(lp.argmax())
            out.append((tok, float(lp[tok])))
            cur.append(tok)
        return out, self.model.tokenizer.decode([t for t, _ in out], skip_special_tokens=True)

    def _completions(self, body: dict) -> dict:
        prompts = body["prompt"]
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        as_ids = body.get("return_tokens_as_token_ids", False)
        choices = []
        for i, prompt in enumerate(prompts):
            ids = self.model.encode_prompt(prompt) if isinstance(prompt, str) else list(prompt)
            gen, text = self._generate(ids, int(body.get("max_tokens", 16)), body.get("logprobs") is not None)
            choice = {"index": i, "text": text, "finish_reason": "length"}
            if body.get("logprobs") is not None:
                tokens = ([t for t, _ in gen], [v for _, v in gen])
                if body.get("echo"):
                    values = self._logprobs(ids)
                    if self.shift:  # llama.cpp: each value listed one position early
                        values = [None] + values[2:] + [tokens[1][0]]
                    tokens = (ids + tokens[0], values + tokens[1])
                names = [f"token_id:{t}" if as_ids else self.model.tokenizer.decode([t]) for t in tokens[0]]
                choice["logprobs"] = {"tokens": names, "token_logprobs": tokens[1]}
                if body.get("echo"):
                    choice["text"] = "".join(names) + text
            choices.append(choice)
        return {"object": "text_completion", "choices": choices}
