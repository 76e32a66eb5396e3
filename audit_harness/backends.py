"""Which backend runs the audited model: ``hf`` (in this process, ``models/hf.py``), ``openai``
(any OpenAI-compatible inference server, ``models/openai_server.py``) or ``replay`` (outputs
saved elsewhere, ``models/replay.py``: ``bias-audit score`` is this backend); their command-line
options and how each is opened. ``--plan`` swaps ``hf`` for its planning twin
(``models/plan.py``: tokenizer and config, no weights)."""

from __future__ import annotations

import os

BACKENDS = ("hf", "openai", "replay")


def add_options(group) -> None:
    """Register the backend options on the plugin's option group."""
    group.addoption(
        "--backend",
        dest="audit_backend",
        choices=list(BACKENDS),
        default=os.environ.get("AUDIT_BACKEND", "hf"),
        help="hf: load the model in this process (default); openai: score and generate "
        "through an OpenAI-compatible server at --base-url (vLLM, SGLang, TGI); "
        "replay: answer from the saved outputs of --predictions (env AUDIT_BACKEND)",
    )
    group.addoption(
        "--base-url",
        dest="audit_base_url",
        action="append",
        default=None,
        metavar="URL",
        help="with --backend openai: the API root, e.g. http://127.0.0.1:8000/v1; several "
        "times (or @FILE, one URL a line) for a pool of replicas of one model "
        "(env AUDIT_BASE_URL: URLs separated by spaces or commas)",
    )
    group.addoption(
        "--api-key-env",
        dest="audit_api_key_env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the server's API key "
        "(default OPENAI_API_KEY; unset: no key is sent; never logged)",
    )
    group.addoption(
        "--tokenizer",
        dest="audit_tokenizer",
        default=None,
        metavar="NAME",
        help="with --backend openai: zoo name, folder or hub id of the served model's "
        "tokenizer, for servers without /tokenize and for chat formatting "
        "(default: --model when it names one)",
    )
    group.addoption(
        "--max-concurrency",
        dest="audit_max_concurrency",
        type=int,
        default=8,
        metavar="N",
        help="with --backend openai: requests in flight per endpoint and process (default 8)",
    )
    group.addoption(
        "--request-timeout",
        dest="audit_request_timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="with --backend openai: seconds per request (default 120)",
    )
    group.addoption(
        "--max-retries",
        dest="audit_max_retries",
        type=int,
        default=5,
        metavar="N",
        help="with --backend openai: retries after HTTP 408, 409, 429, "
        "500, 502, 503, 504 or a connection error, "
        "with exponential backoff (default 5)",
    )

    group.addoption(
        "--predictions",
        dest="audit_predictions",
        default=None,
        metavar="FILE",
        help="with --backend replay: JSONL of saved outputs, one row per item with its id and the output",
    )
    group.addoption(
        "--prediction-field",
        dest="audit_prediction_field",
        default=None,
        metavar="FIELD",
        help="with --backend replay: the row field holding the output",
    )
    group.addoption(
        "--index-base",
        dest="audit_index_base",
        type=int,
        choices=[0, 1],
        default=None,
        help="with --backend replay: saved answers that are numbers count the options "
        "from 0 or from 1 (without it a number is an error: '1' could be A or B)",
    )
    group.addoption(
        "--allow-partial",
        dest="audit_allow_partial",
        action="store_true",
        default=False,
        help="with --backend replay: judge a category the predictions "
        "cover only in part (else its gates are INSUFFICIENT)",
    )


def options_from_config(config) -> dict:
    """The ``AuditOptions`` fields of the backend options."""
    get = config.getoption
    return {
        "backend": get("audit_backend"),
        "base_url": base_urls(
            get("audit_base_url") or os.environ.get("AUDIT_BASE_URL", "").replace(",", " ").split()
        ),
        "api_key_env": get("audit_api_key_env"),
        "tokenizer": get("audit_tokenizer"),
        "max_concurrency": get("audit_max_concurrency"),
        "request_timeout": get("audit_request_timeout"),
        "max_retries": get("audit_max_retries"),
        "predictions": get("audit_predictions"),
        "prediction_field": get("audit_prediction_field"),
        "index_base": get("audit_index_base"),
        "allow_partial": get("audit_allow_partial"),
    }


def base_urls(values) -> tuple[str, ...] | None:
    """The ``--base-url`` values with each ``@FILE`` replaced by the file's URLs (one a line;
    blank lines and ``#`` comments skipped); None when there are none.

    Raises:
        ConfigError: the file cannot be read or lists no URL.
    """
    from pathlib import Path

    from .errors import ConfigError

    urls: list[str] = []
    for value in values or ():
        if not value.startswith("@"):
            urls.append(value)
            continue
        path = Path(value[1:]).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--base-url {value}: cannot read {path} ({e})") from None
        listed = [line.split("#", 1)[0].strip() for line in lines]
        listed = [u for u in listed if u]
        if not listed:
            raise ConfigError(f"--base-url {value}: {path} lists no URL")
        urls += listed
    return tuple(urls) or None


def validate(options) -> None:
    """Raise ConfigError on a backend option that cannot work, naming the flag."""
    from .errors import ConfigError

    if options.backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {options.backend!r}")
    if options.backend == "openai" and not options.base_url:
        raise ConfigError(
            "--backend openai needs --base-url (the server's API root, e.g. http://127.0.0.1:8000/v1)"
        )
    if options.backend != "openai" and options.base_url:
        from .redact import redact_text

        shown = redact_text(" ".join(options.base_url))
        raise ConfigError(f"--base-url {shown} is only used with --backend openai")
    replay_only = [
        flag
        for flag, value in (
            ("--predictions", options.predictions),
            ("--prediction-field", options.prediction_field),
            ("--index-base", options.index_base),
            ("--allow-partial", options.allow_partial or None),
        )
        if value is not None
    ]
    if options.backend == "replay":
        missing = [
            f
            for f, v in (
                ("--predictions", options.predictions),
                ("--prediction-field", options.prediction_field),
            )
            if not v
        ]
        if missing:
            raise ConfigError(
                f"--backend replay needs {' and '.join(missing)} (the saved outputs "
                "and the row field that holds them)"
            )
        if options.limit is not None:
            raise ConfigError(
                "--limit does not apply with --backend replay: the predictions file "
                "says which items are scored"
            )
    elif replay_only:
        raise ConfigError(f"{replay_only[0]} is only used with --backend replay")
    if options.plan and options.backend != "hf":
        raise ConfigError(f"--plan plans an in-process run (--backend hf), not --backend {options.backend}")
    if options.plan_params is not None:
        if not options.plan:
            raise ConfigError("--plan-params is only used with --plan")
        if not options.plan_params >= 1:
            raise ConfigError(f"--plan-params must be a parameter count >= 1, got {options.plan_params:g}")
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
    if options.backend == "replay":
        raise ValueError(
            "the replay backend is opened by the session (it joins the predictions to the data first)"
        )
    if options.backend == "openai":
        from .models.openai_server import connect

        return connect(
            list(options.base_url),
            options.model,
            api_key_env=options.api_key_env,
            tokenizer=options.tokenizer,
            max_concurrency=options.max_concurrency,
            timeout=options.request_timeout,
            max_retries=options.max_retries,
        )
    if options.plan:
        from .models.plan import load_plan_model

        return load_plan_model(
            options.model, device=device, dtype=options.dtype, batch_size=options.batch_size
        )
    from .models.zoo import load_model

    return load_model(options.model, device=device, dtype=options.dtype, batch_size=options.batch_size)
