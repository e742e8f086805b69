"""An application group shared with a Unix group (Protocol.md §4.2), used by two Unix
users made for the test (``useradd``, run by ``runuser`` with umask 077 and a bare
environment, as a service and a desktop session start): a service answers requests and
works a queue, a desktop user asks and passes jobs; every file keeps the group's access;
an outsider is refused with the group to join. Needs root (CI runs as root); every user,
group and directory the test makes is removed after it."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import unittest

from support import PACKAGE_ROOT, INSTALLED

import wormhole
from wormhole import Wormhole, WormholeError, directory_for_group

SHARED = "/run/wormhole/app-groups"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None

SERVICE = r"""
import os, sys, time
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
def job(value):
    os.write(1, f"job {value}\n".encode())
wormhole.respond("svc", lambda request: f"{os.geteuid()}:{request}")
wormhole.listen_for_message("jobs", job, work_queue="workers")
wormhole.listen_for_message("note", lambda value: os.write(1, f"note {value}\n".encode()), durable_name="service")
os.write(1, f"ready {wormhole.directory}\n".encode())
sys.stdin.read()                       # until the test closes it
wormhole.close()
"""

DESKTOP = r"""
import os, sys, time
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
print(wormhole.directory)
print(wormhole.request("hello", "svc", timeout=20))
for index in range(20):
    wormhole.pass_message(index, "jobs")
wormhole.pass_message("from the desktop", "note")
deadline = time.monotonic() + 30
while time.monotonic() < deadline and wormhole.work_queues("jobs")[0].acknowledged < 20:
    time.sleep(0.05)
print(wormhole.work_queues("jobs")[0].acknowledged)
"""

OUTSIDER = r"""
import sys
from wormhole import Wormhole, WormholeError
try:
    Wormhole(application_group_identifier=sys.argv[1])
    print("opened")
except WormholeError as error:
    print(error.code, error)
