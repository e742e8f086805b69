"""Requests and replies (Protocol.md §19): a request is a message of role 1 with a random
correlation and the requester's deadline as its expiry; the responders are the members of
the identifier's work queue ``responders``; replies are passed to ``<id>.replies`` with the
request's correlation. The Swift library's ``Requests``, ``PendingReply`` and
``ReplyRouter`` (Sources/Wormhole/Requests)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional, Union

from .errors import WormholeError
from .format import ROLE_ERROR_REPLY, ROLE_REPLY, Record, random_u64
from .queues import WorkQueueStatus
from .subscription import LogSubscription

__all__ = ["RESPONDERS_QUEUE", "replies_identifier", "timed_out", "failed", "PendingReply", "ReplyRouter"]

RESPONDERS_QUEUE = "responders"
"""The work queue of a request identifier whose members are its responders. Reserved:
a work queue of another kind may not take that name (Protocol.md §19), or its members
would take requests as the responders do, and answer none."""


def reserved_queue_message(identifier: str) -> str:
    """Why a work queue named ``responders`` is refused (the Swift library's words)."""
    return (f"the work queue name '{RESPONDERS_QUEUE}' is reserved for the responders of requests to '{identifier}' "
            f"(respond); its members would take requests and answer none: choose another name")


def not_sent(identifier: str, error: WormholeError) -> WormholeError:
    """The error for a request that was not passed because its requester could not listen
    for the reply (no inotify instance or watch left, say): ``error``, saying so (Q1)."""
    return WormholeError(error.code, f"the request to '{identifier}' was not sent, since its reply could not be "
                                     f"awaited: {error.message}", path=error.path, errno=error.errno)


def unpassable_reply_message(error: WormholeError) -> str:
    """The error reply's text for a reply that could not be passed (the Swift library's
    words)."""
    return f"its reply could not be passed: {error}"


def replies_identifier(identifier: str) -> str:
    """Where the replies to requests of ``identifier`` are passed."""
    return identifier + ".replies"


def _seconds(timeout: float) -> str:
    return str(int(timeout)) if float(timeout).is_integer() else repr(float(timeout))


def timed_out(identifier: str, timeout: float, work_queues: Callable[[str], List[WorkQueueStatus]]) -> WormholeError:
    """The error of a request with no reply within ``timeout`` seconds, saying whether any
    responder was there to answer it (Q4); ``work_queues`` is ``Wormhole.work_queues``."""
    try:
        members = next((len(queue.members) for queue in work_queues(identifier)
                        if queue.name == RESPONDERS_QUEUE), 0)
    except WormholeError:
        members = 0
    if members == 0:
        why = (f"no responder serves '{identifier}' (start one with respondToRequests(withIdentifier:) or 'wormhole respond "
               f"{identifier} -- COMMAND')")
    else:
        why = f"{members} responder{'' if members == 1 else 's'} of '{identifier}' did not answer in time"
    return WormholeError(WormholeError.TIMED_OUT,
                         f"no reply to the request to '{identifier}' within {_seconds(timeout)} s: {why}")


def failed(identifier: str, reply: Record) -> WormholeError:
    """The error a requester receives for an error reply: what the responder said."""
    return WormholeError(WormholeError.REQUEST_FAILED,
                         f"the responder of '{identifier}' failed: {reply.payload.decode('utf-8', 'replace')}")


def new_correlation() -> int:
    """A correlation for a new request: random, never 0 (0 means "none")."""
    return random_u64()


Outcome = Union[Record, WormholeError]


class PendingReply:
    """One request waiting for its reply: completed once, by the reply, its timeout or a
    failure."""

    def __init__(self, correlation: int) -> None:
        self.correlation = correlation
        self.outcome: Optional[Outcome] = None
        self._done = threading.Event()
        self._lock = threading.Lock()

    def complete(self, outcome: Outcome) -> bool:
        """Completes the request; later calls do nothing. Returns whether this call did."""
        with self._lock:
            if self.outcome is not None:
                return False
            self.outcome = outcome
        self._done.set()
        return True

    def wait(self, timeout: float) -> bool:
        """Waits (on the monotonic clock) until complete or ``timeout`` seconds passed."""
        return self._done.wait(timeout)


class ReplyRouter:
    """The requests of one wormhole to one identifier, and the one listener of its reply
    identifier that completes them by correlation (Q1, Q3). Replies to other requesters
    (the reply identifier is shared) and late replies are ignored."""

    def __init__(self, identifier: str, listen: Callable[[str, Callable[[Record], None]], LogSubscription]) -> None:
        """Listens with ``listen(replies_identifier, route)``, which calls ``route`` with each
        record of the reply identifier."""
        self.identifier = identifier
        self.replies = replies_identifier(identifier)
        self._pending: Dict[int, PendingReply] = {}
        self._lock = threading.Lock()
        self.token = listen(self.replies, self._route)

    @property
    def is_listening(self) -> bool:
        return not self.token.is_cancelled

    def add(self, reply: PendingReply) -> None:
        with self._lock:
            self._pending[reply.correlation] = reply

    def finish(self, correlation: int, outcome: Outcome) -> None:
        """Completes ``correlation``'s request with ``outcome``, unless it was completed."""
        with self._lock:
            reply = self._pending.pop(correlation, None)
        if reply is not None:
            reply.complete(outcome)

    def _route(self, record: Record) -> None:
        if record.role in (ROLE_REPLY, ROLE_ERROR_REPLY):
            self.finish(record.correlation, record)

    def stop(self) -> None:
        self.token.cancel()


def deadline_ns(timeout: float) -> int:
    """A request's expiry: now plus ``timeout``, wall clock, ns since 1970 (Q2)."""
    return time.time_ns() + int(timeout * 1e9)
