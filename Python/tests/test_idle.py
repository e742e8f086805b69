"""``Wormhole.wait_until_idle``: what a service started on demand (Activation.md) waits
for before it exits, as the Swift library's ``waitUntilIdle(for:)``."""

from __future__ import annotations

import threading
import time
import unittest

from support import Collector, WormholeTestCase

from wormhole import Wormhole


class WaitUntilIdleTests(WormholeTestCase):
    def test_a_durable_backlog_comes_first_and_a_long_handler_holds_idle(self) -> None:
        for value in (1, 2, 3):
            self.wormhole.pass_message(value, "jobs")
        service = Wormhole(directory=self.directory)
        self.addCleanup(service.close)
        handled = []
        last_return = [time.monotonic()]

        def handle(value: int) -> None:
            # Message 2 is handled for longer than the idle time asked for.
            if value == 2:
                time.sleep(0.6)
            handled.append(value)
            last_return[0] = time.monotonic()

        token = service.listen_for_message("jobs", handle, start="history", durable_name="worker")
        service.wait_until_idle(0.3)
        returned = time.monotonic()
        self.assertEqual(handled, [1, 2, 3])
        self.assertGreaterEqual(returned - last_return[0], 0.3)
        token.cancel()

    def test_a_first_read_held_up_is_no_idleness(self) -> None:
        """A listener's (a queue member's) first read that has not ended is no idleness,
        however long it is held up: here it is held until released, as on a machine too
        loaded to run it within the idle time."""
        from wormhole.queues import WorkQueueFile
        from wormhole.reader import Cursor
        for kind, owner, method in (("durable", Cursor, "read"), ("queue", WorkQueueFile, "take")):
            with self.subTest(kind):
                self.wormhole.pass_message("waiting", "jobs-" + kind)
                release = threading.Event()
                original = getattr(owner, method)

                def held(this, *arguments, original=original, release=release, **keywords):
                    if threading.current_thread().name.startswith(("wormhole-listener", "wormhole-queue")):
                        release.wait(10)
                    return original(this, *arguments, **keywords)

                setattr(owner, method, held)
                self.addCleanup(setattr, owner, method, original)
                service = Wormhole(directory=self.directory)
                self.addCleanup(service.close)
                handled = Collector()
                if kind == "durable":
                    token = service.listen_for_message("jobs-durable", handled.append, start="history", durable_name="w")
                else:
                    token = service.listen_for_message("jobs-queue", handled.append, work_queue="workers")
                started = time.monotonic()
                returned = []
                waiter = threading.Thread(target=lambda: (service.wait_until_idle(0.2), returned.append(time.monotonic())))
                waiter.start()
                time.sleep(0.8)
                self.assertEqual((handled.items, returned), ([], []), "returned before the held read ran")
                release.set()
                self.assertEqual(handled.wait_for(1), ["waiting"])
                waiter.join(10)
                self.assertGreaterEqual(returned[0] - started, 0.8)
                token.cancel()
                setattr(owner, method, original)

    def test_a_responder_counts_until_its_answer(self) -> None:
        service = Wormhole(directory=self.directory)
        self.addCleanup(service.close)
        answered = []

        def answer(request: str) -> str:
            time.sleep(0.5)
            answered.append(time.monotonic())
            return request.upper()

        responder = service.respond("slow", answer)
        replies = Collector()
        threading.Thread(target=lambda: replies.append(self.wormhole.request("hi", "slow", timeout=20)), daemon=True).start()
        service.wait_until_idle(0.2)
        returned = time.monotonic()
        self.assertTrue(answered, "returned before the request was answered")
        self.assertGreaterEqual(returned - answered[0], 0.2)
        self.assertEqual(replies.wait_for(1), ["HI"])
        responder.cancel()


if __name__ == "__main__":
    unittest.main()