"""


@unittest.skipUnless(os.geteuid() == 0 and PYTHON and shutil.which("useradd") and shutil.which("runuser"),
                     "needs root, useradd, runuser and /usr/bin/python3")
class SharedGroupTests(unittest.TestCase):
    def setUp(self) -> None:
        suffix = os.urandom(4).hex()
        self.unix_group, self.group = f"whpg{suffix}", f"group.test.python-shared-{suffix}"
        self.service, self.desktop, self.outsider = f"whps{suffix}", f"whpd{suffix}", f"whpe{suffix}"
        self.system(["groupadd", self.unix_group])
        self.addCleanup(self.system, ["groupdel", self.unix_group])
        for user, options in [(self.service, ["--system", "--shell", "/usr/sbin/nologin", "--groups", self.unix_group]),
                              (self.desktop, ["--groups", self.unix_group]), (self.outsider, [])]:
            self.system(["useradd", "--no-create-home", *options, user])
            self.addCleanup(self.remove_user, user)
        # What 'wormhole share GROUP --unix-group NAME' makes (§4.2).
        for path in ("/run/wormhole", SHARED):
            if not os.path.isdir(path):
                os.mkdir(path, 0o755)
        self.container = f"{SHARED}/{self.group}"
        os.mkdir(self.container)
        self.addCleanup(shutil.rmtree, self.container, True)
        self.gid = grp.getgrnam(self.unix_group).gr_gid
        os.chown(self.container, 0, self.gid)
        os.chmod(self.container, 0o2770)
        # The package where the other users can read it.
        package = os.path.dirname(os.path.abspath(wormhole.__file__))
        self.path = tempfile.mkdtemp(prefix="wormhole-python-shared-")
        self.addCleanup(shutil.rmtree, self.path, True)
        os.chmod(self.path, 0o755)
        shutil.copytree(package, os.path.join(self.path, "wormhole"), ignore=shutil.ignore_patterns("__pycache__"))
        for root, directories, files in os.walk(self.path):
            for name in directories:
                os.chmod(os.path.join(root, name), 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)

    @staticmethod
    def system(arguments) -> None:
        subprocess.run(arguments, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def remove_user(self, user: str) -> None:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            return
        for root in ("/dev/shm", "/tmp"):
            shutil.rmtree(f"{root}/app-groups-{uid}", True)
        subprocess.run(["userdel", user], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self, user: str, code: str) -> subprocess.Popen:
        return subprocess.Popen(["runuser", "-u", user, "--", "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
                                 f"PYTHONPATH={self.path}", "/bin/sh", "-c", 'umask 077; cd /; exec "$@"', "sh", PYTHON,
                                 "-c", code, self.group], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    def test_a_service_and_a_desktop_user_share_a_group_and_an_outsider_is_refused(self) -> None:
        service = self.start(self.service, SERVICE)
        self.addCleanup(service.wait)
        self.addCleanup(service.stdin.close)        # (runuser's child ends with its input)
        self.addCleanup(service.stdout.close)
        self.addCleanup(service.stderr.close)
        ready = service.stdout.readline().decode()
        self.assertEqual(ready, f"ready {self.container}\n", service.stderr.read1().decode() if not ready else "")

        desktop = self.start(self.desktop, DESKTOP)
        output, errors = desktop.communicate(timeout=90)     # (its input closed: it reads none)
        self.assertEqual(desktop.returncode, 0, errors.decode())
        service_uid = pwd.getpwnam(self.service).pw_uid
        self.assertEqual(output.decode().splitlines(), [self.container, f"{service_uid}:hello", "20"])

        # Every file keeps the group's access whatever the umask (077); no file is anyone else's.
        for root, directories, files in os.walk(self.container):
            for name in directories:
                status = os.lstat(os.path.join(root, name))
                self.assertEqual((stat.S_IMODE(status.st_mode), status.st_gid), (0o2770, self.gid), f"{root}/{name}")
            for name in files:
                status = os.lstat(os.path.join(root, name))
                self.assertEqual((stat.S_IMODE(status.st_mode), status.st_gid), (0o660, self.gid), f"{root}/{name}")
        self.assertTrue(os.path.exists(f"{self.container}/.queues/jobs/workers/state"))
        self.assertTrue(os.path.exists(f"{self.container}/.listeners/note/durable-service"))

        # Root, any group's member, resolves the group to the same container and sees the service.
        self.assertEqual(directory_for_group(self.group, {}), self.container)
        with Wormhole(application_group_identifier=self.group) as mine:
            self.assertEqual(mine.work_queues("jobs")[0].acknowledged, 20)
            self.assertEqual([status.durable_name for status in mine.listeners("note")], ["service"])

        outsider = self.start(self.outsider, OUTSIDER)
        output, errors = outsider.communicate(timeout=60)
        outsider_uid = pwd.getpwnam(self.outsider).pw_uid
        self.assertEqual(output.decode().strip(),
                         f"containerInsecure container '{self.container}' is shared with Unix group {self.unix_group} "
                         f"(gid {self.gid}), and this user (uid {outsider_uid}) is not a member: ask an administrator "
                         f"to add it ('usermod -aG {self.unix_group} {self.outsider}'), then log in again",
                         errors.decode())

        service.stdin.close()
        self.assertEqual(service.wait(timeout=30), 0)
        jobs = [line for line in service.stdout.read().decode().splitlines() if line.startswith("job ")]
        self.assertEqual(sorted(jobs, key=lambda line: int(line.split()[1])), [f"job {index}" for index in range(20)])

    def test_a_shared_container_with_a_parent_members_may_write_is_refused(self) -> None:
        parent = tempfile.mkdtemp(prefix="wormhole-python-shared-parent-")
        self.addCleanup(shutil.rmtree, parent, True)
        os.chown(parent, 0, self.gid)
        os.chmod(parent, 0o775)
        container = os.path.join(parent, "group")
        os.mkdir(container)
        os.chown(container, 0, self.gid)
        os.chmod(container, 0o2770)
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=container)
        self.assertIn(f"the parent of shared container '{container}'", str(caught.exception))
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)

    def test_installed_or_not_the_package_copied_is_the_one_under_test(self) -> None:
        copied = os.path.join(self.path, "wormhole", "__init__.py")
        source = os.path.join(os.path.dirname(os.path.abspath(wormhole.__file__)), "__init__.py")
        with open(copied, "rb") as first, open(source, "rb") as second:
            self.assertEqual(first.read(), second.read())
        if not INSTALLED:
            self.assertTrue(source.startswith(PACKAGE_ROOT))
