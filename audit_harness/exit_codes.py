"""The exit codes of an audit run (``pytest audits``, ``bias-audit run``) and of ``bias-audit``'s
other commands, as the README documents them. 0, 1, 2, 4 and 5 are pytest's own; 3 is pytest's
internal-error code, which an audit also uses when a model or data failure during the run left
gates without a verdict (pytest's own internal errors are the same kind of event: no verdict)."""

from __future__ import annotations

#: every selected gate ran and passed.
OK = 0
#: a gate failed, or was undefined, insufficient or inconclusive (FAIL, or NOT CERTIFIED when no gate
#: failed and the only blockers are undecided: the release is blocked either way).
GATE_FAILED = 1
#: interrupted (Ctrl-C): the numbers are partial.
INTERRUPTED = 2
#: a model or data error during the run (an ERROR verdict): no verdict for those gates, not a gate
#: failure; takes precedence over 1, since the run is incomplete.
RUN_ERROR = 3
#: usage or input error: bad option, thresholds file, data, or a model that cannot load; nothing
#: was judged.
USAGE_ERROR = 4
#: no audit selected, or every selected gate skipped (its data missing): never 0 when nothing ran.
NOTHING_SELECTED = 5
