"""The documents' Python code runs as written: the README's snippet, in a process of its
own, against a responder and a sender of this test, in the container its group names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import unittest

from support import INSTALLED, PACKAGE_ROOT, ScratchTestCase
from wormhole import Wormhole

README = os.path.join(os.path.dirname(PACKAGE_ROOT), "README.md")


def readme_python_snippet() -> str:
    """The README's Python block (the first ```python block of its "## Python" section)."""
    with open(README, encoding="utf-8") as file:
        text = file.read()
    section = text[text.index("\n## Python\n"):]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the README's Python section has no ```python block"
    return found.group(1)


@unittest.skipUnless(os.path.exists(README), "the README is not beside the package (installed alone)")
class ReadmeSnippetTests(ScratchTestCase):
    def test_the_readme_python_snippet_runs_as_written(self) -> None:
        snippet = readme_python_snippet()
        group = re.search(r'application_group_identifier="([^"]+)"', snippet)
        self.assertIsNotNone(group)
        self.assertEqual(group.group(1), "group.com.example.notes", "the Swift quick start's group")
        groups = os.path.join(self.scratch, "groups")
        app = Wormhole(directory=os.path.join(groups, group.group(1)))
        self.addCleanup(app.close)
        # What the snippet's comments say another process does: a Swift app's respond.
        responder = app.respond("app.state", lambda request: {"answered": request})
        self.addCleanup(responder.cancel)
        script = os.path.join(self.scratch, "snippet.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(snippet)
        environment = dict(os.environ, WORMHOLE_APP_GROUPS_DIRECTORY=groups, PYTHONUNBUFFERED="1")
        if not INSTALLED:
            environment["PYTHONPATH"] = PACKAGE_ROOT
        process = subprocess.Popen([sys.executable, script], env=environment,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(process.wait)
        self.addCleanup(process.kill)
        self.addCleanup(process.stdout.close)
        self.addCleanup(process.stderr.close)
        timer = threading.Timer(30, process.kill)   # a line that never comes fails the test
        timer.start()
        self.addCleanup(timer.cancel)
        # Its own note, the latest: it passed it, was answered and joined the queue first.
        self.assertEqual(process.stdout.readline(), "{'text': 'from Python'}\n", process.stderr.read() if process.poll() is not None else "")
        app.pass_message({"id": 7}, "jobs")
        self.assertEqual(process.stdout.readline(), "job {'id': 7}\n")
        app.pass_message("from Swift", "note")
        self.assertEqual(process.stdout.readline(), "from Swift\n")
        self.assertIsNone(process.poll(), process.stderr.read() if process.poll() is not None else "")


if __name__ == "__main__":
    unittest.main()
