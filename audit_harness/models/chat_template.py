"""A ``--chat-template`` file checked before anything runs: it must render one user turn with
the generation prompt, as the backends render every prompt (transformers' own Jinja renderer:
its sandbox, ``raise_exception``, ``tojson``). A template that does not compile, raises, or
drops the user's message otherwise stopped each category mid-run (exit 3) as a model error,
when it is bad input (exit 4 at start-up)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

#: The user turn rendered by the check; any text would do, this one is easy to find again.
PROBE = "Which of the two people was late? Answer A, B or C."
#: Special tokens a template may name: the tokenizer fills them in; the check gives them empty
#: values, so a template reading ``bos_token`` is not refused for a token it will have.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def render_probe(template: str) -> str:
    """``template`` applied to one user turn (``PROBE``) with the generation prompt appended.

    Raises:
        Exception: whatever the renderer raises (a syntax error, ``raise_exception``, an
            undefined name used as a value, ...).
    """
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[[{"role": "user", "content": PROBE}]],
        chat_template=template,
        add_generation_prompt=True,
        **{name: "" for name in SPECIAL_TOKENS},
    )
    return rendered[0]


def check_template_file(path: str | Path) -> None:
    """Raise ConfigError naming the file and the problem when the chat template in ``path``
    cannot be read, does not render a user turn, or leaves the user's message out.

    Raises:
        ConfigError: ``--chat-template <path>: ...`` (exit 4 at start-up).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--chat-template {path}: cannot read it ({e})") from None
    try:
        rendered = render_probe(text)
    except Exception as e:  # noqa: BLE001 - any failure to render is the file's problem
        line = getattr(e, "lineno", None)
        at = f" (line {line})" if line else ""
        raise ConfigError(
            f"--chat-template {path}: the template does not render a user turn{at}: {type(e).__name__}: {e}"
        ) from None
    if PROBE not in rendered:
        raise ConfigError(
            f"--chat-template {path}: the template renders a user turn without the user's "
            f"message (it rendered {rendered[:80]!r}); the model would never see an item's question"
        )
