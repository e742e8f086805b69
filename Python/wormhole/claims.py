"""Listener claims and durable positions (Protocol.md §12, revision 2.1): what live and
durable listeners have read, so that compaction keeps what they have not."""

from __future__ import annotations

import datetime
import errno
import fcntl
import os
import stat
import struct
import time
from typing import Callable, List, Optional, Tuple

from . import identifiers
from .container import ContainerDirectory
from .errors import WormholeError
from .format import crc32, pwrite_all, random_u64

CLAIMS = ".listeners"
# §12.2: at most one write of a caught-up claim per this many seconds (as in Swift).
IDLE_INTERVAL = 0.05
DURABLE_PREFIX = "durable-"
DURABLE_SIZE = 36
DURABLE_LEGACY_SIZE = 24
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
UINT64_MAX = 0xFFFFFFFFFFFFFFFF


def pid_namespace() -> int:
    """The inode number of this process's PID namespace; 0 when /proc does not say."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def open_claims_directory(container: ContainerDirectory, identifier: str, create: bool) -> Optional[int]:
    top = container.subdirectory(container.fd, CLAIMS, container.file_path(CLAIMS), create)
    if top is None:
        return None
    try:
        return container.subdirectory(top, identifier, container.file_path(CLAIMS + "/" + identifier), create)
    finally:
        os.close(top)


def read_claim(fd: int) -> Tuple[int, Optional[int], int]:
    """(delivered, logID or None for an earlier writer's claim, PID namespace)."""
    data = os.pread(fd, 24, 0)
    if len(data) >= 24:
        delivered, log_id, namespace = struct.unpack_from("<QQQ", data)
        return delivered, log_id, namespace
    if len(data) >= 8:
        return struct.unpack_from("<Q", data)[0], None, 0
    return 0, None, 0


class DurableValue:
    __slots__ = ("position", "log_id", "pid", "pid_namespace")

    def __init__(self, position: int, log_id: int, pid: int, namespace: int) -> None:
        self.position, self.log_id, self.pid, self.pid_namespace = position, log_id, pid, namespace

    def encode(self) -> bytes:
        first = struct.pack("<QQI", self.position, self.log_id, self.pid & 0xFFFFFFFF)
        second = struct.pack("<Q", self.pid_namespace)
        return first + struct.pack("<I", crc32(first)) + second + struct.pack("<I", crc32(second))

    @staticmethod
    def decode(data: bytes) -> Optional["DurableValue"]:
        if len(data) < DURABLE_LEGACY_SIZE:
            return None
        position, log_id, pid, crc = struct.unpack_from("<QQII", data)
        if crc32(data[:20]) != crc:
            return None
        namespace = 0
        if len(data) >= DURABLE_SIZE:
            (value,), (check,) = struct.unpack_from("<Q", data, 24), struct.unpack_from("<I", data, 32)
            if crc32(data[24:32]) == check:
                namespace = value
        return DurableValue(position, log_id, pid, namespace)

    @property
    def holder(self) -> str:
        mine = pid_namespace()
        elsewhere = self.pid_namespace != 0 and mine != 0 and self.pid_namespace != mine
        return f"process {self.pid}" + (" of another PID namespace" if elsewhere else "")


def read_durable(fd: int) -> Optional[DurableValue]:
    return DurableValue.decode(os.pread(fd, DURABLE_SIZE, 0))


def for_each_claim_file(container: ContainerDirectory, identifier: str,
                        visit: Callable[[str, int, os.stat_result, int], None]) -> None:
    """Calls ``visit(name, fd, stat, directory_fd)`` with each regular file of
    ``.listeners/<id>/`` (opened read-only, without following links)."""
    directory = open_claims_directory(container, identifier, create=False)
    if directory is None:
        return
    try:
        for name in os.listdir(directory):
            try:
                fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=directory)      # Q1
            except OSError:
                continue
            try:
                status = os.fstat(fd)
                if stat.S_ISREG(status.st_mode):
                    visit(name, fd, status, directory)
            finally:
                os.close(fd)
    finally:
        os.close(directory)


