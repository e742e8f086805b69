"""Reading a log: the latest message (Protocol.md §11.1), all retained ones (§11.2) and a
listener's cursor that follows the log (§11.3, with R5 and R6 of revision 2.1)."""

from __future__ import annotations

import os
import time
from typing import Callable, ClassVar, List, Optional, Tuple, TypeVar, Union

from . import claims
from .configuration import DEFAULT, Configuration
from .container import ContainerDirectory
from .errors import WormholeError
from .format import HEADER_SIZE, LOG_SUFFIX, MAXIMUM_PAYLOAD, Header, Item, Record, Walk, find_tail, problem, read_header

T = TypeVar("T")


def open_log(container: ContainerDirectory, identifier: str) -> Optional[Tuple[int, os.stat_result, Optional[Header]]]:
    """(fd, stat, header or None when empty) of the log, or None when there is none."""
    name = identifier + LOG_SUFFIX
    opened = container.open_file(name, write=False)
    if opened is None:
        return None
    fd, status = opened
    try:
        header = read_header(fd, container.file_path(name)) if status.st_size > 0 else None
    except BaseException:
        os.close(fd)
        raise
    return fd, status, header


def with_log(container: ContainerDirectory, identifier: str,
              body: Callable[[int, os.stat_result, Header], T]) -> Optional[T]:
    """``body(fd, stat, header)`` on the open log, or None when there is no log (or an
    empty one)."""
    opened = open_log(container, identifier)
    if opened is None:
        return None
    fd, status, header = opened
    try:
        return None if header is None else body(fd, status, header)
    finally:
        os.close(fd)


def read_latest(container: ContainerDirectory, identifier: str, configuration: Configuration = DEFAULT
                ) -> Optional[Record]:
    """§11.1: the latest record, or None (none yet, cleared, or expired: an older one is
    not the latest). One too large for this reader, or damaged, raises."""
    def latest(fd: int, status: os.stat_result, header: Header) -> Optional[Record]:
        path = container.file_path(identifier + LOG_SUFFIX)
        tail = find_tail(fd, status.st_size, header, configuration.maximum_message_size, path, identifier)
        if tail.last_record is None or tail.last_sequence <= header.cleared_through:
            return None
        if isinstance(tail.last_record, WormholeError):
            if tail.last_record.code == WormholeError.CORRUPT_RECORD:
                raise problem(WormholeError.CORRUPT_RECORD,
                              f"the latest message of '{identifier}' ({tail.last_sequence}) is damaged, at offset "
                              f"{tail.last_offset}: {tail.last_record.message}",
                              offset=tail.last_offset, sequence=tail.last_sequence, path=path)
            raise tail.last_record
        if tail.last_record.expired(time.time_ns()):
            return None
        return tail.last_record

    return with_log(container, identifier, latest)


def log_summary(container: ContainerDirectory, identifier: str) -> Optional[Tuple[int, int]]:
    """(logID, last sequence number) of the log of ``identifier``, or None when there is
    no log (or an empty one)."""
    return with_log(container, identifier, lambda fd, status, header: (
        header.log_id, find_tail(fd, status.st_size, header, MAXIMUM_PAYLOAD).last_sequence))


def read_record(container: ContainerDirectory, identifier: str, sequence: int,
                configuration: Configuration = DEFAULT, log_id: int = 0) -> Optional[Record]:
    """The record ``sequence`` of the log, when it is still there (not compacted away, not
    damaged), cleared or not and expired or not: a work queue's claim kept it, and the
    queue counts expired ones (§18.3 T2). With ``log_id``, only in that log (in a log
    made anew the same number is another message)."""
    def find(fd: int, status: os.stat_result, header: Header) -> Optional[Record]:
        if log_id not in (0, header.log_id):
            return None
        for item in Walk(fd, HEADER_SIZE, header, configuration.maximum_message_size,
                         container.file_path(identifier + LOG_SUFFIX), identifier):
            if isinstance(item, Record) and item.sequence >= sequence:
                return item if item.sequence == sequence else None
        return None
    return with_log(container, identifier, find)


def read_all(container: ContainerDirectory, identifier: str, configuration: Configuration = DEFAULT,
             expired: bool = False) -> List[Item]:
    """§11.2: every record above clearedThrough, oldest first, and a problem for each
    that cannot be read. Records whose expiry has passed are left out (§8.1), unless
    ``expired``."""
    now = time.time_ns()
    return with_log(container, identifier, lambda fd, status, header: [
        item for item in Walk(fd, HEADER_SIZE, header, configuration.maximum_message_size,
                              container.file_path(identifier + LOG_SUFFIX), identifier)
        if not (isinstance(item, Record) and (item.sequence <= header.cleared_through
                                              or (not expired and item.expired(now))))]) or []


