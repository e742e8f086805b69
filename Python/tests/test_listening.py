"""Listening: starting points, durable listeners across processes, iteration (for and
async for), records, notifications, JSON form, status, lifecycle."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import threading
import time
import unittest

from support import Collector, ScratchTestCase, eventually, scaled

from wormhole import Configuration, Record, StartingPoint, Wormhole, WormholeError
from wormhole.format import KIND_TEXT


class StartingPointTests(ScratchTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.wormhole = Wormhole(directory=self.directory)
        self.addCleanup(self.wormhole.close)
        for index in range(1, 6):
            self.wormhole.pass_message(f"m{index}", "note")

    def first(self, start, count: int):
        """The first ``count`` messages of a listener of a new identifier that holds m1...m5."""
        identifier = f"start-{start}"
        for index in range(1, 6):
            self.wormhole.pass_message(f"m{index}", identifier)
        received = Collector()
        token = self.wormhole.listen_for_message(identifier, received.append, start=start)
        self.addCleanup(token.cancel)
        self.wormhole.pass_message("new", identifier)
        return received.wait_for(count)

    def test_now_latest_history_and_after(self) -> None:
        self.assertEqual(self.first("now", 1), ["new"])
        self.assertEqual(self.first(StartingPoint.LATEST, 2)[:2], ["m5", "new"])
        self.assertEqual(self.first("history", 6), ["m1", "m2", "m3", "m4", "m5", "new"])
        self.assertEqual(self.first(StartingPoint.after(3), 3), ["m4", "m5", "new"])
        self.assertEqual(self.first("after:4", 2), ["m5", "new"])

    def test_records_carry_sequence_sender_date_and_kind(self) -> None:
        received = Collector()
        token = self.wormhole.listen_for_message("note", received.append, start="latest", records=True)
        self.addCleanup(token.cancel)
        record = received.wait_for(1)[0]
        self.assertIsInstance(record, Record)
        self.assertEqual((record.sequence, record.sender_pid, record.sender_uid, record.kind_name, record.payload),
                         (5, os.getpid(), os.geteuid(), "text", b"m5"))
        self.assertLess(abs((datetime.datetime.now(datetime.timezone.utc) - record.date).total_seconds()), 60)

    def test_an_unknown_starting_point_is_refused(self) -> None:
        with self.assertRaises(WormholeError):
            self.wormhole.listen_for_message("note", print, start="tomorrow")

    def test_an_expired_message_is_not_delivered_to_a_listener_that_starts_later(self) -> None:
        self.wormhole.pass_message("short-lived", "ttl", time_to_live=0.05)
        self.wormhole.pass_message("kept", "ttl")
        self.assertTrue(eventually(lambda: self.wormhole.record("ttl").sequence == 2))
        import time
        time.sleep(0.1)
        received = Collector()
        token = self.wormhole.listen_for_message("ttl", received.append, start="history")
        self.addCleanup(token.cancel)
        self.wormhole.pass_message("end", "ttl")
        self.assertEqual(received.wait_for(2), ["kept", "end"])


    def test_an_expired_latest_message_is_none_and_a_one_pass_read_skips_expired_messages(self) -> None:
        self.wormhole.pass_message("kept", "ttl")
        old = self.wormhole.pass_message("stale", "ttl", time_to_live=0.05)
        self.assertEqual(self.wormhole.record("ttl").sequence, old, "not expired yet")
        import time
        time.sleep(0.2)       # the wall clock is what expiry follows: nothing to wait on but it
        # §11.1: an expired latest message is none; an older one is not the latest.
        self.assertIsNone(self.wormhole.record("ttl"))
        self.assertIsNone(self.wormhole.message("ttl"))
        # §11.2 read later than the expiry, as §8.1 says: the expired message is not there.
        self.assertEqual([record.value() for record in self.wormhole.retained_records("ttl")], ["kept"])
        self.wormhole.pass_message("new", "ttl")
        self.assertEqual(self.wormhole.message("ttl"), "new")


    def expired_reports(self, reports: Collector) -> list:
        return [(error.missed_message_count, error.sequence) for error in reports.items
                if error.code == WormholeError.MESSAGES_EXPIRED]

    def pass_expired(self, identifier: str, text: str) -> int:
        """Passes a message whose expiry is the moment it was passed: every read of it
        comes after its expiry."""
        return self.wormhole._writer(identifier).append(KIND_TEXT, text.encode(), expires_ns=time.time_ns())

    def test_a_running_listener_is_not_given_a_message_that_expired_before_it_read_it(self) -> None:
        """§11.3 R1: expiry is checked when a listener reads a record, also for one that
        was running when it was passed; an expired record is counted in a messagesExpired
        report in its place, whose sequence is the newest of its run."""
        received, reports = Collector(), Collector()
        token = self.wormhole.listen_for_message("ttl", received.append, on_error=reports.append)
        self.addCleanup(token.cancel)
        self.wormhole.pass_message("before", "ttl")
        self.assertEqual(received.wait_for(1), ["before"])
        self.pass_expired("ttl", "stale 1")
        newest = self.pass_expired("ttl", "stale 2")
        self.wormhole.pass_message("after", "ttl")
        self.assertEqual(received.wait_for(2), ["before", "after"])
        self.assertTrue(eventually(lambda: self.expired_reports(reports) != []))
        self.assertEqual(sum(count for count, _ in self.expired_reports(reports)), 2)
        self.assertEqual(self.expired_reports(reports)[-1][1], newest)

    def test_a_durable_listener_that_resumes_after_the_expiry_is_told_of_the_expired_message(self) -> None:
        """§11.3 R1 with §12.4 D4: a durable name resumed after a message expired is not
        given it, and gets a messagesExpired report in its place."""
        self.wormhole.listen_for_message("ttl", print, durable_name="archive").cancel()
        stale = self.pass_expired("ttl", "stale")
        self.wormhole.pass_message("kept", "ttl")
        received, reports = Collector(), Collector()
        token = self.wormhole.listen_for_message("ttl", received.append, durable_name="archive",
                                                 on_error=reports.append)
        self.assertEqual(received.wait_for(1), ["kept"])
        self.assertEqual(self.expired_reports(reports), [(1, stale)])
        token.cancel()
        # D5: the position moves with handled messages only; an expired record after it
        # is read, and reported, again when the name resumes.
        again = self.pass_expired("ttl", "stale again")
        for _ in range(2):
            reports.items.clear()
            token = self.wormhole.listen_for_message("ttl", received.append, durable_name="archive",
                                                     on_error=reports.append)
            self.assertTrue(eventually(lambda: self.expired_reports(reports) != []))
            token.cancel()
            self.assertEqual(self.expired_reports(reports), [(1, again)])
        self.assertEqual(received.items, ["kept"])


class OrderTests(ScratchTestCase):
    def test_bursts_from_several_processes_reach_every_listener_in_one_order(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        first, second = Collector(), Collector()
        tokens = [wormhole.listen_for_message("burst", first.append, records=True)]
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        tokens.append(other.listen_for_message("burst", second.append, records=True))
        for token in tokens:
            self.addCleanup(token.cancel)
        count = scaled(500)
        code = ("import sys, wormhole\n"
                "w = wormhole.Wormhole(directory=sys.argv[1])\n"
                "for i in range(int(sys.argv[2])): w.pass_message(sys.argv[3] + str(i), 'burst')\n")
        children = [self.child(code, self.directory, str(count), name) for name in ("a", "b", "c")]
        for child in children:
            self.assertEqual(child.wait(), 0, child.stderr.read())
            child.stdout.close()
            child.stderr.close()
        a = first.wait_for(3 * count)
        b = second.wait_for(3 * count)
        self.assertEqual([r.sequence for r in a], list(range(1, 3 * count + 1)))
        self.assertEqual([r.payload for r in a], [r.payload for r in b])
        for name in "abc":
            mine = [r.payload.decode() for r in a if r.payload.decode().startswith(name)]
            self.assertEqual(mine, [f"{name}{i}" for i in range(count)])


class LogMadeAnewTests(ScratchTestCase):
    def test_a_log_deleted_and_made_again_is_read_from_1_even_when_opened_empty(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        received = Collector()
        token = wormhole.listen_for_message("note", received.append)
        self.addCleanup(token.cancel)
        for text in ("a", "b", "c"):
            wormhole.pass_message(text, "note")
        self.assertEqual(received.wait_for(3), ["a", "b", "c"])
        log = os.path.join(self.directory, "note.wormhole")
        os.unlink(log)
        self.assertTrue(eventually(lambda: token.cursor.fd is None))
        open(log, "wb").close()                     # as a writer's W1, before its header (W4)
        self.assertTrue(eventually(lambda: token.cursor.fd is not None and token.cursor.header is None))
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        self.assertEqual(other.pass_message("fresh", "note"), 1, "numbering starts again in the new log")
        self.assertEqual(received.wait_for(4), ["a", "b", "c", "fresh"])


class GapReasonTests(ScratchTestCase):
    def test_a_record_cut_out_of_the_log_is_reported_as_removed_outside_the_protocol(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for index in range(1, 6):
            wormhole.pass_message(f"m{index}", "note")
        third = wormhole.retained_records("note")[2]
        path = os.path.join(self.directory, "note.wormhole")
        with open(path, "rb") as file:
            data = file.read()
        with open(path, "wb") as file:                  # message 3 removed by another program
            file.write(data[:third.offset] + data[third.offset + third.length:])
        received, errors = Collector(), Collector()
        token = wormhole.listen_for_message("note", received.append, start="history", on_error=errors.append)
        self.addCleanup(token.cancel)
        self.assertEqual(received.wait_for(4), ["m1", "m2", "m4", "m5"])
        gap = errors.wait_for(1)[0]
        self.assertEqual((gap.code, gap.missed_message_count), (WormholeError.MESSAGES_LOST, 1))
        self.assertEqual(str(gap), "1 message of 'note' (3...3) are missing from the log: damaged, or removed by "
                                   "something that changed the file outside the protocol")

    def test_a_gap_below_the_log_s_base_names_the_backlog_cap(self) -> None:
        wormhole = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=2))
        self.addCleanup(wormhole.close)
        for index in range(1, 11):
            wormhole.pass_message(f"m{index}", "note")
        errors = Collector()
        token = wormhole.listen_for_message("note", lambda _: None, start="after:1", on_error=errors.append)
        self.addCleanup(token.cancel)
        gap = errors.wait_for(1)[0]
        self.assertIn("were compacted away before this listener read them: it fell behind by more than the backlog cap",
                      str(gap))


class CaughtUpClaimTests(ScratchTestCase):
    """§12.2: a listener that caught up writes its exact position at once (at most once
    per idle interval), so that ``listeners()`` and ``status`` show it 0 behind, not as far
    behind as the batch step (R/4 = 250 by default)."""

    def test_a_caught_up_listener_shows_its_exact_position(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message(0, "chat")
        received = Collector()
        token = wormhole.listen_for_message("chat", received.append)
        self.addCleanup(token.cancel)
        # One at a time, each received before the next is passed: twenty reads of the
        # same log, each far less than the step past the last claim written.
        for index in range(1, 21):
            wormhole.pass_message(index, "chat")
            self.assertEqual(received.wait_for(index), list(range(1, index + 1)))

        def exact() -> bool:
            statuses = wormhole.listeners("chat")
            return [(s.position, s.behind) for s in statuses] == [(21, 0)]
        # Within the idle interval's re-read, well before the listener's 5 s safety wake.
        self.assertTrue(eventually(exact, timeout=4.0), f"{wormhole.listeners('chat')}")


class PIDNamespaceTests(ScratchTestCase):
    """§12.2: a claim names its PID namespace by the inode /proc/self/ns/pid links to
    (``stat``, following the link), not by the link's own inode (``lstat``)."""

    def test_a_claim_names_the_namespace_by_stat_not_lstat(self) -> None:
        import struct
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message(1, "chat")
        token = wormhole.listen_for_message("chat", lambda _: None)
        self.addCleanup(token.cancel)
        followed, link = os.stat("/proc/self/ns/pid").st_ino, os.lstat("/proc/self/ns/pid").st_ino
        self.assertNotEqual(followed, link)
        claims = os.path.join(self.directory, ".listeners", "chat")
        names = [name for name in os.listdir(claims) if not name.startswith(".")]
        self.assertEqual(len(names), 1)
        with open(os.path.join(claims, names[0]), "rb") as claim:
            data = claim.read()
        self.assertEqual(len(data), 24)
        self.assertEqual(struct.unpack_from("<Q", data, 16)[0], followed, f"lstat gives {link}")


