"""Containers used from inside a sandbox made by bubblewrap (bwrap), as Flatpak makes one: a
private /tmp, /dev/shm and /run (tmpfs), and only the group's container bound in (Security.md,
"Sandboxes"). Two kinds: root in a mount namespace of its own, without a user namespace, and
an unprivileged member of the group in a user namespace (--unshare-user --unshare-pid
--unshare-ipc), where root's and other users' files show as the overflow uid 65534. In a
personal and in a shared container, a process inside listens, passes, requests and answers,
resumes a durable name and works a queue with a process outside. A sandbox that bound no
container is told what to bind; an outsider's sandbox is refused; outside a sandbox a
container owned by the overflow uid is still refused. Needs root, useradd and bwrap
(Scripts/test installs bubblewrap); every user, group and directory made is removed after."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import unittest

import support  # noqa: F401  (puts the package under test on the path)
import wormhole

SHARED = "/run/wormhole/app-groups"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
BWRAP = shutil.which("bwrap")

# Outside the sandbox: answers "ask-outside", hears "to-outside"; on "go" it passes to the
# process inside, asks it, and says what it heard.
OUTSIDE = r"""
import os, sys, threading
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
heard = threading.Event()
wormhole.respond("ask-outside", lambda request: f"outside answers {request}")
wormhole.listen_for_message("to-outside", lambda message: (print("heard", message, flush=True), heard.set()))
print("ready", wormhole.directory, flush=True)
sys.stdin.readline()
wormhole.pass_message("hello inside", "to-inside")
wormhole.pass_message("m1", "durable")
for index in (1, 2):
    wormhole.pass_message(f"job {index}", "jobs")
print("reply", wormhole.request("question", "ask-inside", timeout=30), flush=True)
print("heard" if heard.wait(30) else "heard nothing", flush=True)
sys.stdin.read()
wormhole.close()
"""

# Inside the sandbox: listens live, under a durable name and as a queue member; answers
# "ask-inside"; asks "ask-outside"; passes "to-outside".
INSIDE = r"""
import queue, sys
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
heard = queue.Queue()
wormhole.listen_for_message("to-inside", lambda message: heard.put(f"live {message}"))
wormhole.listen_for_message("durable", lambda message: heard.put(f"durable {message}"), durable_name="boxed")
wormhole.listen_for_message("jobs", lambda message: heard.put(f"queue {message}"), work_queue="workers")
wormhole.respond("ask-inside", lambda request: f"inside answers {request}")
print("ready", wormhole.directory, flush=True)
print("reply", wormhole.request("question", "ask-outside", timeout=30), flush=True)
wormhole.pass_message("hello outside", "to-outside")
for _ in range(4):
    print(heard.get(timeout=30), flush=True)
sys.stdin.read()
wormhole.close()
"""

# Inside again: the durable name resumes with what was passed while it was not running.
RESUME = r"""
import queue, sys
from wormhole import Wormhole
wormhole = Wormhole(application_group_identifier=sys.argv[1])
heard = queue.Queue()
wormhole.listen_for_message("durable", heard.put, durable_name="boxed")
print("resumed", heard.get(timeout=30), flush=True)
wormhole.close()
"""

PASS = r"""
import sys
from wormhole import Wormhole
Wormhole(application_group_identifier=sys.argv[1]).pass_message(sys.argv[3], sys.argv[2])
"""

# Runs argv[1:] as root of a user namespace that maps the host's 100000-165535 to 0-65535
# (as a rootless container's does): its overflow uid 65534 is a mapped user there.
MAPPED_RANGE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
go_read, go_write = os.pipe()
ready_read, ready_write = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:          # CLONE_NEWUSER
        os._exit(70)
    os.write(ready_write, b"u")
    os.read(go_read, 1)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    os.execv(sys.argv[1], sys.argv[1:])
os.read(ready_read, 1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{name}", "w") as file:
        file.write("0 100000 65536\n")
os.write(go_write, b"g")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""

OPEN = r"""
import sys
from wormhole import Wormhole, WormholeError
try:
    print("opened", Wormhole(application_group_identifier=sys.argv[1]).directory)
except WormholeError as error:
    print(error.code, error)
