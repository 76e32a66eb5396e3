"""One declaration per option (``Option``): its flag, default, environment variable, type,
choices, check and help, written once and read by every parser that takes it: the pytest plugin
(``options.register``), ``bias-audit score`` and ``oracle`` (``cli``), and a benchmark's
``configure`` (``Benchmark.settings``), so a flag cannot mean two things in two places.

Also the suite's one check of an interval's confidence level (``check_confidence``): the
``--confidence`` option and a thresholds file's ``confidence`` are both held to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .errors import ConfigError


def confidence_problem(value: object) -> str | None:
    """What is wrong with ``value`` as an interval's confidence level (it must be a number in the
    open interval (0, 1)), or None when nothing is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        return "must be in (0, 1)"
    return None


def check_confidence(value: object, name: str, example: str = "", shown: str | None = None) -> None:
    """Raise ConfigError unless ``value`` is a confidence level in (0, 1).

    Args:
        value: the level given. name: what gave it, first in the message (``--confidence``,
            ``thresholds.yaml: bbq``). example: added after the rule (e.g. ``", e.g. 0.95"``).
        shown: how the message shows the value (default ``str(value)``).

    Raises:
        ConfigError: ``<name> must be in (0, 1)<example>, got <shown>``.
    """
    problem = confidence_problem(value)
    if problem:
        raise ConfigError(f"{name} {problem}{example}, got {value if shown is None else shown}")


def at_least(low: float, unit: str = "") -> Callable[[float | None], str | None]:
    """An ``Option.check``: the value, when given (not None), is ``>= low``."""

    def check(value: float | None) -> str | None:
        return None if value is None or value >= low else f"must be >= {low}{unit}, got {value}"

    return check


def above(low: float, unit: str = "") -> Callable[[float | None], str | None]:
    """An ``Option.check``: the value, when given (not None), is ``> low`` (``unit`` follows it)."""

    def check(value: float | None) -> str | None:
        return None if value is None or value > low else f"must be > {low}{unit}, got {value}"

    return check


def a_confidence(value: object) -> str | None:
    """An ``Option.check``: ``value`` is a confidence level (``confidence_problem``)."""
    problem = confidence_problem(value)
    return f"{problem}, got {value}" if problem else None


@dataclass(frozen=True)
class Option:
    """An option declared once.

    A command-line option has a ``flag``; a setting without one (``flag=None``) is taken by a
    benchmark's ``configure`` only (e.g. ``max_new_tokens``), declared the same way so its
    default and check live beside it.

    Attributes:
        flag: e.g. ``"--kobbq-mode"``; None for a ``configure``-only setting.
        help: one sentence for ``--help``.
        key: the name the value is set under: a benchmark's ``configure`` key (e.g.
            ``answer_mode``); default: the flag without dashes, ``-`` as ``_``.
        default: the value when neither the flag nor ``env`` gives one.
        env: an environment variable giving the default (read by ``options.default_of``, which
            refuses a value of the wrong type).
        type: converts the command-line text (``int``, ``float``); None keeps the text.
        choices: the allowed values, or None.
        metavar: the value's name in ``--help``.
        switch: a flag without a value (``store_true``).
        repeat: a flag that may be given several times, each value added to a list (its
            ``env`` variable's value, split on ``os.pathsep``, comes first).
        dest: the pytest option's ``dest`` (default ``audit_<key>``).
        parse: turns a given value into the setting's (e.g. ``"1,3"`` into ``(1, 3)``), raising
            ConfigError; applied before ``check``.
        check: what is wrong with a value (a phrase such as ``"must be >= 1, got 0"``), or None;
            default: membership in ``choices``.
        group: for an option of the run (``option_values.AuditOptions``): the group that holds
            its value (``backend``, ``metrics``, ``outputs``; ``""``: ``AuditOptions`` itself).
        field: the field of that group (set by ``option_values.rows``).
    """

    flag: str | None
    help: str = ""
    key: str = ""
    default: Any = None
    env: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    switch: bool = False
    repeat: bool = False
    dest: str = ""
    parse: Callable[[Any], Any] | None = None
    check: Callable[[Any], str | None] | None = None
    group: str = ""
    field: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            if self.flag is None:
                raise ValueError("an Option without a flag needs a key")
            object.__setattr__(self, "key", self.flag.lstrip("-").replace("-", "_"))
        if not self.dest:
            name = self.flag.lstrip("-").replace("-", "_") if self.flag else self.key
            object.__setattr__(self, "dest", "audit_" + name)

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` (``check``, else ``choices``), or None."""
        if self.check is not None:
            return self.check(value)
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(str(c) for c in self.choices)}, got {value!r}"
        return None

    def value_of(self, value: Any, who: str) -> Any:
        """``value`` parsed (``parse``) and checked.

        Raises:
            ConfigError: ``<who>: <key> <problem>`` (a parser's own ConfigError as it is).
        """
        if self.parse is not None:
            value = self.parse(value)
        problem = self.problem(value)
        if problem:
            raise ConfigError(f"{who}: {self.key} {problem}")
        return value

    def parser_kwargs(self) -> dict[str, Any]:
        """The keywords argparse's ``add_argument`` and pytest's ``addoption`` share (the default
        and dest apart)."""
        if self.switch:
            return {"action": "store_true", "help": self.help}
        kwargs: dict[str, Any] = {"help": self.help}
        if self.repeat:
            kwargs["action"] = "append"
        if self.type is not None:
            kwargs["type"] = self.type
        if self.choices is not None:
            kwargs["choices"] = list(self.choices)
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        return kwargs