def _process_may_be_alive(pid_text: str) -> bool:
    """§12.3 Q4: ``pid_text`` is a temporary name without its leading ``.``: ``<pid>-<hex>``
    (a claim) or ``durable-<name>.<pid>-<hex>`` (a durable position): the pid is the
    decimal number between the last ``.`` (or the start) and the ``-`` that follows it."""
    try:
        pid = int(pid_text.rsplit(".", 1)[-1].split("-", 1)[0])
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def lowest_live_claim(container: ContainerDirectory, identifier: str, log_id: int) -> Optional[int]:
    """§12.3: the lowest claim of live listeners and durable positions in this log,
    deleting the claims of listeners that died."""
    lowest: List[int] = []
    directory_lock: List[Optional[bool]] = [None]

    def visit(name: str, fd: int, status: os.stat_result, directory: int) -> None:
        if name.startswith(DURABLE_PREFIX):
            # Q1: kept whether its listener runs or not; a position of another log (the
            # log was made anew while it was stopped) keeps all of this one, which it
            # reads from its start (§12.4 D4).
            value = read_durable(fd)
            if value is not None:
                lowest.append(value.position if value.log_id in (0, log_id) else 0)
            return
        being_created = name.startswith(".")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)                         # Q2
        except BlockingIOError:
            if being_created:                                                      # Q3
                return
            delivered, claim_log, _ = read_claim(fd)
            lowest.append(delivered if claim_log is None or claim_log == log_id else 0)
            return
        except OSError:
            return                                                                 # Q5
        fcntl.flock(fd, fcntl.LOCK_UN)
        if being_created:                                                          # Q4
            if directory_lock[0] is None:
                try:
                    fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    directory_lock[0] = True
                except OSError:
                    directory_lock[0] = False
            if not directory_lock[0] or _process_may_be_alive(name[1:]):
                return
        try:
            os.unlink(name, dir_fd=directory)
        except OSError:
            pass

    for_each_claim_file(container, identifier, visit)
    return min(lowest) if lowest else None


def highest_position(container: ContainerDirectory, identifier: str, log_id: int) -> int:
    """§9.1 W5': the highest position in this log among live claims and durable positions
    (0 when none). The writer adds what work queues took (``queues.highest_taken``)."""
    highest = [0]

    def visit(name: str, fd: int, status: os.stat_result, directory: int) -> None:
        if name.startswith("."):
            return
        if name.startswith(DURABLE_PREFIX):
            value = read_durable(fd)
            if value is not None and value.log_id == log_id:
                highest[0] = max(highest[0], value.position)
            return
        delivered, claim_log, _ = read_claim(fd)
        if claim_log == log_id:
            highest[0] = max(highest[0], delivered)

    for_each_claim_file(container, identifier, visit)
    return highest[0]


class Claim:
    """§12.1, §12.2: a live listener's claim on the log of one identifier."""

    def __init__(self, container: ContainerDirectory, identifier: str, step: int) -> None:
        self.step = max(1, step)
        directory = open_claims_directory(container, identifier, create=True)      # P1
        if directory is None:
            raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                f"cannot create the listener claims of '{identifier}'", path=container.path)
        self.directory = directory
        self.name = f"{os.getpid()}-{random_u64():x}"                              # P2
        temporary = "." + self.name
        try:
            fcntl.flock(directory, fcntl.LOCK_SH)                                  # P3
            fd = container.create_file(temporary, directory)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)                                     # P4
                os.rename(temporary, self.name, src_dir_fd=directory, dst_dir_fd=directory)   # P5
            except BaseException:
                try:
                    os.unlink(temporary, dir_fd=directory)
                finally:
                    os.close(fd)
                raise
            # None once closed.
            self.fd: Optional[int] = fd
            fcntl.flock(directory, fcntl.LOCK_UN)
        except OSError as error:
            os.close(directory)
            raise WormholeError.system("create a listener claim in", error,
                                       container.file_path(CLAIMS + "/" + identifier)) from None
        except BaseException:
            os.close(directory)
            raise
        self.written = 0
        self.written_log = 0
        self.written_at = 0.0
        self.namespace = pid_namespace()

    def update(self, delivered: int, log_id: int, force: bool = False) -> None:
        """Written in batches: moved by the step, went back, another log, or forced."""
        if self.fd is None or (delivered == self.written and log_id == self.written_log and not force):
            return
        if force or log_id != self.written_log or delivered < self.written or delivered - self.written >= self.step:
            try:
                pwrite_all(self.fd, struct.pack("<QQQ", delivered, log_id, self.namespace), 0)
            except OSError:
                return      # a lagging claim only makes compaction keep more
            self.written, self.written_log = delivered, log_id
            self.written_at = time.monotonic()

    def caught_up(self, delivered: int, log_id: int) -> bool:
        """§12.2: the reader caught up at ``delivered``: the claim is written at once unless
        it was written less than ``IDLE_INTERVAL`` ago, so that ``status`` shows an idle
        listener's exact position without a write at every wake-up of a busy one. Returns
        whether the claim still lags: the owner then reads again after the interval."""
        if self.fd is None or (delivered == self.written and log_id == self.written_log):
            return False
        if time.monotonic() - self.written_at >= IDLE_INTERVAL:
            self.update(delivered, log_id, force=True)
        return delivered != self.written or log_id != self.written_log

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.name, dir_fd=self.directory)
            except OSError:
                pass
            os.close(self.fd)
            os.close(self.directory)
            self.fd = None


