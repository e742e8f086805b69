"""inotify through the C library (ctypes, standard library only): one inotify instance
and one reader thread per process, fanned out to every watcher (Protocol.md §11.3 S1,
§13.2)."""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
from typing import Callable, Dict, List, Optional, Set, Tuple

from .errors import WormholeError

IN_MODIFY, IN_ATTRIB = 0x00000002, 0x00000004
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x00000040, 0x00000080, 0x00000100, 0x00000200
IN_DELETE_SELF, IN_MOVE_SELF = 0x00000400, 0x00000800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR = 0x00004000, 0x00008000, 0x01000000
IN_CLOEXEC, IN_NONBLOCK = 0o2000000, 0o4000
WATCH_MASK = (IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_EVENT = struct.Struct("iIII")

Event = Tuple[int, str]                       # (mask, name): name "" for the directory itself
Handler = Callable[[List[Event]], None]


class _Hub:
    """The process's one inotify instance and its reader thread."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = self.libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
        if fd < 0:
            number = ctypes.get_errno()
            if number == errno.EMFILE:
                raise WormholeError(WormholeError.NOTIFICATION_LIMIT_REACHED,
                                    "cannot create an inotify instance: this user has reached "
                                    "fs.inotify.max_user_instances (see 'sysctl fs.inotify')", errno=number)
            raise WormholeError(WormholeError.SYSTEM_ERROR, f"cannot create an inotify instance: {os.strerror(number)}",
                                errno=number)
        self.fd = fd
        # The process that made it: a child made by fork() has no reader thread, and
        # makes its own (``hub``).
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.handlers: Dict[int, Set["Watch"]] = {}
        self.thread = threading.Thread(target=self._run, name="wormhole-inotify", daemon=True)
        self.thread.start()

    def add(self, directory_fd: int, path: str, watch: "Watch") -> int:
        # Through /proc/self/fd: the watch is on the directory this process holds, even
        # if another took its name meanwhile.
        target = f"/proc/self/fd/{directory_fd}".encode()
        with self.lock:
            wd: int = self.libc.inotify_add_watch(self.fd, target, WATCH_MASK)
            if wd < 0:
                number = ctypes.get_errno()
                if number == errno.ENOSPC:
                    raise WormholeError(WormholeError.NOTIFICATION_LIMIT_REACHED,
                                        f"cannot watch '{path}': this user has reached fs.inotify.max_user_watches "
                                        f"(see 'sysctl fs.inotify')", path=path, errno=number)
                raise WormholeError(WormholeError.SYSTEM_ERROR, f"cannot watch '{path}': {os.strerror(number)}",
                                    path=path, errno=number)
            self.handlers.setdefault(wd, set()).add(watch)
            return wd

    def remove(self, wd: int, watch: "Watch") -> None:
        with self.lock:
            watchers = self.handlers.get(wd)
            if watchers is None:
                return
            watchers.discard(watch)
            if not watchers:
                del self.handlers[wd]
                self.libc.inotify_rm_watch(self.fd, wd)

    def _run(self) -> None:
        while True:
            try:
                select.select([self.fd], [], [])
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            except InterruptedError:
                continue
            except OSError:
                return
            batches: Dict[int, List[Event]] = {}
            overflow = False
            position = 0
            while position + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, position)
                name = data[position + _EVENT.size:position + _EVENT.size + length].rstrip(b"\0")
                position += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                    continue
                batches.setdefault(wd, []).append((mask, os.fsdecode(name)))
            with self.lock:
                if overflow:
                    targets = [(watch, [(IN_Q_OVERFLOW, "")]) for watchers in self.handlers.values() for watch in watchers]
                else:
                    targets = [(watch, events) for wd, events in batches.items()
                               for watch in self.handlers.get(wd, ())]
                for wd, events in batches.items():
                    if any(mask & IN_IGNORED for mask, _ in events):
                        self.handlers.pop(wd, None)
            for watch, events in targets:
                try:
                    watch.handler(events)
                except Exception:       # a handler's failure stays its own
                    pass


_hub: Optional[_Hub] = None
_hub_lock = threading.Lock()


def hub() -> _Hub:
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():
            _hub = _Hub()
        return _hub


class Watch:
    """A watch on a container directory; ``handler`` gets each batch of its events on
    the reader thread (keep it short)."""

    def __init__(self, directory_fd: int, path: str, handler: Handler) -> None:
        self.handler = handler
        self.path = path
        self.hub = hub()
        self.wd: Optional[int] = self.hub.add(directory_fd, path, self)

    def rewatch(self, directory_fd: int) -> None:
        """Watches the directory now held (after the container was replaced)."""
        if self.wd is not None:
            self.hub.remove(self.wd, self)
        self.wd = self.hub.add(directory_fd, self.path, self)

    def close(self) -> None:
        if self.wd is not None:
            self.hub.remove(self.wd, self)
            self.wd = None


def directory_gone(mask: int) -> bool:
    return bool(mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))