"""


@unittest.skipUnless(os.geteuid() == 0 and PYTHON and BWRAP and shutil.which("useradd") and shutil.which("runuser"),
                     "needs root, useradd, runuser, bwrap and /usr/bin/python3")
class SandboxTests(unittest.TestCase):
    def setUp(self) -> None:
        suffix = os.urandom(4).hex()
        self.unix_group, self.group = f"whpbg{suffix}", f"group.test.python-sandbox-{suffix}"
        self.member, self.outsider = f"whpbm{suffix}", f"whpbo{suffix}"
        self.system(["groupadd", self.unix_group])
        self.addCleanup(self.system, ["groupdel", self.unix_group])
        for user, options in [(self.member, ["--groups", self.unix_group]), (self.outsider, [])]:
            self.system(["useradd", "--no-create-home", *options, user])
            self.addCleanup(self.remove_user, user)
        self.gid = grp.getgrnam(self.unix_group).gr_gid
        self.shared = f"{SHARED}/{self.group}"
        for root in ("/dev/shm/app-groups-0", "/run/user/0/app-groups"):
            self.addCleanup(shutil.rmtree, f"{root}/{self.group}", True)
        # The package where the other users, and the sandboxes, can read it (outside /tmp,
        # which each sandbox has of its own: bound read-only at its path).
        package = os.path.dirname(os.path.abspath(wormhole.__file__))
        self.path = tempfile.mkdtemp(prefix="wormhole-python-sandbox-")
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
        shutil.rmtree(f"/run/user/{uid}/app-groups/{self.group}", True)
        subprocess.run(["userdel", user], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def share(self) -> None:
        """What 'wormhole share GROUP --unix-group NAME' makes (§4.2)."""
        for path in ("/run/wormhole", SHARED):
            if not os.path.isdir(path):
                os.mkdir(path, 0o755)
        os.mkdir(self.shared)
        self.addCleanup(shutil.rmtree, self.shared, True)
        os.chown(self.shared, 0, self.gid)
        os.chmod(self.shared, 0o2770)

    def personal(self, user) -> str:
        """The personal container of ``user`` (root when None) as the resolution finds it."""
        uid = pwd.getpwnam(user).pw_uid if user else 0
        try:
            status = os.lstat(f"/run/user/{uid}")
            if stat.S_ISDIR(status.st_mode) and status.st_uid == uid and status.st_mode & 0o077 == 0:
                return f"/run/user/{uid}/app-groups/{self.group}"
        except OSError:
            pass
        return f"/dev/shm/app-groups-{uid}/{self.group}"

    def start(self, user, code: str, *arguments: str, sandboxed: bool = False, binding=None) -> subprocess.Popen:
        """``code`` run by ``user`` (root when None) with a bare environment and umask 077;
        in a bwrap sandbox when ``sandboxed`` (a user namespace when ``user`` is given), with
        a private /tmp, /dev/shm and /run and ``binding`` bound at its own path."""
        command = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", f"PYTHONPATH={self.path}", "/bin/sh",
                   "-c", 'umask 077; cd /; exec "$@"', "sh"]
        if sandboxed:
            command.append(BWRAP)
            if user:
                command += ["--unshare-user", "--unshare-pid", "--unshare-ipc"]
            command += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs",
                        "/dev/shm", "--tmpfs", "/run", "--ro-bind", self.path, self.path, "--die-with-parent"]
            if binding:
                command += ["--bind", binding, binding]
        command += [PYTHON, "-c", code, self.group, *arguments]
        if user:
            command = ["runuser", "-u", user, "--"] + command
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run_code(self, user, code: str, *arguments: str, sandboxed: bool = False, binding=None) -> str:
        process = self.start(user, code, *arguments, sandboxed=sandboxed, binding=binding)
        output, errors = process.communicate(timeout=90)
        self.assertEqual(process.returncode, 0, errors.decode())
        return output.decode()

    def exchange(self, inside_user, kind: str) -> None:
        """Inside the sandbox and outside it, every kind of exchange, in a ``kind``
        ('personal' or 'shared') container."""
        if kind == "shared":
            self.share()
            container, outside_user = self.shared, (None if inside_user else self.member)
        else:
            container, outside_user = self.personal(inside_user), inside_user
            self.run_code(inside_user, PASS, "setup", "made outside")     # the container, made outside first
        outside = self.start(outside_user, OUTSIDE)
        self.addCleanup(outside.wait)
        self.addCleanup(outside.stdin.close)
        self.assertEqual(outside.stdout.readline().decode(), f"ready {container}\n")
        inside = self.start(inside_user, INSIDE, sandboxed=True, binding=container)
        self.addCleanup(inside.wait)
        self.addCleanup(inside.stdin.close)
        ready = inside.stdout.readline().decode()
        self.assertEqual(ready, f"ready {container}\n", inside.stderr.read1().decode() if not ready else "")
        self.assertEqual(inside.stdout.readline().decode(), "reply outside answers question\n")
        outside.stdin.write(b"go\n")
        outside.stdin.flush()
        # (What the listener heard may come before or after the reply.)
        told = sorted(outside.stdout.readline().decode() for _ in range(3))
        self.assertEqual(told, ["heard\n", "heard hello outside\n", "reply inside answers question\n"])
        heard = sorted(inside.stdout.readline().decode().strip() for _ in range(4))
        self.assertEqual(heard, ["durable m1", "live hello inside", "queue job 1", "queue job 2"])
        inside.stdin.close()
        self.assertEqual(inside.wait(timeout=30), 0, inside.stderr.read().decode())
        outside.stdin.close()
        self.assertEqual(outside.wait(timeout=30), 0, outside.stderr.read().decode())
        for stream in (inside.stdout, inside.stderr, outside.stdout, outside.stderr):
            stream.close()
        # The durable name resumes inside with what was passed while it was away.
        self.run_code(outside_user, PASS, "durable", "m2 while away")
        self.assertEqual(self.run_code(inside_user, RESUME, sandboxed=True, binding=container), "resumed m2 while away\n")

    def test_root_without_a_user_namespace_in_a_personal_container(self) -> None:
        self.exchange(None, "personal")

    def test_root_without_a_user_namespace_in_a_shared_container(self) -> None:
        self.exchange(None, "shared")

    def test_a_member_in_a_user_namespace_in_a_personal_container(self) -> None:
        self.exchange(self.member, "personal")

    def test_a_member_in_a_user_namespace_in_a_shared_container(self) -> None:
        self.exchange(self.member, "shared")

    def test_a_sandbox_that_bound_no_container_is_told_what_to_bind(self) -> None:
        self.share()
        output = self.run_code(self.member, OPEN, sandboxed=True)
        self.assertIn(f"containerUnavailable no container of group '{self.group}' in this sandbox", output)
        self.assertIn(f"the sandbox must bind the group's container (for a shared group, bwrap --bind {self.shared} "
                      f"{self.shared}; Flatpak: the finish-arg --filesystem={self.shared})", output)

    def test_an_outsider_whose_sandbox_binds_a_shared_container_is_refused(self) -> None:
        self.share()
        output = self.run_code(self.outsider, OPEN, sandboxed=True, binding=self.shared)
        self.assertIn(f"containerInsecure container '{self.shared}' belongs to a user not mapped into this user "
                      f"namespace (uid 65534 is the overflow uid", output)
        self.assertIn("this process may not read, write and search it", output)

    def test_outside_a_sandbox_a_container_owned_by_the_overflow_uid_is_still_refused(self) -> None:
        parent = tempfile.mkdtemp(prefix="wormhole-python-sandbox-nobody-")
        self.addCleanup(shutil.rmtree, parent, True)
        os.chmod(parent, 0o755)
        container = os.path.join(parent, "nobodys")
        os.mkdir(container)
        os.chown(container, 65534, self.gid)
        os.chmod(container, 0o2770)
        code = OPEN.replace("application_group_identifier=sys.argv[1]", "directory=sys.argv[2]")
        for user in (self.member, None):
            output = self.run_code(user, code, container)
            self.assertIn(f"containerInsecure container '{container}' belongs to user 65534, not to this user", output)


    def test_in_a_user_namespace_that_maps_the_overflow_uid_a_container_it_shows_is_still_refused(self) -> None:
        # A rootless container's namespace maps a whole range, 65534 included: a directory
        # that shows as 65534 there may be that user's, so nothing is relaxed. Root (host
        # uid 0, unmapped there) owns it; its group is the namespace's root's (host 100000).
        parent = tempfile.mkdtemp(prefix="wormhole-python-sandbox-range-")
        self.addCleanup(shutil.rmtree, parent, True)
        os.chmod(parent, 0o755)
        container = os.path.join(parent, "c")
        os.mkdir(container)
        os.chown(container, 0, 100000)
        os.chmod(container, 0o2770)
        code = OPEN.replace("application_group_identifier=sys.argv[1]", "directory=sys.argv[2]")
        process = subprocess.run([PYTHON, "-c", MAPPED_RANGE, "/usr/bin/env", "-i", f"PYTHONPATH={self.path}", PYTHON, "-c",
                                  code, self.group, container], capture_output=True, timeout=60)
        self.assertEqual(process.returncode, 0, process.stderr.decode())
        self.assertIn(f"containerInsecure container '{container}' belongs to user 65534, not to this user (0)",
                      process.stdout.decode())


if __name__ == "__main__":
    unittest.main()
