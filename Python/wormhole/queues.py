"""Work queues' files (Protocol.md §18): each message of an identifier to one member of
a queue, in whatever process and language, acknowledged, handed out again when its
member dies, moved to a dead-letter identifier after too many tries. No daemon: the
members share ``.queues/<id>/<queue>/state``, changed only under its lock, and each
holds a lock on ``members/<token>`` for as long as it lives. The Swift library's
``WorkQueueFile`` and ``WorkQueueState`` (Sources/WormholeFiles/Queues)."""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import math
import os
import struct
import time
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from . import claims, identifiers
from .coding import iso8601_ns
from .configuration import Configuration
from .container import ContainerDirectory
from .errors import WormholeError
from .format import LOG_SUFFIX, Header, Item, Record, crc32, find_tail, pread, pwrite_all, random_u64
from .reader import Cursor, StartingPoint, log_summary, read_record, with_log

__all__ = ["WorkQueueState", "WorkQueueFile", "WorkQueueStatus", "WorkQueueMemberStatus", "Delivery",
           "lowest_unhandled", "statuses"]

QUEUES = ".queues"
STATE = "state"
MEMBERS = "members"
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HEADER = struct.Struct("<IIQQQQQQ")
_ENTRY = struct.Struct("<QQIIq")
_IDENTITY = struct.Struct("<IIQ")

Report = Callable[[WormholeError], None]
T = TypeVar("T")


class Entry:
    """A message handed out and not yet acknowledged: ``member`` 0 when nobody holds it
    (its member died or gave it back). ``retry_delay``: while nobody holds it, the
    milliseconds after ``delivered`` before it is handed out again (0: at once; §18.1,
    revision 3.1, the field a 3.0 member writes 0 as reserved)."""

    __slots__ = ("sequence", "member", "deliveries", "delivered", "retry_delay")

    def __init__(self, sequence: int, member: int, deliveries: int, delivered: int, retry_delay: int = 0) -> None:
        self.sequence, self.member, self.deliveries, self.delivered = sequence, member, deliveries, delivered
        self.retry_delay = retry_delay

    def key(self) -> Tuple[int, int, int, int, int]:
        return self.sequence, self.member, self.deliveries, self.delivered, self.retry_delay

    def is_due(self, now: int) -> bool:
        """Whether it may be handed out again at ``now`` (ns since 1970). Before
        ``delivered`` it is: the wall clock was set back, and the entry is not held for
        as long as the step."""
        return self.retry_delay == 0 or now < self.delivered or now >= self.delivered + self.retry_delay * 1_000_000

    def wait_before_redelivery(self, delay: float, now: int) -> None:
        """Not handed out again before ``delay`` seconds from ``now``: counted from
        ``delivered`` (what the file holds), rounded up to a millisecond, at most
        2**32 - 1 ms after it."""
        if delay <= 0:
            self.retry_delay = 0
            return
        milliseconds = math.ceil(max(0, now - self.delivered) / 1e6 + delay * 1000)
        self.retry_delay = min(0xFFFFFFFF, max(1, milliseconds))