def without_expired(items: List[Item], identifier: str, path: Optional[str] = None) -> List[Item]:
    """§11.3 R1: ``items`` without the records whose expiry has passed now, when they
    are read, with one ``MESSAGES_EXPIRED`` report in place of each run of them (expired
    records with nothing else between them), saying how many; its ``sequence`` is the
    newest of the run. As the Swift library's ``WormholeRecord.withoutExpired``."""
    if not any(isinstance(item, Record) and item.expires_ns for item in items):
        return items
    now = time.time_ns()
    kept: List[Item] = []
    run: List[int] = []

    def end_run() -> None:
        if run:
            count = len(run)
            kept.append(problem(WormholeError.MESSAGES_EXPIRED,
                                f"{count} message{'' if count == 1 else 's'} of '{identifier}' expired before this "
                                f"listener read {'it' if count == 1 else 'them'}; expired messages are not delivered",
                                sequence=run[-1], lost=count, path=path))
            run.clear()

    for item in items:
        if isinstance(item, Record) and item.expired(now):
            run.append(item.sequence)
            continue
        end_run()
        kept.append(item)
    end_run()
    return kept


class StartingPoint:
    """Where a listener starts: ``NOW`` (messages passed from now on), ``LATEST`` (the
    latest one, then the new ones), ``HISTORY`` (the retained history, then the new ones)
    or ``StartingPoint.after(sequence)``."""

    __slots__ = ("kind", "sequence")

    NOW: ClassVar["StartingPoint"]
    LATEST: ClassVar["StartingPoint"]
    HISTORY: ClassVar["StartingPoint"]

    def __init__(self, kind: str, sequence: int = 0) -> None:
        if kind not in ("now", "latest", "history", "after"):
            raise WormholeError(WormholeError.INVALID_CONFIGURATION, f"unknown starting point {kind!r}")
        self.kind, self.sequence = kind, sequence

    @staticmethod
    def after(sequence: int) -> "StartingPoint":
        if sequence < 0:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION, f"a sequence number is at least 0, not {sequence}")
        return StartingPoint("after", sequence)

    @staticmethod
    def parse(value: Union["StartingPoint", str]) -> "StartingPoint":
        """A StartingPoint, or its text: "now", "latest", "history" or "after:N"."""
        if isinstance(value, StartingPoint):
            return value
        if value.startswith("after:"):
            try:
                return StartingPoint.after(int(value[6:]))
            except ValueError:
                pass
        return StartingPoint(value)

    def __repr__(self) -> str:
        return f"StartingPoint.after({self.sequence})" if self.kind == "after" else f"StartingPoint.{self.kind.upper()}"


StartingPoint.NOW = StartingPoint("now")
StartingPoint.LATEST = StartingPoint("latest")
StartingPoint.HISTORY = StartingPoint("history")


