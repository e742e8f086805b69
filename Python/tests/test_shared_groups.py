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


ATTEMPTS = r"""
import sys
from wormhole import Wormhole, WormholeError
wormhole = Wormhole(application_group_identifier=sys.argv[1])
for attempt in (lambda: wormhole.pass_message("hi", "x"), lambda: wormhole.listen_for_message("y", print).cancel()):
    try:
        attempt()
        print("done")
    except WormholeError as error:
        print(error.code, error)
"""

REPAIR = r"""
import sys, threading
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
wormhole.pass_message("hello", "x")
heard = threading.Event()
token = wormhole.listen_for_message("x", lambda message: heard.set(), start="history")
print(heard.wait(20))
token.cancel()
"""

# Made as a member killed right before its Nth fchmod would: every file and directory a
# process makes (a log, claims and their directories, a durable position, a work queue's
# directories, state and member file, a notification file), with umask 077.
KILLED_BEFORE_FCHMOD = r"""
import os, sys
calls, limit = [0], int(sys.argv[2])
fchmod = os.fchmod
def killing_fchmod(fd, mode):
    calls[0] += 1
    if calls[0] == limit:
        os._exit(9)
    fchmod(fd, mode)
os.fchmod = killing_fchmod
from wormhole import Wormhole
wormhole = Wormhole(directory=sys.argv[1])
wormhole.pass_message("m", "walk")
wormhole.listen_for_message("walk", lambda message: None, durable_name="agent").cancel()
wormhole.listen_for_message("walk", lambda message: None, work_queue="q").cancel()
wormhole.notification_center.post("ping")
print("calls", calls[0])
"""

