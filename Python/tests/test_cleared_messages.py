"""What a clear hides, and from whom (Protocol.md §10.3, §11.3, §12.3 Q1, §12.4 D4, §18.1,
§18.3 T2 and T3): a clear hides the messages so far from readers that start later, not
from a position whose claim kept them. A work queue's state and a durable name hold such
a claim, in their own log and (keeping everything) in a log made anew; a new queue does
not. The same cases as the Swift suite ``ClearedMessagesTests``."""

from __future__ import annotations

import os
import time
import unittest
from typing import List, Optional

from support import Collector, WormholeTestCase, eventually

from wormhole import StartingPoint, WormholeError
from wormhole.queues import Delivery, WorkQueueFile


class ClearedMessagesTests(WormholeTestCase):
    def join(self, name: str) -> WorkQueueFile:
        queue = WorkQueueFile(self.wormhole.container, self.wormhole.configuration, "jobs", name,
                              StartingPoint("history"), self.wormhole._pass_json)
        self.addCleanup(queue.close)
        return queue

    @staticmethod
    def take(queue: WorkQueueFile, reports: List[WormholeError]) -> Optional[Delivery]:
        return queue.take(5, "jobs.dead-letters", reports.append)

    def test_a_queue_is_handed_what_it_had_not_taken_when_the_log_was_cleared(self) -> None:
        """T3: the queue's claim kept m3...m5; nothing is called lost."""
        for index in range(1, 6):
            self.wormhole.pass_message(f"m{index}", "jobs")
        reports: List[WormholeError] = []
        first = self.join("w")
        for expected in ("m1", "m2"):
            delivery = self.take(first, reports)
            assert delivery is not None
            self.assertEqual(delivery.record.payload.decode(), expected)
            first.acknowledge(delivery.record.sequence)
        first.close()
        self.wormhole.clear_message_contents("jobs")
        self.wormhole.pass_message("m6", "jobs")
        second = self.join("w")
        handed = []
        while True:
            delivery = self.take(second, reports)
            if delivery is None:
                break
            handed.append(delivery.record.payload.decode())
            second.acknowledge(delivery.record.sequence)
        self.assertEqual(handed, ["m3", "m4", "m5", "m6"])
        self.assertEqual([error.message for error in reports], [])
        status = next(queue for queue in self.wormhole.work_queues("jobs") if queue.name == "w")
        self.assertEqual((status.lost, status.acknowledged), (0, 6))

    def test_a_message_given_back_after_a_clear_is_handed_out_again_with_its_count(self) -> None:
        """T2: an entry at or below clearedThrough is read from the log, which the queue's
        claim kept, not reported lost."""
        for index in range(1, 4):
            self.wormhole.pass_message(f"m{index}", "jobs")
        reports: List[WormholeError] = []
        queue = self.join("w")
        held = self.take(queue, reports)
        assert held is not None
        self.wormhole.clear_message_contents("jobs")
        queue.give_back(held.record.sequence, "failed", 5, "jobs.dead-letters")
        again = self.take(queue, reports)
        assert again is not None
        self.assertEqual((again.record.payload.decode(), again.deliveries), ("m1", 2))
        self.assertEqual([error.message for error in reports], [])

    def test_a_queue_made_after_a_clear_starts_above_it(self) -> None:
        """§18.1: the cleared messages are not a new queue's to handle, and not lost to it."""
        for index in range(1, 4):
            self.wormhole.pass_message(f"m{index}", "jobs")
        self.wormhole.clear_message_contents("jobs")
        self.wormhole.pass_message("m4", "jobs")
        reports: List[WormholeError] = []
        queue = self.join("late")
        delivery = self.take(queue, reports)
        assert delivery is not None
        self.assertEqual(delivery.record.payload.decode(), "m4")
        queue.acknowledge(delivery.record.sequence)
        self.assertIsNone(self.take(queue, reports))
        self.assertEqual([error.message for error in reports], [])

    def test_a_durable_name_gets_what_was_cleared_while_it_was_stopped(self) -> None:
        """Q1, D4: in its own log and in a log made anew, whose compaction (the clear's) its
        position kept from removing them, without a report."""
        self.wormhole.pass_message("x", "chat")
        for name in ("same", "anew"):
            first = Collector()
            token = self.wormhole.listen_for_message("chat", first.append, start="history", durable_name=name)
            self.assertEqual(first.wait_for(1), ["x"])
            self.assertTrue(eventually(lambda name=name: any(
                each.durable_name == name and each.position == 1 for each in self.wormhole.listeners("chat"))))
            token.cancel()
        self.wormhole.pass_message("y", "chat")
        self.wormhole.clear_message_contents("chat")
        self.wormhole.pass_message("z", "chat")
        errors: List[WormholeError] = []
        same = Collector()
        token = self.wormhole.listen_for_message("chat", same.append, durable_name="same", on_error=errors.append)
        self.assertEqual(same.wait_for(2), ["y", "z"])
        token.cancel()

        os.unlink(os.path.join(self.directory, "chat.wormhole"))
        for text in ("a", "b"):
            self.wormhole.pass_message(text, "chat")
        self.wormhole.clear_message_contents("chat")
        self.wormhole.pass_message("c", "chat")
        anew = Collector()
        token = self.wormhole.listen_for_message("chat", anew.append, durable_name="anew", on_error=errors.append)
        self.assertEqual(anew.wait_for(3), ["a", "b", "c"])
        time.sleep(0.15)
        token.cancel()
        self.assertEqual(anew.items, ["a", "b", "c"])
        self.assertEqual([error.message for error in errors], [])


if __name__ == "__main__":
    unittest.main()
