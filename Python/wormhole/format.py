"""The log file: its header (Protocol.md §7) and records (§8) in versions 2 and 3, the
walk over records (§9.3) and finding the tail (§9.2). Readers read both versions; writers
write version 3."""

from __future__ import annotations

import datetime
import json
import os
import struct
import zlib
from typing import Any, Iterator, List, Optional, Tuple, Union

from .errors import WormholeError

MAGIC = b"WORMHOLE"
HEADER_SIZE = 128
WRITTEN_VERSION = 3
READ_VERSIONS = (2, 3)
MAXIMUM_PAYLOAD = 1 << 30
LOG_SUFFIX = ".wormhole"
COMPACTING_SUFFIX = ".compacting"
UNKNOWN_UID = 0xFFFFFFFF

KIND_DATA, KIND_TEXT, KIND_JSON = 0, 1, 2
KIND_NAMES = {KIND_DATA: "data", KIND_TEXT: "text", KIND_JSON: "json"}
ROLE_MESSAGE, ROLE_REQUEST, ROLE_REPLY, ROLE_ERROR_REPLY = 0, 1, 2, 3
ROLE_NAMES = {0: "message", 1: "request", 2: "reply", 3: "errorReply"}

_HEADER = struct.Struct("<8sIIQQQQQ68x")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# Bytes read at a time by a walk; a record longer than this is read whole, alone.
CHUNK = 1 << 20


def crc32(data: bytes, crc: int = 0) -> int:
    return zlib.crc32(data, crc) & 0xFFFFFFFF


class Layout:
    """The record layout of one version: marker, the fields before the CRC, overhead."""

    def __init__(self, version: int, marker: bytes, fields: str) -> None:
        self.version = version
        self.marker = marker
        self.head = struct.Struct(fields)
        self.crc_offset = self.head.size
        self.payload_offset = self.head.size + 4
        self.overhead = self.payload_offset + 4

    def checksum(self, log_id: int, head: bytes, payload: bytes) -> int:
        """crc32(logID as 8 LE bytes ‖ the record's bytes before its CRC ‖ payload)."""
        return crc32(payload, crc32(head, crc32(_U64.pack(log_id))))


# Version 2: marker, length, sequence, date, pid, kind, 3 reserved; CRC at 32.
V2 = Layout(2, b"WHR2", "<4sIQqiB3x")
# Version 3: marker, length, sequence, date, expires, correlation, pid, uid, kind, role,
# 2 reserved; CRC at 52.
V3 = Layout(3, b"WHR3", "<4sIQqqQiIBB2x")
LAYOUTS = {2: V2, 3: V3}
assert V2.overhead == 40 and V3.overhead == 60


