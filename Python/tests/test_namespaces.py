"""A listener in another PID namespace (a container beside its sidecar): its claim holds
across a compaction made here, where its process id names no process or another one
(Protocol.md §12, revision 2.1), and a durable name it holds is shown as another
namespace's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import unittest

from support import INSTALLED, PACKAGE_ROOT, Collector, ScratchTestCase, eventually

from wormhole import Configuration, Wormhole

CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None and \
    subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode == 0


@unittest.skipUnless(CAN_UNSHARE, "needs root and unshare(1) to make a PID namespace")
class PIDNamespaceTests(ScratchTestCase):
    LISTENER = ("import os, sys, wormhole\n"
                "w = wormhole.Wormhole(directory=sys.argv[1], "
                "configuration=wormhole.Configuration(retained_message_count=4))\n"
                "def got(value):\n"
                "    sys.stdout.write(f'{value}\\n'); sys.stdout.flush()\n"
                "    if value == int(sys.argv[2]): os._exit(0)\n"
                "w.listen_for_message('news', got, durable_name=sys.argv[3] if len(sys.argv) > 3 else None)\n"
                "import os; open(sys.argv[1] + '/../ready', 'w').close()\n"
                "import time; time.sleep(60)\n")

    def namespaced(self, *arguments: str) -> subprocess.Popen:
        environment = dict(os.environ) if INSTALLED else dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
        return subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", self.LISTENER,
                                 *arguments], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def test_a_listener_of_another_pid_namespace_keeps_its_messages_through_compaction(self) -> None:
        wormhole = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=4))
        self.addCleanup(wormhole.close)
        child = self.namespaced(self.directory, "200", "sidecar")
        self.addCleanup(child.kill)
        self.assertTrue(eventually(lambda: os.path.exists(os.path.join(self.scratch, "ready"))))
        statuses = wormhole.listeners("news")
        durable = [s for s in statuses if s.durable_name == "sidecar"]
        self.assertEqual(len(durable), 1)
        self.assertTrue(durable[0].is_running)
        self.assertFalse(durable[0].is_in_this_pid_namespace)
        # Its position is its claim (as a Swift durable listener's): no other listener shows.
        self.assertEqual([s for s in statuses if s.durable_name is None], [])
        for index in range(1, 201):                   # 50 compactions' worth with R = 4
            wormhole.pass_message(index, "news")
        output, errors = child.communicate(timeout=60)
        self.assertEqual(child.returncode, 0, errors)
        self.assertEqual([int(line) for line in output.split()], list(range(1, 201)))


if __name__ == "__main__":
    unittest.main()
