"""The package's annotations hold under ``mypy --strict``: it ships py.typed, so its
users' type checkers rely on them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
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

    def test_listen_for_message_has_one_declared_type_and_each_kind_is_seen(self) -> None:
        # A user's code, checked (never run): a listener is a ListenerToken, a member a
        # WorkQueueMember, a queue name known only at run time a LogSubscription; each
        # has the common surface.
        snippet = """
from typing import Optional
from typing_extensions import assert_type
from wormhole import ListenerToken, LogSubscription, WorkQueueMember, Wormhole

def use(wormhole: Wormhole, queue: Optional[str]) -> None:
    listener = wormhole.listen_for_message("note", print)
    assert_type(listener, ListenerToken)
    member = wormhole.listen_for_message("jobs", print, work_queue="workers")
    assert_type(member, WorkQueueMember)
    either = wormhole.listen_for_message("jobs", print, work_queue=queue)
    assert_type(either, LogSubscription)
    with wormhole.listen_for_message("jobs", print, work_queue="workers") as entered:
        assert_type(entered, WorkQueueMember)
    for each in (listener, member, either):
        assert_type(each.is_cancelled, bool)
        assert_type(each.identifier, str)
        each.cancel()
    assert_type(wormhole.respond("state", lambda query: 3), WorkQueueMember)
"""
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "user.py")
            with open(path, "w", encoding="utf-8") as file:
                file.write(snippet)
            result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-version", "3.9",
                                     "--cache-dir", os.devnull, path], capture_output=True, text=True,
                                    env=dict(os.environ, MYPYPATH=PACKAGE_ROOT))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