class WorkQueueState:
    """§18.1: what the queue has taken from the log and handed out, and its counters."""

    MAGIC = 0x31514857                   # "WHQ1"
    HEADER_SIZE = 56
    ENTRY_SIZE = 32
    MAXIMUM_ENTRIES = 120
    MAXIMUM_SIZE = HEADER_SIZE + MAXIMUM_ENTRIES * ENTRY_SIZE + 4

    def __init__(self, taken: int = 0, acknowledged: int = 0, dead_lettered: int = 0, expired: int = 0, lost: int = 0,
                 log_id: int = 0, entries: Optional[List[Entry]] = None) -> None:
        self.taken, self.acknowledged, self.dead_lettered = taken, acknowledged, dead_lettered
        self.expired, self.lost, self.log_id = expired, lost, log_id
        self.entries: List[Entry] = entries or []

    def key(self) -> Tuple[int, int, int, int, int, int, Tuple[Tuple[int, int, int, int, int], ...]]:
        """Everything stored, to compare: whether a step changed the state."""
        return (self.taken, self.acknowledged, self.dead_lettered, self.expired, self.lost, self.log_id,
                tuple(entry.key() for entry in self.entries))

    def lowest_unhandled(self, log_id: int) -> int:
        """§18.4: compaction keeps every message after this (all of a log it has not seen)."""
        if self.log_id not in (0, log_id):
            return 0
        return min([self.taken] + [entry.sequence - 1 for entry in self.entries])

    def encode(self) -> bytes:
        body = _HEADER.pack(self.MAGIC, len(self.entries), self.taken, self.acknowledged, self.dead_lettered,
                            self.expired, self.lost, self.log_id)
        body += b"".join(_ENTRY.pack(entry.sequence, entry.member, entry.deliveries, entry.retry_delay, entry.delivered)
                         for entry in self.entries)
        return body + struct.pack("<I", crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> Optional["WorkQueueState"]:
        """The state in ``data``, or None when it is not a whole, valid one."""
        if len(data) < cls.HEADER_SIZE + 4:
            return None
        magic, count, taken, acknowledged, dead_lettered, expired, lost, log_id = _HEADER.unpack_from(data)
        if magic != cls.MAGIC or count > cls.MAXIMUM_ENTRIES:
            return None
        end = cls.HEADER_SIZE + count * cls.ENTRY_SIZE
        if len(data) < end + 4 or struct.unpack_from("<I", data, end)[0] != crc32(data[:end]):
            return None
        entries = []
        for index in range(count):
            sequence, member, deliveries, retry_delay, delivered = _ENTRY.unpack_from(data, cls.HEADER_SIZE + index * cls.ENTRY_SIZE)
            entries.append(Entry(sequence, member, deliveries, delivered, retry_delay))
        return cls(taken, acknowledged, dead_lettered, expired, lost, log_id, entries)

    @classmethod
    def read(cls, fd: int) -> Optional["WorkQueueState"]:
        try:
            return cls.decode(pread(fd, cls.MAXIMUM_SIZE, 0))
        except OSError:
            return None


class Delivery:
    """A message handed to this member, and how many times it has been handed out (this
    time included)."""

    __slots__ = ("record", "deliveries")

    def __init__(self, record: Record, deliveries: int) -> None:
        self.record, self.deliveries = record, deliveries


def dead_letter(identifier: str, queue: str, record: Record, deliveries: int, reason: str,
                maximum_size: Optional[int] = None) -> bytes:
    """§18.5: the JSON of a message the queue gave up on, as the Swift library's
    ``WormholeDeadLetter`` writes it (keys sorted, date ISO 8601 to the millisecond,
    payload base64, '/' not escaped). When that is larger than ``maximum_size`` (the
    payload in base64 is a third larger than the message), the payload is left out and
    ``omittedPayloadSize`` says its size: a letter that cannot be passed would stay in
    the queue for ever."""
    letter = {"identifier": identifier, "queue": queue, "sequence": record.sequence, "deliveries": deliveries,
              "reason": reason, "kind": record.kind_name,
              "payload": base64.b64encode(record.payload).decode("ascii"), "date": iso8601_ns(record.date_ns)}
    encoded = json.dumps(letter, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if maximum_size is None or len(encoded) <= maximum_size:
        return encoded
    letter["payload"], letter["omittedPayloadSize"] = "", len(record.payload)
    return json.dumps(letter, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _name(token: int) -> str:
    return format(token, "x")


class WorkQueueFile:
    """One member's handle on the queue ``name`` of ``identifier`` (§18.2, §18.3). Used by
    one thread at a time.

    Args:
        pass_json: passes a JSON payload under an identifier (the dead letters).
    """

    def __init__(self, container: ContainerDirectory, configuration: Configuration, identifier: str, name: str,
                 start: StartingPoint, pass_json: Callable[[str, bytes], object]) -> None:
        identifiers.validate(identifier)
        identifiers.validate(name, "work queue name")
        self.container, self.configuration = container, configuration
        self.identifier, self.name = identifier, name
        self.pass_json = pass_json
        # The back-off of a message that failed, by its deliveries (seconds): none until
        # the member sets it (WorkQueueOptions.retry_delay_after).
        self.redelivery_delay: Callable[[int], float] = lambda deliveries: 0.0
        relative = f"{QUEUES}/{identifier}/{name}"
        self.directory_path = container.file_path(relative)
        self.state_path = container.file_path(relative + "/" + STATE)
        members_path = container.file_path(relative + "/" + MEMBERS)
        self.others: Dict[int, int] = {}
        self.reader: Optional[Cursor] = None
        self.buffered: List[Tuple[Optional[Item], Optional[int]]] = []
        # Messages whose dead letter could not be passed, with the failure reported for
        # each: a take tries each again, and reports it again only when the failure
        # changed (not once per take: the queue's owner would be flooded).
        self.dead_letter_failures: Dict[int, str] = {}
        # Whether this member reported that the state is full of such messages (once,
        # until it is not).
        self.reported_full = False
        self.closed = False
        opened: List[int] = []
        try:
            self.queue_fd = open_directories(container, [identifier, name])                         # J1
            opened.append(self.queue_fd)
            members = container.subdirectory(self.queue_fd, MEMBERS, members_path, create=True)
            assert members is not None
            self.members = members
            opened.append(members)
            self._create_state(*_starting_position(start, container, identifier, configuration))
            try:
                self.state_fd = os.open(STATE, os.O_RDWR | _OPEN_FLAGS, dir_fd=self.queue_fd)
            except OSError as error:
                raise container.file_error(relative + "/" + STATE, error) from None
            opened.append(self.state_fd)
            try:
                fcntl.flock(self.state_fd, fcntl.LOCK_EX)                                          # J2
            except OSError as error:
                raise WormholeError.system("lock the work queue state", error, self.state_path) from None
            try:
                self.token, self.member_fd = self._register(members_path)
                opened.append(self.member_fd)
                self._remove_dead_member_files()
            finally:
                fcntl.flock(self.state_fd, fcntl.LOCK_UN)
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise

    def _register(self, path: str) -> Tuple[int, int]:
        """members/<token>, locked, holding the process id, 4 zero bytes, the PID namespace."""
        for _ in range(8):
            token = random_u64()
            try:
                fd = self.container.create_file(_name(token), self.members)
            except FileExistsError:
                continue
            except OSError as error:
                raise WormholeError.system("create a work queue member file in", error, path) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                pwrite_all(fd, _IDENTITY.pack(os.getpid() & 0xFFFFFFFF, 0, claims.pid_namespace()), 0)
            except OSError:
                pass
            return token, fd
        raise WormholeError(WormholeError.SYSTEM_ERROR, f"cannot find a free member name in '{path}'", path=path)

    def _create_state(self, taken: int, log_id: int) -> None:
        """§18.1: made whole under a temporary name, then linked; nothing when it exists."""
        try:
            os.close(os.open(STATE, os.O_RDONLY | _OPEN_FLAGS, dir_fd=self.queue_fd))
            return
        except OSError:
            pass
        temporary = f".{STATE}.{os.getpid()}-{random_u64():x}"
        try:
            fd = self.container.create_file(temporary, self.queue_fd)
        except OSError as error:
            raise WormholeError.system("create the work queue state", error, self.state_path) from None
        try:
            try:
                pwrite_all(fd, WorkQueueState(taken=taken, log_id=log_id).encode(), 0)
            except OSError as error:
                if error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise WormholeError(WormholeError.SYSTEM_ERROR,
                                        f"cannot write the work queue state '{self.state_path}': the filesystem is full "
                                        f"(no space or no inodes left: see 'df' and 'df -i'); the member did not join, "
                                        f"and no state was written (the next member to join makes it)",
                                        path=self.state_path, errno=error.errno) from None
                raise
            try:
                os.link(temporary, STATE, src_dir_fd=self.queue_fd, dst_dir_fd=self.queue_fd)
            except FileExistsError:
                pass
        except OSError as error:
            raise WormholeError.system("create the work queue state", error, self.state_path) from None
        finally:
            os.close(fd)
            try:
                os.unlink(temporary, dir_fd=self.queue_fd)
            except OSError:
                pass

    def close(self) -> None:
        """Leaves the queue: what this member still holds goes to the others."""
        if self.closed:
            return
        self.closed = True
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        try:
            fcntl.flock(self.state_fd, fcntl.LOCK_EX)
            try:
                state = WorkQueueState.read(self.state_fd)
                if state is not None:
                    before = state.key()
                    for entry in state.entries:
                        if entry.member == self.token:
                            entry.member = 0
                    if state.key() != before:
                        pwrite_all(self.state_fd, state.encode(), 0)
                os.unlink(_name(self.token), dir_fd=self.members)
            finally:
                fcntl.flock(self.state_fd, fcntl.LOCK_UN)
        except OSError:
            pass
        for fd in list(self.others.values()) + [self.member_fd, self.state_fd, self.members, self.queue_fd]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.others = {}

    # Taking and acknowledging (§18.3)

    def take(self, maximum_deliveries: int, dead_letters: str, report: Report) -> Optional[Delivery]:
        """The oldest message nobody alive holds (T1, T2), else the next of the log (T3);
        None when there is nothing to take."""
        def body(state: WorkQueueState) -> Optional[Delivery]:
            now = time.time_ns()
            for entry in state.entries:                                                            # T1
                if entry.member == self.token:
                    # This member takes with nothing in hand: an entry it holds is one whose
                    # handing out or acknowledgement failed. Handed out again, with its
                    # count, rather than held for as long as the member lives.
                    entry.member = 0
                elif entry.member != 0 and not self._alive(entry.member):
                    # Its member ended holding it (killed, perhaps by this very message):
                    # handed out again after the back-off, as a message given back is.
                    entry.member = 0
                    entry.wait_before_redelivery(self.redelivery_delay(entry.deliveries), now)
            # Messages whose dead letter could not be passed (a full disk, a damaged or
            # unwritable dead-letter log): kept for the next take, skipped in this one.
            # Once one failed for want of a writable dead-letter log, those that failed
            # before are not tried again in this take: they would fail alike.
            unmoved = set()
            dead_letters_failing = False
            while True:                                                                            # T2
                # An entry whose retry delay has not run out waits (revision 3.1), unless it
                # is to go to the dead letters: it will not be handed out again.
                waiting = [entry for entry in state.entries if entry.member == 0 and entry.sequence not in unmoved
                           and (entry.is_due(now) or entry.deliveries >= maximum_deliveries)]
                if not waiting:
                    break
                entry = min(waiting, key=lambda each: each.sequence)
                if (dead_letters_failing and entry.deliveries >= maximum_deliveries
                        and entry.sequence in self.dead_letter_failures):
                    unmoved.add(entry.sequence)
                    continue
                record = read_record(self.container, self.identifier, entry.sequence, self.configuration, state.log_id)
                if record is None:
                    state.entries.remove(entry)
                    state.lost += 1
                    report(self._lost(1, "it was cleared or dropped from the log before it was handled"))
                    continue
                if entry.deliveries >= maximum_deliveries:
                    try:
                        self._dead_letter(record, entry.deliveries, dead_letters,
                                          f"handed out {entry.deliveries} times; each time its member ended (killed "
                                          f"or stopped) before acknowledging it")
                    except WormholeError as error:
                        self._dead_letter_failed(entry.sequence, error, report)
                        unmoved.add(entry.sequence)
                        # Too large for a message is this letter's own; anything else
                        # is the dead-letter log's (or the disk's).
                        dead_letters_failing = error.code != WormholeError.MESSAGE_TOO_LARGE
                        continue
                    self.dead_letter_failures.pop(entry.sequence, None)
                    state.entries.remove(entry)
                    state.dead_lettered += 1
                    continue
                if record.expired(now):
                    state.entries.remove(entry)
                    state.expired += 1
                    continue
                entry.member, entry.deliveries, entry.delivered = self.token, entry.deliveries + 1, now
                entry.retry_delay = 0
                return Delivery(record, entry.deliveries)
            self._forget_failures(state)
            if len(state.entries) >= WorkQueueState.MAXIMUM_ENTRIES:
                if unmoved and not self.reported_full:
                    self.reported_full = True
                    report(WormholeError(
                        WormholeError.SYSTEM_ERROR,
                        f"the work queue '{self.name}' of '{self.identifier}' holds {len(state.entries)} messages, "
                        f"as many as its state can, {len(unmoved)} of them waiting until they can be moved to its "
                        f"dead letters '{dead_letters}' (see the errors reported for them): it takes no new message "
                        f"until some are moved", path=self.state_path))
                return None
            self.reported_full = False
            while True:                                                                            # T3
                item, log_id = self._next(state.taken, state.log_id)
                if item is None:
                    return None
                if not isinstance(item, Record):
                    if item.code != WormholeError.MESSAGES_LOST:     # gaps: counted below
                        report(item)
                    continue
                if log_id is not None and log_id != state.log_id:
                    if state.log_id != 0:
                        self._start_over(state, log_id, report)
                    else:
                        state.log_id = log_id
                if item.sequence <= state.taken:
                    continue
                if item.sequence > state.taken + 1:
                    missed = item.sequence - state.taken - 1
                    state.lost += missed
                    report(self._lost(missed, "they were cleared, damaged, or dropped by the backlog cap before the "
                                              "queue took them"))
                state.taken = item.sequence
                if item.expired(now):
                    state.expired += 1
                    continue
                state.entries.append(Entry(item.sequence, self.token, 1, now))
                return Delivery(item, 1)

        return self._locked(body)

    def acknowledge(self, sequence: int) -> None:
        """The message ``sequence`` was handled: it leaves the queue for good."""
        def body(state: WorkQueueState) -> None:
            for entry in state.entries:
                if entry.sequence == sequence and entry.member == self.token:
                    state.entries.remove(entry)
                    state.acknowledged += 1
                    return

        self._locked(body)

    def give_back(self, sequence: int, reason: str, maximum_deliveries: int, dead_letters: str) -> None:
        """Its handler failed with ``reason``: handed out again once its retry delay ran
        out (§18.1), or after
        ``maximum_deliveries`` passed to the dead letters. A dead letter that cannot be
        passed leaves the message in the queue, for nobody: the next take tries again
        (T2) and reports the failure."""
        def body(state: WorkQueueState) -> None:
            for entry in state.entries:
                if entry.sequence == sequence and entry.member == self.token:
                    if entry.deliveries < maximum_deliveries:
                        entry.member = 0
                        entry.wait_before_redelivery(self.redelivery_delay(entry.deliveries), time.time_ns())
                        return
                    record = read_record(self.container, self.identifier, sequence, self.configuration, state.log_id)
                    if record is not None:
                        try:
                            self._dead_letter(record, entry.deliveries, dead_letters, reason)
                        except WormholeError:
                            # Kept, for nobody: the next take tries again, and reports it
                            # if it fails again (once: not at each take). This member
                            # goes on taking meanwhile.
                            entry.member = 0
                            return
                        state.dead_lettered += 1
                    else:
                        state.lost += 1
                    state.entries.remove(entry)
                    return

        self._locked(body)

    def invalidate_reader(self) -> None:
        """The log may have been replaced (compacted, made anew): the reader looks again."""
        if self.reader is not None:
            self.reader.invalidate()

    # Internals

    def _locked(self, body: Callable[[WorkQueueState], T]) -> T:
        if self.closed:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"the work queue '{self.name}' of '{self.identifier}' was left")
        try:
            fcntl.flock(self.state_fd, fcntl.LOCK_EX)
        except OSError as error:
            raise WormholeError.system("lock the work queue state", error, self.state_path) from None
        try:
            state = WorkQueueState.read(self.state_fd)
            if state is None:
                raise WormholeError(WormholeError.CORRUPT_RECORD,
                                    f"the state of the work queue '{self.name}' of '{self.identifier}' is damaged; "
                                    f"remove the directory '{self.directory_path}' to start the queue anew (it then "
                                    f"takes again what the log retains)", path=self.state_path)
            before = state.key()
            try:
                result = body(state)
            finally:
                # What the body did before it failed (a dead letter passed) is kept.
                if state.key() != before:
                    try:
                        pwrite_all(self.state_fd, state.encode(), 0)
                    except OSError as error:
                        raise WormholeError.system("write the work queue state", error, self.state_path) from None
            return result
        finally:
            fcntl.flock(self.state_fd, fcntl.LOCK_UN)

    def _alive(self, member: int) -> bool:
        """§18.2: its file exists and is locked. A dead member's file is removed (under
        the state's lock)."""
        fd = self.others.get(member)
        if fd is None:
            try:
                fd = os.open(_name(member), os.O_RDONLY | _OPEN_FLAGS, dir_fd=self.members)
            except OSError:
                return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            self.others[member] = fd
            return True
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.unlink(_name(member), dir_fd=self.members)
        except OSError:
            pass
        self.others.pop(member, None)
        os.close(fd)
        return False

    def _remove_dead_member_files(self) -> None:
        try:
            names = os.listdir(self.members)
        except OSError:
            return
        for name in names:
            if name == _name(self.token):
                continue
            try:
                self._alive(int(name, 16))
            except ValueError:
                continue

    def _next(self, taken: int, log_id: int) -> Tuple[Optional[Item], Optional[int]]:
        """The next record (or problem) of the log after ``taken`` (of the log ``log_id``),
        one at a time, with the logID it belongs to; (None, None) when there is none yet."""
        if self.reader is None:
            # No listener claim: the queue's state is the member's claim (§18.4), which kept
            # what a clear hid after ``taken`` (T3).
            self.reader = Cursor(self.container, self.identifier, StartingPoint.after(taken), self.configuration,
                                 claiming=False, position_log_id=log_id)
            self.reader.drops_expired = False
        while not self.buffered:
            items = self.reader.read(one_log=True)
            self.buffered = [(item, self.reader.log_id) for item in items]
            if not items and not getattr(self.reader, "more", False):
                return None, None
        return self.buffered.pop(0)

    def _start_over(self, state: WorkQueueState, log_id: int, report: Report) -> None:
        """The log was made anew: the queue starts at its beginning; what it held is lost."""
        if state.entries:
            state.lost += len(state.entries)
            report(self._lost(len(state.entries), f"the log of '{self.identifier}' was deleted and made anew before "
                                                  f"they were handled"))
        state.entries, state.taken, state.log_id = [], 0, log_id

    def _dead_letter(self, record: Record, deliveries: int, dead_letters: str, reason: str) -> None:
        """§18.5; a dead letter that cannot be passed (a full disk, an unusable dead-letter
        log) raises, and its message stays in the queue."""
        try:
            self.pass_json(dead_letters, dead_letter(self.identifier, self.name, record, deliveries, reason,
                                                     self.configuration.maximum_message_size))
        except WormholeError as error:
            raise WormholeError(error.code,
                                f"the work queue '{self.name}' of '{self.identifier}' cannot move message "
                                f"{record.sequence} to its dead letters '{dead_letters}': {error.message}; it stays in "
                                f"the queue, and is moved when it can be", path=error.path, errno=error.errno) from None

    def _dead_letter_failed(self, sequence: int, error: WormholeError, report: Report) -> None:
        """Reports that the dead letter of ``sequence`` could not be passed, unless that
        failure was reported already (a take tries each such message again)."""
        if self.dead_letter_failures.get(sequence) != error.message:
            self.dead_letter_failures[sequence] = error.message
            report(error)

    def _forget_failures(self, state: WorkQueueState) -> None:
        """Forgets the reported failures of messages that left the queue (moved by
        another member, lost)."""
        if self.dead_letter_failures:
            held = {entry.sequence for entry in state.entries}
            for sequence in [each for each in self.dead_letter_failures if each not in held]:
                del self.dead_letter_failures[sequence]

    def _lost(self, count: int, reason: str) -> WormholeError:
        return WormholeError(WormholeError.MESSAGES_LOST,
                             f"the work queue '{self.name}' of '{self.identifier}' lost {count} "
                             f"message{'' if count == 1 else 's'}: {reason}", missed_message_count=count)


def _starting_position(start: StartingPoint, container: ContainerDirectory, identifier: str,
                       configuration: Configuration) -> Tuple[int, int]:
    """Where a new queue starts (§18.1): ``taken`` and the log it belongs to. A new queue
    is a reader that starts now: what was cleared before is not its to handle (§10.3),
    so its start is never below the log's clearedThrough. Once made, its claim keeps what
    it has not handled, and a later clear does not withdraw it."""
    def position(fd: int, status: os.stat_result, header: Header) -> Tuple[int, int]:
        cleared = header.cleared_through
        if start.kind == "history":
            return cleared, header.log_id
        if start.kind == "after":
            return max(start.sequence, cleared), header.log_id
        last = find_tail(fd, status.st_size, header, configuration.maximum_message_size,
                         container.file_path(identifier + LOG_SUFFIX), identifier).last_sequence
        if start.kind == "latest" and last > cleared:
            return last - 1, header.log_id
        return max(last, cleared), header.log_id
    found = with_log(container, identifier, position)
    if found is not None:
        return found
    return (start.sequence if start.kind == "after" else 0), 0


def open_directories(container: ContainerDirectory, components: List[str]) -> int:
    """Opens ``.queues/<components...>``, creating each with the container's modes and
    checking it as the container's access says."""
    current = container.subdirectory(container.fd, QUEUES, container.file_path(QUEUES), create=True)
    assert current is not None
    path = container.file_path(QUEUES)
    for component in components:
        path += "/" + component
        try:
            following = container.subdirectory(current, component, path, create=True)
        finally:
            os.close(current)
        assert following is not None
        current = following
    return current


# Readers without membership (compaction, status)

def _open_directory(name: str, parent: int) -> Optional[int]:
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    except OSError:
        return None


def states(container: ContainerDirectory, identifier: str) -> List[Tuple[str, Optional[WorkQueueState], Optional[int]]]:
    """The queues of ``identifier``: name, state (None: damaged) and its members
    directory opened (the caller closes it), read without the lock."""
    top = _open_directory(QUEUES, container.fd)
    if top is None:
        return []
    try:
        queues = _open_directory(identifier, top)
    finally:
        os.close(top)
    if queues is None:
        return []
    result: List[Tuple[str, Optional[WorkQueueState], Optional[int]]] = []
    try:
        for name in sorted(os.listdir(queues)):
            if name.startswith("."):
                continue
            queue = _open_directory(name, queues)
            if queue is None:
                continue
            try:
                state = None
                try:
                    fd = os.open(STATE, os.O_RDONLY | _OPEN_FLAGS, dir_fd=queue)
                except FileNotFoundError:
                    # Not made yet (its first member is joining, or could not: a full
                    # disk): no queue yet, neither damaged nor keeping anything.
                    continue
                except OSError:
                    pass
                else:
                    state = WorkQueueState.read(fd)
                    os.close(fd)
                result.append((name, state, _open_directory(MEMBERS, queue)))
            finally:
                os.close(queue)
    except OSError:
        pass
    finally:
        os.close(queues)
    return result


def lowest_unhandled(container: ContainerDirectory, identifier: str, log_id: int) -> Optional[int]:
    """§18.4, §12.3 Q5: what the queues of ``identifier`` ask compaction to keep (every
    message after this); 0 for a damaged state; None when there is no queue."""
    lowest: Optional[int] = None
    for _, state, members in states(container, identifier):
        if members is not None:
            os.close(members)
        keep = state.lowest_unhandled(log_id) if state is not None else 0
        lowest = keep if lowest is None else min(lowest, keep)
    return lowest


def highest_taken(container: ContainerDirectory, identifier: str, log_id: int) -> int:
    """§9.1 W5', §18.4: the highest sequence number of the log ``log_id`` that a work
    queue of ``identifier`` has taken (handed out, whatever the log says now; its members
    read without claims); 0 when none has."""
    highest = 0
    for _, state, members in states(container, identifier):
        if members is not None:
            os.close(members)
        if state is not None and state.log_id == log_id:
            highest = max(highest, state.taken)
    return highest


def identifiers_with_queues(container: ContainerDirectory) -> List[str]:
    top = _open_directory(QUEUES, container.fd)
    if top is None:
        return []
    try:
        return identifiers.valid(os.listdir(top))
    finally:
        os.close(top)


def live_members(members: int) -> List[Tuple[int, int, Optional[int]]]:
    """(token, process id, PID namespace or None) of each member file that is locked."""
    result = []
    try:
        names = sorted(os.listdir(members))
    except OSError:
        return []
    for name in names:
        if name.startswith("."):
            continue
        try:
            token = int(name, 16)
            fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=members)
        except (ValueError, OSError):
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                continue
            except BlockingIOError:
                pass
            except OSError:
                continue
            data = pread(fd, _IDENTITY.size, 0)
            pid, _, namespace = _IDENTITY.unpack(data) if len(data) == _IDENTITY.size else (0, 0, 0)
            result.append((token, pid - (1 << 32) if pid >= 1 << 31 else pid, namespace or None))
        finally:
            os.close(fd)
    return result


class WorkQueueMemberStatus:
    """A live member: its process (as numbered in its PID namespace) and whether it is
    handling a message now."""

    __slots__ = ("process_id", "pid_namespace", "is_handling")

    def __init__(self, process_id: int, pid_namespace: Optional[int], is_handling: bool) -> None:
        self.process_id, self.pid_namespace, self.is_handling = process_id, pid_namespace, is_handling

    def __repr__(self) -> str:
        return f"WorkQueueMemberStatus(process_id={self.process_id}, is_handling={self.is_handling})"


class WorkQueueStatus:
    """One work queue, as ``Wormhole.work_queues()`` reports it (the Swift
    ``WormholeWorkQueueStatus``): live members, messages pending (passed after the queue's
    position, or held by a member that ended) and in flight, and what was acknowledged,
    dead-lettered, expired and lost. ``is_damaged``: the state file is damaged (nothing
    else is known then)."""

    __slots__ = ("identifier", "name", "members", "pending", "in_flight", "acknowledged", "dead_lettered", "expired",
                 "lost", "is_damaged")

    def __init__(self, identifier: str, name: str, members: List[WorkQueueMemberStatus], pending: int, in_flight: int,
                 acknowledged: int, dead_lettered: int, expired: int, lost: int, is_damaged: bool) -> None:
        self.identifier, self.name, self.members = identifier, name, members
        self.pending, self.in_flight, self.acknowledged = pending, in_flight, acknowledged
        self.dead_lettered, self.expired, self.lost, self.is_damaged = dead_lettered, expired, lost, is_damaged

    def __repr__(self) -> str:
        return (f"WorkQueueStatus(identifier={self.identifier!r}, name={self.name!r}, members={len(self.members)}, "
                f"pending={self.pending}, in_flight={self.in_flight}, acknowledged={self.acknowledged}, "
                f"dead_lettered={self.dead_lettered}, expired={self.expired}, lost={self.lost}, "
                f"is_damaged={self.is_damaged})")


def statuses(container: ContainerDirectory, identifier: Optional[str]) -> List[WorkQueueStatus]:
    """The work queues of ``identifier`` (of every identifier when None)."""
    names = [identifier] if identifier is not None else identifiers_with_queues(container)
    result = []
    for each in names:
        summary = log_summary(container, each)
        last = summary[1] if summary else 0
        for name, state, members in states(container, each):
            live = live_members(members) if members is not None else []
            if members is not None:
                os.close(members)
            tokens = {token for token, _, _ in live}
            entries = state.entries if state is not None else []
            held = {entry.member for entry in entries if entry.member in tokens}
            in_flight = sum(1 for entry in entries if entry.member in tokens)
            ahead = max(0, last - state.taken) if state is not None else 0
            result.append(WorkQueueStatus(
                each, name, [WorkQueueMemberStatus(pid, namespace, token in held) for token, pid, namespace in live],
                ahead + len(entries) - in_flight, in_flight,
                state.acknowledged if state else 0, state.dead_lettered if state else 0,
                state.expired if state else 0, state.lost if state else 0, state is None))
    return result

