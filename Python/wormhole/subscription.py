"""What a listener and a work queue member share: a thread of its own that reads the log
of one identifier when the container's watch (or its parent's, Protocol.md §4.1) says so,
and ``cancel()``."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, List, Optional

from . import inotify
from .errors import WormholeError
from .format import LOG_SUFFIX
from .watching import ContainerWatch, log_events_wake, log_replaced

if TYPE_CHECKING:
    from .client import Wormhole

__all__ = ["LogSubscription"]


class LogSubscription:
    """Watches the container first (S1, and the parent, §4.1); the subclass then looks at
    the log and calls ``_start`` to run ``_run`` on a thread of its own."""

    def __init__(self, wormhole: "Wormhole", identifier: str) -> None:
        self.wormhole, self.identifier = wormhole, identifier
        self._log_name = identifier + LOG_SUFFIX
        self._wake = threading.Event()
        self._stopped = False
        self._replaced = False
        self._failure: Optional[WormholeError] = None
        self._watch = ContainerWatch(wormhole.container, self._events, self._container_replaced)
        self._thread = threading.Thread()
        self._reading_first = False

    def _start(self, name: str) -> None:
        # Until its first read has ended, the wormhole is not idle (``wait_until_idle``):
        # a service whose backlog is not read yet is never taken for idle.
        self._reading_first = True
        self.wormhole._activity.begin()
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
            self.wormhole._activity.end()

    def _run(self) -> None:
        raise NotImplementedError

    def _events(self, events: List[inotify.Event]) -> None:
        if log_events_wake(events, self._log_name):
            self._replaced = self._replaced or log_replaced(events, self._log_name)
            self._wake.set()

    def _container_replaced(self) -> None:
        # A shared container that root removed is not coming back: the listener ends,
        # saying so, instead of waiting in a deleted directory.
        self._failure = self.wormhole.container.revocation()
        self._replaced = True
        self._wake.set()

    def _take_failure(self) -> Optional[WormholeError]:
        """Why this subscription must end (its shared container was revoked), once; it is
        then cancelled."""
        failure, self._failure = self._failure, None
        if failure is not None:
            self._stopped = True
            self.wormhole._forget(self)
        return failure

    def _take_replaced(self) -> bool:
        """Whether the log (or the container) may have been replaced since the last call."""
        replaced, self._replaced = self._replaced, False
        return replaced

    @property
    def is_cancelled(self) -> bool:
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
        self.wormhole._forget(self)

    def __enter__(self) -> "LogSubscription":
        return self

    def __exit__(self, *_: object) -> None:
        self.cancel()
