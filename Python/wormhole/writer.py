"""Writing a log: appending (Protocol.md §9.1, with the repairs W3' and W5'), compaction
(§10.2), clearing (§10.3, K2') and the conversion of a version 2 log to version 3."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from typing import Callable, List, Optional, Tuple

from . import claims, queues
from .configuration import DEFAULT, Configuration
from .container import ContainerDirectory
from .errors import WormholeError
from .format import (COMPACTING_SUFFIX, HEADER_SIZE, KIND_NAMES, LAYOUTS, LOG_SUFFIX, MAXIMUM_PAYLOAD, V3,
                     WRITTEN_VERSION, CHUNK, Header, Record, Tail, Walk, encode_record, find_tail, pwrite_all,
                     pwritev_all, random_u64, read_header)

_log = logging.getLogger("Wormhole")


def new_header(configuration: Configuration) -> Header:
    """§9.1 W4: the header of a log created now."""
    return Header(log_id=random_u64(), base_sequence=0, cleared_through=0,
                  byte_threshold=HEADER_SIZE + 2 * configuration.retention_size(),
                  record_threshold=2 * configuration.retained_message_count)


Body = Callable[[Header, Tail], Tuple[object, Tail]]


class Writer:
    """Appends to the log of one identifier, keeping the log open between passes with
    what it learned of its tail (§9.1: a steady pass is flock, fstat, pwritev, unlock).
    Thread-safe: one mutex serialises this writer's passes."""

    def __init__(self, container: ContainerDirectory, identifier: str,
                 configuration: Configuration = DEFAULT) -> None:
        self.container = container
        self.identifier = identifier
        self.name = identifier + LOG_SUFFIX
        self.configuration = configuration
        self.fd: Optional[int] = None
        self.header: Optional[Header] = None
        self.tail: Optional[Tail] = None
        self.generation = 0
        self.mutex = threading.Lock()

    @property
    def path(self) -> str:
        return self.container.file_path(self.name)

    def close(self) -> None:
        with self.mutex:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None

    def _drop(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.header, self.tail = None, None, None

    def locked(self, create: bool, body: Body, clearing: bool = False, compacting: bool = True) -> object:
        """W1-W5, then ``body(header, tail)`` -> (result, new tail), then W7 (or the clear)
        and W8. Returns None when there is no log and ``create`` is False."""
        with self.mutex:
            # §4.1: the directory at the path must be the one held (one lstat per pass): a
            # container moved away or replaced is left for the one there now, a removed one
            # is made again by a pass.
            self.container.refresh(create=create)
            if self.fd is not None and self.generation != self.container.generation:
                self._drop()
            for _ in range(64):
                if self.fd is None:
                    self.generation = self.container.generation
                    try:
                        opened = self.container.open_file(self.name, write=True, create=create)      # W1
                    except WormholeError as error:
                        if error.code != WormholeError.CONTAINER_UNAVAILABLE:
                            raise
                        self.container.refresh()                         # the container went away: once
                        self.generation = self.container.generation
                        opened = self.container.open_file(self.name, write=True, create=create)
                    if opened is None:
                        return None
                    self.fd, self.header, self.tail = opened[0], None, None
                fd = self.fd
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)                                                   # W2
                    status = os.fstat(fd)                                                            # W3
                    if status.st_nlink == 0:
                        self._drop()
                        continue
                    result = self._under_lock(fd, status.st_size, create, body, clearing, compacting)
                except OSError as error:
                    self._drop()                                         # closing unlocks
                    raise WormholeError.system("write", error, self.path) from None
                except BaseException:
                    self._drop()
                    raise
                if result is _REPLACED:
                    continue
                return result
            raise WormholeError(WormholeError.SYSTEM_ERROR,
                                f"'{self.path}' kept being replaced while this process tried to append to it",
                                path=self.path)

    def _under_lock(self, fd: int, size: int, create: bool, body: Body, clearing: bool, compacting: bool) -> object:
        known_end = self.tail.end if self.tail is not None and self.header is not None else None
        if self.header is not None and (size < HEADER_SIZE or (known_end is not None and size < known_end)):
            self._repair(fd, size)                                                                   # W3'
            size = os.fstat(fd).st_size
        if self.header is None:                                                                      # W4
            if size == 0:
                if not create:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return None
                self.header = new_header(self.configuration)
                pwrite_all(fd, self.header.encode(), 0)
                self.tail = Tail(HEADER_SIZE, 0)
                size = HEADER_SIZE
            else:
                self.header = read_header(fd, self.path)
                self.tail = None
        header = self.header
        assert header is not None
        tail = self._current_tail(fd, size)                                                          # W5
        if tail.end < size:
            os.ftruncate(fd, tail.end)
        if known_end is None and self.tail is None:
            highest = max(claims.highest_position(self.container, self.identifier, header.log_id),    # W5'
                          queues.highest_taken(self.container, self.identifier, header.log_id))
            if highest > tail.last_sequence:
                tail = Tail(tail.end, highest, tail.last_offset)
        self.tail = tail
        if header.version != WRITTEN_VERSION:
            # A version 2 log: converted, under its lock, as a compaction does.
            self._replace(fd, header, tail, clearing=False)
            return _REPLACED
        result, tail = body(header, tail)                                                            # W6
        self.tail = tail
        due = tail.end > header.byte_threshold or tail.last_sequence - header.base_sequence > header.record_threshold
        if clearing or (compacting and due):
            try:
                self._replace(fd, header, tail, clearing=clearing)                                   # W7
            except (OSError, WormholeError) as error:
                failed_errno = error.errno
                if clearing and failed_errno in (errno.ENOSPC, errno.EDQUOT):
                    # K2': no room for a cleared copy: a header with everything cleared over
                    # the old one, then the records go.
                    emptied = new_header(self.configuration)
                    emptied.log_id = header.log_id
                    emptied.base_sequence = emptied.cleared_through = tail.last_sequence
                    pwrite_all(fd, emptied.encode(), 0)
                    os.ftruncate(fd, HEADER_SIZE)
                    self.header, self.tail = emptied, Tail(HEADER_SIZE, tail.last_sequence)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return result
                if clearing:
                    raise
                _log.warning("could not compact '%s': %s", self.path, error)
            else:
                return result
        fcntl.flock(fd, fcntl.LOCK_UN)                                                               # W8
        return result

    def _repair(self, fd: int, size: int) -> None:
        """W3': the file shrank under this writer: keep the whole records with the higher
        last sequence, or write the header again."""
        assert self.header is not None and self.tail is not None
        known = self.header
        last = self.tail.last_sequence
        try:
            found = read_header(fd, self.path)
        except WormholeError:
            found = None
            data = os.pread(fd, 12, 0)
            if len(data) >= 12 and data[:8] == b"WORMHOLE":
                version = int.from_bytes(data[8:12], "little")
                if version not in (2, 3):
                    raise
        if found is not None and found.log_id == known.log_id:
            tail = find_tail(fd, size, found, MAXIMUM_PAYLOAD, self.path, self.identifier)
            self.header = found
            self.tail = Tail(tail.end, max(last, tail.last_sequence), tail.last_offset)
            if tail.end < size:
                os.ftruncate(fd, tail.end)
            return
        repaired = known.copy()
        repaired.base_sequence = max(last, known.base_sequence)
        repaired.cleared_through = min(repaired.cleared_through, repaired.base_sequence)
        pwrite_all(fd, repaired.encode(), 0)
        os.ftruncate(fd, HEADER_SIZE)
        self.header, self.tail = repaired, Tail(HEADER_SIZE, repaired.base_sequence)

    def _current_tail(self, fd: int, size: int) -> Tail:
        known = self.tail
        header = self.header
        assert header is not None
        if known is not None and known.end == size:
            return known
        if known is not None and known.end < size:
            walk = Walk(fd, known.end, header, MAXIMUM_PAYLOAD, self.path, self.identifier)
            tail = Tail(known.end, known.last_sequence, known.last_offset)
            for item in walk:
                if isinstance(item, Record):
                    tail = Tail(item.offset + item.length, max(tail.last_sequence, item.sequence), item.offset)
            tail.end = walk.end
            return tail
        return find_tail(fd, size, header, MAXIMUM_PAYLOAD, self.path, self.identifier)

    def _replace(self, fd: int, header: Header, tail: Tail, clearing: bool) -> None:
        """Compaction (C1-C8), converting a version 2 log; on success this writer holds
        the new file, unlocked."""
        new_fd, new_header_, new_tail = compact(self.container, self.identifier, fd, header, tail, clearing,
                                                self.configuration, self.path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        self.fd, self.header, self.tail = new_fd, new_header_, new_tail
        fcntl.flock(new_fd, fcntl.LOCK_UN)

    def append(self, kind: int, payload: bytes, expires_ns: int = 0, correlation: int = 0, role: int = 0,
               torn: Optional[int] = None) -> int:
        """Passes one message (§9.1); returns its sequence number. With ``torn``, writes only
        the record's first ``torn`` bytes and stops, as a writer killed in its pwritev (for
        tests and tools)."""
        if kind not in KIND_NAMES:
            raise ValueError(f"unknown payload kind {kind}")
        payload = bytes(payload)
        self.configuration.check_message_size(len(payload), self.identifier)
        date_ns, pid, uid = time.time_ns(), os.getpid(), os.geteuid()

        def body(header: Header, tail: Tail) -> Tuple[object, Tail]:
            fd = self.fd
            assert fd is not None           # locked() runs the body with the log open
            sequence = tail.last_sequence + 1
            record = Record(sequence, date_ns, pid, kind, payload, uid, expires_ns, correlation, role)
            parts = encode_record(V3, header.log_id, record)
            length = sum(len(part) for part in parts)
            if torn is not None:
                if not 0 < torn < length:
                    raise ValueError(f"torn must be between 1 and {length - 1} for this message")
                pwrite_all(fd, b"".join(parts)[:torn], tail.end)
                return sequence, tail
            try:
                pwritev_all(fd, parts, tail.end)
            except OSError:
                os.ftruncate(fd, tail.end)
                raise
            return sequence, Tail(tail.end + length, sequence, tail.end)

        sequence = self.locked(True, body, compacting=torn is None)
        assert isinstance(sequence, int)    # made with create: never None
        return sequence

    def clear(self) -> None:
        """§10.3: clearedThrough = the last sequence, by a compaction."""
        self.locked(False, lambda header, tail: (True, tail), clearing=True)

    def convert(self) -> bool:
        """Converts a version 2 log to version 3 (any pass does it); True when a log exists."""
        return self.locked(False, lambda header, tail: (True, tail), compacting=False) is not None


_REPLACED = object()


def compact(container: ContainerDirectory, identifier: str, fd: int, header: Header, tail: Tail, clearing: bool,
            configuration: Configuration, path: str) -> Tuple[int, Header, Tail]:
    """§10.2 C1-C8 under the lock of ``fd``. A log of version 2 is converted on the way
    (§2): each kept record is written again in version 3's layout (same logID, numbers,
    date, pid and kind; uid unknown), one whose checksum fails is dropped as damage.
    Returns the new file's descriptor (locked), header and tail."""
    layout = header.layout
    overhead = layout.overhead
    entries: List[Tuple[int, int, int]] = []                                              # C1
    for item in Walk(fd, HEADER_SIZE, header, MAXIMUM_PAYLOAD, path, identifier):
        if isinstance(item, Record) and item.offset + item.length <= tail.end:
            entries.append((item.offset, item.sequence, item.length))
    new = header.copy()
    new.version = WRITTEN_VERSION
    if clearing:
        new.cleared_through = tail.last_sequence                                          # C2
    keep_from, count, size = tail.last_sequence + 1, 0, 0                                 # C3
    for _, sequence, length in reversed(entries):
        if sequence <= new.cleared_through:
            continue
        payload = length - overhead
        if count > 0 and (count >= configuration.retained_message_count or
                          size + payload > configuration.retained_byte_count):
            break
        keep_from, count, size = sequence, count + 1, size + payload
    claim = claims.lowest_live_claim(container, identifier, header.log_id)                # C4
    kept_for_queues = queues.lowest_unhandled(container, identifier, header.log_id)       # Q5, §18.4
    if kept_for_queues is not None:
        claim = kept_for_queues if claim is None else min(claim, kept_for_queues)
    # The lowest number kept for a reader: below the first kept record when the numbers
    # between are missing (damaged), so that readers are told they are missing, not that
    # they fell behind (C6).
    lowest_kept = keep_from
    if claim is not None and claim < claims.UINT64_MAX and claim + 1 < keep_from:
        following = claim + 1
        count, size, capped, over_cap = 0, 0, keep_from, False
        for _, sequence, length in reversed(entries):
            if sequence < following:
                continue
            count += 1
            size += length - overhead
            if count > max(configuration.maximum_backlog_message_count, configuration.retained_message_count) or \
                    size > max(configuration.maximum_backlog_byte_count, configuration.retained_byte_count):
                over_cap = True
                break
            capped = sequence
        keep_from = min(keep_from, max(following, capped))
        lowest_kept = keep_from if over_cap else min(keep_from, following)
    kept = [entry for entry in entries if entry[1] >= keep_from]                           # C5
    new_overhead = LAYOUTS[WRITTEN_VERSION].overhead
    copied = sum(length - overhead + new_overhead for _, _, length in kept)
    new.base_sequence = (max(header.base_sequence, min(kept[0][1], lowest_kept) - 1) if kept
                         else tail.last_sequence)                                          # C6
    new.byte_threshold = HEADER_SIZE + 2 * max(configuration.retention_size(), copied)
    new.record_threshold = 2 * max(configuration.retained_message_count, len(kept))
    temporary = "." + identifier + LOG_SUFFIX + COMPACTING_SUFFIX
    out = container.create_exclusive(temporary)                                            # C7
    try:
        pwrite_all(out, new.encode(), 0)
        target = HEADER_SIZE
        last_offset: Optional[int] = None
        if layout is LAYOUTS[WRITTEN_VERSION]:
            index = 0
            while index < len(kept):                                                       # runs of adjacent records
                start = kept[index][0]
                end = start + kept[index][2]
                last_offset = target + (end - start) - kept[index][2]
                index += 1
                while index < len(kept) and kept[index][0] == end:
                    end += kept[index][2]
                    index += 1
                while start < end:
                    data = os.pread(fd, min(CHUNK, end - start), start)
                    if not data:
                        raise WormholeError(WormholeError.CORRUPT_RECORD,
                                            f"'{path}' ended while it was being compacted", path=path)
                    pwrite_all(out, data, target)
                    start += len(data)
                    target += len(data)
            if kept:
                last_offset = target - (kept[-1][2])
        else:
            # Another version's records: each one read and written in this version's layout.
            for item in Walk(fd, HEADER_SIZE, header, MAXIMUM_PAYLOAD, path, identifier):
                if not isinstance(item, Record) or item.sequence < keep_from or item.offset + item.length > tail.end:
                    continue
                parts = encode_record(LAYOUTS[WRITTEN_VERSION], header.log_id, item)
                last_offset = target
                pwritev_all(out, parts, target)
                target += sum(len(part) for part in parts)
        fcntl.flock(out, fcntl.LOCK_EX)                                                    # C7
        os.rename(temporary, identifier + LOG_SUFFIX, src_dir_fd=container.fd, dst_dir_fd=container.fd)   # C8
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=container.fd)
        except OSError:
            pass
        os.close(out)
        raise
    return out, new, Tail(target, tail.last_sequence, last_offset)