class Cursor:
    """§11.3: follows the log of one identifier. The caller watches the container first
    (S1); the cursor claims (S2) and looks (S3, S4). ``read()`` returns what is new;
    ``invalidate()`` marks the file at the name as possibly replaced."""

    def __init__(self, container: ContainerDirectory, identifier: str, start: StartingPoint = StartingPoint("now"),
                 configuration: Configuration = DEFAULT, durable: Optional[claims.DurablePosition] = None,
                 claiming: bool = True, position_log_id: Optional[int] = None) -> None:
        """``position_log_id``: for a position kept elsewhere (a work queue's state,
        §18.4), with ``start`` after its sequence number: the log that number belongs to
        (0: none yet). Such a position claims what follows it, so it is not raised to what
        a clear hid; in another log (made anew) it starts at that log's first message, as
        the queue's claim of another log kept everything."""
        self.container = container
        self.identifier = identifier
        self.name = identifier + LOG_SUFFIX
        self.path = container.file_path(self.name)
        self.configuration = configuration
        self.maximum = configuration.maximum_message_size
        self.fd: Optional[int] = None
        self.inode: Optional[Tuple[int, int]] = None
        self.header: Optional[Header] = None
        self.offset = HEADER_SIZE
        self.log_id: Optional[int] = None
        self.delivered = 0
        self.invalidated = False
        self.reported_damage = -1
        self.checked_offset = -1
        self.sees_cleared = False
        self.position_log_id = position_log_id
        self.deferred: Optional[WormholeError] = None
        self.more = False
        self.unpublished = False
        self.durable = durable
        # A queue's reader counts expired messages itself (§18.3): it reads them.
        self.drops_expired = True
        # The container's generation when the claim was made: a container replaced since
        # holds neither the claim nor a durable position; they are made again in it.
        self.claimed_generation = container.generation
        # S2; a durable listener's position is its claim (§12.4), as in the Swift library.
        # A work queue's member reads without one (``claiming`` False): its queue's state
        # keeps what the queue has not handled (§18.4), and status lists the member once.
        self.claiming = claiming and durable is None
        self.claim = claims.Claim(container, identifier, configuration.claim_step()) if self.claiming \
            else claims.NoClaim(configuration.claim_step())
        try:
            self._look(start)
        except BaseException:
            self.close()
            raise

    def _look(self, start: StartingPoint) -> None:
        stored = self.durable.stored if self.durable is not None else None
        opened = open_log(self.container, self.identifier)                              # S3
        if opened is not None:
            self.fd, status, self.header = opened
            self.inode = (status.st_dev, status.st_ino)
        header = self.header
        if header is None or self.fd is None:
            # No log, or one whose header is being written: its first record is new. A
            # position of a log that is gone counts for nothing in the one made next.
            if stored is not None:
                self.delivered, self.sees_cleared = (0 if stored.log_id else stored.position), True
            elif self.position_log_id is not None:
                self.delivered, self.sees_cleared = (0 if self.position_log_id else start.sequence), True
            elif start.kind == "after":
                self.delivered = start.sequence
            self._store_durable()
            return
        self.log_id = header.log_id
        if stored is not None:
            # D4: a resumed name: after its position in the same log (or a position of no
            # log yet), from the start of a new one; cleared messages included, as its
            # claim kept them (§12.3 Q1: 0, everything, in another log).
            self.delivered = stored.position if stored.log_id in (0, header.log_id) else 0
            self.sees_cleared = True
        elif self.position_log_id is not None:
            # A work queue's state (T2, T3): its claim kept what a clear hid.
            same = self.position_log_id in (0, header.log_id)
            self.delivered, self.sees_cleared = (start.sequence if same else 0), True
        else:
            kind = start.kind
            if kind in ("now", "latest", "history"):
                tail = find_tail(self.fd, status.st_size, header, self.maximum, self.path, self.identifier)
            if kind in ("now", "latest"):
                self.delivered, self.offset = tail.last_sequence, tail.end
                if kind == "latest" and tail.last_offset is not None and tail.last_sequence > header.cleared_through:
                    self.delivered, self.offset = tail.last_sequence - 1, tail.last_offset
            elif kind == "history":
                retained = self.configuration.retained_message_count
                last = tail.last_sequence
                self.delivered = max(header.cleared_through, header.base_sequence, last - retained if last > retained else 0)
            else:
                self.delivered = max(start.sequence, header.cleared_through)
        self.claim.update(self.delivered, self.log_id or 0, force=True)                # S4
        self._store_durable()

    def _store_durable(self) -> None:
        if self.durable is not None:
            self.durable.store(self.delivered, self.log_id or 0)
            self.claim.update(self.delivered, self.log_id or 0, force=True)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.claim.close()
        if self.durable is not None:
            self.durable.close()

    def invalidate(self) -> None:
        self.invalidated = True

    def read(self, one_log: bool = False) -> List[Item]:
        """R1-R6: returns a list of Record and WormholeError items. With ``one_log``, a
        batch never spans two logs (a durable reader's D5); ``more`` then says whether to
        read again at once."""
        results: List[Item] = []
        self.more = False
        if self.deferred is not None:
            results.append(self.deferred)
            self.deferred = None
        try:
            self._read(results, one_log)
        except (OSError, WormholeError) as error:
            failure = error if isinstance(error, WormholeError) else WormholeError.system("read", error, self.path)
            if any(isinstance(item, Record) for item in results):
                self.deferred = failure                                                # R6
            else:
                results.append(failure)
        self.claim.update(self.delivered, self.log_id or 0)                          # R4
        # Caught up (nothing more to read without a wake-up): the exact position is
        # written now, at most once per idle interval (§12.2); ``unpublished`` says it
        # still lags, and the owner reads again after the interval.
        self.unpublished = not self.more and self.claim.caught_up(self.delivered, self.log_id or 0)
        return without_expired(results, self.identifier, self.path) if self.drops_expired else results

    def _read(self, results: List[Item], one_log: bool) -> None:
        while True:
            if self.fd is None:
                if not (self.invalidated and self._open_current()):
                    return
                continue
            if self.header is None:
                try:
                    self.header = read_header(self.fd, self.path)
                except WormholeError:
                    self.header = None
                if self.header is None:
                    if self.invalidated and self._open_current():
                        continue
                    return
                self._adopt(self.header)          # R3, for a file that was empty when opened
            header = self.header
            if self.log_id is None:
                self.log_id = header.log_id
            found = False
            # Damage the walk met, reported with the next whole record, which says which
            # messages it held (the numbers between the last whole record and that one).
            damage: Optional[WormholeError] = None
            last_seen = max(header.base_sequence, self.delivered)
            walk = Walk(self.fd, self.offset, header, self.maximum, self.path, self.identifier)      # R1
            for item in walk:
                sequence = getattr(item, "sequence", None)
                if isinstance(item, Record) or item.code == WormholeError.MESSAGE_TOO_LARGE:
                    if sequence is None:
                        continue
                    last_seen = max(last_seen, sequence)
                    self._report_damage(damage, sequence, header, results)
                    damage = None
                    if sequence <= self.delivered:
                        continue
                    found = True
                    self._report_gap(sequence, header, results)                             # §11.4
                    self.delivered = sequence
                    results.append(item)
                elif item.offset is not None and item.offset > self.reported_damage:
                    # Damage, which a walk reports with where it is.
                    self.reported_damage = item.offset
                    damage = item
            # A damaged record, whole, ends the file: it took the number after the last
            # whole record (§9.3), which the next message does not.
            self._report_damage(damage, last_seen + 2, header, results)
            self.offset = walk.end
            if not found and self._rewritten(header, results):                           # R5
                continue
            if self.invalidated:
                if one_log and any(isinstance(item, Record) for item in results):
                    self.more = True
                    return
                if self._open_current():                                                  # R3
                    continue
            return

    def _rewritten(self, known: Header, results: List[Item]) -> bool:
        """R5: whether the held file was rewritten under this listener (cut, emptied,
        cleared in place); reports it, writes the claim at once and reads from 128 again."""
        if self.fd is None or self.checked_offset == self.offset:
            return False
        size = os.fstat(self.fd).st_size
        rewritten = size < self.offset
        if not rewritten and size >= self.offset + 4:
            marker = os.pread(self.fd, 4, self.offset)
            rewritten = marker != known.layout.marker
        if not rewritten and size < self.offset + 4:
            try:
                now = read_header(self.fd, self.path)
            except WormholeError:
                now = None
            rewritten = now != known
        if not rewritten:
            return False
        self.checked_offset = self.offset
        try:
            header = read_header(self.fd, self.path)
        except WormholeError:
            header = None
        if header is not None and header.log_id == self.log_id and header != known and \
                header.cleared_through == header.base_sequence:
            # K2': a clear on a full filesystem emptied it in place.
            if self.delivered < header.base_sequence:
                missed = header.base_sequence - self.delivered
                results.append(problem(WormholeError.MESSAGES_LOST,
                                       f"{missed} message{'' if missed == 1 else 's'} of '{self.identifier}' "
                                       f"({self.delivered + 1}...{header.base_sequence}) were cleared before this "
                                       f"listener read them, on a filesystem with no room to keep them for it",
                                       lost=missed, path=self.path))
                self.delivered = header.base_sequence
        else:
            if header is not None and header.log_id == self.log_id:
                # Shorter than what was read: cut; as long or longer (bytes that are no
                # record appended, or written over what was read): rewritten.
                what = (f"{'cut' if size < self.offset else 'rewritten'} by another program ({size} bytes where this "
                        f"listener had read {self.offset}); it goes on after message {self.delivered}, and is told of "
                        f"any message it had not read that is gone")
            elif header is not None:
                what = ("emptied by another program and started again as a new log; messages this listener had not "
                        "read before that are gone, how many is not known")
                self.delivered = 0
            else:
                what = (f"emptied or overwritten by another program ({size} bytes where this listener had read "
                        f"{self.offset}); messages this listener had not read before that may be gone")
            results.append(WormholeError(WormholeError.LOG_CHANGED_OUTSIDE_WORMHOLE, f"'{self.path}' was {what}",
                                         path=self.path))
        if header is not None:
            self.header, self.log_id = header, header.log_id
        else:
            self.header = None
        self.claim.update(self.delivered, self.log_id or 0, force=True)
        # Read again from the first record; ``checked_offset`` stays where the change was
        # found, so that the walk ending there again (bytes that are no record still
        # follow) does not find it again, report it again and read again, for ever.
        self.offset = HEADER_SIZE
        self.reported_damage = -1
        return header is not None

    def _adopt(self, header: Header) -> None:
        """R3: a log with another logID was created anew and its numbers restarted:
        delivered = 0. Also when the file was empty when it was opened (its header is read
        at a later wake-up): numbering of a log deleted and made again starts at 1 too."""
        if self.log_id is not None and header.log_id != self.log_id:
            self.delivered = 0
            # A work queue's state of another log claimed all of the new one (§18.4).
            self.sees_cleared = self.position_log_id is not None
        self.log_id = header.log_id

    def _claim_again_if_replaced(self) -> None:
        """After the container was replaced, this reader's claim (or durable position) is
        in the old directory: made again in the new one before its log is opened, as a
        new listener claims before it looks."""
        generation = self.container.generation
        if generation == self.claimed_generation:
            return
        if self.claiming:
            fresh = claims.Claim(self.container, self.identifier, self.claim.step)
            self.claim.close()
            self.claim = fresh
        elif self.durable is not None:
            durable = claims.DurablePosition(self.container, self.identifier, self.durable.name)
            self.durable.close()
            self.durable = durable
        self.claimed_generation = generation
        self.claim.update(self.delivered, self.log_id or 0, force=True)
        self._store_durable()

    def _report_damage(self, damage: Optional[WormholeError], sequence: int, header: Header,
                       results: List[Item]) -> None:
        """§11.4: damage the walk skipped, before the whole record numbered ``sequence``
        that follows it: the numbers between the last delivered message and that record
        were in the damaged bytes and are lost; they count as delivered, so that the gap
        is not reported again as messages missing from the log."""
        if damage is None:
            return
        base = self.delivered if self.sees_cleared else max(self.delivered, header.cleared_through)
        if sequence <= base + 1:
            results.append(problem(WormholeError.CORRUPT_RECORD,
                                   f"{damage.message}; skipped (it held no message this listener had not read)",
                                   offset=damage.offset, path=self.path))
            return
        lost = sequence - base - 1
        which = f"message {base + 1}" if lost == 1 else f"messages {base + 1}...{sequence - 1}"
        results.append(problem(WormholeError.CORRUPT_RECORD,
                               f"{damage.message}; skipped up to the next whole record: {which} of "
                               f"'{self.identifier}' {'was' if lost == 1 else 'were'} in the damaged bytes and "
                               f"{'is' if lost == 1 else 'are'} lost",
                               offset=damage.offset, sequence=base + 1, lost=lost, path=self.path))
        self.delivered = sequence - 1

    def _report_gap(self, sequence: int, header: Header, results: List[Item]) -> None:
        """§11.4: the messages between the last delivered one and ``sequence`` that this
        reader never saw, unless cleared; why, as the file tells: at or below its base
        they were compacted away, above it they were removed outside the protocol."""
        base = self.delivered if self.sees_cleared else max(self.delivered, header.cleared_through)
        if sequence > base + 1:
            lost = sequence - base - 1
            why = ("were compacted away before this listener read them: it fell behind by more than the backlog cap "
                   "(Wormhole.Configuration.maximumBacklogMessageCount, maximumBacklogByteCount), or started before "
                   "the oldest message kept" if sequence - 1 <= header.base_sequence else
                   "are missing from the log: damaged, or removed by something that changed the file outside the protocol")
            results.append(problem(WormholeError.MESSAGES_LOST,
                                   f"{lost} message{'s' if lost != 1 else ''} of '{self.identifier}' "
                                   f"({base + 1}...{sequence - 1}) {why}", sequence=sequence, lost=lost))

    def _open_current(self) -> bool:
        """R3: once the held file is read to its end, the file at the name now."""
        self.invalidated = False
        # A listener follows the directory at the path but never makes it: passes and
        # posts make a removed container again.
        try:
            self.container.refresh(create=False)
        except WormholeError:
            pass
        self._claim_again_if_replaced()
        try:
            opened = open_log(self.container, self.identifier)
        except (OSError, WormholeError):
            # Out of descriptors, or a file not yet usable at the name (made a moment ago
            # by a member of a shared group, before its fchmod): the next wake-up tries
            # again, so no message of the new file is left unread.
            self.invalidated = True
            raise
        if opened is None:
            if self.fd is not None:
                os.close(self.fd)
            self.fd, self.header, self.inode = None, None, None
            return False
        fd, status, header = opened
        if self.fd is not None and self.inode == (status.st_dev, status.st_ino):
            os.close(fd)
            return False
        if self.fd is not None:
            os.close(self.fd)
        if header is not None:
            self._adopt(header)
        self.fd, self.header, self.inode = fd, header, (status.st_dev, status.st_ino)
        self.offset = HEADER_SIZE
        self.reported_damage = -1
        self.checked_offset = -1
        return True
