"""Watching a container and its parent (Protocol.md §4.1, §11.3 S1, §13.2 O1): the
container's own watch reports its files' changes and its move at once, but not its
removal while a descriptor of it is open (every process holds one, §4); the parent's
watch reports that removal, and a directory made again at the container's path. As the
Swift library's ``WatchTable`` does, a private parent is watched for as long as the
container; a parent that other users may write to (``/tmp``, ``/dev/shm``) only while
it matters: while the container is missing, and from the deletion of one of its entries
(``rm -r`` removes the entries first) until an entry is made in it again."""

from __future__ import annotations

import os
import stat
import threading
from typing import Callable, List, Optional

from . import inotify
from .container import ContainerDirectory
from .errors import WormholeError

__all__ = ["ContainerWatch"]

_ENTRY_GONE = inotify.IN_DELETE | inotify.IN_MOVED_FROM
_ENTRY_MADE = inotify.IN_CREATE | inotify.IN_MOVED_TO


class ContainerWatch:
    """Watches ``container`` (S1) and its parent as §4.1 requires. ``on_events`` gets the
    container's events (``(mask, name)``, name "" for the directory itself) on the
    process's inotify thread; ``on_replaced`` is called when the directory at the path
    is no longer the one held: removed, moved, or replaced, after the container was
    opened again when a directory is there (``ContainerDirectory.refresh``, never
    creating it: posts and passes make a removed container again)."""

    def __init__(self, container: ContainerDirectory, on_events: Callable[[List[inotify.Event]], None],
                 on_replaced: Callable[[], None]) -> None:
        self.container = container
        self.on_events, self.on_replaced = on_events, on_replaced
        parent, self.name = container.path.rsplit("/", 1)
        self.parent_path = parent or "/"
        self._lock = threading.RLock()
        self._closed = False
        self._missing = False
        self._emptying = False
        try:
            self._shared_parent = bool(os.lstat(self.parent_path).st_mode & 0o022)
        except OSError:
            self._shared_parent = False
        self._parent: Optional[inotify.Watch] = None
        self._watched = container.inode
        self._watch = inotify.Watch(container.fd, container.path, self._container_events)
        try:
            self._settle_parent()
        except BaseException:
            self._watch.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._watch.close()
            if self._parent is not None:
                self._parent.close()
                self._parent = None

    # The parent's watch

    def _needs_parent(self) -> bool:
        return not self._shared_parent or self._missing or self._emptying

    def _settle_parent(self) -> None:
        """Watches the parent when needed now, or stops; after a new watch, looks at the
        path once: what happened before the watch was in place went unseen."""
        if self._closed or self.parent_path == self.container.path:
            return
        if not self._needs_parent():
            if self._parent is not None:
                self._parent.close()
                self._parent = None
            return
        if self._parent is not None:
            return
        try:
            fd = os.open(self.parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except PermissionError:
            return      # a parent this user may not read: its container's removal goes unseen
        except OSError:
            return      # the parent itself is gone: nothing will say when the container is back
        try:
            self._parent = inotify.Watch(fd, self.parent_path, self._parent_events)
        finally:
            os.close(fd)
        self._look()

    def _look(self) -> None:
        try:
            status = os.lstat(self.container.path)
        except OSError:
            status = None
        # Against the directory watched, not the one held: a reader may have opened the
        # new one already, and the watch must follow it.
        if status is None or not stat.S_ISDIR(status.st_mode) or (status.st_dev, status.st_ino) != self._watched \
                or self.container.inode != self._watched:
            self._gone()

    # Events

    def _container_events(self, events: List[inotify.Event]) -> None:
        gone = False
        with self._lock:
            if self._closed:
                return
            for mask, name in events:
                if not name and (inotify.directory_gone(mask) or mask & inotify.IN_Q_OVERFLOW):
                    gone = True     # (after an overflow: looked at, in case it went meanwhile)
                elif name and self._shared_parent:
                    if mask & _ENTRY_GONE:
                        self._emptying = True
                    elif mask & _ENTRY_MADE:
                        self._emptying = False
        self.on_events(events)
        with self._lock:
            if gone:
                self._look() if not any(inotify.directory_gone(mask) for mask, name in events if not name) \
                    else self._gone()
            else:
                self._settle_parent()

    def _parent_events(self, events: List[inotify.Event]) -> None:
        with self._lock:
            if self._closed:
                return
            for mask, name in events:
                if mask & inotify.IN_Q_OVERFLOW:
                    self._look()
                elif not name and mask & inotify.IN_IGNORED:
                    self._parent = None          # the parent itself went away
                elif name == self.name and mask & (_ENTRY_GONE | _ENTRY_MADE):
                    self._gone()

    def _gone(self) -> None:
        """The directory at the path may no longer be the one held: open the one there
        now, if any, watch it, and tell the owner."""
        try:
            self.container.refresh(create=False)
        except WormholeError:
            pass
        try:
            status = os.lstat(self.container.path)
            self._missing = (status.st_dev, status.st_ino) != self.container.inode
        except OSError:
            self._missing = True
        # Another thread (a reader) may have opened the new directory first: what is
        # watched is compared with what is held, not with what this call opened.
        if self.container.inode != self._watched:
            self._emptying = False
            try:
                self._watch.rewatch(self.container.fd)
                self._watched = self.container.inode
            except WormholeError:
                pass
        self._settle_parent()
        self.on_replaced()


def log_replaced(events: List[inotify.Event], log_name: str) -> bool:
    """Whether ``events`` of a container say that the file at ``log_name`` may have been
    replaced (created, compacted, moved, deleted), or that events were lost (§11.3)."""
    return any(mask & inotify.IN_Q_OVERFLOW or
               (name == log_name and mask & (inotify.IN_CREATE | inotify.IN_DELETE | inotify.IN_MOVED_FROM |
                                             inotify.IN_MOVED_TO))
               for mask, name in events)


def log_events_wake(events: List[inotify.Event], log_name: str) -> bool:
    """Whether ``events`` of a container concern the log ``log_name`` (an append, a
    replacement) or were lost: a reader of it reads."""
    return any(mask & inotify.IN_Q_OVERFLOW or
               (name == log_name and mask & (inotify.IN_MODIFY | inotify.IN_CREATE | inotify.IN_DELETE |
                                             inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO))
               for mask, name in events)
