"""An open container directory: every file of the container is reached through its one
descriptor, never by a path that could be redirected (Protocol.md §4)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from typing import List, Optional, Tuple

from .errors import WormholeError

__all__ = ["ContainerDirectory", "check_ownership", "make_directories", "symbolic_link_refused"]

_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")]


def _kind(mode: int) -> str:
    """'a FIFO', 'a directory', ... for error messages."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def symbolic_link_refused(path: str) -> WormholeError:
    return WormholeError(WormholeError.CONTAINER_INSECURE,
                         f"container '{path}' is a symbolic link; Wormhole refuses it so that no one can redirect "
                         f"messages. Remove the link or pass the real directory", path=path)


def check_ownership(status: os.stat_result, path: str) -> None:
    """A directory owned by this user that no other user may write to (§4)."""
    if not stat.S_ISDIR(status.st_mode):
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"container '{path}' is not a directory; move that file away", path=path)
    me = os.geteuid()
    if status.st_uid != me:
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"container '{path}' belongs to user {status.st_uid}, not to this user ({me}); another "
                            f"user may have created it to read your messages. Remove it, or choose another directory",
                            path=path)
    if status.st_mode & 0o022:
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"container '{path}' has mode {stat.S_IMODE(status.st_mode):o}: other users may write to "
                            f"it. Run 'chmod go-w {path}' or choose another directory", path=path)


def _unavailable(path: str, error: OSError) -> WormholeError:
    return WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                         f"cannot create or open container '{path}': {os.strerror(error.errno or 0)}",
                         path=path, errno=error.errno)


def make_directories(path: str, including_last: bool = True) -> None:
    """mkdir (0700) of each missing component of ``path`` (all but the last one unless
    ``including_last``); containerUnavailable naming the one that failed."""
    components = [c for c in path.split("/") if c]
    prefix = ""
    for component in components if including_last else components[:-1]:
        prefix += "/" + component
        try:
            os.mkdir(prefix, 0o700)
        except FileExistsError:
            pass
        except OSError as error:
            raise _unavailable(prefix, error) from None


