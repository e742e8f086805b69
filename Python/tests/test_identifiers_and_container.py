"""Bad identifiers, unsafe containers and hostile files are refused with the Swift
library's codes and words, and nothing is written outside the container."""

from __future__ import annotations

import os
import re
import stat
import threading
import unittest

from support import PACKAGE_ROOT, ScratchTestCase

from wormhole import Wormhole, WormholeError, directory_for_group
from wormhole import identifiers
from wormhole.container import ContainerDirectory


class IdentifierTests(ScratchTestCase):
    BAD = {
        "": "may not be empty",
        "a/b": "may not contain '/'",
        "..": "may not be '.' or '..'",
        ".hidden": "may not start with '.'",
        "a\0b": "may not contain a NUL byte",
        "tab\there": "may not contain control characters",
        "c1\u0085": "may not contain control characters",
        "txt\u202eexe": "bidirectional formatting characters",
        "e\u0301": "is not in Unicode Normalization Form C",
        "x" * 201: "is 201 bytes long; the limit is 200 bytes",
    }

    def test_every_bad_identifier_is_refused_before_any_file_is_touched(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for identifier, reason in self.BAD.items():
            for call in (lambda: wormhole.pass_message("x", identifier), lambda: wormhole.message(identifier),
                         lambda: wormhole.listen_for_message(identifier, print),
                         lambda: wormhole.clear_message_contents(identifier),
                         lambda: wormhole.notification_center.post(identifier)):
                with self.assertRaises(WormholeError) as caught:
                    call()
                self.assertEqual(caught.exception.code, WormholeError.INVALID_IDENTIFIER)
                self.assertIn(reason, str(caught.exception))
        self.assertEqual(os.listdir(self.directory), [])
        self.assertEqual(sorted(os.listdir(self.scratch)), ["container"])

    def test_the_nfc_error_names_the_composed_form(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        with self.assertRaises(WormholeError) as caught:
            wormhole.pass_message("x", "cafe\u0301")
        self.assertIn("write it as 'caf\u00e9'", str(caught.exception))

    def test_spaces_and_other_scripts_are_identifiers(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for identifier in ("kitchen lights", "caf\u00e9", "\u65e5\u672c"):
            self.assertEqual(wormhole.pass_message("on", identifier), 1)
            self.assertEqual(wormhole.message(identifier), "on")


class SharedIdentifierTableTests(unittest.TestCase):
    """The identifier rules judged from one table with the Swift library's tests
    (Tests/Interop/identifiers.tsv), whatever the Unicode version of this Python."""

    REPOSITORY = os.path.dirname(PACKAGE_ROOT)

    @classmethod
    def cases(cls):
        with open(os.path.join(cls.REPOSITORY, "Tests", "Interop", "identifiers.tsv"), encoding="utf-8") as table:
            for line in table:
                if not line.strip() or line.startswith("#"):
                    continue
                expectation, code_points, reason, note = line.rstrip("\n").split("\t")
                yield expectation, "".join(chr(int(point, 16)) for point in code_points.split()), reason, note

    def test_every_identifier_of_the_shared_table_is_accepted_or_refused_as_it_says(self) -> None:
        cases = list(self.cases())
        self.assertGreater(len(cases), 20)
        for expectation, name, reason, note in cases:
            with self.subTest(name=name.encode("unicode_escape").decode(), note=note):
                if expectation == "accept":
                    self.assertEqual(identifiers.validate(name), name.encode("utf-8"))
                else:
                    self.assertEqual(expectation, "refuse")
                    with self.assertRaises(WormholeError) as caught:
                        identifiers.validate(name)
                    self.assertEqual(caught.exception.code, WormholeError.INVALID_IDENTIFIER)
                    self.assertIn(reason, str(caught.exception))

    def test_the_table_of_assigned_code_points_is_the_swift_librarys(self) -> None:
        from wormhole import _unicode_table
        path = os.path.join(self.REPOSITORY, "Sources", "WormholeCore", "System", "Identifier+UnicodeTable.swift")
        with open(path, encoding="utf-8") as source:
            text = source.read()
        body = text[text.index("assignedRangeBounds"):]
        swift = tuple(int(value, 16) for value in re.findall(r"0x[0-9A-F]+", body))
        self.assertEqual(swift, _unicode_table.ASSIGNED_RANGE_BOUNDS)
        self.assertIn('unicodeVersion = "%s"' % _unicode_table.UNICODE_VERSION, text)

    def test_every_code_point_of_the_table_is_assigned_in_this_pythons_unicode(self) -> None:
        """Python 3.9's Unicode is 13.0, the table's version: a later one assigns more."""
        import unicodedata
        from wormhole import _unicode_table
        bounds = _unicode_table.ASSIGNED_RANGE_BOUNDS
        unassigned = [point for first, last in zip(bounds[0::2], bounds[1::2]) for point in range(first, last + 1)
                      if unicodedata.category(chr(point)) in ("Cn", "Cs")]
        self.assertEqual(unassigned, [])


class ContainerTests(ScratchTestCase):
    def test_the_container_is_created_0700_and_the_log_0600(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message("x", "note")
        self.assertEqual(stat.S_IMODE(os.stat(self.directory).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.directory, "note.wormhole")).st_mode), 0o600)

    def test_a_directory_made_again_is_opened_once_when_two_threads_notice_it_together(self) -> None:
        """Two refreshes that both saw the old directory gone: the one that opens second
        finds the first's directory held and keeps the generation, so what is made again
        in a new directory (a listener's claim) is made there once."""
        container = ContainerDirectory(self.directory)
        self.addCleanup(container.close)
        os.rename(self.directory, self.directory + ".old")
        os.mkdir(self.directory, 0o700)
        opening = ContainerDirectory._open
        nested = []

        def open_while_another_thread_opens(path: str, create: bool = True):
            if not nested:
                nested.append(None)
                nested[0] = container.refresh(create=False)        # the other thread, first to finish
            return opening(path, create)

        ContainerDirectory._open = staticmethod(open_while_another_thread_opens)    # type: ignore[assignment]
        self.addCleanup(setattr, ContainerDirectory, "_open", staticmethod(opening))
        self.assertFalse(container.refresh(create=False), "the directory was already opened")
        self.assertEqual(nested, [True])
        self.assertEqual(container.generation, 2)
        self.assertEqual(container.inode, (os.lstat(self.directory).st_dev, os.lstat(self.directory).st_ino))

    def test_a_symbolic_link_as_the_container_is_refused(self) -> None:
        real = os.path.join(self.scratch, "real")
        os.mkdir(real, 0o700)
        os.symlink(real, self.directory)
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=self.directory)
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)
        self.assertIn("is a symbolic link", str(caught.exception))

    def test_a_container_other_users_may_write_is_refused(self) -> None:
        os.mkdir(self.directory, 0o700)
        os.chmod(self.directory, 0o777)
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=self.directory)
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)
        self.assertIn("chmod go-w", str(caught.exception))

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give a directory to another user")
    def test_a_container_owned_by_another_user_is_refused(self) -> None:
        os.mkdir(self.directory, 0o700)
        os.chown(self.directory, 65534, 65534)
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=self.directory)
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)
        self.assertIn("belongs to user 65534", str(caught.exception))

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give a directory to another user")
    def test_a_parent_owned_by_another_user_is_refused(self) -> None:
        parent = os.path.join(self.scratch, "theirs")
        os.mkdir(parent, 0o755)
        os.chown(parent, 65534, 65534)
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=os.path.join(parent, "container"))
        self.assertIn("belongs to user 65534: that user could replace the container", str(caught.exception))

    def test_a_world_writable_parent_without_the_sticky_bit_is_refused(self) -> None:
        parent = os.path.join(self.scratch, "open")
        os.mkdir(parent)
        os.chmod(parent, 0o777)
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=os.path.join(parent, "container"))
        self.assertIn("without the sticky bit", str(caught.exception))

    def test_dot_dot_in_the_path_is_refused(self) -> None:
        with self.assertRaises(WormholeError) as caught:
            Wormhole(directory=self.scratch + "/a/../container")
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_UNAVAILABLE)
        self.assertIn("contains '..'", str(caught.exception))

    def test_groups_resolve_as_the_swift_library_does(self) -> None:
        groups = os.path.join(self.scratch, "groups")
        environment = {"WORMHOLE_APP_GROUPS_DIRECTORY": groups}
        self.assertEqual(directory_for_group("group.example", environment), groups + "/group.example")
        # Without the override: from the user id, whatever XDG_RUNTIME_DIR says (the
        # Swift library's rule, so that a service and a session meet).
        runtime = os.path.join(self.scratch, "runtime")
        os.mkdir(runtime, 0o700)
        name = "group.example.resolution-%d" % os.getpid()
        found = directory_for_group(name, {"XDG_RUNTIME_DIR": runtime})
        try:
            uid = os.geteuid()
            self.assertRegex(found, r"^(/run/user/%d/app-groups|/(dev/shm|tmp)/app-groups-%d)/%s$" % (uid, uid, re.escape(name)))
            self.assertFalse(found.startswith(runtime))
            self.assertEqual(directory_for_group(name, {}), found)
        finally:
            os.rmdir(found)
        with self.assertRaises(WormholeError) as caught:
            directory_for_group("group.example", {"WORMHOLE_APP_GROUPS_DIRECTORY": "relative"})
        self.assertIn("must be an absolute path", str(caught.exception))

    def test_a_group_and_an_optional_directory_meet_an_explicit_directory(self) -> None:
        groups = os.path.join(self.scratch, "groups")
        previous = os.environ.get("WORMHOLE_APP_GROUPS_DIRECTORY")
        os.environ["WORMHOLE_APP_GROUPS_DIRECTORY"] = groups
        try:
            sender = Wormhole(application_group_identifier="group.example", optional_directory="wormhole")
        finally:
            if previous is None:
                del os.environ["WORMHOLE_APP_GROUPS_DIRECTORY"]
            else:
                os.environ["WORMHOLE_APP_GROUPS_DIRECTORY"] = previous
        self.addCleanup(sender.close)
        sender.pass_message("hello", "note")
        reader = Wormhole(directory=groups + "/group.example/wormhole")
        self.addCleanup(reader.close)
        self.assertEqual(reader.message("note"), "hello")