class Record:
    """One message as stored: its sequence number, the sender's process id and user id
    (``None`` when unknown: version 2 records), when it was passed, its kind and payload.

    Attributes:
        sequence: its place in the identifier's order, from 1.
        date_ns: when it was passed, nanoseconds since 1970 (the writer's wall clock).
        pid: the sender's process id (in the sender's PID namespace).
        uid: the sender's effective user id, or ``None`` when unknown.
        kind: ``KIND_DATA``, ``KIND_TEXT`` or ``KIND_JSON``.
        payload: the bytes exactly as passed.
        expires_ns: 0, or when it stops being delivered to listeners that start later.
        correlation: 0, or the id of the request a reply answers.
        role: ``ROLE_MESSAGE`` and so on.
    """

    __slots__ = ("sequence", "date_ns", "pid", "uid", "kind", "payload", "expires_ns", "correlation", "role",
                 "offset", "length", "identifier")

    def __init__(self, sequence: int, date_ns: int, pid: int, kind: int, payload: bytes, uid: Optional[int] = None,
                 expires_ns: int = 0, correlation: int = 0, role: int = 0, offset: int = 0, length: int = 0,
                 identifier: str = "") -> None:
        self.sequence, self.date_ns, self.pid, self.kind, self.payload = sequence, date_ns, pid, kind, payload
        self.uid, self.expires_ns, self.correlation, self.role = uid, expires_ns, correlation, role
        self.offset, self.length, self.identifier = offset, length, identifier

    @property
    def sender_pid(self) -> int:
        return self.pid

    @property
    def sender_uid(self) -> Optional[int]:
        return self.uid

    @property
    def date(self) -> datetime.datetime:
        """When it was passed, an aware UTC datetime (microsecond precision)."""
        return datetime.datetime.fromtimestamp(self.date_ns // 1000 / 1e6, tz=datetime.timezone.utc)

    @property
    def expires(self) -> Optional[datetime.datetime]:
        if not self.expires_ns:
            return None
        return datetime.datetime.fromtimestamp(self.expires_ns // 1000 / 1e6, tz=datetime.timezone.utc)

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, str(self.kind))

    def expired(self, now_ns: int) -> bool:
        return self.expires_ns != 0 and self.expires_ns <= now_ns

    def value(self) -> Any:
        """The payload as Python: bytes for data, str for text, the parsed JSON for json."""
        return decode(self)

    def __repr__(self) -> str:
        return (f"Record(sequence={self.sequence}, kind={self.kind_name}, pid={self.pid}, uid={self.uid}, "
                f"payload={self.payload[:40]!r}{'...' if len(self.payload) > 40 else ''})")


def decode(record: Record) -> Any:
    """bytes for data, str for text, the parsed JSON for json."""
    if record.kind == KIND_DATA:
        return record.payload
    try:
        text = record.payload.decode("utf-8")
    except UnicodeDecodeError:
        raise WormholeError(WormholeError.DECODING_FAILED,
                            f"message {record.sequence} of '{record.identifier}' is not UTF-8 text") from None
    if record.kind == KIND_TEXT:
        return text
    try:
        return json.loads(text)
    except ValueError as error:
        raise WormholeError(WormholeError.DECODING_FAILED,
                            f"message {record.sequence} of '{record.identifier}' is not a JSON value: {error}") from None


def problem(code: str, message: str, offset: Optional[int] = None, sequence: Optional[int] = None,
            lost: Optional[int] = None, path: Optional[str] = None) -> WormholeError:
    """Something a reader reports in place of a record: damage, a record too large, a gap."""
    error = WormholeError(code, message, path=path, missed_message_count=lost)
    error.offset = offset
    error.sequence = sequence
    return error


Item = Union[Record, WormholeError]


def encode_record(layout: Layout, log_id: int, record: Record) -> List[bytes]:
    """The record's header (with its CRC), payload and trailer: one pwritev's pieces."""
    payload = record.payload
    if layout is V3:
        uid = UNKNOWN_UID if record.uid is None else record.uid
        head = layout.head.pack(layout.marker, len(payload), record.sequence, record.date_ns, record.expires_ns,
                                record.correlation, record.pid, uid, record.kind, record.role)
    else:
        head = layout.head.pack(layout.marker, len(payload), record.sequence, record.date_ns, record.pid, record.kind)
    return [head + _U32.pack(layout.checksum(log_id, head, payload)), payload, _U32.pack(len(payload))]


def parse_record(layout: Layout, data: Union[bytes, memoryview],
                 log_id: int) -> Tuple[Optional[Record], Optional[str], bool]:
    """§8.3: whether ``data`` (exactly one record's bytes) is a valid record of this log.
    Returns (Record, None, False) or (None, reason, skippable): skippable when the frame
    is whole (its trailer matches) and only its contents fail."""
    fields = layout.head.unpack_from(data, 0)
    marker, length, sequence = fields[0], fields[1], fields[2]
    if marker != layout.marker or len(data) != layout.overhead + length:
        return None, "no record here", False
    if _U32.unpack_from(data, len(data) - 4)[0] != length:
        return None, f"record {sequence} does not end where its length says", False
    payload = bytes(data[layout.payload_offset:layout.payload_offset + length])
    if layout.checksum(log_id, bytes(data[:layout.crc_offset]), payload) != _U32.unpack_from(data, layout.crc_offset)[0]:
        return None, f"record {sequence} fails its checksum", True
    if layout is V3:
        _, _, _, date_ns, expires_ns, correlation, pid, uid, kind, role = fields
        if kind not in KIND_NAMES:
            return None, f"record {sequence} has unknown kind {kind}", True
        if role not in ROLE_NAMES:
            return None, f"record {sequence} has unknown role {role}", True
        return Record(sequence, date_ns, pid, kind, payload, None if uid == UNKNOWN_UID else uid,
                      expires_ns, correlation, role), None, False
    _, _, _, date_ns, pid, kind = fields
    if kind not in KIND_NAMES:
        return None, f"record {sequence} has unknown kind {kind}", True
    return Record(sequence, date_ns, pid, kind, payload), None, False


class Header:
    """§7.1: the 128-byte header, written once per file."""

    __slots__ = ("version", "log_id", "base_sequence", "cleared_through", "byte_threshold", "record_threshold")

    def __init__(self, log_id: int = 0, base_sequence: int = 0, cleared_through: int = 0, byte_threshold: int = 0,
                 record_threshold: int = 0, version: int = WRITTEN_VERSION) -> None:
        self.version = version
        self.log_id = log_id
        self.base_sequence = base_sequence
        self.cleared_through = cleared_through
        self.byte_threshold = byte_threshold
        self.record_threshold = record_threshold

    @property
    def layout(self) -> Layout:
        return LAYOUTS[self.version]

    def copy(self) -> "Header":
        return Header(self.log_id, self.base_sequence, self.cleared_through, self.byte_threshold,
                      self.record_threshold, self.version)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Header) and self.encode() == other.encode()

    def encode(self) -> bytes:
        head = _HEADER.pack(MAGIC, self.version, HEADER_SIZE, self.log_id, self.base_sequence,
                            self.cleared_through, self.byte_threshold, self.record_threshold)
        return head + _U32.pack(crc32(head))

    @staticmethod
    def decode(data: bytes, path: str = "log") -> Optional["Header"]:
        """§7.2: None for an empty file; a Header; or WormholeError(unsupportedFormat)."""
        if len(data) == 0:
            return None
        if len(data) < 12 or data[:8] != MAGIC:
            raise WormholeError(WormholeError.UNSUPPORTED_FORMAT,
                                f"'{path}' is not a Wormhole message log (it does not start with 'WORMHOLE'); move it "
                                f"out of the container or delete it", path=path)
        (version,) = _U32.unpack_from(data, 8)
        if version not in READ_VERSIONS:
            if version < min(READ_VERSIONS):
                advice = ("it was written by an earlier Wormhole, whose messages this version does not read or "
                          "change. Read what you need with that version, then delete the file; the next message "
                          f"starts a version {WRITTEN_VERSION} log")
            else:
                advice = "it was written by a newer Wormhole; use that version"
            raise WormholeError(WormholeError.UNSUPPORTED_FORMAT,
                                f"'{path}' is a version {version} message log and this library reads versions "
                                f"{min(READ_VERSIONS)} and {WRITTEN_VERSION}: {advice}", path=path)
        if len(data) < HEADER_SIZE:
            raise WormholeError(WormholeError.UNSUPPORTED_FORMAT,
                                f"'{path}' has a damaged header (the file is {len(data)} bytes long)", path=path)
        if crc32(data[:124]) != _U32.unpack_from(data, 124)[0]:
            raise WormholeError(WormholeError.UNSUPPORTED_FORMAT,
                                f"'{path}' has a damaged header (its checksum does not match); move it out of the "
                                f"container or delete it", path=path)
        _, version, _, log_id, base, cleared, byte_threshold, record_threshold = _HEADER.unpack_from(data)
        return Header(log_id, base, cleared, byte_threshold, record_threshold, version)


