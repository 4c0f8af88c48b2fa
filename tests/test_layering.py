"""The layering of the apps (docs/architecture.md), checked on the source: who may import whom,
and no cycles.

Read with `ast` (nothing is imported), counting imports inside functions too: a deferred
import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "fleet",
    "telemetry",
    "jobs",
    "failures",
    "teams",
    "recovery",
    "alerts",
    "energy",
    "evaluation",
    "pages",
)
# The staircase, ground floor first: an app imports only apps on a lower floor. Apps on one
# floor (alerts, evaluation) import neither each other. `pages` holds the pages that compose
# several apps (the node page).
FLOORS = (
    ("core",),
    ("fleet",),
    ("teams",),
    ("telemetry",),
    ("jobs",),
    ("failures",),
    ("recovery",),
    ("alerts", "evaluation"),
    ("energy",),
    ("pages",),
)
FLOOR = {app: level for level, apps in enumerate(FLOORS) for app in apps}
# What an app shows the apps above it: its models, choices, reads, writes and
# dispatch, plus the one failure taxonomy. The top floor draws other apps' data the way they
# do, so it may also use their figures and request forms.
PUBLIC = {"models", "choices", "selectors", "services", "dispatch", "taxonomy"}
PUBLIC_TO_TOP = PUBLIC | {"figures", "forms"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (packages resolved to their __init__)."""
    files = [
        p
        for top in ("webapp", "collectors")
        for p in (ROOT / top).rglob("*.py")
        if "migrations" not in p.parts
    ]
    modules = {_module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for target in found:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def _app(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "webapp" else None


GRAPH = _graph()


def test_collectors_import_nothing_from_webapp():
    offenders = {
        (m, t)
        for m, ts in GRAPH.items()
        if m.startswith("collectors")
        for t in ts
        if t.startswith("webapp")
    }
    assert not offenders


@pytest.mark.parametrize(("layer", "allowed"), [("core", {"core"}), ("fleet", {"core", "fleet"})])
def test_the_ground_floor_imports_no_app_above_it(layer, allowed):
    offenders = {
        (m, t)
        for m, ts in GRAPH.items()
        if _app(m) == layer
        for t in ts
        if _app(t) in APPS and _app(t) not in allowed
    }
    assert not offenders


def test_no_app_imports_another_apps_views():
    offenders = {
        (m, t)
        for m, ts in GRAPH.items()
        for t in ts
        if _app(m) != _app(t) and t.split(".")[-1] in ("views", "api")
        if _app(t) in APPS
    }
    assert not offenders


def _app_edges() -> set[tuple[str, str, str, str]]:
    """(importing app, imported app, importing module, imported module) across apps."""
    return {
        (_app(m), _app(t), m, t)
        for m, ts in GRAPH.items()
        for t in ts
        if _app(m) in FLOOR and _app(t) in FLOOR and _app(m) != _app(t)
    }


def test_apps_form_a_staircase():
    """No cycle between apps: each app imports only apps on a floor below its own."""
    offenders = sorted(f"{m} -> {t}" for a, b, m, t in _app_edges() if FLOOR[b] >= FLOOR[a])
    assert not offenders


def test_apps_import_only_each_others_public_surface():
    offenders = set()
    for a, _b, m, t in _app_edges():
        parts = t.split(".")
        if len(parts) == 2 or _b == "core":  # a package itself; core is everyone's plumbing
            continue
        public = PUBLIC_TO_TOP if a == "pages" else PUBLIC
        if parts[2] not in public:
            offenders.add(f"{m} -> {t}")
    assert not sorted(offenders)


def test_no_import_cycles():
    """Tarjan's strongly connected components: any component of two or more is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles


# Imports of a test module that landed after the list was emptied, to be moved to a helpers
# module by their authors; the list only shrinks.
TEST_IMPORTS_LEFT: set[tuple[str, str]] = set()


def _is_test_module(dotted: str) -> bool:
    return dotted.startswith("tests.") and dotted.rpartition(".")[2].startswith("test_")


def _test_module_imports() -> set[tuple[str, str]]:
    """(file, test module) for every import of a test module by a file under tests/: `from
    tests.x.test_y import ...`, `import tests.x.test_y`, `from tests.x import test_y` and the
    relative forms of these."""
    found = set()
    for path in (ROOT / "tests").rglob("*.py"):
        package = ".".join(path.relative_to(ROOT).parent.parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                modules = (
                    [base]
                    if _is_test_module(base)
                    else [f"{base}.{alias.name}" for alias in node.names]
                )
            else:
                continue
            found.update((str(path.relative_to(ROOT)), m) for m in modules if _is_test_module(m))
    return found


def test_test_modules_take_shared_helpers_from_helpers_modules():
    """A helper a second test module needs lives in a helpers module (tests/helpers.py,
    tests/factory.py or a package's helpers.py), never in a test module: importing a test
    module also collects its tests and fixtures a second time."""
    assert sorted(_test_module_imports() - TEST_IMPORTS_LEFT) == []


def test_the_list_of_test_imports_left_only_shrinks():
    assert sorted(TEST_IMPORTS_LEFT - _test_module_imports()) == []
