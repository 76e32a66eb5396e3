"""Which backend runs the audited model: ``hf`` (in this process, ``models/hf.py``) or ``openai``
(any OpenAI-compatible inference server, ``models/openai_server.py``); their command-line options
and how each is opened."""

from __future__ import annotations

import os

BACKENDS = ("hf", "openai")


def add_options(group) -> None:
    """Register the backend options on the plugin's option group."""
    group.addoption("--backend", dest="audit_backend", choices=list(BACKENDS),
                    default=os.environ.get("AUDIT_BACKEND", "hf"),
                    help="hf: load the model in this process (default); openai: score and generate "
                         "through an OpenAI-compatible server at --base-url (vLLM, SGLang, TGI) "
                         "(env AUDIT_BACKEND)")
    group.addoption("--base-url", dest="audit_base_url", default=os.environ.get("AUDIT_BASE_URL"),
                    metavar="URL", help="with --backend openai: the API root, e.g. "
                                        "http://127.0.0.1:8000/v1 (env AUDIT_BASE_URL)")
    group.addoption("--api-key-env", dest="audit_api_key_env", default="OPENAI_API_KEY",
                    metavar="NAME", help="environment variable holding the server's API key "
                                         "(default OPENAI_API_KEY; unset: no key is sent; never logged)")
    group.addoption("--tokenizer", dest="audit_tokenizer", default=None, metavar="NAME",
                    help="with --backend openai: zoo name, folder or hub id of the served model's "
                         "tokenizer, for servers without /tokenize and for chat formatting "
                         "(default: --model when it names one)")
    group.addoption("--max-concurrency", dest="audit_max_concurrency", type=int, default=8,
                    metavar="N", help="with --backend openai: requests in flight per process (default 8)")
    group.addoption("--request-timeout", dest="audit_request_timeout", type=float, default=120.0,
                    metavar="SECONDS", help="with --backend openai: seconds per request (default 120)")
    group.addoption("--max-retries", dest="audit_max_retries", type=int, default=5,
                    metavar="N", help="with --backend openai: retries after HTTP 408, 409, 429, "
                         "500, 502, 503, 504 or a connection error, "
                         "with exponential backoff (default 5)")


def options_from_config(config) -> dict:
    """The ``AuditOptions`` fields of the backend options."""
    get = config.getoption
    return {"backend": get("audit_backend"), "base_url": get("audit_base_url"),
            "api_key_env": get("audit_api_key_env"), "tokenizer": get("audit_tokenizer"),
            "max_concurrency": get("audit_max_concurrency"),
            "request_timeout": get("audit_request_timeout"), "max_retries": get("audit_max_retries")}


def validate(options) -> None:
    """Raise ConfigError on a backend option that cannot work, naming the flag."""
    from .errors import ConfigError

    if options.backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {options.backend!r}")
    if options.backend == "openai" and not options.base_url:
        raise ConfigError("--backend openai needs --base-url (the server's API root, e.g. "
                          "http://127.0.0.1:8000/v1)")
    if options.backend != "openai" and options.base_url:
        raise ConfigError(f"--base-url {options.base_url} is only used with --backend openai")
    if options.max_concurrency < 1:
        raise ConfigError(f"--max-concurrency must be >= 1, got {options.max_concurrency}")
    if options.request_timeout <= 0:
        raise ConfigError(f"--request-timeout must be > 0 seconds, got {options.request_timeout}")
    if options.max_retries < 0:
        raise ConfigError(f"--max-retries must be >= 0, got {options.max_retries}")


def open_model(options, device: str):
    """The audited model of ``options`` (an ``AuditOptions``) on ``device`` (in-process only).

    Raises:
        ModelError: the model cannot be loaded, or the server cannot be used.
    """
    if options.backend == "openai":
        from .models.openai_server import connect

        return connect(options.base_url, options.model, api_key_env=options.api_key_env,
                       tokenizer=options.tokenizer, max_concurrency=options.max_concurrency,
                       timeout=options.request_timeout, max_retries=options.max_retries)
    from .models.zoo import load_model

    return load_model(options.model, device=device, dtype=options.dtype,
                      batch_size=options.batch_size)