def random_u64() -> int:
    while True:
        value = int.from_bytes(os.urandom(8), "little")
        if value:
            return value


def pread(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes at ``offset``: fewer only at the end of the file."""
    chunks, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def pwritev_all(fd: int, parts: List[bytes], offset: int) -> None:
    """One pwritev of the pieces; continues after a short write."""
    views = [memoryview(part) for part in parts if len(part)]
    while views:
        written = os.pwritev(fd, views, offset)
        offset += written
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def read_header(fd: int, path: str) -> Optional[Header]:
    return Header.decode(os.pread(fd, HEADER_SIZE, 0), path)


class Walk:
    """Visits the records of an open log from ``start`` (§9.3), yielding Record and
    problem items; afterwards ``end`` is the offset just past the last whole record (or
    damage followed by one). Memory: one chunk, or one record of at most ``maximum``
    payload bytes."""

    def __init__(self, fd: int, start: int, header: Header, maximum: int, path: str = "log",
                 identifier: str = "") -> None:
        self.fd, self.start, self.maximum, self.path = fd, start, maximum, path
        self.log_id = header.log_id
        self.layout = header.layout
        self.identifier = identifier
        self.end = start
        # The last whole record's number: a record proving damage before it must be above.
        self.last = header.base_sequence

    def whole_record_follows(self, offset: int) -> bool:
        """§9.3: whether a whole, valid record numbered above ``self.last`` starts after
        ``offset``: the proof that the record at ``offset``, which runs past the end of the
        file, has a damaged length (a record being written, or torn, is always last). A
        candidate marker is checked whole only when its trailer repeats its length."""
        fd, layout = self.fd, self.layout
        size = os.fstat(fd).st_size
        position = offset + 1
        while position + layout.overhead <= size:
            chunk = pread(fd, min(CHUNK, size - position), position)
            if len(chunk) < 4:
                return False
            found = chunk.find(layout.marker)
            while found >= 0:
                at = position + found
                found = chunk.find(layout.marker, found + 1)
                head = pread(fd, 16, at)
                if len(head) < 16:
                    continue
                (length,) = _U32.unpack_from(head, 4)
                (sequence,) = _U64.unpack_from(head, 8)
                total = layout.overhead + length
                if length > MAXIMUM_PAYLOAD or sequence <= self.last or at + total > size:
                    continue
                trailer = pread(fd, 4, at + total - 4)
                if len(trailer) < 4 or _U32.unpack(trailer)[0] != length:
                    continue
                if length > self.maximum:
                    return True
                record, _, _ = parse_record(layout, pread(fd, total, at), self.log_id)
                if record is not None and record.sequence > self.last:
                    return True
            position += max(1, len(chunk) - 3)
        return False

    def __iter__(self) -> Iterator[Item]:
        fd, layout = self.fd, self.layout
        marker, overhead = layout.marker, layout.overhead
        position = self.start
        buffer, base, short = b"", position, False
        pending: Optional[WormholeError] = None
        # A record running past the end at this offset, with a whole record after it: read
        # once more (it may have been completed, or cut and written again, meanwhile), then
        # skipped as damage.
        proven = -1

        def past_the_end(payload_length: int) -> Union[str, bool]:
            """For a record at ``position`` running past the end of the file: the damage to
            report when a whole record follows it, False when it is incomplete (wait),
            True to read it again first."""
            nonlocal proven, buffer
            if proven == position:
                return (f"a record declares {payload_length} bytes, which run past the end of the file although "
                        f"whole records follow it (its length is damaged)")
            if self.whole_record_follows(position):
                proven, buffer = position, b""
                return True
            return False

        def ensure(count: int) -> bool:
            nonlocal buffer, base, short
            local = position - base
            if 0 <= local and local + count <= len(buffer):
                return True
            request = max(count, CHUNK)
            buffer, base = pread(fd, request, position), position
            short = len(buffer) < request
            return len(buffer) >= count

        while True:
            if not ensure(8):
                return
            local = position - base
            length = None
            damage = None
            # A record that runs past the end of the file: incomplete, or damage (§9.3).
            past_end = False
            if buffer[local:local + 4] != marker:
                damage = "no record marker at this offset"
            else:
                (payload_length,) = _U32.unpack_from(buffer, local + 4)
                if payload_length > MAXIMUM_PAYLOAD:
                    damage = f"a record declares {payload_length} bytes, more than the format allows"
                elif payload_length > self.maximum:
                    if not ensure(16):
                        return
                    (sequence,) = _U64.unpack_from(buffer, position - base + 8)
                    total = overhead + payload_length
                    trailer = pread(fd, 4, position + total - 4)
                    if len(trailer) < 4:
                        past_end = True
                    elif _U32.unpack(trailer)[0] != payload_length:
                        damage = f"a record of {payload_length} bytes whose trailer does not repeat its length"
                    else:
                        if pending is not None:
                            yield pending
                            pending = None
                        yield problem(WormholeError.MESSAGE_TOO_LARGE,
                                      f"message {sequence} of '{self.identifier}' is {payload_length} bytes, more "
                                      f"than this reader's limit of {self.maximum} "
                                      f"(Wormhole.Configuration.maximumMessageSize); skipped, at offset {position} "
                                      f"of '{self.path}'",
                                      offset=position, sequence=sequence, path=self.path)
                        self.last = max(self.last, sequence)
                        position += total
                        self.end = position
                        continue
                else:
                    total = overhead + payload_length
                    if not ensure(total):
                        if len(buffer) - (position - base) < 16:
                            return
                        past_end = True
                if past_end:
                    verdict = past_the_end(payload_length)
                    if verdict is True:
                        continue
                    if verdict is False:
                        return
                    damage = verdict
                if damage is None:
                    local = position - base
                    record, reason, skippable = parse_record(layout, memoryview(buffer)[local:local + total],
                                                             self.log_id)
                    if record is not None:
                        if pending is not None:
                            yield pending
                            pending = None
                        record.offset, record.length, record.identifier = position, total, self.identifier
                        self.last = max(self.last, record.sequence)
                        yield record
                        position += total
                        self.end = position
                        continue
                    damage = reason
                    if skippable:
                        length = total
            if pending is None:
                pending = problem(WormholeError.CORRUPT_RECORD,
                                  f"corrupt record in '{self.path}': {damage}, at offset {position}",
                                  offset=position, path=self.path)
            if length is not None:
                after = pread(fd, 16, position + length)
                if len(after) == 16 and after[:4] == marker and _U32.unpack_from(after, 4)[0] <= MAXIMUM_PAYLOAD:
                    position += length
                    continue
                if not after:
                    # §9.3: the last record, whole but damaged: damage to report and
                    # skip, not a torn tail to wait on or cut (it took a number, §9.2).
                    yield pending
                    self.end = position + length
                    return
            local = position - base
            found = buffer.find(marker, local + 1)
            if found >= 0:
                position = base + found
                continue
            if short:
                return
            position = max(position + 1, base + len(buffer) - 3)


class Tail:
    """§9.2: the end of the whole records, and the last one."""

    __slots__ = ("end", "last_sequence", "last_offset", "last_record")

    def __init__(self, end: int, last_sequence: int, last_offset: Optional[int] = None,
                 last_record: Optional[Item] = None) -> None:
        self.end, self.last_sequence, self.last_offset, self.last_record = end, last_sequence, last_offset, last_record


def find_tail(fd: int, size: int, header: Header, maximum: int, path: str = "log", identifier: str = "") -> Tail:
    """§9.2 T2-T4: from the end (the last 4 bytes give the last record's length), else by
    walking from offset 128."""
    layout = header.layout
    empty = Tail(HEADER_SIZE, header.base_sequence)
    if size <= HEADER_SIZE:
        return empty
    if size - HEADER_SIZE >= layout.overhead:
        trailer = pread(fd, 4, size - 4)
        if len(trailer) == 4:
            (payload_length,) = _U32.unpack(trailer)
            total = layout.overhead + payload_length
            start = size - total
            if start >= HEADER_SIZE and payload_length <= maximum:
                data = pread(fd, total, start)
                if len(data) == total:
                    record, _, _ = parse_record(layout, data, header.log_id)
                    if record is not None and record.sequence > header.base_sequence:
                        record.offset, record.length, record.identifier = start, total, identifier
                        return Tail(size, record.sequence, start, record)
            elif start >= HEADER_SIZE and payload_length <= MAXIMUM_PAYLOAD:
                head = pread(fd, 16, start)
                if len(head) == 16 and head[:4] == layout.marker and _U32.unpack_from(head, 4)[0] == payload_length:
                    (sequence,) = _U64.unpack_from(head, 8)
                    if sequence > header.base_sequence:
                        too_large = problem(WormholeError.MESSAGE_TOO_LARGE,
                                            f"the latest message of '{identifier}' ({sequence}) is {payload_length} "
                                            f"bytes, more than this reader's limit of {maximum} "
                                            f"(Wormhole.Configuration.maximumMessageSize); it was not read",
                                            offset=start, sequence=sequence, path=path)
                        return Tail(size, sequence, start, too_large)
    tail = empty
    damage: Optional[WormholeError] = None
    walk = Walk(fd, HEADER_SIZE, header, maximum, path, identifier)
    for item in walk:
        if isinstance(item, Record):
            tail = Tail(item.offset + item.length, max(tail.last_sequence, item.sequence), item.offset, item)
        elif item.code == WormholeError.MESSAGE_TOO_LARGE and item.offset is not None and item.sequence is not None:
            # A walk reports a record too large with where it is and its number.
            tail = Tail(item.offset, max(tail.last_sequence, item.sequence), item.offset, item)
        else:
            damage = item
    if walk.end > tail.end:
        # A damaged last record, whole (§9.3): it took the number after the last whole
        # record (whatever its own sequence field says), and it is the last record: the
        # damage (as the Swift library's Tail.includeDamagedEnd).
        tail.last_sequence += 1
        if damage is not None:
            tail.last_offset, tail.last_record = damage.offset, damage
    tail.end = walk.end
    return tail