class NoClaim:
    """The claim of a reader whose durable position is its claim, or of a work queue's
    member (its queue's state is its claim, §18.4): nothing to write."""

    def __init__(self, step: int) -> None:
        self.step = step

    def update(self, delivered: int, log_id: int, force: bool = False) -> None:
        pass

    def caught_up(self, delivered: int, log_id: int) -> bool:
        return False

    def close(self) -> None:
        pass


class DurablePosition:
    """§12.4: a durable listener's position, locked while it runs, kept when it stops."""

    def __init__(self, container: ContainerDirectory, identifier: str, name: str) -> None:
        identifiers.validate(name, "durable listener name")
        directory = open_claims_directory(container, identifier, create=True)      # D1
        if directory is None:
            raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                f"cannot create the listener claims of '{identifier}'", path=container.path)
        self.name, self.identifier, self.container = name, identifier, container
        file = DURABLE_PREFIX + name
        self.path = container.file_path(CLAIMS + "/" + identifier + "/" + file)
        self.namespace = pid_namespace()
        fd: Optional[int] = None
        try:
            for _ in range(8):
                fd = self._open_existing(file, directory)
                if fd is None:
                    fd = self._create(file, directory)
                if fd is not None:
                    break
        finally:
            os.close(directory)
        if fd is None:
            raise WormholeError(WormholeError.SYSTEM_ERROR,
                                f"'{self.path}' kept appearing and disappearing while this process opened it",
                                path=self.path)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)                     # D2
            except BlockingIOError:
                value = read_durable(fd)
                holder = f" ({value.holder})" if value is not None else ""
                raise WormholeError(WormholeError.DURABLE_NAME_IN_USE,
                                    f"the durable listener '{name}' of '{identifier}' is already running{holder}; one "
                                    f"process at a time uses a durable name: stop the other, or choose another name",
                                    path=self.path) from None
            except OSError as error:
                raise WormholeError.system("lock the durable position", error, self.path) from None
            value = read_durable(fd)                                               # D3
            if value is None:
                raise WormholeError(WormholeError.CORRUPT_RECORD,
                                    f"the position of the durable listener '{name}' of '{identifier}' is damaged (not "
                                    f"{DURABLE_LEGACY_SIZE} bytes or more with a valid checksum), so where it stopped is "
                                    f"unknown; 'wormhole forget {name} {identifier}' (or "
                                    f"forget_durable_listener(name, identifier)) removes it, and the name then starts anew",
                                    path=self.path)
        except BaseException:
            os.close(fd)
            raise
        self.fd: Optional[int] = fd
        new = value.log_id == 0 and value.position == 0 and value.pid == 0
        self.stored: Optional[DurableValue] = None if new else value
        self.store(value.position if not new else 0, value.log_id if not new else 0)

    def _open_existing(self, file: str, directory: int) -> Optional[int]:
        try:
            fd = os.open(file, os.O_RDWR | _OPEN_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise WormholeError(WormholeError.CONTAINER_INSECURE, f"'{self.path}' is a symbolic link; remove it",
                                    path=self.path) from None
            if error.errno == errno.ENXIO:
                raise WormholeError(WormholeError.CONTAINER_INSECURE, f"'{self.path}' is not a regular file; remove it",
                                    path=self.path) from None
            raise WormholeError.system("open the durable position", error, self.path) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WormholeError(WormholeError.CONTAINER_INSECURE, f"'{self.path}' is not a regular file; remove it",
                                path=self.path)
        return fd

    def _create(self, file: str, directory: int) -> Optional[int]:
        temporary = f".{file}.{os.getpid()}-{random_u64():x}"
        try:
            fcntl.flock(directory, fcntl.LOCK_SH)
        except OSError as error:
            raise self._failure("lock the listener claims of", error) from None
        try:
            try:
                fd = self.container.create_file(temporary, directory)
            except OSError as error:
                raise self._failure("create the durable position", error) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                pwrite_all(fd, DurableValue(0, 0, 0, 0).encode(), 0)
                try:
                    os.link(temporary, file, src_dir_fd=directory, dst_dir_fd=directory)
                except FileExistsError:
                    os.close(fd)
                    return None
                fcntl.flock(fd, fcntl.LOCK_UN)
                return fd
            except OSError as error:
                os.close(fd)
                raise self._failure("write the durable position", error) from None
            finally:
                try:
                    os.unlink(temporary, dir_fd=directory)
                except OSError:
                    pass
        finally:
            fcntl.flock(directory, fcntl.LOCK_UN)

    def _failure(self, operation: str, error: OSError) -> WormholeError:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return WormholeError(WormholeError.SYSTEM_ERROR,
                                 f"cannot {operation} '{self.path}': the filesystem is full (no space or no inodes "
                                 f"left: see 'df' and 'df -i'); the durable listener was not started, and no position "
                                 f"was lost", path=self.path, errno=error.errno)
        return WormholeError.system(operation, error, self.path)

    def store(self, position: int, log_id: int) -> None:
        """D3-D5: one pwrite of the 36 bytes."""
        if self.fd is None:
            return
        try:
            pwrite_all(self.fd, DurableValue(position, log_id, os.getpid(), self.namespace).encode(), 0)
        except OSError as error:
            raise self._failure("write the durable position", error) from None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def forget_durable(container: ContainerDirectory, identifier: str, name: str) -> bool:
    """D6: removes the position of ``name``; False when there is none; refused while it runs."""
    identifiers.validate(name, "durable listener name")
    directory = open_claims_directory(container, identifier, create=False)
    if directory is None:
        return False
    try:
        file = DURABLE_PREFIX + name
        try:
            fd = os.open(file, os.O_RDONLY | _OPEN_FLAGS, dir_fd=directory)
        except OSError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise WormholeError(WormholeError.DURABLE_NAME_IN_USE,
                                    f"the durable listener '{name}' of '{identifier}' is running; stop it before "
                                    f"forgetting its position",
                                    path=container.file_path(CLAIMS + "/" + identifier + "/" + file)) from None
            os.unlink(file, dir_fd=directory)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        finally:
            os.close(fd)
    finally:
        os.close(directory)


class ListenerStatus:
    """A live listener or a durable name, as ``Wormhole.listeners()`` reports it (the
    Swift ``WormholeListenerStatus``)."""

    __slots__ = ("identifier", "durable_name", "process_id", "pid_namespace", "is_running", "position", "behind",
                 "last_seen")

    def __init__(self, identifier: str, durable_name: Optional[str], process_id: Optional[int],
                 pid_namespace: Optional[int], is_running: bool, position: int, behind: int,
                 last_seen: Optional[datetime.datetime]) -> None:
        self.identifier, self.durable_name, self.process_id = identifier, durable_name, process_id
        self.pid_namespace, self.is_running, self.position = pid_namespace, is_running, position
        self.behind, self.last_seen = behind, last_seen

    @property
    def is_in_this_pid_namespace(self) -> bool:
        mine = pid_namespace()
        return self.pid_namespace is None or mine == 0 or self.pid_namespace == mine

    def __repr__(self) -> str:
        return (f"ListenerStatus(identifier={self.identifier!r}, durable_name={self.durable_name!r}, "
                f"process_id={self.process_id}, is_running={self.is_running}, position={self.position}, "
                f"behind={self.behind})")


def listener_statuses(container: ContainerDirectory, identifier: str, log_id: int, last: int) -> List[ListenerStatus]:
    result: List[ListenerStatus] = []

    def visit(name: str, fd: int, status: os.stat_result, directory: int) -> None:
        if name.startswith("."):
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            running = False
        except OSError:
            running = True
        if name.startswith(DURABLE_PREFIX):
            value = read_durable(fd)
            position = (value.position if value.log_id in (0, log_id) else 0) if value is not None else 0
            result.append(ListenerStatus(identifier, name[len(DURABLE_PREFIX):], value.pid if value else None,
                                         (value.pid_namespace or None) if value else None, running, position,
                                         max(0, last - position),
                                         datetime.datetime.fromtimestamp(status.st_mtime, tz=datetime.timezone.utc)))
        elif running:
            delivered, claim_log, namespace = read_claim(fd)
            position = delivered if claim_log is None or claim_log == log_id else 0
            try:
                pid: Optional[int] = int(name.split("-", 1)[0])
            except ValueError:
                pid = None
            result.append(ListenerStatus(identifier, None, pid, namespace or None, True, position,
                                         max(0, last - position), None))

    for_each_claim_file(container, identifier, visit)
    return result


def identifiers_with_listeners(container: ContainerDirectory) -> List[str]:
    try:
        top = os.open(CLAIMS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=container.fd)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise WormholeError.system("open", error, container.file_path(CLAIMS)) from None
    try:
        return identifiers.valid(os.listdir(top))
    finally:
        os.close(top)