class TemporaryNameTests(ScratchTestCase):
    """§12.3 Q4: a compactor reads the pid of both temporary names, ``.<pid>-<hex>`` and
    ``.durable-<name>.<pid>-<hex>`` (dots and dashes in the name), and removes an unlocked
    one only when that process is gone."""

    def test_a_compaction_keeps_the_temporary_names_of_live_processes(self) -> None:
        import subprocess
        from wormhole import claims
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message(1, "chat")
        finished = subprocess.Popen(["/bin/true"])
        finished.wait()
        alive, dead = os.getpid(), finished.pid
        directory = claims.open_claims_directory(wormhole.container, "chat", create=True)
        self.addCleanup(os.close, directory)
        names = {f".{alive}-1f": True, f".durable-a-b.c.{alive}-1f": True,
                 f".{dead}-1f": False, f".durable-a-b.c.{dead}-1f": False}
        for name in names:
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=directory))
        claims.lowest_live_claim(wormhole.container, "chat", 0)
        left = set(os.listdir(directory))
        self.assertEqual({name for name in names if name in left}, {name for name, kept in names.items() if kept})


class DurableTests(ScratchTestCase):
    CHILD = ("import sys, wormhole\n"
             "w = wormhole.Wormhole(directory=sys.argv[1])\n"
             "def handle(value):\n"
             "    print(value, flush=True)\n"
             "    if value == int(sys.argv[2]):\n"
             "        import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
             "w.listen_for_message('jobs', handle, durable_name='worker', start='history')\n"
             "import time; time.sleep(60)\n")

    def test_a_durable_name_resumes_after_the_last_message_handled_across_a_kill(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for index in range(1, 11):
            wormhole.pass_message(index, "jobs")
        child = self.child(self.CHILD, self.directory, "6")
        lines = child.stdout.read().split()
        child.stdout.close()
        child.wait()
        child.stderr.close()
        self.assertEqual(child.returncode, -signal.SIGKILL)
        self.assertEqual([int(x) for x in lines], [1, 2, 3, 4, 5, 6])
        for index in range(11, 14):
            wormhole.pass_message(index, "jobs")
        status = [s for s in wormhole.listeners("jobs") if s.durable_name == "worker"]
        self.assertEqual(len(status), 1)
        self.assertFalse(status[0].is_running)
        self.assertEqual((status[0].position, status[0].behind), (5, 8))   # 6 was handled but killed before D5
        received = Collector()
        token = wormhole.listen_for_message("jobs", received.append, durable_name="worker")
        self.addCleanup(token.cancel)
        self.assertEqual(received.wait_for(8), [6, 7, 8, 9, 10, 11, 12, 13])

    def test_a_durable_name_is_used_by_one_listener_at_a_time(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        token = wormhole.listen_for_message("jobs", print, durable_name="worker")
        with self.assertRaises(WormholeError) as caught:
            wormhole.listen_for_message("jobs", print, durable_name="worker")
        self.assertEqual(caught.exception.code, WormholeError.DURABLE_NAME_IN_USE)
        self.assertIn(f"is already running (process {os.getpid()})", str(caught.exception))
        with self.assertRaises(WormholeError):
            wormhole.forget_durable_listener("worker", "jobs")
        token.cancel()
        self.assertEqual(wormhole.forget_durable_listener("worker", "jobs"), 1)
        self.assertEqual(wormhole.forget_durable_listener("worker", "jobs"), 0)

    def test_a_damaged_position_is_refused_with_how_to_forget_it(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.listen_for_message("jobs", print, durable_name="worker").cancel()
        path = os.path.join(self.directory, ".listeners", "jobs", "durable-worker")
        with open(path, "r+b") as handle:
            handle.write(b"\xff" * 4)
        with self.assertRaises(WormholeError) as caught:
            wormhole.listen_for_message("jobs", print, durable_name="worker")
        self.assertEqual(caught.exception.code, WormholeError.CORRUPT_RECORD)
        self.assertIn("wormhole forget worker jobs", str(caught.exception))

    def test_a_durable_position_keeps_messages_through_compaction_while_it_is_stopped(self) -> None:
        small = Configuration(retained_message_count=4)
        wormhole = Wormhole(directory=self.directory, configuration=small)
        self.addCleanup(wormhole.close)
        received = Collector()
        token = wormhole.listen_for_message("jobs", received.append, durable_name="worker")
        wormhole.pass_message(0, "jobs")
        self.assertEqual(received.wait_for(1), [0])
        token.cancel()
        for index in range(1, 101):
            wormhole.pass_message(index, "jobs")
        again = Collector()
        token = wormhole.listen_for_message("jobs", again.append, durable_name="worker")
        self.addCleanup(token.cancel)
        self.assertEqual(again.wait_for(100), list(range(1, 101)))


class IterationTests(ScratchTestCase):
    def test_for_and_async_for(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for index in range(3):
            wormhole.pass_message({"n": index}, "note")
        got = []
        for message in wormhole.messages("note", start="history"):
            got.append(message["n"])
            if len(got) == 3:
                break
        self.assertEqual(got, [0, 1, 2])

        async def consume():
            seen = []
            async with wormhole.records("note", start="after:1") as stream:
                async for record in stream:
                    seen.append(record.sequence)
                    if len(seen) == 3:
                        break
            return seen

        threading.Timer(0.2, lambda: wormhole.pass_message("late", "note")).start()
        self.assertEqual(asyncio.run(asyncio.wait_for(consume(), 20)), [2, 3, 4])
        self.assertTrue(eventually(lambda: wormhole.listeners("note") == []))


class JSONFormTests(ScratchTestCase):
    def test_values_are_written_in_the_swift_library_stable_form(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        moment = datetime.datetime(2026, 11, 25, 12, 27, 40, 34512, tzinfo=datetime.timezone.utc)
        wormhole.pass_message({"zone": "kitchen/north", "level": 7, "updated": moment, "raw": b"\x00\x01\x02",
                               "ratio": 6.5, "none": None, "\u00e9": "\u65e5"}, "sensor")
        payload = wormhole.record("sensor").payload
        self.assertEqual(payload.decode("utf-8"),
                         '{"level":7,"none":null,"ratio":6.5,"raw":"AAEC","updated":"2026-11-25T12:27:40.035Z",'
                         '"zone":"kitchen/north","\u00e9":"\u65e5"}')
        with self.assertRaises(WormholeError) as caught:
            wormhole.pass_message({"bad": float("nan")}, "sensor")
        self.assertEqual(caught.exception.code, WormholeError.ENCODING_FAILED)
        with self.assertRaises(WormholeError) as caught:
            wormhole.pass_payload(b"{not json", "json", "sensor")
        self.assertIn("is not JSON", str(caught.exception))


class NotificationTests(ScratchTestCase):
    def test_post_observe_and_state(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        center = wormhole.notification_center
        heard = Collector()
        token = center.observe("refresh", heard.append)
        center.post("refresh")
        self.assertEqual(heard.wait_for(1)[:1], ["refresh"])
        wormhole.pass_message("x", "refresh")               # a message to the identifier is a post too
        self.assertGreaterEqual(len(heard.wait_for(2)), 2)
        self.assertEqual(center.state("refresh"), 0)
        center.set_state("refresh", 0xFEEDFACE12345678)
        self.assertEqual(center.state("refresh"), 0xFEEDFACE12345678)
        token.cancel()
        heard.wait_for(1000, timeout=0.2)                    # the events of the writes above, if any are late
        count = len(heard.items)
        center.post("refresh")
        other = Collector()
        center.observe("other", other.append)
        center.post("other")
        other.wait_for(1)
        self.assertEqual(len(heard.items), count)
        self.assertFalse(os.path.exists(os.path.join(self.directory, "note.notification")))


class LifecycleTests(ScratchTestCase):
    def test_thousands_of_listen_and_cancel_cycles_leak_no_descriptor_or_thread(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message("x", "note")
        before = (len(os.listdir("/proc/self/fd")), threading.active_count())
        for _ in range(scaled(500)):
            wormhole.listen_for_message("note", print).cancel()
        after = (len(os.listdir("/proc/self/fd")), threading.active_count())
        self.assertEqual(before, after)
        self.assertEqual(os.listdir(os.path.join(self.directory, ".listeners", "note")), [])

    def test_a_listener_that_raises_goes_on_with_the_next_message(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        received = Collector()

        def fragile(value):
            received.append(value)
            if value == "boom":
                raise RuntimeError("listener failure")

        token = wormhole.listen_for_message("note", fragile)
        self.addCleanup(token.cancel)
        import logging
        logging.getLogger("Wormhole").disabled = True
        self.addCleanup(setattr, logging.getLogger("Wormhole"), "disabled", False)
        wormhole.pass_message("boom", "note")
        wormhole.pass_message("after", "note")
        self.assertEqual(received.wait_for(2), ["boom", "after"])


if __name__ == "__main__":
    unittest.main()
