"""Helpers of the test suite: scratch containers, waiting without sleeping blindly, and
child processes that import the package under test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Callable, List

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# WORMHOLE_PYTHON_INSTALLED=1 (.ci/run): test the package pip installed, not the sources.
INSTALLED = os.environ.get("WORMHOLE_PYTHON_INSTALLED") == "1"
if not INSTALLED and PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

# The library's warnings (a cut log, a refused XDG_RUNTIME_DIR) are what some tests cause
# on purpose: kept out of the test output.
import logging
logging.getLogger("Wormhole").addHandler(logging.NullHandler())
logging.getLogger("Wormhole").propagate = False

SCALE = float(os.environ.get("WORMHOLE_TEST_SCALE", "1"))


def scaled(count: int) -> int:
    return max(1, int(count * SCALE))


class Collector:
    """Items appended from another thread, waited for with a deadline."""

    def __init__(self) -> None:
        self.items: List[Any] = []
        self.condition = threading.Condition()

    def append(self, item: Any) -> None:
        with self.condition:
            self.items.append(item)
            self.condition.notify_all()

    def wait_for(self, count: int, timeout: float = 20.0) -> List[Any]:
        deadline = time.monotonic() + timeout
        with self.condition:
            while len(self.items) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.condition.wait(remaining)
            return list(self.items)


def eventually(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def remove_tree(path: str) -> None:
    """Removes ``path`` as ``rm -rf`` does while a listener works in it: a listener
    that follows its container claims again in the one made at the path, so a file may
    go (a temporary claim renamed) between the listing and its removal, which is not an
    error, and a directory may get a new entry, which is removed on the next pass."""
    def missing_is_fine(function, name, error) -> None:
        if not isinstance(error[1], FileNotFoundError):
            raise error[1]
    for _ in range(50):
        try:
            shutil.rmtree(path, onerror=missing_is_fine)
            return
        except OSError:
            time.sleep(0.01)
    shutil.rmtree(path, onerror=missing_is_fine)


class ScratchTestCase(unittest.TestCase):
    """A fresh scratch directory per test, removed afterwards; ``self.directory`` is a
    container path inside it (not yet created)."""

    def setUp(self) -> None:
        self.scratch = tempfile.mkdtemp(prefix="wormhole-python-test-")
        os.chmod(self.scratch, 0o700)
        self.directory = os.path.join(self.scratch, "container")
        self.addCleanup(shutil.rmtree, self.scratch, True)

    def child(self, code: str, *arguments: str) -> subprocess.Popen:
        """A Python child process running ``code`` with the package importable."""
        environment = dict(os.environ) if INSTALLED else dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
        return subprocess.Popen([sys.executable, "-c", code, *arguments], env=environment,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def owned_child(self, code: str, *arguments: str) -> subprocess.Popen:
        """``child``, killed (if still running) and its pipes closed after the test."""
        process = self.child(code, *arguments)
        self.addCleanup(process.wait)
        self.addCleanup(process.kill)
        self.addCleanup(process.stdout.close)
        self.addCleanup(process.stderr.close)
        return process


class WormholeTestCase(ScratchTestCase):
    """A scratch container and ``self.wormhole`` of it, closed afterwards."""

    def setUp(self) -> None:
        super().setUp()
        from wormhole import Wormhole
        self.wormhole = Wormhole(directory=self.directory)
        self.addCleanup(self.wormhole.close)
