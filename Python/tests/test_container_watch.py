"""A listener watches its container's parent (Protocol.md §4.1): a container removed
(while the listener holds its descriptor, so that its own watch says nothing), moved
away or replaced is noticed at once, and the listener claims again in the new one. The
listeners' 5 s safety wake-up is turned off here: only inotify can deliver."""

from __future__ import annotations

import os
import stat
import time

from support import Collector, ScratchTestCase, eventually, remove_tree

from wormhole import ListenerToken, Wormhole
from wormhole.watching import ContainerWatch


class ContainerWatchTests(ScratchTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.saved = ListenerToken.SAFETY_WAKE
        ListenerToken.SAFETY_WAKE = 3600.0
        self.addCleanup(setattr, ListenerToken, "SAFETY_WAKE", self.saved)

    def listen(self, directory: str, **arguments):
        wormhole = Wormhole(directory=directory)
        self.addCleanup(wormhole.close)
        received = Collector()
        wormhole.listen_for_message("note", received.append, **arguments)
        return wormhole, received

    def writer(self, directory: str) -> Wormhole:
        wormhole = Wormhole(directory=directory)
        self.addCleanup(wormhole.close)
        return wormhole

    def claims(self, directory: str):
        path = os.path.join(directory, ".listeners", "note")
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def test_a_removed_container_made_again_is_followed_and_claimed_in(self) -> None:
        listener, received = self.listen(self.directory)
        self.writer(self.directory).pass_message("before", "note")
        self.assertEqual(received.wait_for(1), ["before"])
        remove_tree(self.directory)                   # the listener holds its descriptor
        # §4: a listener follows the directory at the path but never makes it (a pass does).
        time.sleep(0.3)
        self.assertFalse(os.path.exists(self.directory), "the listener made the removed container again")
        self.writer(self.directory).pass_message("after", "note")   # a new container at the path
        self.assertEqual(received.wait_for(2, timeout=10), ["before", "after"])
        claims = self.claims(self.directory)
        self.assertEqual(len(claims), 1, "the listener claimed again in the new container")
        self.assertTrue(claims[0].startswith(f"{os.getpid()}-"))
        self.assertEqual(len(listener.listeners("note")), 1)

    def test_a_container_moved_away_and_replaced_is_followed(self) -> None:
        _, received = self.listen(self.directory, durable_name="keeper")
        os.rename(self.directory, self.directory + ".old")
        self.writer(self.directory).pass_message("new one", "note")
        self.assertEqual(received.wait_for(1, timeout=10), ["new one"])
        self.assertIn("durable-keeper", self.claims(self.directory), "the durable position is made in the new one")
        self.writer(self.directory + ".old").pass_message("old one", "note")
        self.writer(self.directory).pass_message("next", "note")
        self.assertEqual(received.wait_for(2, timeout=10), ["new one", "next"], "the moved container is not read")

    def test_a_container_in_a_parent_every_user_may_write_is_followed(self) -> None:
        shared = os.path.join(self.scratch, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)                      # as /tmp: watched only while it matters
        directory = os.path.join(shared, "container")
        _, received = self.listen(directory)
        writer = self.writer(directory)
        writer.pass_message("one", "note")
        self.assertEqual(received.wait_for(1), ["one"])
        writer.close()
        for turn in range(3):
            remove_tree(directory)
            self.writer(directory).pass_message(f"again {turn}", "note")
            self.assertEqual(received.wait_for(2 + turn, timeout=10)[-1], f"again {turn}")

    def test_a_parent_watch_is_dropped_when_the_container_is_no_longer_emptying(self) -> None:
        shared = os.path.join(self.scratch, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        directory = os.path.join(shared, "container")
        wormhole = self.writer(directory)
        events = Collector()
        watch = ContainerWatch(wormhole.container, events.append, lambda: events.append("replaced"))
        self.addCleanup(watch.close)
        self.assertIsNone(watch._parent, "a shared parent is not watched while nothing is going")
        wormhole.pass_message("x", "note")
        open(os.path.join(directory, "scratch-file"), "w").close()
        os.unlink(os.path.join(directory, "scratch-file"))
        self.assertTrue(eventually(lambda: watch._parent is not None, 10), "an entry deleted: the parent is watched")
        wormhole.pass_message("y", "other")           # an entry made: no longer emptying
        self.assertTrue(eventually(lambda: watch._parent is None, 10))
        self.assertNotIn("replaced", events.items)

    def test_a_private_parent_is_watched_for_as_long_as_the_container(self) -> None:
        wormhole = self.writer(self.directory)
        self.assertEqual(stat.S_IMODE(os.stat(self.scratch).st_mode) & 0o022, 0)
        watch = ContainerWatch(wormhole.container, lambda events: None, lambda: None)
        self.assertIsNotNone(watch._parent)
        watch.close()
        self.assertIsNone(watch._parent)

    def test_a_writer_passes_to_the_directory_at_the_path_not_to_one_moved_away(self) -> None:
        writer = self.writer(self.directory)
        writer.pass_message("first", "note")
        os.rename(self.directory, self.directory + ".old")
        writer.pass_message("second", "note")
        self.assertEqual(Wormhole(directory=self.directory).message("note"), "second")
        self.assertEqual(Wormhole(directory=self.directory + ".old").message("note"), "first")
        remove_tree(self.directory)
        writer.pass_message("third", "note")           # a removed container is made again
        self.assertEqual(Wormhole(directory=self.directory).message("note"), "third")

    def test_an_observer_follows_a_container_removed_and_made_again(self) -> None:
        observer = self.writer(self.directory)
        posted = Collector()
        observer.notification_center.observe("ping", posted.append)
        remove_tree(self.directory)
        poster = self.writer(self.directory)
        poster.notification_center.post("ping")
        self.assertEqual(posted.wait_for(1, timeout=10)[:1], ["ping"])
        watch = observer.notification_center._watch
        self.assertTrue(eventually(lambda: watch._watched == poster.container.inode, 10), "the watch follows it")
        seen = len(posted.items)
        poster.notification_center.post("ping")            # heard through the new directory's watch
        self.assertGreaterEqual(len(posted.wait_for(seen + 1, timeout=10)), seen + 1)