REVOKED = r"""
import os, sys, threading
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
ended = threading.Event()
def on_error(error):
    print(error.code, error, flush=True)
    ended.set()
member_ended = threading.Event()
def on_member_error(error):
    print("member", error.code, flush=True)
    member_ended.set()
token = wormhole.listen_for_message("x", lambda message: print("heard", message, flush=True), on_error=on_error)
member = wormhole.listen_for_message("jobs", lambda message: None, work_queue="q", on_error=on_member_error)
observer_ended = threading.Event()
def on_observer_error(error):
    print("observer", error.code, flush=True)
    observer_ended.set()
observer = wormhole.notification_center.observe("x", lambda name: None, on_error=on_observer_error)
print("ready", flush=True)
print("ended" if ended.wait(20) else "still listening", token.is_cancelled, flush=True)
print("member ended" if member_ended.wait(20) else "member still taking", member.is_cancelled, flush=True)
print("observer ended" if observer_ended.wait(20) else "still observing", observer.is_cancelled, flush=True)
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
        # The service's member file is among those checked: other users' members test its lock.
        self.assertEqual(len(os.listdir(f"{self.container}/.queues/jobs/workers/members")), 1)
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

    def wrong_modes(self) -> list:
        """Files and directories of the container, at a name members use, without the
        group's mode and group ('.<name>.<random>.making' is being made: nobody uses it)."""
        wrong = []
        for root, directories, files in os.walk(self.container):
            for name in directories + files:
                if name.endswith(".making"):
                    continue
                status = os.lstat(os.path.join(root, name))
                wanted = 0o2770 if stat.S_ISDIR(status.st_mode) else 0o660
                if (stat.S_IMODE(status.st_mode), status.st_gid) != (wanted, self.gid):
                    wrong.append(f"{os.path.relpath(os.path.join(root, name), self.container)} "
                                 f"{stat.S_IMODE(status.st_mode):o}")
        return wrong

    def test_a_member_killed_before_any_fchmod_leaves_nothing_without_the_groups_mode(self) -> None:
        def run(limit: int) -> subprocess.CompletedProcess:
            for name in os.listdir(self.container):
                path = os.path.join(self.container, name)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            return subprocess.run(["/bin/sh", "-c", 'umask 077; exec "$@"', "sh", PYTHON, "-c", KILLED_BEFORE_FCHMOD,
                                   self.container, str(limit)], env={"PYTHONPATH": self.path, "PATH": "/usr/bin:/bin"},
                                  capture_output=True, timeout=60)
        dry = run(0)
        self.assertEqual(dry.returncode, 0, dry.stderr.decode())
        calls = int(dry.stdout.decode().split()[1])
        self.assertGreater(calls, 0)
        violations = []
        for limit in range(1, calls + 1):
            killed = run(limit)
            self.assertEqual(killed.returncode, 9, killed.stderr.decode())
            violations += [f"killed before fchmod {limit} of {calls}: {wrong}" for wrong in self.wrong_modes()]
        self.assertEqual(violations, [])

    def test_what_a_member_killed_before_its_fchmod_left_is_named_with_its_owner_and_then_repaired(self) -> None:
        desktop_uid = pwd.getpwnam(self.desktop).pw_uid
        # What the desktop user's process (umask 077) left when it was killed between its
        # mkdir/open and its fchmod.
        listeners, log = f"{self.container}/.listeners", f"{self.container}/x.wormhole"
        os.mkdir(listeners)
        os.chmod(listeners, 0o2700)
        os.chown(listeners, desktop_uid, self.gid)
        fd = os.open(log, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.fchown(fd, desktop_uid, self.gid)
        os.fchmod(fd, 0o600)
        os.close(fd)

        service = self.start(self.service, ATTEMPTS)
        output, errors = service.communicate(timeout=60)
        lines = output.decode().splitlines()
        self.assertEqual(len(lines), 2, errors.decode())
        self.assertIn(f"containerInsecure '{log}' belongs to user {self.desktop} (uid {desktop_uid}) and has mode 600",
                      lines[0])
        self.assertIn(f"'chmod 660 {log}'", lines[0])
        self.assertIn(f"containerInsecure '{listeners}' belongs to user {self.desktop} (uid {desktop_uid}) and has "
                      f"mode 2700", lines[1])
        self.assertIn(f"'chmod 2770 {listeners}'", lines[1])

        # The desktop user's next pass and listener repair both; then the service hears.
        desktop = self.start(self.desktop, REPAIR)
        output, errors = desktop.communicate(timeout=60)
        self.assertEqual(output.decode(), "True\n", errors.decode())
        self.assertEqual(stat.S_IMODE(os.lstat(log).st_mode), 0o660)
        self.assertEqual(stat.S_IMODE(os.lstat(listeners).st_mode), 0o2770)
        service = self.start(self.service, REPAIR.replace('wormhole.pass_message("hello", "x")', ""))
        output, errors = service.communicate(timeout=60)
        self.assertEqual(output.decode(), "True\n", errors.decode())

    def test_a_listener_and_a_work_queue_member_whose_shared_container_is_revoked_end_with_an_error(self) -> None:
        service = self.start(self.service, REVOKED)
        self.addCleanup(service.stdout.close)
        self.addCleanup(service.stderr.close)
        self.addCleanup(service.stdin.close)
        self.assertEqual(service.stdout.readline().decode(), "ready\n")
        desktop = self.start(self.desktop, "import sys\nfrom wormhole import Wormhole\n"
                                           "Wormhole(application_group_identifier=sys.argv[1]).pass_message('before', 'x')")
        self.assertEqual(desktop.communicate(timeout=60)[0], b"")
        self.assertEqual(service.stdout.readline().decode(), "heard before\n")
        sender = Wormhole(directory=self.container)     # root's, a process that stays
        self.addCleanup(sender.close)
        sender.pass_message("also before", "x")
        self.assertEqual(service.stdout.readline().decode(), "heard also before\n")
        shutil.rmtree(self.container)               # what 'wormhole share --revoke' does
        output = service.communicate(timeout=60)[0].decode().splitlines()
        # Its next pass fails, saying so, and makes no directory in its place.
        with self.assertRaises(WormholeError) as caught:
            sender.pass_message("after", "x")
        self.assertIn(f"the shared container '{self.container}' was removed", str(caught.exception))
        self.assertFalse(os.path.exists(self.container))
        # (The listener's and the member's threads report in either order.)
        self.assertCountEqual(output, [f"containerUnavailable the shared container '{self.container}' was removed ('wormhole "
                                  f"share --revoke' stops sharing a group, and removes its messages): nothing will be "
                                  f"passed here again, and only root can share the group again. Processes started now "
                                  f"use their own containers ('wormhole doctor' shows which): start this one again (No such file "
                                  f"or directory)",
                                  "ended True", "member containerUnavailable", "member ended True",
                                  "observer containerUnavailable", "observer ended True"])
