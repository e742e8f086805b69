"""What a listener and a work queue member share: a thread of its own that reads the log
of one identifier when the container's watch (or its parent's, Protocol.md §4.1) says so,
and ``cancel()``; and what they need of their wormhole (``Subscriptions``), so that they
need not know ``Wormhole`` itself."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, TypeVar

from . import inotify
from .configuration import Configuration
from .container import ContainerDirectory
from .errors import WormholeError
from .format import LOG_SUFFIX
from .watching import ContainerWatch, log_events_wake, log_replaced

__all__ = ["LogSubscription", "Subscriptions", "HandlingActivity"]

_Self = TypeVar("_Self", bound="LogSubscription")


class HandlingActivity:
    """When a wormhole's listeners, work queue members and responders last handled a
    message, and how many are handling one now: what ``Wormhole.wait_until_idle`` waits
    on (as the Swift library's ``waitUntilIdle(for:)``)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._handling = 0
        self._last_handled = 0.0

    def begin(self) -> None:
        """A listener's first read is scheduled: the wormhole is not idle until ``end``."""
        with self._condition:
            self._handling += 1

    def end(self) -> None:
        """That read ended. It starts no idle time (a read that found nothing is no
        activity); it only lets the idle time run out."""
        with self._condition:
            self._handling -= 1
            self._condition.notify_all()

    def counting(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """``handler``, counted: while it runs the wormhole is not idle, and its return
        starts the idle time again."""
        def counted(*arguments: Any) -> Any:
            with self._condition:
                self._handling += 1
            try:
                return handler(*arguments)
            finally:
                with self._condition:
                    self._handling -= 1
                    self._last_handled = time.monotonic()
                    self._condition.notify_all()
        return counted

    def wait_until_idle(self, seconds: float) -> None:
        start = time.monotonic()
        with self._condition:
            while True:
                if self._handling > 0:
                    self._condition.wait()
                    continue
                remaining = max(start, self._last_handled) + seconds - time.monotonic()
                if remaining <= 0:
                    return
                self._condition.wait(remaining)


class Subscriptions:
    """One wormhole's live listeners, work queue members and responders, and what they
    need of it: its container, its configuration and its handling activity. A
    subscription is added once made, and removes itself when cancelled."""

    def __init__(self, container: ContainerDirectory, configuration: Configuration) -> None:
        self.container = container
        self.configuration = configuration
        self.activity = HandlingActivity()
        self._lock = threading.Lock()
        self._live: List[LogSubscription] = []

    def add(self, subscription: "LogSubscription") -> None:
        with self._lock:
            self._live.append(subscription)

    def forget(self, subscription: "LogSubscription") -> None:
        with self._lock:
            if subscription in self._live:
                self._live.remove(subscription)

    def live(self) -> List["LogSubscription"]:
        """The live ones, a copy (cancelling one removes it)."""
        with self._lock:
            return list(self._live)


class LogSubscription:
    """What ``Wormhole.listen_for_message`` returns: a listener (``ListenerToken``) or a
    work queue member (``WorkQueueMember``, also what ``respond`` returns), with the same
    public surface: ``identifier``, ``is_cancelled``, ``cancel()``, and ``with`` (which
    cancels it at the end of the block).

    It watches the container first (S1, and the parent, §4.1); the subclass then looks at
    the log and calls ``_start`` to run ``_run`` on a thread of its own."""

    def __init__(self, subscriptions: Subscriptions, identifier: str) -> None:
        self._subscriptions, self.identifier = subscriptions, identifier
        self._log_name = identifier + LOG_SUFFIX
        self._wake = threading.Event()
        self._stopped = False
        self._replaced = False
        self._failure: Optional[WormholeError] = None
        self._watch = ContainerWatch(subscriptions.container, self._events, self._container_replaced)
        self._thread = threading.Thread()
        self._reading_first = False

    def _start(self, name: str) -> None:
        # Until its first read has ended, the wormhole is not idle (``wait_until_idle``):
        # a service whose backlog is not read yet is never taken for idle.
        self._reading_first = True
        self._subscriptions.activity.begin()
        self._thread = threading.Thread(target=self._run_counted, name=name, daemon=True)
        self._thread.start()

    def _run_counted(self) -> None:
        try:
            self._run()
        finally:
            self._first_read_done()

    def _first_read_done(self) -> None:
        """The first read (the backlog, or a first take) ended: counted once."""
        if self._reading_first:
            self._reading_first = False
            self._subscriptions.activity.end()

    def _run(self) -> None:
        raise NotImplementedError

    def _events(self, events: List[inotify.Event]) -> None:
        if log_events_wake(events, self._log_name):
            self._replaced = self._replaced or log_replaced(events, self._log_name)
            self._wake.set()

    def _container_replaced(self) -> None:
        # A shared container that root removed is not coming back: the listener ends,
        # saying so, instead of waiting in a deleted directory.
        self._failure = self._subscriptions.container.revocation()
        self._replaced = True
        self._wake.set()

    def _take_failure(self) -> Optional[WormholeError]:
        """Why this subscription must end (its shared container was revoked), once; it is
        then cancelled."""
        failure, self._failure = self._failure, None
        if failure is not None:
            self._stopped = True
            self._subscriptions.forget(self)
        return failure

    def _take_replaced(self) -> bool:
        """Whether the log (or the container) may have been replaced since the last call."""
        replaced, self._replaced = self._replaced, False
        return replaced

    @property
    def is_cancelled(self) -> bool:
        """Whether it stopped: cancelled, or ended by its shared container's revocation."""
        return self._stopped

    def cancel(self) -> None:
        """Stops it: from another thread, waits for a callback that runs to return (and
        its message to be stored or acknowledged); from the callback, after it returns."""
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._subscriptions.forget(self)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.cancel()
