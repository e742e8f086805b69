"""Work queues (Protocol.md §18): each message to exactly one live member, acknowledged
when its callback returns, redelivered with its delivery count when a member dies or
fails, dead letters, expiry, status, compaction, bad options and a damaged state."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from support import Collector, WormholeTestCase, eventually, scaled

from wormhole import (Configuration, ListenerToken, LogSubscription, Record, WorkQueueMember, WorkQueueOptions, Wormhole,
                      WormholeError)
from wormhole.queues import WorkQueueState

MEMBER = r"""
import os, sys, time
from wormhole import Wormhole, WorkQueueOptions
wormhole = Wormhole(directory=sys.argv[1])
def job(record, deliveries):
    os.write(1, f"{record.sequence} {deliveries} {record.payload.decode()}\n".encode())
    while record.payload == b"stuck":
        time.sleep(60)
wormhole.listen_for_message("jobs", job, work_queue="workers", records=True,
                            options=WorkQueueOptions(redelivery_interval=0.05, retry_delay=0))
os.write(1, b"ready\n")
time.sleep(120)
"""


class QueueClaimTests(unittest.TestCase):
    """§18.4: a state whose logID is 0 claims ``taken`` (or an entry's sequence − 1) on any
    log, as a durable position of logID 0 does; a state of another log claims 0."""

    def test_an_entry_is_due_after_its_retry_delay_or_when_the_clock_was_set_back(self) -> None:
        from wormhole.queues import Entry
        entry = Entry(1, 0, 1, 10_000_000_000)
        self.assertTrue(entry.is_due(10_000_000_000))
        entry.wait_before_redelivery(1, 10_500_000_000)
        self.assertEqual(entry.retry_delay, 1500)
        self.assertFalse(entry.is_due(11_499_999_999))
        self.assertTrue(entry.is_due(11_500_000_000))
        self.assertTrue(entry.is_due(9_999_999_999), "the clock set back before its delivery")
        entry.wait_before_redelivery(1e9, 10_500_000_000)
        self.assertEqual(entry.retry_delay, 0xFFFFFFFF)

    def test_a_state_of_log_id_zero_claims_on_any_log(self) -> None:
        from wormhole.queues import Entry, WorkQueueState
        state = WorkQueueState(taken=5)
        self.assertEqual(state.lowest_unhandled(123), 5)
        state.entries.append(Entry(3, 0, 1, 0))
        self.assertEqual(state.lowest_unhandled(123), 2)
        state.log_id = 7
        self.assertEqual(state.lowest_unhandled(123), 0)
        self.assertEqual(state.lowest_unhandled(7), 2)


class WorkQueueTests(WormholeTestCase):
    def member(self, handler, name: str = "workers", **options) -> object:
        """A member of the queue ``name``; no retry delay unless given (the tests that
        are not about delays would wait for them)."""
        errors = options.pop("errors", None)
        options.setdefault("retry_delay", 0)
        member = self.wormhole.listen_for_message("jobs", handler, work_queue=name, records=True,
                                                  options=WorkQueueOptions(redelivery_interval=0.05, **options),
                                                  on_error=errors.append if errors is not None else None)
        self.addCleanup(member.cancel)
        return member

    def status(self, name: str = "workers"):
        return next(queue for queue in self.wormhole.work_queues("jobs") if queue.name == name)

    def test_a_listener_and_a_member_are_log_subscriptions_with_one_surface(self) -> None:
        listened, handled = Collector(), Collector()
        listener = self.wormhole.listen_for_message("jobs", listened.append)
        member = self.wormhole.listen_for_message("jobs", handled.append, work_queue="workers")
        for subscription in (listener, member):
            self.addCleanup(subscription.cancel)
            self.assertIsInstance(subscription, LogSubscription)
            self.assertEqual((subscription.identifier, subscription.is_cancelled), ("jobs", False))
        self.assertIsInstance(listener, ListenerToken)
        self.assertIsInstance(member, WorkQueueMember)
        self.wormhole.pass_message("job", "jobs")
        self.assertEqual(listened.wait_for(1), ["job"])
        self.assertEqual(handled.wait_for(1), ["job"])
        for subscription in (listener, member):
            with subscription as entered:
                self.assertIs(entered, subscription)
            self.assertTrue(subscription.is_cancelled)
        self.assertEqual(self.status().members, [], "the member left its queue")

    def test_each_message_goes_to_exactly_one_of_three_members(self) -> None:
        total = scaled(300)
        handled = Collector()
        for tag in "abc":
            self.member(lambda record, deliveries, tag=tag: handled.append((tag, record.value(), deliveries)))
        for index in range(total):
            self.wormhole.pass_message({"job": index}, "jobs")
        got = handled.wait_for(total)
        self.assertTrue(eventually(lambda: self.status().acknowledged == total))
        self.assertEqual(sorted(value["job"] for _, value, _ in got), list(range(total)), "each job once")
        self.assertTrue(all(deliveries == 1 for _, _, deliveries in got))
        status = self.status()
        self.assertEqual((len(status.members), status.pending, status.in_flight, status.dead_lettered, status.lost),
                         (3, 0, 0, 0, 0))
        # An ordinary listener still receives every message; two queues are independent.
        self.assertEqual(len(self.wormhole.retained_records("jobs")), total)

    def test_two_queues_of_one_identifier_each_get_every_message(self) -> None:
        first, second = Collector(), Collector()
        self.member(lambda record, _: first.append(record.sequence), name="index")
        self.member(lambda record, _: second.append(record.sequence), name="mail")
        for index in range(10):
            self.wormhole.pass_message(index, "jobs")
        self.assertEqual(sorted(first.wait_for(10)), list(range(1, 11)))
        self.assertEqual(sorted(second.wait_for(10)), list(range(1, 11)))

    def test_a_member_killed_mid_message_leaves_it_to_another_member_with_its_delivery_count(self) -> None:
        child = self.owned_child(MEMBER, self.directory)
        self.assertEqual(child.stdout.readline().strip(), b"ready")
        sequence = self.wormhole.pass_message("stuck", "jobs")
        self.assertEqual(child.stdout.readline().split(), [str(sequence).encode(), b"1", b"stuck"])
        self.assertEqual(self.status().in_flight, 1)
        os.kill(child.pid, signal.SIGKILL)                    # holding the job, mid-callback
        child.wait()
        handled = Collector()
        self.member(lambda record, deliveries: handled.append((record.sequence, deliveries, record.payload)))
        self.assertEqual(handled.wait_for(1), [(sequence, 2, b"stuck")])
        self.assertTrue(eventually(lambda: self.status().acknowledged == 1))
        status = self.status()
        self.assertEqual((len(status.members), status.pending, status.in_flight, status.lost), (1, 0, 0, 0))
        self.assertEqual(os.listdir(os.path.join(self.directory, ".queues", "jobs", "workers", "members")),
                         [format(member.file.token, "x") for member in self.wormhole._subscriptions.live()])

    def test_an_acknowledgement_not_stored_is_reported_and_the_live_member_hands_the_message_out_again(self) -> None:
        """§18.3 T1: a member takes with nothing in hand, so a message it still holds (its
        acknowledgement failed: a full disk, an I/O error) is handed out again, with its
        count, at its next take, not held for as long as the member lives."""
        from wormhole.queues import WorkQueueFile
        acknowledge = WorkQueueFile.acknowledge
        failures = []

        def failing_once(queue_file, sequence):
            if not failures:
                failures.append(sequence)
                raise WormholeError(WormholeError.SYSTEM_ERROR, "write the work queue state: No space left on device")
            return acknowledge(queue_file, sequence)

        WorkQueueFile.acknowledge = failing_once                 # type: ignore[method-assign]
        self.addCleanup(setattr, WorkQueueFile, "acknowledge", acknowledge)
        handled, errors = Collector(), []
        self.member(lambda record, deliveries: handled.append((record.sequence, deliveries)), errors=errors)
        sequence = self.wormhole.pass_message("job", "jobs")
        self.assertEqual(handled.wait_for(2), [(sequence, 1), (sequence, 2)], "handed out again, with its count")
        self.assertTrue(eventually(lambda: self.status().acknowledged == 1))
        status = self.status()
        self.assertEqual((status.in_flight, status.pending, status.lost), (0, 0, 0))
        self.assertEqual([error.code for error in errors], [WormholeError.SYSTEM_ERROR], "the failure was reported")

    def test_a_failing_callback_is_retried_then_dead_lettered_as_swift_writes_it(self) -> None:
        attempts = Collector()

        def handler(record: Record, deliveries: int) -> None:
            attempts.append(deliveries)
            if record.payload == b"bad/job":
                raise ValueError("cannot handle it")

        self.member(handler, maximum_deliveries=3)
        sequence = self.wormhole.pass_message("bad/job", "jobs")
        self.assertEqual(attempts.wait_for(3), [1, 2, 3])
        self.assertTrue(eventually(lambda: self.wormhole.record("jobs.dead-letters") is not None))
        letter = self.wormhole.record("jobs.dead-letters")
        self.assertEqual(letter.kind_name, "json")
        passed = self.wormhole.record("jobs")
        self.assertEqual(json.loads(letter.payload), {
            "identifier": "jobs", "queue": "workers", "sequence": sequence, "deliveries": 3,
            "reason": "the handler threw: cannot handle it", "kind": "text", "payload": "YmFkL2pvYg==",
            "date": letter.value()["date"]})
        self.assertEqual(letter.payload[:11], b'{"date":"20', "keys sorted as Swift sorts them")
        self.assertIn(b'"reason":"the handler threw: cannot handle it"', letter.payload)
        date = letter.value()["date"]
        self.assertRegex(date, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        parsed = datetime.datetime.strptime(date, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
        self.assertLessEqual(abs((parsed - passed.date).total_seconds()), 0.0005, "the date it was passed, to the ms")
        status = self.status()
        self.assertEqual((status.dead_lettered, status.acknowledged, status.pending), (1, 0, 0))
        time.sleep(0.2)
        self.assertEqual(len(attempts.items), 3, "not handed out after it was dead-lettered")

    def test_members_that_end_holding_a_message_send_it_to_the_dead_letters_at_the_maximum(self) -> None:
        for delivery in (1, 2):
            child = self.owned_child(MEMBER, self.directory)
            if delivery == 1:
                self.assertEqual(child.stdout.readline().strip(), b"ready")
                self.wormhole.pass_message("stuck", "jobs")
            lines = {child.stdout.readline().strip() for _ in range(delivery)}
            self.assertIn(b"1 %d stuck" % delivery, lines)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        handled = Collector()
        self.member(lambda record, deliveries: handled.append(record.sequence), maximum_deliveries=2,
                    dead_letter_identifier="jobs.failed")
        self.assertTrue(eventually(lambda: self.wormhole.record("jobs.failed") is not None))
        letter = self.wormhole.message("jobs.failed")
        self.assertEqual((letter["deliveries"], letter["reason"]),
                         (2, "handed out 2 times; each time its member ended (killed or stopped) before "
                             "acknowledging it"))
        self.assertEqual(handled.items, [])

    def test_a_failing_job_waits_its_retry_delay_doubled_up_to_the_maximum_while_others_are_handed_out(self) -> None:
        """§18.1 (revision 3.1): the entry records its delay; the member waiting for it
        wakes when it is due (its redelivery timer), not long after."""
        attempts, handled = Collector(), Collector()

        def handler(record: Record, deliveries: int) -> None:
            if record.payload != b"poison":
                handled.append(record.payload)
                return
            attempts.append(time.monotonic())
            raise ValueError("failed")

        options = WorkQueueOptions(maximum_deliveries=4, retry_delay=1, maximum_retry_delay=1.5)
        self.assertEqual([options.retry_delay_after(n) for n in (1, 2, 3, 4)], [1, 1.5, 1.5, 1.5])
        self.member(handler, maximum_deliveries=4, retry_delay=1, maximum_retry_delay=1.5)
        self.wormhole.pass_message("poison", "jobs")
        self.assertGreaterEqual(len(attempts.wait_for(1)), 1)
        path = os.path.join(self.directory, ".queues", "jobs", "workers", "state")

        def waiting():
            with open(path, "rb") as file:
                state = WorkQueueState.decode(file.read())
            return state.entries[0] if state is not None and state.entries and state.entries[0].member == 0 else None

        self.assertTrue(eventually(lambda: waiting() is not None))
        entry = waiting()
        self.assertEqual(entry.deliveries, 1)
        self.assertTrue(1000 <= entry.retry_delay < 3000, entry.retry_delay)
        self.wormhole.pass_message("a", "jobs")
        self.wormhole.pass_message("b", "jobs")
        times = attempts.wait_for(4)
        self.assertEqual(len(times), 4)
        gaps = [round((later - earlier) * 1000) for earlier, later in zip(times, times[1:])]
        self.assertTrue(gaps[0] >= 1000 and gaps[1] >= 1500 and gaps[2] >= 1500, f"gaps in ms: {gaps}")
        self.assertTrue(all(gap < 4000 for gap in gaps), f"gaps in ms: {gaps}")
        self.assertEqual(handled.items, [b"a", b"b"], "handed out while the failing job waited")
        self.assertTrue(eventually(lambda: self.status().dead_lettered == 1))

    def test_a_job_of_a_killed_member_waits_the_retry_delay_of_the_member_that_finds_it_dead(self) -> None:
        child = self.owned_child(MEMBER, self.directory)
        self.assertEqual(child.stdout.readline().strip(), b"ready")
        sequence = self.wormhole.pass_message("stuck", "jobs")
        self.assertEqual(child.stdout.readline().split(), [str(sequence).encode(), b"1", b"stuck"])
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed = time.monotonic()
        handled = Collector()
        self.member(lambda record, deliveries: handled.append((time.monotonic(), deliveries)), retry_delay=0.6)
        got = handled.wait_for(1)
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0][1], 2)
        self.assertGreaterEqual(got[0][0] - killed, 0.6, "handed out again before the retry delay")

    def test_expired_messages_are_skipped_and_counted(self) -> None:
        self.wormhole.pass_message("late", "jobs", time_to_live=0.05)
        time.sleep(0.1)
        self.wormhole.pass_message("fresh", "jobs")
        handled = Collector()
        self.member(lambda record, _: handled.append(record.value()))
        self.assertEqual(handled.wait_for(1), ["fresh"])
        self.assertTrue(eventually(lambda: self.status().acknowledged == 1))
        self.assertEqual(self.status().expired, 1)

    def test_a_new_queue_starts_from_history_or_now_and_an_existing_one_resumes(self) -> None:
        for index in range(3):
            self.wormhole.pass_message(index, "jobs")
        history, now = Collector(), Collector()
        first = self.member(lambda record, _: history.append(record.value()))
        self.member(lambda record, _: now.append(record.value()), name="fresh", start="now")
        self.assertEqual(history.wait_for(3), [0, 1, 2])
        first.cancel()
        self.wormhole.pass_message(3, "jobs")
        self.assertEqual(now.wait_for(1), [3])
        resumed = Collector()
        self.member(lambda record, _: resumed.append(record.value()), start="history")
        self.assertEqual(resumed.wait_for(1), [3], "the queue resumes where it is, whatever start says")

    def test_compaction_keeps_what_the_queue_has_not_handled(self) -> None:
        small = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=4))
        self.addCleanup(small.close)
        self.member(lambda record, _: None).cancel()       # the queue exists; nobody takes
        total = scaled(200)
        for index in range(total):
            small.pass_message(index, "jobs")
            small.pass_message(index, "other")
        self.assertGreater(self._base_sequence("other"), total - 10, "without a queue, the writer kept 4 or so")
        self.assertEqual(self._base_sequence("jobs"), 0, "with one, it kept what the queue has not handled")
        handled = Collector()
        errors: list = []
        self.member(lambda record, _: handled.append(record.value()), errors=errors)
        self.assertEqual(handled.wait_for(total), list(range(total)))
        self.assertEqual(errors, [])
        self.assertEqual(self.status().lost, 0)

    def test_a_queue_started_on_a_compacted_log_hands_out_the_first_record_kept(self) -> None:
        small = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=3))
        self.addCleanup(small.close)
        for index in range(1, 21):
            small.pass_message(index, "jobs")
        first = self._base_sequence("jobs") + 1
        self.assertGreater(first, 1, "the log was compacted")
        self.assertEqual(small.retained_records("jobs")[0].sequence, first)
        handled, errors = Collector(), []
        self.member(lambda record, _: handled.append(record.sequence), errors=errors)
        self.assertEqual(handled.wait_for(21 - first), list(range(first, 21)), "T3: the first record kept is handed out")
        self.assertEqual([(error.code, error.missed_message_count) for error in errors],
                         [(WormholeError.MESSAGES_LOST, first - 1)])
        self.assertEqual(self.status().lost, first - 1)

    def test_dead_letters_that_cannot_be_passed_are_reported_once_each_and_the_queue_goes_on(self) -> None:
        # The dead-letter identifier's log is not a log: no dead letter can be passed.
        letters = os.path.join(self.directory, "jobs.dead-letters.wormhole")
        with open(letters, "wb") as file:
            file.write(b"not a Wormhole log " * 20)
        errors, handled = Collector(), Collector()

        def handler(record: Record, deliveries: int) -> None:
            if record.payload == b"bad":
                raise ValueError("cannot handle it")
            handled.append(record.sequence)

        bad = [self.wormhole.pass_message("bad", "jobs") for _ in range(10)]
        self.member(handler, maximum_deliveries=1, errors=errors)
        # Each good job handled is one more take, past the bad jobs kept in the queue.
        for round in range(5):
            good = self.wormhole.pass_message("good", "jobs")
            self.assertEqual(handled.wait_for(round + 1)[-1], good)

        def moves() -> list:
            return [int(str(error).split("cannot move message ")[1].split()[0]) for error in errors.items
                    if "cannot move message" in str(error)]

        self.assertTrue(eventually(lambda: sorted(moves()) == bad), f"{len(errors.items)} reports: {sorted(moves())[:30]}")
        self.assertEqual(sorted(moves()), bad, "each reported once, not once per take")
        self.assertIn("is not a Wormhole message log", str(errors.items[0]))
        self.assertEqual((self.status().pending, self.status().dead_lettered), (10, 0))

        # The state full of them (120 entries): said once, not at each take.
        more = [self.wormhole.pass_message("bad", "jobs") for _ in range(WorkQueueState.MAXIMUM_ENTRIES - 10)]
        self.assertTrue(eventually(lambda: len(moves()) == WorkQueueState.MAXIMUM_ENTRIES), len(moves()))
        self.assertEqual(sorted(moves()), bad + more)
        waiting = self.wormhole.pass_message("good", "jobs")
        full = [error for error in errors.items if "as many as its state can" in str(error)]
        self.assertTrue(eventually(lambda: [e for e in errors.items if "as many as its state can" in str(e)]))
        # Takes come every redelivery interval (0.05 s) with no event to wait on.
        time.sleep(0.3)
        full = [error for error in errors.items if "as many as its state can" in str(error)]
        self.assertEqual(len(full), 1, full)
        self.assertIn("holds 120 messages", str(full[0]))
        self.assertIn("it takes no new message until some are moved", str(full[0]))
        self.assertEqual(len(moves()), WorkQueueState.MAXIMUM_ENTRIES)

        # The dead-letter log repaired (removed): every one is moved, and the queue goes on.
        os.unlink(letters)
        self.assertEqual(handled.wait_for(6)[-1], waiting)
        self.assertTrue(eventually(lambda: self.status().dead_lettered == WorkQueueState.MAXIMUM_ENTRIES))
        self.assertEqual((self.status().pending, self.status().lost), (0, 0))

    def test_the_dead_letter_of_a_message_too_large_to_carry_is_passed_without_its_payload(self) -> None:
        size = 7_000_000            # within the 8 MiB limit; its base64 is not
        sequence = self.wormhole.pass_message(bytes(size), "jobs")
        errors, attempts = [], Collector()

        def handler(record: Record, deliveries: int) -> None:
            attempts.append(deliveries)
            raise ValueError("too big")

        self.member(handler, maximum_deliveries=1, errors=errors)
        self.assertEqual(attempts.wait_for(1), [1])
        self.assertTrue(eventually(lambda: self.status().dead_lettered == 1), errors)
        self.assertEqual((self.status().pending, errors), (0, []))
        letter = json.loads(self.wormhole.record("jobs.dead-letters").payload)
        self.assertEqual((letter["sequence"], letter["reason"], letter["kind"], letter["payload"],
                          letter["omittedPayloadSize"]), (sequence, "the handler threw: too big", "data", "", size))

    def test_members_read_without_a_listener_claim_and_are_listed_once_under_their_queue(self) -> None:
        handled = Collector()
        self.member(lambda record, _: handled.append(record.sequence))
        responder = self.wormhole.respond("svc", lambda query: query + 1)
        self.addCleanup(responder.cancel)
        for index in range(5):
            self.wormhole.pass_message(index, "jobs")
        self.assertEqual(sorted(handled.wait_for(5)), [1, 2, 3, 4, 5])
        self.assertEqual(self.wormhole.request(1, "svc", timeout=10), 2)
        # §18.4: the queue's state is the members' claim; no claim file of their own.
        self.assertEqual(self.wormhole.listeners("jobs"), [])
        self.assertEqual(self.wormhole.listeners("svc"), [])
        self.assertEqual([status.identifier for status in self.wormhole.listeners()], ["svc.replies"],
                         "only the requester's listener of the replies")
        for identifier in ("jobs", "svc"):
            claims = os.path.join(self.directory, ".listeners", identifier)
            self.assertEqual(os.listdir(claims) if os.path.isdir(claims) else [], [], identifier)
        self.assertEqual(len(self.status().members), 1)
        self.assertEqual([len(queue.members) for queue in self.wormhole.work_queues("svc")], [1])

    def test_a_new_writer_finds_the_numbers_a_queue_took_in_a_cut_log(self) -> None:
        handled = Collector()
        self.member(lambda record, _: handled.append((record.sequence, record.value())))
        for index in range(1, 11):
            self.wormhole.pass_message(index, "jobs")
        self.assertEqual(handled.wait_for(10), [(index, index) for index in range(1, 11)])
        self.assertTrue(eventually(lambda: self.status().acknowledged == 10))
        os.truncate(os.path.join(self.directory, "jobs.wormhole"), 128)      # cut after the header
        fresh = Wormhole(directory=self.directory)
        self.addCleanup(fresh.close)
        # W5': the queue took 10 of this log, and its members hold no claim that says so.
        self.assertEqual(fresh.pass_message(11, "jobs"), 11)
        self.assertEqual(handled.wait_for(11)[-1], (11, 11), "not skipped as already taken")
        self.assertEqual(self.status().lost, 0)

    def test_a_queue_directory_without_a_state_is_no_queue_yet(self) -> None:
        self.member(lambda record, _: None).cancel()
        os.makedirs(os.path.join(self.directory, ".queues", "jobs", "joining", "members"), 0o700)
        self.assertEqual([queue.name for queue in self.wormhole.work_queues("jobs")], ["workers"])
        self.assertEqual([queue.name for queue in self.wormhole.work_queues()], ["workers"])
        shutil.rmtree(os.path.join(self.directory, ".queues", "jobs", "workers"))
        self.assertEqual(self.wormhole.work_queues(), [])
        small = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=4))
        self.addCleanup(small.close)
        for index in range(scaled(200)):
            small.pass_message(index, "jobs")
        self.assertGreater(self._base_sequence("jobs"), scaled(200) - 10, "compaction passed it by")

    def _base_sequence(self, identifier: str) -> int:
        with open(os.path.join(self.directory, identifier + ".wormhole"), "rb") as file:
            return int.from_bytes(file.read(32)[24:32], "little")

    def test_a_damaged_state_is_reported_and_the_queue_is_left_alone(self) -> None:
        self.member(lambda record, _: None).cancel()
        state = os.path.join(self.directory, ".queues", "jobs", "workers", "state")
        with open(state, "r+b") as file:
            file.write(b"XXXX")
        errors: list = []
        self.wormhole.pass_message("job", "jobs")
        self.member(lambda record, _: None, errors=errors)
        self.assertTrue(eventually(lambda: bool(errors)))
        self.assertEqual(errors[0].code, WormholeError.CORRUPT_RECORD)
        self.assertIn("is damaged; remove the directory", str(errors[0]))
        self.assertTrue(self.status().is_damaged)
        with open(state, "rb") as file:
            self.assertEqual(file.read(4), b"XXXX")

    def test_bad_names_and_options_are_refused_with_what_is_wrong(self) -> None:
        cases = [
            (dict(work_queue="../x"), "work queue name"),
            (dict(work_queue="w", options=WorkQueueOptions(maximum_deliveries=0)), "maximumDeliveries is 0"),
            (dict(work_queue="w", options=WorkQueueOptions(redelivery_interval=0)), "redeliveryInterval is 0"),
            (dict(work_queue="w", options=WorkQueueOptions(dead_letter_identifier="jobs")), "cannot be 'jobs' itself"),
            (dict(work_queue="w", options=WorkQueueOptions(retry_delay=-1)), "retryDelay is -1"),
            (dict(work_queue="w", options=WorkQueueOptions(retry_delay=2, maximum_retry_delay=1)),
             "maximumRetryDelay is 1, less than retryDelay 2"),
            (dict(work_queue="w", durable_name="d"), "has no durable name"),
            (dict(options=WorkQueueOptions()), "give work_queue"),
        ]
        for arguments, text in cases:
            with self.subTest(arguments=arguments):
                with self.assertRaises(WormholeError) as caught:
                    self.wormhole.listen_for_message("jobs", print, **arguments)
                self.assertIn(text, str(caught.exception))
        self.assertFalse(os.path.exists(os.path.join(self.directory, ".queues", "jobs", "w")))

    def test_cancel_from_the_callback_acknowledges_that_message_and_takes_no_other(self) -> None:
        handled = Collector()
        holder: list = []

        def handler(record: Record, _: int) -> None:
            handled.append(record.value())
            holder[0].cancel()

        holder.append(self.member(handler))
        self.wormhole.pass_message(1, "jobs")
        self.wormhole.pass_message(2, "jobs")
        self.assertEqual(handled.wait_for(1), [1])
        self.assertTrue(eventually(lambda: self.status().acknowledged == 1))
        time.sleep(0.2)
        status = self.status()
        self.assertEqual((handled.items, len(status.members), status.pending), ([1], 0, 1))

    def test_members_in_many_threads_and_a_burst_from_threads(self) -> None:
        total = scaled(400)
        handled = Collector()
        for _ in range(4):
            self.member(lambda record, _: handled.append(record.sequence))
        writers = [threading.Thread(target=lambda: [self.wormhole.pass_message("x", "jobs")
                                                    for _ in range(total // 4)]) for _ in range(4)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        self.assertEqual(sorted(handled.wait_for(total)), list(range(1, total + 1)))


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("mount"), "mounting a small tmpfs needs root")
class WorkQueueFullDiskTests(WormholeTestCase):
    """A queue on a filesystem with no room left: a small tmpfs, filled by the test."""

    def setUp(self) -> None:
        super().setUp()
        self.mount_point = tempfile.mkdtemp(prefix="wormhole-python-small-")
        self.addCleanup(os.rmdir, self.mount_point)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", self.mount_point], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", self.mount_point], check=True)
        self.wormhole = Wormhole(directory=os.path.join(self.mount_point, "container"))
        self.addCleanup(self.wormhole.close)
        self.filler = os.path.join(self.mount_point, "filler")

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)

    def test_a_dead_letter_that_cannot_be_passed_stays_in_the_queue_and_is_moved_later(self) -> None:
        def status():
            return self.wormhole.work_queues("jobs")[0]

        attempts, errors, handled = Collector(), Collector(), Collector()

        def handler(record: Record, deliveries: int) -> None:
            if record.payload == b"bad":
                attempts.append(deliveries)
                raise ValueError("cannot handle it")
            handled.append(record.value())

        options = WorkQueueOptions(maximum_deliveries=2, redelivery_interval=0.05)
        self.wormhole.listen_for_message("jobs", handler, work_queue="workers", options=options,
                                         records=True).cancel()
        bad = self.wormhole.pass_message("bad", "jobs")
        self.wormhole.pass_message("good", "jobs")
        self.fill()
        member = self.wormhole.listen_for_message("jobs", handler, work_queue="workers", options=options, records=True,
                                                  on_error=errors.append)
        self.addCleanup(member.cancel)
        # Given back at its last delivery, then skipped by each take: the next job is done.
        self.assertEqual(handled.wait_for(1), ["good"])
        self.assertEqual(attempts.wait_for(2), [1, 2])
        self.assertEqual(len(errors.wait_for(1)), 1, "given back, then reported by the next take")
        for error in errors.items:
            self.assertEqual(error.code, WormholeError.SYSTEM_ERROR)
            self.assertIn(f"the work queue 'workers' of 'jobs' cannot move message {bad} to its dead letters "
                          f"'jobs.dead-letters'", str(error))
            self.assertIn("it stays in the queue, and is moved when it can be", str(error))
            self.assertIn("No space left on device", str(error))
        self.assertTrue(eventually(lambda: status().acknowledged == 1))
        self.assertEqual((status().pending, status().in_flight, status().dead_lettered, status().lost), (1, 0, 0, 0))
        self.assertIsNone(self.wormhole.record("jobs.dead-letters"))
        os.unlink(self.filler)
        self.assertTrue(eventually(lambda: status().dead_lettered == 1))
        letter = self.wormhole.message("jobs.dead-letters")
        self.assertEqual((letter["sequence"], letter["deliveries"], letter["payload"]), (bad, 2, "YmFk"))
        self.assertTrue(letter["reason"].startswith("handed out 2 times"), letter["reason"])   # moved by a take (T2)
        self.assertEqual((status().pending, status().in_flight, status().lost), (0, 0, 0))
        time.sleep(0.2)
        self.assertEqual(attempts.items, [1, 2], "never handed out a third time")
        self.assertEqual(len(errors.items), 1, "reported once, not at each take")

    def test_a_member_cannot_join_a_new_queue_on_a_full_disk_and_its_directory_is_no_queue(self) -> None:
        self.wormhole.pass_message("job", "jobs")
        self.fill()
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.listen_for_message("jobs", print, work_queue="workers")
        self.assertIn("cannot write the work queue state", str(caught.exception))
        self.assertIn("the filesystem is full", str(caught.exception))
        queue = os.path.join(self.wormhole.directory, ".queues", "jobs", "workers")
        self.assertEqual(sorted(os.listdir(queue)), ["members"], "neither a state nor a temporary one")
        self.assertEqual(self.wormhole.work_queues(), [], "not listed as a damaged queue")
        os.unlink(self.filler)
        handled = Collector()
        member = self.wormhole.listen_for_message("jobs", handled.append, work_queue="workers")
        self.addCleanup(member.cancel)
        self.assertEqual(handled.wait_for(1), ["job"])
