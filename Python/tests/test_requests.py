"""Requests and replies (Protocol.md §19): round trips of every kind, concurrent
requesters never answered with each other's replies, failures and timeouts with the
Swift library's messages, a responder killed mid-request, expiry."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import unittest

from support import Collector, WormholeTestCase, eventually

import wormhole
from wormhole import ROLE_REPLY, ROLE_REQUEST, Configuration, Wormhole, WormholeError

RESPONDER = r"""
import os, sys, time
from wormhole import Wormhole
wormhole = Wormhole(directory=sys.argv[1])
def answer(request):
    os.write(1, f"{request}\n".encode())
    while request == "hang":
        time.sleep(60)
    return "child:" + request
wormhole.respond("svc", answer)
os.write(1, b"ready\n")
time.sleep(120)
"""


class ResponderStartTests(WormholeTestCase):
    """§19: a new ``responders`` queue starts at the retained history: a request passed
    before any responder ran is answered; a role 0 message is acknowledged unanswered."""

    def test_a_new_responder_answers_earlier_requests_and_skips_plain_messages(self) -> None:
        from wormhole.reader import log_summary
        self.wormhole.pass_message("plain", "svc")
        answers: list = []
        requester = threading.Thread(target=lambda: answers.append(self.wormhole.request("early", "svc", timeout=20)))
        requester.start()
        self.assertTrue(eventually(lambda: (log_summary(self.wormhole.container, "svc") or (0, 0))[1] >= 2))
        seen = Collector()

        def answer(message):
            seen.append(message)
            return f"re: {message}"
        token = self.wormhole.respond("svc", answer)
        self.addCleanup(token.cancel)
        requester.join(30)
        self.assertEqual(answers, ["re: early"])
        self.assertEqual(seen.items, ["early"], "the plain message is not run as a request")


class RequestTests(WormholeTestCase):
    def respond(self, callback, **arguments):
        member = self.wormhole.respond("svc", callback, **arguments)
        self.addCleanup(member.cancel)
        return member

    def test_requests_of_every_kind_are_answered(self) -> None:
        self.respond(lambda request: {"echo": request})
        self.assertEqual(self.wormhole.request({"a": [1, 2.5, None]}, "svc", timeout=5), {"echo": {"a": [1, 2.5, None]}})
        self.assertEqual(self.wormhole.request("héllo", "svc", timeout=5), {"echo": "héllo"})
        # bytes reach the callback as bytes; inside a JSON reply they are base64, as in Swift.
        self.assertEqual(self.wormhole.request(b"\x00\xff", "svc", timeout=5), {"echo": "AP8="})

    def test_records_in_and_bytes_out(self) -> None:
        seen = Collector()

        def answer(record):
            seen.append(record)
            return bytes(reversed(record.payload)), "data"

        self.respond(answer, records=True)
        reply = self.wormhole.request_record(b"\x01\x02\x03", "data", "svc", timeout=5)
        self.assertEqual((reply.payload, reply.kind_name, reply.role, reply.sender_pid), (b"\x03\x02\x01", "data",
                                                                                          ROLE_REPLY, os.getpid()))
        request = seen.wait_for(1)[0]
        self.assertEqual((request.role, request.correlation, reply.correlation == request.correlation),
                         (ROLE_REQUEST, request.correlation, True))
        self.assertNotEqual(request.correlation, 0)
        self.assertGreater(request.expires_ns, time.time_ns())

    def test_concurrent_requesters_in_two_processes_get_their_own_replies(self) -> None:
        self.respond(lambda request: "re:" + request)
        other = self.owned_child(r"""
