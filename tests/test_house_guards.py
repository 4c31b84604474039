"""Guards that keep the house's shape: the next feature must not undo a clean-up unnoticed.

Each guard reads the source (AST), never runs it: run/'s module map names exactly run/'s modules, no
function takes more parameters than the house allows (a named list of known exceptions, which may
only shrink), and no function or method is left that nothing calls.
"""

from __future__ import annotations

import ast
import collections
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "commbench"

# At most 6 parameters anywhere, 5 in run/ (self and cls not counted). The exceptions, and why:
# click commands receive every option as a parameter (cli/*: the option declarations are the API);
# torch's autograd Function.forward takes the tensors torch passes it; the rest are debts named by the
# architecture issue, to be paid down: each entry is removed when its function comes under the limit.
PARAMETER_EXCEPTIONS = {
    "commbench/cli/compare.py:compare",
    "commbench/cli/history.py:list_runs",
    "commbench/cli/history.py:trend",
    "commbench/cli/isolate.py:isolate",
    "commbench/cli/model.py:model",
    "commbench/cli/replay.py:replay",
    "commbench/cli/sweep.py:sweep",
    "commbench/syncbn/function.py:forward",
    # debts
    "commbench/analysis/charts/layout.py:grid",
    "commbench/analysis/history_gate.py:series_plans",
    "commbench/cli/replay.py:_report",
    "commbench/history/query.py:list_runs",
    "commbench/isolate/node_sweep.py:__init__",
    "commbench/provenance.py:collect_host",
    "commbench/provenance.py:layout",
    "commbench/replay/readers/comms.py:dispatcher_collective",
    "commbench/run/harness.py:measure",
    "commbench/run/harness.py:__init__",
    "commbench/run/harness.py:_timed",
    "commbench/run/heartbeat.py:__init__",
    "commbench/run/host_records.py:gather_host_envs",
    "commbench/run/host_records.py:begin_record",
    "commbench/run/resources.py:memory_case",
    "commbench/run/session.py:_open_sink",
    "commbench/syncbn/function.py:_grad_input",
    "commbench/syncbn/module.py:__init__",
}

# Called by name from outside Python's view: PEP 562 module __getattr__, click's ParamType.convert,
# pickle's Unpickler.find_class, a click command registered under another name.
CALLED_FROM_OUTSIDE = {"__getattr__", "convert", "find_class", "import_"}


def _modules(root: Path) -> Iterator[Path]:
    yield from sorted(root.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)


def over_limit(root: Path = PACKAGE) -> set[str]:
    """Every function with more parameters than its layer allows, as 'path:name'."""
    found = set()
    for path in _modules(root):
        limit = 5 if path.parent.name == "run" else 6
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) > limit:
                found.add(f"{_relative(path)}:{node.name}")
    return found


def never_called(roots: tuple[Path, ...]) -> set[str]:
    """Functions, classes and methods of commbench whose name appears nowhere else (not called, not
    imported, not named in a string), as 'path:name'."""
    defined: list[tuple[str, str]] = []
    used: collections.Counter[str] = collections.Counter()
    for root in roots:
        for path in _modules(root):
            tree = ast.parse(path.read_text())
            if path.is_relative_to(PACKAGE):
                for node in tree.body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        defined.append((_relative(path), node.name))
                    if isinstance(node, ast.ClassDef):
                        defined += [
                            (_relative(path), f.name)
                            for f in node.body
                            if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")
                        ]
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    used[node.id] += 1
                elif isinstance(node, ast.Attribute):
                    used[node.attr] += 1
                elif isinstance(node, ast.alias):
                    used[node.name.rsplit(".", 1)[-1]] += 1
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    used.update(re.findall(r"[A-Za-z_]\w*", node.value))
    used.update(re.findall(r"[A-Za-z_]\w*", (REPO / "pyproject.toml").read_text()))
    return {f"{path}:{name}" for path, name in defined if not used[name] and name not in CALLED_FROM_OUTSIDE}


def run_map() -> set[str]:
    """The modules run/__init__.py's docstring lists (the first word of each indented line)."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "run" / "__init__.py").read_text())) or ""
    return {line.split()[0] for line in doc.splitlines() if line.startswith("    ") and line.strip()}


def test_run_s_module_map_names_exactly_its_modules() -> None:
    modules = {p.stem for p in (PACKAGE / "run").glob("*.py") if p.stem != "__init__"}
    assert run_map() == modules, "update the module map in commbench/run/__init__.py"


def test_no_function_takes_more_parameters_than_its_layer_allows() -> None:
    over = over_limit()
    assert not over - PARAMETER_EXCEPTIONS, "more than 6 parameters (5 in run/): pass a small dataclass instead"
    assert not PARAMETER_EXCEPTIONS - over, "these came under the limit: remove them from PARAMETER_EXCEPTIONS"


def test_no_code_is_left_that_nothing_calls() -> None:
    assert not never_called((PACKAGE, REPO / "tests", REPO / "bench")), "delete dead code, or call it"


@pytest.mark.parametrize(
    "source, guard",
    [
        ("def f(a, b, c, d, e, f, g):\n    return a\n", lambda root: over_limit(root)),
        ("def lonely_helper_nobody_calls():\n    return 1\n", lambda root: never_called((root,))),
    ],
    ids=["seven parameters", "dead function"],
)
def test_each_guard_catches_a_planted_violation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source, guard) -> None:
    planted = tmp_path / "commbench"
    planted.mkdir()
    (planted / "planted.py").write_text(source)
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    monkeypatch.setattr(f"{__name__}.PACKAGE", planted)
    (tmp_path / "pyproject.toml").write_text("")
    assert guard(planted) == {f"commbench/planted.py:{source.split('(')[0].split()[-1]}"}
