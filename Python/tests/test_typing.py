"""The package's annotations hold under ``mypy --strict``: it ships py.typed, so its
users' type checkers rely on them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import unittest

from support import PACKAGE_ROOT

SOURCES = os.path.join(PACKAGE_ROOT, "wormhole")


@unittest.skipUnless(importlib.util.find_spec("mypy") is not None,
                     "mypy is not installed (.ci/run installs the version it pins)")
class StrictTypingTests(unittest.TestCase):
    def test_the_package_passes_mypy_strict(self) -> None:
        # For the oldest Python the package supports (pyproject.toml's requires-python).
        result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-version", "3.9",
                                 "--cache-dir", os.devnull, SOURCES], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
