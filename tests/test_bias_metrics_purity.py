"""bias_metrics is the math only: it must never import torch, transformers or audit_harness, so
reviewers can re-derive any number from saved records without the model stack."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bias_metrics"
FORBIDDEN = ("torch", "transformers", "audit_harness", "datasets")


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_no_model_stack_imports(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & set(FORBIDDEN), f"{path.name} imports {sorted(imported & set(FORBIDDEN))}"


def test_every_public_function_has_a_docstring():
    missing = []
    for path in PACKAGE.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if not ast.get_docstring(node):
                    missing.append(f"{path.name}:{node.name}")
    assert not missing, missing