class HostileFileTests(ScratchTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.wormhole = Wormhole(directory=self.directory)
        self.addCleanup(self.wormhole.close)

    def test_a_symbolic_link_in_place_of_a_log_is_neither_followed_nor_written(self) -> None:
        target = os.path.join(self.scratch, "target")
        with open(target, "wb") as handle:
            handle.write(b"precious")
        os.symlink(target, os.path.join(self.directory, "note.wormhole"))
        for call in (lambda: self.wormhole.pass_message("x", "note"), lambda: self.wormhole.message("note")):
            with self.assertRaises(WormholeError) as caught:
                call()
            self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)
            self.assertIn("is a symbolic link", str(caught.exception))
        with open(target, "rb") as handle:
            self.assertEqual(handle.read(), b"precious")

    def test_a_fifo_in_place_of_a_log_is_refused_without_blocking(self) -> None:
        os.mkfifo(os.path.join(self.directory, "note.wormhole"), 0o600)
        done = threading.Event()
        errors = []

        def attempt() -> None:
            for call in (lambda: self.wormhole.pass_message("x", "note"), lambda: self.wormhole.message("note")):
                try:
                    call()
                except WormholeError as error:
                    errors.append(error)
            done.set()

        threading.Thread(target=attempt, daemon=True).start()
        self.assertTrue(done.wait(10), "a FIFO blocked the call")
        self.assertEqual([e.code for e in errors], [WormholeError.CONTAINER_INSECURE] * 2)
        self.assertIn("a FIFO", str(errors[1]))

    def test_a_directory_in_place_of_a_log_is_refused(self) -> None:
        os.mkdir(os.path.join(self.directory, "note.wormhole"))
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.pass_message("x", "note")
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)

    def test_a_file_that_is_not_a_log_is_reported_and_left_alone(self) -> None:
        path = os.path.join(self.directory, "note.wormhole")
        with open(path, "wb") as handle:
            handle.write(b"just some text that is not a log at all")
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.pass_message("x", "note")
        self.assertEqual(caught.exception.code, WormholeError.UNSUPPORTED_FORMAT)
        self.assertIn("is not a Wormhole message log", str(caught.exception))
        with open(path, "rb") as handle:
            self.assertEqual(handle.read(), b"just some text that is not a log at all")

    def test_a_version_1_log_is_refused_and_not_modified(self) -> None:
        path = os.path.join(self.directory, "old.wormhole")
        content = b"WORMHOLE" + (1).to_bytes(4, "little") + (128).to_bytes(4, "little") + bytes(112)
        with open(path, "wb") as handle:
            handle.write(content)
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.pass_message("x", "old")
        self.assertIn("is a version 1 message log and this library reads versions 2 and 3: it was written by an "
                      "earlier Wormhole", str(caught.exception))
        with open(path, "rb") as handle:
            self.assertEqual(handle.read(), content)

    def test_a_symbolic_link_as_the_claims_directory_is_refused(self) -> None:
        elsewhere = os.path.join(self.scratch, "elsewhere")
        os.mkdir(elsewhere, 0o700)
        os.symlink(elsewhere, os.path.join(self.directory, ".listeners"))
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.listen_for_message("note", print)
        self.assertEqual(caught.exception.code, WormholeError.CONTAINER_INSECURE)
        self.assertEqual(os.listdir(elsewhere), [])

    def test_an_oversized_message_is_refused_with_the_limit(self) -> None:
        from wormhole import Configuration
        small = Wormhole(directory=self.directory, configuration=Configuration(maximum_message_size=16))
        self.addCleanup(small.close)
        with self.assertRaises(WormholeError) as caught:
            small.pass_message(b"x" * 17, "note")
        self.assertEqual(caught.exception.code, WormholeError.MESSAGE_TOO_LARGE)
        self.assertIn("is 17 bytes; the limit is 16 bytes", str(caught.exception))
        with self.assertRaises(WormholeError):
            Configuration(retained_message_count=0)


if __name__ == "__main__":
    unittest.main()