import sys
from wormhole import Wormhole
wormhole = Wormhole(directory=sys.argv[1])
bad = [i for i in range(100) if wormhole.request(f"child {i}", "svc", timeout=20) != f"re:child {i}"]
print("wrong", len(bad))
""", self.directory)
        wrong = Collector()

        def ask(tag: str) -> None:
            for index in range(100):
                if self.wormhole.request(f"{tag} {index}", "svc", timeout=20) != f"re:{tag} {index}":
                    wrong.append((tag, index))

        threads = [threading.Thread(target=ask, args=(f"thread{n}",)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        output, errors = other.communicate(timeout=60)
        self.assertEqual(output.strip(), b"wrong 0", errors.decode())
        self.assertEqual(wrong.items, [])

    def test_a_failing_responder_reaches_the_requester_as_request_failed(self) -> None:
        def fail(request):
            raise ValueError(f"no answer to {request}")

        self.respond(fail)
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.request("q", "svc", timeout=5)
        self.assertEqual(caught.exception.code, WormholeError.REQUEST_FAILED)
        self.assertEqual(str(caught.exception), "the responder of 'svc' failed: no answer to q")

    def test_a_reply_over_the_size_limit_is_an_error_reply_and_its_request_runs_once(self) -> None:
        wormhole = Wormhole(directory=self.directory, configuration=Configuration(maximum_message_size=1024))
        self.addCleanup(wormhole.close)
        runs = Collector()

        def answer(record):
            runs.append(record.payload)
            return b"\x00" * 2048, "data"

        member = wormhole.respond("big", answer, records=True)
        self.addCleanup(member.cancel)
        with self.assertRaises(WormholeError) as caught:
            wormhole.request_record(b"once", "text", "big", timeout=10)
        self.assertEqual(caught.exception.code, WormholeError.REQUEST_FAILED)
        self.assertIn("is 2048 bytes; the limit is 1024 bytes", str(caught.exception))
        # A request run again would come before this one: the queue hands out in order.
        with self.assertRaises(WormholeError):
            wormhole.request_record(b"next", "text", "big", timeout=10)
        self.assertEqual(runs.items, [b"once", b"next"])

    def test_the_work_queue_name_responders_is_reserved_for_responders(self) -> None:
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.listen_for_message("svc", print, work_queue="responders")
        self.assertEqual(caught.exception.code, WormholeError.INVALID_IDENTIFIER)
        self.assertIn("work queue name 'responders' is reserved", str(caught.exception))
        self.respond(lambda request: request.upper())
        member = self.wormhole.listen_for_message("svc", print, work_queue="workers")
        self.addCleanup(member.cancel)
        for index in range(5):
            self.assertEqual(self.wormhole.request(f"r{index}", "svc", timeout=10), f"R{index}")

    @unittest.skipUnless(os.path.exists("/usr/bin/unshare"), "needs unshare")
    def test_a_requester_that_cannot_listen_for_its_reply_passes_nothing(self) -> None:
        # In a user namespace of its own whose inotify instance limit is 0 (Q1).
        script = ("import sys\nfrom wormhole import Wormhole, WormholeError\n"
                  "try:\n    Wormhole(directory=sys.argv[1]).request('q', 'svc', timeout=1)\n"
                  "except WormholeError as error:\n    print(error.code, error)\n")
        package = os.path.dirname(os.path.dirname(os.path.abspath(wormhole.__file__)))
        result = subprocess.run(["/usr/bin/unshare", "--user", "--map-root-user", "/bin/sh", "-c",
                                 'echo 0 > /proc/sys/user/max_inotify_instances && exec python3 -c "$0" "$1"',
                                 script, self.directory], capture_output=True, text=True, timeout=60,
                                env=dict(os.environ, PYTHONPATH=package))
        self.assertIn("the request to 'svc' was not sent, since its reply could not be awaited: cannot create an "
                      "inotify instance", result.stdout, result.stderr)
        # Nothing was passed: no log of the identifier was made.
        self.assertEqual([name for name in os.listdir(self.directory) if name.startswith("svc")], [])

    def test_a_timeout_says_whether_anyone_serves_on_the_monotonic_clock(self) -> None:
        started = time.monotonic()
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.request("q", "svc", timeout=0.3)
        elapsed = time.monotonic() - started
        self.assertEqual(caught.exception.code, WormholeError.TIMED_OUT)
        self.assertEqual(str(caught.exception),
                         "no reply to the request to 'svc' within 0.3 s: no responder serves 'svc' (start one with "
                         "respondToRequests(withIdentifier:) or 'wormhole respond svc -- COMMAND')")
        self.assertGreaterEqual(elapsed, 0.3)
        release = threading.Event()
        self.respond(lambda request: release.wait(10) and "late")
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.request("q", "svc", timeout=1)
        release.set()
        self.assertEqual(str(caught.exception),
                         "no reply to the request to 'svc' within 1 s: 1 responder of 'svc' did not answer in time")

    def test_a_request_whose_requester_gave_up_is_not_answered_by_a_later_responder(self) -> None:
        with self.assertRaises(WormholeError):
            self.wormhole.request("old", "svc", timeout=0.1)
        asked = Collector()
        self.respond(lambda request: asked.append(request) or "ok")
        self.assertEqual(self.wormhole.request("new", "svc", timeout=5), "ok")
        self.assertEqual(asked.items, ["new"])
        self.assertTrue(eventually(lambda: self.wormhole.work_queues("svc")[0].expired == 1))

    def test_a_responder_killed_mid_request_leaves_it_to_another(self) -> None:
        child = self.owned_child(RESPONDER, self.directory)
        self.assertEqual(child.stdout.readline().strip(), b"ready")
        replies = Collector()
        requester = threading.Thread(target=lambda: replies.append(self.wormhole.request("hang", "svc", timeout=30)))
        requester.start()
        self.assertEqual(child.stdout.readline().strip(), b"hang")
        os.kill(child.pid, signal.SIGKILL)                  # holding the request, before replying
        child.wait()
        self.respond(lambda request: "parent:" + request)
        requester.join(30)
        self.assertEqual(replies.items, ["parent:hang"])
        self.assertTrue(eventually(lambda: self.wormhole.work_queues("svc")[0].acknowledged == 1))
        status = self.wormhole.work_queues("svc")[0]
        self.assertEqual((status.acknowledged, status.pending, status.in_flight, len(status.members)), (1, 0, 0, 1))

    def test_other_messages_of_the_identifier_are_not_answered(self) -> None:
        asked = Collector()
        self.respond(lambda request: asked.append(request) or "ok")
        self.wormhole.pass_message("a plain message", "svc")
        self.assertEqual(self.wormhole.request("q", "svc", timeout=5), "ok")
        self.assertEqual(asked.items, ["q"])
        replies = self.wormhole.retained_records("svc.replies")
        self.assertEqual(len(replies), 1, "one reply: the plain message got none")
        self.assertGreater(replies[0].expires_ns, 0, "the reply carries the request's expiry")
        self.assertTrue(eventually(lambda: self.wormhole.work_queues("svc")[0].acknowledged == 2))

    def test_bad_requests_are_refused_before_anything_is_passed(self) -> None:
        for timeout in (0, -1, float("inf"), float("nan")):
            with self.subTest(timeout=timeout):
                with self.assertRaises(WormholeError) as caught:
                    self.wormhole.request("q", "svc", timeout=timeout)
                self.assertIn("a request's timeout must be a positive number of seconds", str(caught.exception))
        with self.assertRaises(WormholeError) as caught:
            self.wormhole.request("q", "../svc")
        self.assertEqual(caught.exception.code, WormholeError.INVALID_IDENTIFIER)
        self.assertEqual(self.wormhole.identifiers(), [])
