"""A user's declaration of a BBQ-format dataset (``--bbq-dataset FILE``, docs/datasets.md): a
YAML file naming the dataset, its language, one data file per category, which of the data's
columns holds each BBQ field, how its values read, the prompts and the metric family.

``read_declaration`` checks everything that can be checked without reading every row, before
anything is scored: every required field, the names and types of the values, the metric family
(one of ``bias_metrics.bbq_family.FLAVOURS``), the prompts' placeholders, that every category
file exists and that each mapped column is among the data's columns. Each problem is a
``ConfigError`` naming the declaration, the line (from the YAML node's mark) and the field
(``fields.context``). The rows themselves are checked by ``declared.DeclaredBBQ``'s loader.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import yaml

from ..data import csv_rows, decoded_lines, not_text
from ..errors import ConfigError, DataError
from .bbq_family import ITEM_FIELDS

#: The BBQ fields every row must have, and the column of the data that holds each.
REQUIRED_FIELDS = (
    *ITEM_FIELDS,
    "question_polarity",
    "context_condition",
    "unknown_option",
)
#: Exactly one of them: the option naming the group the stereotype targets (``target_option``),
#: or the bias-aligned option itself (``biased_option``, as BBQ's ``target_loc``).
TARGET_FIELDS = ("target_option", "biased_option")
#: Optional: the row's id (default: its row number) and its template (the bootstrap's cluster;
#: default: every item its own).
OPTIONAL_FIELDS = ("id", "template_id")
KNOWN_FIELDS = REQUIRED_FIELDS + TARGET_FIELDS + OPTIONAL_FIELDS
#: Fields whose value is an option: 0, 1 or 2 (ans0, ans1, ans2).
INDEX_FIELDS = ("label", "unknown_option", "target_option", "biased_option")
#: Fields whose values are one of these (after ``values``).
CHOICE_FIELDS = {"question_polarity": ("neg", "nonneg"), "context_condition": ("ambig", "disambig")}
#: The keys of a declaration: required, then optional.
REQUIRED_KEYS = ("name", "language", "metric_family", "files", "fields", "prompt")
OPTIONAL_KEYS = (
    "title",
    "format",
    "values",
    "generate_prompt",
    "unknown_phrasings",
    "delimiter",
    "limitations",
    "metadata",
)
#: ``format: bbq``: BBQ's own JSONL rows (``bbq.REQUIRED_FIELDS``), read as the built-in ``bbq``
#: reads them; ``fields`` and ``values`` do not apply, ``language``, ``metric_family`` and
#: ``prompt`` default to BBQ's.
NATIVE = "bbq"
NATIVE_DEFAULTS = {"language": "en", "metric_family": "bbq"}
FORMATS = ("jsonl", "csv", NATIVE)
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_CATEGORY = re.compile(r"\w+")
#: The longest name and category: both name files of the run folder (``records/<name>/
#: <category>.jsonl``), and a file name longer than the file system's 255 bytes failed the run
#: after scoring.
MAX_NAME = 64
_LANGUAGE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]+)*")
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


@dataclass(frozen=True)
class Declaration:
    """A checked declaration.

    Attributes:
        path: the YAML file (absolute). sha256: of its bytes.
        name: the benchmark's name (thresholds section, ``test_<name>``). language: a language
            code (``en``, ``es``, ``zh``...). flavour: the metric family. title: for reports.
        files: ``{category: data file}`` (absolute), in the declaration's order. shown: the same
            paths as results record them (``<name>/<path relative to the declaration>``).
        formats: ``{category: "jsonl" | "csv"}``.
        fields: ``{BBQ field: the data's column}``. values: ``{BBQ field: {data value (text):
            BBQ value}}``.
        prompt: the cloze prompt (``{context}``, ``{question}``). generate_prompt: the lettered
            prompt of generate mode (``{context}``, ``{question}``, ``{a}``, ``{b}``, ``{c}``),
            or None for the suite's own in ``language``.
        unknown_phrasings: further texts that name the unknown option (generate mode's parser).
        delimiter: put between the prompt and each scored option. limitations: for reports.
        metadata: ``format: bbq``: BBQ's ``additional_metadata.csv``, whose ``target_loc`` names
            each row's bias-aligned option, or None (derived from the row's own
            ``stereotyped_groups``).
    """

    path: Path
    sha256: str
    name: str
    language: str
    flavour: str
    title: str
    files: dict[str, Path]
    shown: dict[str, str]
    formats: dict[str, str]
    fields: dict[str, str]
    values: dict[str, dict[str, object]]
    prompt: str
    generate_prompt: str | None
    unknown_phrasings: tuple[str, ...] = ()
    delimiter: str = " "
    limitations: tuple[str, ...] = ()
    lines: dict[str, int] = field(default_factory=dict)
    metadata: Path | None = None

    def where(self, key: str) -> str:
        """``<declaration>:<line>: field '<key>'``, for a message about one of its fields."""
        return f"{self.path}:{self.lines.get(key, 1)}: field {key!r}"


class _Tree:
    """A YAML document as plain values, with the line of every key, so that a problem names
    the file, the line and the dotted field (``fields.context``)."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.lines: dict[str, int] = {}
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
        self.doc = self._plain(node, ()) if node is not None else None

    def _plain(self, node: yaml.Node, at: tuple[str, ...]) -> object:
        if isinstance(node, yaml.MappingNode):
            out: dict[str, object] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                here = at + (key,)
                if key in out:
                    raise self.fail(here, f"written twice (lines {self.line(here)} and {_line(key_node)})")
                self.lines[".".join(here)] = _line(key_node)
                out[key] = self._plain(value_node, here)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._plain(v, at + (str(i),)) for i, v in enumerate(node.value)]
        return _CONSTRUCTOR.construct_object(node, deep=True)

    def line(self, at: tuple[str, ...]) -> int:
        """The line of the key ``at``, else of its nearest parent key, else 1."""
        for end in range(len(at), 0, -1):
            line = self.lines.get(".".join(at[:end]))
            if line is not None:
                return line
        return 1

    def fail(self, at: tuple[str, ...], problem: str) -> ConfigError:
        return ConfigError(f"{self.path}:{self.line(at)}: field {'.'.join(at)!r}: {problem}")

    def mapping(self, value: object, at: tuple[str, ...], what: str) -> dict[str, object]:
        if not isinstance(value, dict) or not value:
            raise self.fail(at, f"expected {what}, got {_shown(value)}")
        return value

    def text(self, value: object, at: tuple[str, ...], what: str = "a text") -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(at, f"expected {what}, got {_shown(value)}")
        return value

    def texts(self, value: object, at: tuple[str, ...]) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(at, f"expected a list of texts, got {_shown(value)}")
        if len(set(value)) != len(value):
            raise self.fail(at, "a text is listed twice")
        return tuple(value)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _shown(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


def read_declaration(path: str | Path, taken: Mapping[str, str] | None = None) -> Declaration:
    """Read and check the declaration at ``path``.

    Args:
        path: the YAML file. taken: ``{name: what holds it}`` of the benchmarks already known
            (the built-in ones, the declarations read before): a name among them is refused.

    Raises:
        ConfigError: the file is unreadable or not YAML, or a field is missing, unknown, of the
            wrong type or value, names a data file that does not exist or a column the data
            lacks; the message names the file, the line and the field.
    """
    file = resolved(path)
    try:
        raw = file.read_bytes()
        text = raw.decode("utf-8")
    except OSError as e:
        raise ConfigError(f"--bbq-dataset {path}: cannot read the declaration ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{file}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    tree = _Tree(file, text)
    doc = _top_level(tree)
    native = doc.get("format") == NATIVE
    name = _name(tree, doc["name"], taken or {})
    language = tree.text(doc["language"], ("language",), "a language code such as en, es, zh")
    if not _LANGUAGE.fullmatch(language):
        raise tree.fail(("language",), f"{language!r} is not a language code (en, es, pt-BR, ...)")
    files, shown, formats = _files(tree, doc, name)
    fields = {} if native else _fields(tree, doc["fields"])
    metadata = _metadata(tree, doc, files) if native else None
    _check_columns(tree, fields, files, formats, metadata)
    return Declaration(
        path=file,
        sha256=hashlib.sha256(raw).hexdigest(),
        name=name,
        language=language,
        flavour=_flavour(tree, doc["metric_family"]),
        title=tree.text(doc["title"], ("title",)) if "title" in doc else "",
        files=files,
        shown=shown,
        formats=formats,
        fields=fields,
        values=_values(tree, doc.get("values"), fields),
        prompt=_template(tree, doc["prompt"], ("prompt",), ("context", "question"), ("context", "question")),
        generate_prompt=_generate_prompt(tree, doc, language),
        unknown_phrasings=tree.texts(doc["unknown_phrasings"], ("unknown_phrasings",))
        if "unknown_phrasings" in doc
        else (),
        delimiter=_delimiter(tree, doc.get("delimiter", " ")),
        limitations=tree.texts(doc["limitations"], ("limitations",)) if "limitations" in doc else (),
        lines=dict(tree.lines),
        metadata=metadata,
    )


def resolved(path: str | Path) -> Path:
    """The declaration's absolute path.

    Raises:
        ConfigError: it cannot be resolved (a symbolic link loop, a name too long).
    """
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symbolic link loop (Python < 3.13)
        raise ConfigError(f"--bbq-dataset {path}: cannot resolve the declaration's path ({e})") from None


def _top_level(tree: _Tree) -> dict[str, object]:
    if not isinstance(tree.doc, dict):
        raise ConfigError(
            f"{tree.path}:1: expected a mapping with {', '.join(REQUIRED_KEYS)}, got {_shown(tree.doc)}"
        )
    for key in tree.doc:
        if key not in REQUIRED_KEYS + OPTIONAL_KEYS:
            raise tree.fail((key,), f"unknown field; known: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
    if tree.doc.get("format") == NATIVE:
        return _native_top_level(tree, tree.doc)
    if "metadata" in tree.doc:
        raise tree.fail(("metadata",), "applies to format: bbq only (BBQ's own rows)")
    for key in REQUIRED_KEYS:
        if key not in tree.doc:
            raise ConfigError(
                f"{tree.path}:1: missing field {key!r} (required: {', '.join(REQUIRED_KEYS)}; "
                "docs/datasets.md)"
            )
    return tree.doc


def _native_top_level(tree: _Tree, doc: dict[str, object]) -> dict[str, object]:
    """``format: bbq``: ``name`` and ``files`` required; BBQ's language, metric family and prompt
    by default; ``fields`` and ``values`` refused (the rows are BBQ's: nothing to map)."""
    from .bbq import PROMPT

    for key in ("fields", "values"):
        if key in doc:
            raise tree.fail(
                (key,), "does not apply to format: bbq (BBQ's own rows; docs/datasets.md); remove it"
            )
    for key in ("name", "files"):
        if key not in doc:
            raise ConfigError(f"{tree.path}:1: missing field {key!r} (format: bbq requires name and files)")
    return {**NATIVE_DEFAULTS, "prompt": PROMPT, **doc}


def _name(tree: _Tree, value: object, taken: Mapping[str, str]) -> str:
    name = tree.text(value, ("name",), "a name")
    if len(name) > MAX_NAME:
        raise tree.fail(("name",), f"{len(name)} characters: at most {MAX_NAME} (it names the run's files)")
    if not _NAME.fullmatch(name):
        raise tree.fail(
            ("name",),
            f"{name!r}: lower-case letters, digits and _, starting with a letter (it names the "
            "thresholds section and the test test_<name>)",
        )
    if name in taken:
        raise tree.fail(("name",), f"{name!r} is already the name of {taken[name]}: choose another")
    return name


def _flavour(tree: _Tree, value: object) -> str:
    from bias_metrics.bbq_family import FLAVOURS

    if value not in FLAVOURS:
        raise tree.fail(
            ("metric_family",),
            f"unknown metric family {value!r}; known: {', '.join(sorted(FLAVOURS))} (docs/metrics.md)",
        )
    return str(value)


def _files(
    tree: _Tree, doc: Mapping[str, object], name: str
) -> tuple[dict[str, Path], dict[str, str], dict[str, str]]:
    """``{category: path}``, the recorded paths and each file's format; every file must exist."""
    given = tree.mapping(doc["files"], ("files",), "a mapping of category: data file")
    fmt = doc.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise tree.fail(("format",), f"{fmt!r} is not one of {', '.join(FORMATS)}")
    files, shown, formats = {}, {}, {}
    for category, raw in given.items():
        at = ("files", category)
        if not _CATEGORY.fullmatch(category):
            raise tree.fail(
                at, f"category {category!r}: letters, digits and _ only (it names test ids and files)"
            )
        if len(category) > MAX_NAME:
            raise tree.fail(
                at, f"category of {len(category)} characters: at most {MAX_NAME} (it names files)"
            )
        path = _declared_file(tree, tree.text(raw, at, "a data file's path"), at, "data file ")
        formats[category] = fmt or _EXTENSIONS.get(path.suffix.lower(), "")
        if not formats[category]:
            raise tree.fail(
                at, f"{path.name}: cannot tell its format from the extension; add format: jsonl or csv"
            )
        files[category] = path
        try:
            shown[category] = f"{name}/{path.relative_to(tree.path.parent).as_posix()}"
        except ValueError:  # outside the declaration's folder: its full path
            shown[category] = f"{name}/{path.as_posix()}"
    return files, shown, formats


def _fields(tree: _Tree, value: object) -> dict[str, str]:
    """``{BBQ field: column}``: every required field, exactly one target field, no unknown one."""
    fields = tree.mapping(value, ("fields",), "a mapping of BBQ field: your column")
    for key, column in fields.items():
        if key not in KNOWN_FIELDS:
            raise tree.fail(("fields", key), f"unknown BBQ field; known: {', '.join(KNOWN_FIELDS)}")
        tree.text(column, ("fields", key), "a column name")
    for key in REQUIRED_FIELDS:
        if key not in fields:
            raise tree.fail(("fields",), f"missing field 'fields.{key}': the column holding {key}")
    targets = [k for k in TARGET_FIELDS if k in fields]
    if len(targets) != 1:
        raise tree.fail(
            ("fields",),
            "map exactly one of target_option (the option naming the targeted group) and "
            f"biased_option (the bias-aligned option, BBQ's target_loc); got {targets or 'neither'}",
        )
    return {k: str(v) for k, v in fields.items()}


def data_columns(path: Path, fmt: str) -> list[str]:
    """The columns of a data file: a CSV's header, or the keys of a JSONL file's first row.

    Raises:
        DataError: the file is empty, holds a header and no row, or its first row is
            malformed (file:line).
    """
    if fmt == "csv":
        first = next(csv_rows(path, ()), None)
        if first is None:
            # As a 0-byte JSONL file is refused: a header alone would give categories of n = 0.
            raise DataError(f"{path}:2: no rows after the header")
        return [column for column in first[2] if column is not None]
    first = next(jsonl_rows(path), None)
    if first is None:
        raise DataError(f"{path}:1: empty file (no rows)")
    return list(first[1])


def jsonl_rows(path: Path) -> Iterator[tuple[str, dict]]:
    """``("<file>:<line>", row)`` of each line of a JSONL file.

    Raises:
        DataError: an empty line, malformed JSON, a line that is not an object, or a value that
            is not text (bytes that are not UTF-8, a lone ``\\ud800`` escape), naming the file,
            the line and the field.
    """
    for line_no, line, utf8 in decoded_lines(path):
        where = f"{path}:{line_no}"
        if not line.strip():
            raise DataError(f"{where}: empty line")
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            bytes_note = "" if utf8 else "; the line is not UTF-8"
            raise DataError(f"{where}: malformed JSON ({e.msg} at column {e.colno}{bytes_note})") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object per line")
        bad = not_text(row, where, utf8)
        if bad is not None:
            raise bad
        yield where, row


def _metadata(tree: _Tree, doc: Mapping[str, object], files: Mapping[str, Path]) -> Path | None:
    """``format: bbq``'s ``metadata``: BBQ's ``additional_metadata.csv`` (relative to the
    declaration), or None."""
    if "metadata" not in doc:
        return None
    at = ("metadata",)
    return _declared_file(
        tree, tree.text(doc["metadata"], at, "the path of BBQ's additional_metadata.csv"), at, ""
    )


def _declared_file(tree: _Tree, text: str, at: tuple[str, ...], noun: str) -> Path:
    """The file a declaration names at ``at`` (relative to the declaration's folder).

    Raises:
        ConfigError: (``tree.fail``) the path cannot be resolved or is no file, naming it with
            ``noun`` before it.
    """
    path = Path(text).expanduser()
    try:
        path = (path if path.is_absolute() else tree.path.parent / path).resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symbolic link loop (Python < 3.13)
        raise tree.fail(at, f"{noun}{path} cannot be resolved ({e})") from None
    if not path.is_file():
        raise tree.fail(at, f"{noun}{path} does not exist (paths are relative to {tree.path.parent})")
    return path


def _native_columns(metadata: Path | None) -> tuple[str, ...]:
    """The fields of a BBQ row ``format: bbq`` reads: the built-in loader's, and the row's own
    ``additional_metadata`` (its ``stereotyped_groups``) without a metadata file."""
    from .bbq import REQUIRED_FIELDS as BBQ_FIELDS

    return BBQ_FIELDS if metadata is not None else (*BBQ_FIELDS, "additional_metadata")


def _check_columns(
    tree: _Tree,
    fields: Mapping[str, str],
    files: Mapping[str, Path],
    formats: Mapping[str, str],
    metadata: Path | None = None,
) -> None:
    """Every mapped column is in every data file (a CSV's header, a JSONL file's first row);
    ``format: bbq``: every field of a BBQ row."""
    for category, path in files.items():
        if formats[category] == NATIVE:
            columns = data_columns(path, "jsonl")
            missing = [c for c in _native_columns(metadata) if c not in columns]
            if missing:
                raise tree.fail(
                    ("files", category),
                    f"{path}:1: not a BBQ row (format: bbq): missing field(s) {', '.join(missing)}",
                )
            continue
        columns = data_columns(path, formats[category])
        for key, column in fields.items():
            if column not in columns:
                raise tree.fail(
                    ("fields", key),
                    f"column {column!r} is not in {path} (category {category}; its columns: "
                    f"{', '.join(columns)})",
                )


def _values(tree: _Tree, value: object, fields: Mapping[str, str]) -> dict[str, dict[str, object]]:
    """``{field: {data value: BBQ value}}``; each BBQ value must be one the field allows."""
    if value is None:
        return {}
    tables = tree.mapping(value, ("values",), "a mapping of BBQ field: {your value: BBQ value}")
    out: dict[str, dict[str, object]] = {}
    for key, table in tables.items():
        at = ("values", key)
        if key not in INDEX_FIELDS + tuple(CHOICE_FIELDS):
            raise tree.fail(at, f"values apply to {', '.join(INDEX_FIELDS + tuple(CHOICE_FIELDS))}")
        if key not in fields:
            raise tree.fail(at, f"fields has no {key!r} to map values of")
        table = tree.mapping(table, at, "a mapping of your value: BBQ value")
        allowed = CHOICE_FIELDS.get(key, (0, 1, 2))
        for raw, bbq in table.items():
            if bbq not in allowed or isinstance(bbq, bool):
                raise tree.fail(at + (raw,), f"{bbq!r} is not one of {', '.join(map(str, allowed))}")
        out[key] = dict(table)
    return out


def _template(
    tree: _Tree, value: object, at: tuple[str, ...], allowed: tuple[str, ...], required: tuple[str, ...]
) -> str:
    """A ``str.format`` template using only ``allowed`` placeholders, each of ``required``."""
    text = tree.text(value, at, "a prompt template")
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        raise tree.fail(at, f"not a template ({e}; write a literal brace as {{{{ or }}}})") from None
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise tree.fail(at, f"unknown placeholder {{{unknown[0]}}}; allowed: {', '.join(allowed)}")
    missing = [f for f in required if f not in names]
    if missing:
        raise tree.fail(at, f"the template must contain {{{missing[0]}}}")
    return text


def _generate_prompt(tree: _Tree, doc: Mapping[str, object], language: str) -> str | None:
    """The declared lettered prompt, or None where the suite has one for ``language``."""
    from .bbq_family import GENERATE_PROMPTS

    fields = ("context", "question", "a", "b", "c")
    if "generate_prompt" in doc:
        return _template(tree, doc["generate_prompt"], ("generate_prompt",), fields, fields[1:])
    if language not in GENERATE_PROMPTS:
        raise ConfigError(
            f"{tree.path}:{tree.line(('language',))}: missing field 'generate_prompt': the suite "
            f"has no lettered prompt in {language!r} (it has {', '.join(sorted(GENERATE_PROMPTS))}); "
            "declare one with {context}, {question}, {a}, {b} and {c}"
        )
    return None


def _delimiter(tree: _Tree, value: object) -> str:
    if not isinstance(value, str):
        raise tree.fail(("delimiter",), f"expected a text such as ' ', got {_shown(value)}")
    return value
