"""The package's modules import each other without a cycle, an import inside a function
or under ``if TYPE_CHECKING:`` included: each can be read, imported and tested from the
bottom up, and none needs an import deferred to run."""

from __future__ import annotations

import ast
import os
import tempfile
import unittest
from typing import Dict, List, Optional, Set

from support import PACKAGE_ROOT

SOURCES = os.path.join(PACKAGE_ROOT, "wormhole")
PACKAGE = "wormhole"


def module_imports(path: str, module: str) -> Set[str]:
    """The package's modules that the module at ``path`` imports, wherever the import is
    (at the top, in a function, under ``if TYPE_CHECKING:``): ``from . import a``,
    ``from .a import b``, ``from wormhole.a import b``, ``import wormhole.a``."""
    with open(path, encoding="utf-8") as file:
        tree = ast.parse(file.read(), path)
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    modules.add(alias.name.split(".")[1])
        elif isinstance(node, ast.ImportFrom):
            if node.level > 0:
                # Relative: from a module of the package itself (one level, its only one).
                base = node.module
            elif node.module is not None and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                base = node.module[len(PACKAGE) + 1:] or None
            else:
                continue
            if base is None:
                modules.update(alias.name for alias in node.names)     # from . import a, b
            else:
                modules.add(base.split(".")[0])
    modules.discard(module)
    return modules


def import_graph(directory: str) -> Dict[str, Set[str]]:
    """Each module of the package (``__init__`` left out: it imports the public names of
    the others, and none imports it) and the package's modules it imports."""
    names = sorted(name[:-3] for name in os.listdir(directory) if name.endswith(".py") and name != "__init__.py")
    graph = {name: module_imports(os.path.join(directory, name + ".py"), name) for name in names}
    for name, imported in graph.items():
        imported.discard("__init__")
        unknown = imported - set(graph)
        assert not unknown, f"{name} imports {sorted(unknown)}, not modules of the package"
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: Dict[str, int] = {}          # 1: on the path being walked; 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return path[path.index(successor):] + [successor]
            if successor not in state:
                found = visit(successor)
                if found is not None:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


class ImportGraphTests(unittest.TestCase):
    def test_the_modules_import_each_other_without_a_cycle(self) -> None:
        cycle = find_cycle(import_graph(SOURCES))
        self.assertIsNone(cycle, f"an import cycle: {' -> '.join(cycle or [])}")

    def test_a_cycle_through_a_function_level_import_is_found(self) -> None:
        # The check itself: imports inside functions and under TYPE_CHECKING count.
        with tempfile.TemporaryDirectory() as directory:
            files = {"a.py": "from .b import thing\n",
                     "b.py": "def thing():\n    from . import c\n",
                     "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from wormhole.a import x\n"}
            for name, text in files.items():
                with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
                    file.write(text)
            self.assertEqual(find_cycle(import_graph(directory)), ["a", "b", "c", "a"])


if __name__ == "__main__":
    unittest.main()
