"""Bare notifications (Protocol.md §13): a name posted with no data, observed through
inotify, with an optional 64-bit state value per name (the Darwin notification analogue)."""

from __future__ import annotations

import logging
import os
import struct
import threading
from typing import Callable, Dict, List, Optional

from . import identifiers, inotify
from .container import ContainerDirectory
from .errors import WormholeError
from .format import LOG_SUFFIX, pwrite_all
from .watching import ContainerWatch

__all__ = ["NotificationCenter", "ObservationToken"]

SUFFIX = ".notification"
_log = logging.getLogger("wormhole")


def _log_error(error: WormholeError) -> None:
    _log.warning("%s", error)


class ObservationToken:
    """Returned by ``observe``; ``cancel()`` stops that one observer."""

    def __init__(self, center: "NotificationCenter", name: str, callback: Callable[[str], None],
                 on_error: Optional[Callable[[WormholeError], None]] = None) -> None:
        self.center, self.name, self.callback, self.on_error = center, name, callback, on_error
        self.cancelled = False

    @property
    def is_cancelled(self) -> bool:
        """Whether it stopped: cancelled, or ended because its shared container was revoked
        (reported to ``on_error``)."""
        return self.cancelled

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.center._remove(self)

    def __enter__(self) -> "ObservationToken":
        return self

    def __exit__(self, *_: object) -> None:
        self.cancel()


class NotificationCenter:
    """Posts and observes names in one container. Observers run on the process's inotify
    reader thread: keep them short, or hand the work to a thread of your own."""

    def __init__(self, container: ContainerDirectory) -> None:
        self.container = container
        self._lock = threading.Lock()
        self._observers: Dict[str, List[ObservationToken]] = {}
        self._watch: Optional[ContainerWatch] = None

    def post(self, name: str) -> None:
        """N1, N2: sets the times of ``<name>.notification`` (creating it if needed)."""
        identifiers.validate(name, "notification name")
        file = name + SUFFIX
        for _ in range(2):
            try:
                os.utime(file, dir_fd=self.container.fd, follow_symlinks=False)
                return
            except FileNotFoundError:
                opened = self.container.open_file(file, write=True, create=True)
                if opened is not None:
                    os.close(opened[0])
            except OSError as error:
                raise WormholeError.system("post", error, self.container.file_path(file)) from None
        raise WormholeError(WormholeError.SYSTEM_ERROR,
                            f"cannot post '{name}': its file keeps disappearing", path=self.container.file_path(file))

    def state(self, name: str) -> int:
        """§13.3: the name's 64-bit state; 0 when never set."""
        identifiers.validate(name, "notification name")
        opened = self.container.open_file(name + SUFFIX, write=False)
        if opened is None:
            return 0
        fd, _ = opened
        try:
            data = os.pread(fd, 8, 0)
        finally:
            os.close(fd)
        return struct.unpack("<Q", data)[0] if len(data) == 8 else 0

    def set_state(self, name: str, value: int) -> None:
        """Stores the state; does not post (post separately when observers should look)."""
        identifiers.validate(name, "notification name")
        if not 0 <= value < 1 << 64:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION, f"a state is a 64-bit unsigned value, not {value}")
        opened = self.container.open_file(name + SUFFIX, write=True, create=True)
        assert opened is not None
        fd, _ = opened
        try:
            pwrite_all(fd, struct.pack("<Q", value), 0)
        except OSError as error:
            raise WormholeError.system("write the state of", error, self.container.file_path(name + SUFFIX)) from None
        finally:
            os.close(fd)

    def observe(self, name: str, callback: Callable[[str], None],
                on_error: Optional[Callable[[WormholeError], None]] = None) -> ObservationToken:
        """O1-O4: calls ``callback(name)`` after posts of ``name`` and messages passed to
        the identifier ``name`` (posts coalesce). When the container is a shared one that
        'wormhole share --revoke' removed (§4.2), the observer ends: ``on_error`` (logged
        by default) gets the ``containerUnavailable`` error that says so, once."""
        identifiers.validate(name, "notification name")
        token = ObservationToken(self, name, callback, on_error)
        with self._lock:
            if self._watch is None:
                self._watch = ContainerWatch(self.container, self._events, self._everything)   # O1, §4.1
            self._observers.setdefault(name, []).append(token)
        return token

    def _remove(self, token: ObservationToken) -> None:
        with self._lock:
            tokens = self._observers.get(token.name, [])
            if token in tokens:
                tokens.remove(token)
            if not tokens:
                self._observers.pop(token.name, None)
            if not self._observers and self._watch is not None:
                self._watch.close()
                self._watch = None

    def close(self) -> None:
        with self._lock:
            self._observers.clear()
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def _everything(self) -> None:
        """O4: the container went away or was replaced (its watch or its parent's says
        so): every observed name is treated as posted; unless it is a shared container
        that root removed (§4.2), which is not coming back: every observer then ends."""
        revoked = self.container.revocation()
        if revoked is None:
            self._events([(inotify.IN_Q_OVERFLOW, "")])
            return
        with self._lock:
            tokens = [token for tokens in self._observers.values() for token in tokens]
        for token in tokens:
            if not token.cancelled:
                token.cancel()
                (token.on_error or _log_error)(revoked)

    def _events(self, events: List[inotify.Event]) -> None:
        posted = set()
        everything = False
        for mask, file in events:
            if mask & inotify.IN_Q_OVERFLOW:
                everything = True                                                          # O3
            elif mask & inotify.IN_ATTRIB and file.endswith(SUFFIX):
                posted.add(file[:-len(SUFFIX)])                                            # O2
            elif mask & inotify.IN_MODIFY and file.endswith(LOG_SUFFIX):
                posted.add(file[:-len(LOG_SUFFIX)])
        with self._lock:
            calls = [(token, name) for name, tokens in self._observers.items()
                     if everything or name in posted for token in tokens]
        for token, name in calls:
            if not token.cancelled:
                token.callback(name)
