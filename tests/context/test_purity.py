"""The engine is pure: no environment, files, network or clock, and no tokenizer of its own.

The seed compatibility modules (``budget``, ``scorer``, ``packer``, ``synthesizer``,
``bundle``) may use the adapters for their defaults; the engine modules may not, nor import
the seed modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import proxy.context

CONTEXT = Path(proxy.context.__file__).parent
SEED_MODULES = frozenset({"budget", "scorer", "packer", "synthesizer", "bundle"})
ENGINE_MODULES = sorted(
    path.stem for path in CONTEXT.glob("*.py") if path.stem not in SEED_MODULES | {"__init__"}
)
# The standard library and packages whose import means I/O, time or process state.
FORBIDDEN_IMPORTS = frozenset(
    {
        "asyncio",
        "importlib",
        "io",
        "json",
        "litellm",
        "os",
        "pathlib",
        "random",
        "shutil",
        "socket",
        "subprocess",
        "sys",
        "tempfile",
        "threading",
        "tiktoken",
        "time",
        "urllib",
    }
)
# What an engine module may take from a forbidden module: a lock guards a memo shared by the
# threads that run the engine (adr/0183) and starts none.
ALLOWED_NAMES = frozenset({("threading", "Lock")})
# The error hierarchy, and the one home of shared defaults (plain constants, no I/O).
ALLOWED_PROXY = frozenset({"proxy.errors", "proxy.defaults"})
# Calls that read the clock, the environment or files.
FORBIDDEN_CALLS = frozenset(
    {"now", "utcnow", "today", "time", "perf_counter", "monotonic", "getenv", "open"}
)


def imports_of(tree: ast.AST) -> list[str]:
    """Every module an AST imports (absolute names), but for the ``ALLOWED_NAMES`` it takes."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            if any((module, alias.name) not in ALLOWED_NAMES for alias in node.names):
                names.append(module)
    return names


def calls_of(tree: ast.AST) -> list[str]:
    """The called names and attributes in an AST (``datetime.now()`` gives ``now``)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                names.append(func.attr)
            elif isinstance(func, ast.Name):
                names.append(func.id)
    return names


def test_every_module_is_engine_or_seed() -> None:
    assert {path.stem for path in CONTEXT.glob("*.py")} >= SEED_MODULES
    assert {"assembler", "allocation", "render", "tokens"} <= set(ENGINE_MODULES)


@pytest.mark.parametrize("module", ENGINE_MODULES)
def test_engine_modules_import_no_io_and_no_seed_layer(module: str) -> None:
    tree = ast.parse((CONTEXT / f"{module}.py").read_text())
    for name in imports_of(tree):
        top = name.split(".")[0]
        assert top not in FORBIDDEN_IMPORTS, f"{module} imports {name}"
        if top == "proxy" and name not in ALLOWED_PROXY:
            assert name.startswith("proxy.context."), f"{module} imports {name}"
            assert name.rsplit(".", 1)[-1] not in SEED_MODULES, f"{module} imports {name}"
    assert "environ" not in ast.unparse(tree), f"{module} touches the environment"
    forbidden = FORBIDDEN_CALLS.intersection(calls_of(tree))
    assert not forbidden, f"{module} calls {sorted(forbidden)}"


def test_the_engine_runs_without_tiktoken_and_leaves_the_environment_alone() -> None:
    # A fresh interpreter: the whole request path of the engine with a tokenizer of no files.
    code = """
import os, sys
from datetime import UTC, datetime
before = dict(os.environ)
from proxy.context.allocation import BudgetCalculator
from proxy.context.assembler import assemble
from proxy.context.inject import inject
from proxy.context.limits import ModelLimits
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.render import BlockTokens
from tests.fakes.tokenizer import CharTokenizer

tokenizer = CharTokenizer()
body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "where is my dog?"}]}
calc = BudgetCalculator(ModelLimits(), tokenizer, memory_cap=300)
upper, lower = calc.bounds(body)
budget = calc.calculate_request(body)
now = datetime(2026, 1, 1, tzinfo=UTC)
record = MemoryRecord("m", "t", "u", "learnings", "The dog is in the garden.", now)
encoding = budget.encoding
tokens = BlockTokens(encoding, tokenizer.counter(encoding))
result = assemble([Candidate(record, 0.9)], "dog", budget.memory_tokens, now=now, tokens=tokens)
messages = inject(body["messages"], result.block)
assert result.rendered_tokens == len(result.block) > 0, result
assert "garden" in messages[0]["content"]
assert "tiktoken" not in sys.modules and "litellm" not in sys.modules
assert dict(os.environ) == before
"""
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root)