class ContainerDirectory:
    """The container, held open. ``refresh()`` opens the directory at the path again when
    it is no longer the held one (deleted, moved, replaced)."""

    def __init__(self, path: str) -> None:
        self.path = self.normalize(path)
        self._lock = threading.Lock()
        self._retired: List[int] = []
        self.fd, status = self._open(self.path)
        self.inode = (status.st_dev, status.st_ino)

    @staticmethod
    def normalize(path: str) -> str:
        """Absolute, without '.' components or repeated and trailing slashes; '..' refused."""
        path = os.fsdecode(path)
        absolute = path if path.startswith("/") else os.getcwd() + "/" + path
        components = []
        for component in absolute.split("/"):
            if component in ("", "."):
                continue
            if component == "..":
                raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                    f"container path '{path}' contains '..'; give the directory's path without it",
                                    path=path)
            components.append(component)
        return "/" + "/".join(components)

    @staticmethod
    def _open(path: str) -> Tuple[int, os.stat_result]:
        if path == "/":
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                "the root directory cannot be a container; choose a directory of your own", path=path)
        parent_path, name = path.rsplit("/", 1)
        parent_path = parent_path or "/"
        try:
            parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            make_directories(parent_path)
            try:
                parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as error:
                raise _unavailable(path, error) from None
        except OSError as error:
            raise _unavailable(path, error) from None
        try:
            ContainerDirectory._check_parent(os.fstat(parent), parent_path, path)
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass
            except OSError as error:
                raise _unavailable(path, error) from None
            try:
                fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise symbolic_link_refused(path) from None
                if error.errno == errno.ENOTDIR:
                    try:
                        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
                            raise symbolic_link_refused(path) from None
                    except OSError:
                        pass
                    raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                        f"container '{path}' is not a directory; move that file away",
                                        path=path) from None
                raise _unavailable(path, error) from None
        finally:
            os.close(parent)
        try:
            status = os.fstat(fd)
            check_ownership(status, path)
        except BaseException:
            os.close(fd)
            raise
        return fd, status

    @staticmethod
    def _check_parent(status: os.stat_result, parent_path: str, path: str) -> None:
        sticky = status.st_mode & stat.S_ISVTX
        others_may_write = status.st_mode & 0o022
        if others_may_write and not sticky:
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"the parent of container '{path}', '{parent_path}', has mode "
                                f"{stat.S_IMODE(status.st_mode):o} without the sticky bit: another user could replace "
                                f"the container with one of hers. Run 'chmod +t {parent_path}' or 'chmod go-w "
                                f"{parent_path}', or choose another directory", path=parent_path)
        if status.st_uid not in (os.geteuid(), 0):
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"the parent of container '{path}', '{parent_path}', belongs to user {status.st_uid}: "
                                f"that user could replace the container. Choose a directory under one of your own",
                                path=parent_path)

    def refresh(self, create: bool = True) -> bool:
        """Opens the directory at the path when it is not the held one (creating it when
        missing); returns whether it changed."""
        try:
            status: Optional[os.stat_result] = os.lstat(self.path)
        except OSError:
            status = None
        with self._lock:
            if status is not None and (status.st_dev, status.st_ino) == self.inode:
                return False
        if status is None and not create:
            return False
        fd, opened = self._open(self.path)
        with self._lock:
            # Another thread may be in a call with the old descriptor: kept until close().
            self._retired.append(self.fd)
            self.fd, self.inode = fd, (opened.st_dev, opened.st_ino)
        return True

    def close(self) -> None:
        with self._lock:
            for fd in self._retired + [self.fd]:
                if fd is not None and fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._retired, self.fd = [], -1

    def file_path(self, name: str) -> str:
        return self.path + "/" + name

    def open_file(self, name: str, write: bool, create: bool = False) -> Optional[Tuple[int, os.stat_result]]:
        """openat with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, then fstat: a regular file or
        an error. Returns (fd, stat), or None when it does not exist and is not created."""
        flags = _FILE_FLAGS | (os.O_RDWR if write or create else os.O_RDONLY) | (os.O_CREAT if create else 0)
        try:
            fd = os.open(name, flags, 0o600, dir_fd=self.fd)
        except FileNotFoundError as error:
            if not create:
                return None
            raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                f"cannot open '{self.file_path(name)}': the container was removed "
                                f"({os.strerror(error.errno)})", path=self.file_path(name), errno=error.errno) from None
        except OSError as error:
            raise self.file_error(name, error) from None
        try:
            status = os.fstat(fd)
        except OSError as error:
            os.close(fd)
            raise WormholeError.system("inspect", error, self.file_path(name)) from None
        if not stat.S_ISREG(status.st_mode):
            os.close(fd)
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"'{self.file_path(name)}' is not a regular file ({_kind(status.st_mode)}); Wormhole "
                                f"neither reads nor waits on it. Remove it", path=self.file_path(name))
        return fd, status

    def file_error(self, name: str, error: OSError) -> WormholeError:
        path = self.file_path(name)
        if error.errno == errno.ELOOP:
            return WormholeError(WormholeError.CONTAINER_INSECURE,
                                 f"'{path}' is a symbolic link; Wormhole does not follow links in its container. "
                                 f"Remove it", path=path, errno=error.errno)
        if error.errno in (errno.EISDIR, errno.ENXIO):
            return WormholeError(WormholeError.CONTAINER_INSECURE,
                                 f"'{path}' is not a regular file; Wormhole neither reads nor waits on it. Remove it",
                                 path=path, errno=error.errno)
        return WormholeError.system("open", error, path)

    def create_exclusive(self, name: str) -> int:
        """Removes a leftover of ``name``, then creates it with O_EXCL (0600)."""
        for _ in range(4):
            try:
                os.unlink(name, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            except OSError:
                pass
            try:
                return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600, dir_fd=self.fd)
            except FileExistsError:
                continue
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"'{self.file_path(name)}' keeps reappearing while Wormhole creates it; another process is "
                            f"interfering with the container", path=self.file_path(name))

    def subdirectory(self, parent_fd: int, name: str, path: str, create: bool) -> Optional[int]:
        """mkdirat (0700) when asked, then opened without following a link and checked
        like the container. None when missing and not created."""
        if create:
            try:
                os.mkdir(name, 0o700, dir_fd=parent_fd)
            except FileExistsError:
                pass
            except OSError as error:
                raise WormholeError.system("create", error, path) from None
        try:
            fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                    f"'{path}' is a symbolic link or not a directory; remove it", path=path) from None
            raise WormholeError.system("open", error, path) from None
        try:
            check_ownership(os.fstat(fd), path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def entries(self) -> List[str]:
        try:
            return os.listdir(self.fd)
        except OSError as error:
            raise WormholeError.system("list", error, self.path) from None
