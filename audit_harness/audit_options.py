"""``AuditOptions`` (declared in ``option_values``, one field per option) read from a pytest config
(``options_from_config``) and checked once (``validate``): the ranges its rows declare, then what
needs the models or the backends (a chat template that renders, the backend's flags)."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError
from .option_values import AuditOptions, BackendOptions, MetricOptions, OutputOptions, read_options

__all__ = [
    "AuditOptions",
    "BackendOptions",
    "MetricOptions",
    "OutputOptions",
    "options_from_config",
    "validate",
]


def validate(options: AuditOptions) -> None:
    """Raise ConfigError on an option that cannot work, naming the flag: a value out of its row's
    range (``AuditOptions.check``), a chat template that does not render, a backend flag its
    backend does not take (``backends.validate``)."""
    from .backends import validate as validate_backend

    options.check()
    if options.chat_template not in ("auto", "none"):
        path = Path(options.chat_template)
        if not path.is_file():
            raise ConfigError(f"--chat-template {options.chat_template}: not auto, none or a template file")
        from .models.chat_template import check_template_file

        check_template_file(path)  # renders, with the user's message: else exit 4 here
    validate_backend(options)


def _progress_mode(config) -> str:
    from .engine.progress import progress_mode

    worker = getattr(config, "workerinput", {}).get("workerid")
    return progress_mode(quiet=config.getoption("verbose") < 0, worker=worker)


def options_from_config(config) -> AuditOptions:
    """``AuditOptions`` from a pytest config (flags already merged with environment defaults),
    checked (``validate``)."""
    from .benchmarks import registry
    from .options import configured_options

    # Relative to where the run started (a declaration's own paths are relative to its file).
    declared = tuple(
        str((Path(config.invocation_params.dir) / Path(p).expanduser()).resolve())
        for p in config.getoption("audit_bbq_dataset") or ()
    )
    opts = read_options(
        config.getoption,
        bbq_datasets=tuple(dict.fromkeys(declared)),
        benchmark_options=configured_options(config, registry(declared)),
        progress=_progress_mode(config),
    )
    validate(opts)
    return opts
