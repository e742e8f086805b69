#!/usr/bin/env python3
"""An independent implementation of the Wormhole on-disk protocol, version 3.

Written from Docs/Protocol.md alone, with the Python standard library only. Step names
in comments (W3, C4, S2, ...) and section numbers (§8.3) refer to that document.

Library use:

    import wormhole_log as w
    seq = w.append("/run/user/1000/app-groups/g", "note", w.KIND_TEXT, b"hi")
    for item in w.read_all("/run/user/1000/app-groups/g", "note"): ...
    latest = w.read_latest("/run/user/1000/app-groups/g", "note")

Command line (every command takes the retention options
[--retain-count N] [--retain-bytes N] [--max-size N] [--backlog-count N] [--backlog-bytes N]):

    wormhole_log.py write DIR ID KIND TEXT [--count N] [--torn BYTES]
                          [--pause-at K --resume-on PATH]
        KIND is data, text or json (or 0, 1, 2). For data, TEXT is the payload in
        base64. TEXT '-' reads the payload's bytes from standard input. With --count N,
        N messages are passed; '{i}' in TEXT becomes 1..N. Prints {"sequence": S} per
        message. With --torn BYTES, the (single) message is written only in part: its
        first BYTES bytes, as by a writer killed in the middle of its append (§8.3); prints
        {"torn": S}. With --pause-at K --resume-on PATH, it waits after its K-th message
        until PATH exists (up to 60 s), so that another writer is sure to come between.
    wormhole_log.py read DIR ID [--latest]
        Prints each retained record (or the latest) as one JSON line:
        {"sequence", "kind", "pid", "date_ns", "encoding", "payload"}; the payload is
        UTF-8 text for kinds text and json when it decodes, else base64. A record that
        cannot be read prints {"error": "...", "code": "..."}.
    wormhole_log.py read DIR ID --follow N [--until S] [--start now|latest|history|after:S]
                                [--timeout SECONDS] [--ready PATH]
        Listens (§11) with a claim (§12) and inotify; prints the first N records that
        arrive (or the records up to the first one with sequence S or above, with
        --until), and every error before them (a gap prints
        {"error": ..., "code": "messagesLost", "lost": COUNT}), then exits. Creates PATH
        once listening has started. Exit status 3 on timeout.
    wormhole_log.py clear DIR ID
        Clears the messages of ID (§10.3).
    wormhole_log.py selftest [PROTOCOL_MD]
        Checks the CRC test vectors, that this encoder reproduces the example record and
        header of the document byte for byte, and runs the protocol (append, torn tail,
        compaction, clearing, listening with a gap) in a temporary directory.

Exit status 1 with a message on standard error for any error (an unsupported log, a bad
identifier, an unsafe container).
"""

import base64
import ctypes
import errno
import fcntl
import json
import os
import select
import stat
import struct
import sys
import tempfile
import time
import unicodedata
import zlib

# §7 header, §8 record
MAGIC = b"WORMHOLE"
VERSION = 3
HEADER_SIZE = 128
RECORD_MARKER = b"WHR3"
RECORD_HEADER_SIZE = 56
RECORD_TRAILER_SIZE = 4
RECORD_OVERHEAD = RECORD_HEADER_SIZE + RECORD_TRAILER_SIZE
MAXIMUM_PAYLOAD = 1 << 30          # §8.1: the format's one record-length limit
LOG_SUFFIX = ".wormhole"
COMPACTING_SUFFIX = ".compacting"
CLAIMS = ".listeners"

# §8.2
KIND_DATA, KIND_TEXT, KIND_JSON = 0, 1, 2
KIND_NAMES = {KIND_DATA: "data", KIND_TEXT: "text", KIND_JSON: "json"}

# Header after the magic: version, headerSize, logID, baseSequence, clearedThrough,
# compactionByteThreshold, compactionRecordThreshold, 68 reserved bytes; then the CRC.
_HEADER = struct.Struct("<8sIIQQQQQ68x")
# Record header without its CRC: marker, length, sequence, date, pid, kind, 3 reserved.
# marker, length, sequence, date, expires, correlation, pid, uid, kind, role, reserved
_RECORD = struct.Struct("<4sIQqqQiIBB2x")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
assert _HEADER.size == 124 and _RECORD.size == 52

# Bytes read at a time by a walk (§9.3); a record longer than this is read whole, alone.
CHUNK = 1 << 20


class Configuration:
    """§10.1: retention and backlog cap (§10.4); §8.1: the maximum message size."""

    def __init__(self, retained_count=1000, retained_bytes=16 << 20, maximum_message_size=8 << 20,
                 backlog_count=100_000, backlog_bytes=64 << 20):
        if retained_count < 1 or retained_bytes < 1 or backlog_count < 1 or backlog_bytes < 1:
            raise ValueError("retention and backlog limits must be at least 1")
        if not 1 <= maximum_message_size <= MAXIMUM_PAYLOAD:
            raise ValueError("the maximum message size must be between 1 byte and 1 GiB")
        self.retained_count = retained_count
        self.retained_bytes = retained_bytes
        self.maximum_message_size = maximum_message_size
        self.backlog_count = backlog_count
        self.backlog_bytes = backlog_bytes

    def retention_size(self):
        """§10.1: the bytes the retained history takes in a file, records framed."""
        return self.retained_bytes + self.retained_count * RECORD_OVERHEAD

    def claim_step(self):
        """§12.2: a claim is written when it moved at least this far."""
        return max(1, self.retained_count // 4)


DEFAULT = Configuration()


class WormholeProtocolError(Exception):
    code = "systemError"


class UnsupportedLog(WormholeProtocolError):
    """§7.2: not a log of this version: report, never modify."""
    code = "unsupportedFormat"


class InsecureContainer(WormholeProtocolError):
    code = "containerInsecure"


# --- §6 identifiers ---------------------------------------------------------------------

_BIDI_FORMATTING = {0x061C, 0x200E, 0x200F} | set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def validate_identifier(identifier, what="identifier"):
    """Returns the identifier's UTF-8 bytes, or raises ValueError saying why not."""
    raw = os.fsencode(identifier) if isinstance(identifier, str) else bytes(identifier)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {raw!r} is not valid UTF-8")
    if not raw:
        raise ValueError(f"{what} may not be empty")
    if len(raw) > 200:
        raise ValueError(f"{what} is {len(raw)} bytes long; the limit is 200")
    if text in (".", ".."):
        raise ValueError(f"{what} may not be '.' or '..'")
    if "/" in text:
        raise ValueError(f"{what} may not contain '/'")
    if text.startswith("."):
        raise ValueError(f"{what} may not start with '.'")
    if "\0" in text:
        raise ValueError(f"{what} may not contain a NUL byte")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text):
        raise ValueError(f"{what} {text!r} may not contain control characters")
    if any(ord(c) in _BIDI_FORMATTING for c in text):
        raise ValueError(f"{what} {text!r} may not contain bidirectional formatting characters")
    composed = unicodedata.normalize("NFC", text)
    if composed != text:
        raise ValueError(f"{what} {text!r} is not in Unicode NFC; use its composed form {composed!r}")
    return raw


# --- §4 container -----------------------------------------------------------------------

def normalize_path(path):
    """§4: absolute, without '.' components or repeated and trailing slashes; '..' refused."""
    path = os.fsencode(path)
    if not path.startswith(b"/"):
        path = os.getcwd().encode() + b"/" + path
    components = []
    for component in path.split(b"/"):
        if component in (b"", b"."):
            continue
        if component == b"..":
            raise InsecureContainer(f"container path '{os.fsdecode(path)}' contains '..'")
        components.append(component)
    if not components:
        raise InsecureContainer("the root directory cannot be a container")
    return b"/" + b"/".join(components)


def _check_directory(fd, path):
    """§4: a directory owned by this user that no other user may write to."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise InsecureContainer(f"'{os.fsdecode(path)}' is not a directory")
    if st.st_uid != os.geteuid():
        raise InsecureContainer(f"'{os.fsdecode(path)}' belongs to user {st.st_uid}")
    if st.st_mode & 0o022:
        raise InsecureContainer(f"'{os.fsdecode(path)}' has mode {oct(st.st_mode & 0o7777)}: other users may write to it")
    return st


def _open_subdirectory(parent_fd, name, path, create):
    """mkdirat (0700) when asked, then open without following a link, and check."""
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise InsecureContainer(f"'{os.fsdecode(path)}' is a symbolic link or not a directory")
        raise
    try:
        _check_directory(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Container:
    """§4: the container directory, held open; every file is reached through it."""

    def __init__(self, path):
        self.path = normalize_path(path)
        self.fd = None
        self.inode = None
        self.refresh()

    def refresh(self):
        """Opens (creating, 0700) the directory at the path when it is not the held one."""
        try:
            st = os.lstat(self.path)
            if self.inode == (st.st_dev, st.st_ino):
                return False
        except FileNotFoundError:
            pass
        parent_path, name = self.path.rsplit(b"/", 1)
        parent_path = parent_path or b"/"
        os.makedirs(parent_path, 0o700, exist_ok=True)
        parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            pst = os.fstat(parent)
            others_write = pst.st_mode & 0o022
            sticky = pst.st_mode & stat.S_ISVTX
            if others_write and not sticky:
                raise InsecureContainer(f"the parent of '{os.fsdecode(self.path)}' may be written by other users and is not sticky")
            if pst.st_uid not in (os.geteuid(), 0):
                raise InsecureContainer(f"the parent of '{os.fsdecode(self.path)}' belongs to user {pst.st_uid}")
            fd = _open_subdirectory(parent, name, self.path, create=True)
        finally:
            os.close(parent)
        st = os.fstat(fd)
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.inode = fd, (st.st_dev, st.st_ino)
        return True

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def file_path(self, name):
        return os.fsdecode(self.path + b"/" + name)

    def open_file(self, name, write, create=False):
        """§4: openat with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, then fstat: a regular file
        or an error. Returns (fd, stat), or None when missing and not created."""
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_RDWR if write else os.O_RDONLY)
        if create:
            flags |= os.O_CREAT
        try:
            fd = os.open(name, flags, 0o600, dir_fd=self.fd)
        except FileNotFoundError:
            if create:
                raise
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise InsecureContainer(f"'{self.file_path(name)}' is a symbolic link; refused")
            if error.errno in (errno.EISDIR, errno.ENXIO):
                raise InsecureContainer(f"'{self.file_path(name)}' is not a regular file; refused")
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise InsecureContainer(f"'{self.file_path(name)}' is not a regular file; refused")
        return fd, st

    def create_exclusive(self, name):
        """§10.2 C7: remove a leftover, then O_CREAT | O_EXCL | O_NOFOLLOW, 0600."""
        for _ in range(4):
            try:
                os.unlink(name, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            try:
                return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                               0o600, dir_fd=self.fd)
            except FileExistsError:
                continue
        raise WormholeProtocolError(f"'{self.file_path(name)}' keeps reappearing")


# --- §7 header, §8 records, §8.4 CRC -----------------------------------------------------

def crc32(data, crc=0):
    return zlib.crc32(data, crc) & 0xFFFFFFFF


class Header:
    __slots__ = ("log_id", "base_sequence", "cleared_through", "byte_threshold", "record_threshold")

    def __init__(self, log_id=0, base_sequence=0, cleared_through=0, byte_threshold=0, record_threshold=0):
        self.log_id = log_id
        self.base_sequence = base_sequence
        self.cleared_through = cleared_through
        self.byte_threshold = byte_threshold
        self.record_threshold = record_threshold

    def copy(self):
        return Header(self.log_id, self.base_sequence, self.cleared_through, self.byte_threshold, self.record_threshold)

    def encode(self):
        head = _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, self.log_id, self.base_sequence,
                            self.cleared_through, self.byte_threshold, self.record_threshold)
        return head + _U32.pack(crc32(head))

    @staticmethod
    def decode(data, path="log"):
        """§7.2: None for an empty file; a Header; or UnsupportedLog."""
        name = os.fsdecode(path)
        if len(data) == 0:
            return None
        if len(data) < 12 or data[:8] != MAGIC:
            raise UnsupportedLog(f"'{name}' is not a Wormhole message log")
        (version,) = _U32.unpack_from(data, 8)
        if version != VERSION:
            if version < VERSION:
                raise UnsupportedLog(
                    f"'{name}' is a version {version} message log, written by an earlier Wormhole; this reads "
                    f"version {VERSION}. Read it with that version, then delete it: the next message starts "
                    f"a version {VERSION} log")
            raise UnsupportedLog(f"'{name}' is a version {version} message log, written by a newer Wormhole")
        if len(data) < HEADER_SIZE:
            raise UnsupportedLog(f"'{name}' has a damaged header ({len(data)} bytes)")
        if crc32(data[:124]) != _U32.unpack_from(data, 124)[0]:
            raise UnsupportedLog(f"'{name}' has a damaged header (its checksum does not match)")
        _, _, _, log_id, base, cleared, byte_threshold, record_threshold = _HEADER.unpack_from(data)
        return Header(log_id, base, cleared, byte_threshold, record_threshold)


def new_header(configuration):
    """§9.1 W4: the header of a log created now."""
    return Header(log_id=_random_u64(), base_sequence=0, cleared_through=0,
                  byte_threshold=HEADER_SIZE + 2 * configuration.retention_size(),
                  record_threshold=2 * configuration.retained_count)


def record_checksum(log_id, head52, payload):
    """§8.1: crc32(logID as 8 LE bytes ‖ record bytes 0..51 ‖ payload)."""
    return crc32(payload, crc32(head52, crc32(_U64.pack(log_id))))


def encode_record_parts(log_id, sequence, date_ns, pid, kind, payload, uid=None):
    """The 56-byte header and 4-byte trailer around `payload` (§8.1): a message that
    never expires, from `uid` (this process's effective user by default)."""
    uid = os.geteuid() if uid is None else uid
    head = _RECORD.pack(RECORD_MARKER, len(payload), sequence, date_ns, 0, 0, pid, uid, kind, 0)
    return head + _U32.pack(record_checksum(log_id, head, payload)), _U32.pack(len(payload))


def encode_record(log_id, sequence, date_ns, pid, kind, payload, uid=None):
    head, trailer = encode_record_parts(log_id, sequence, date_ns, pid, kind, payload, uid)
    return head + payload + trailer


class Record:
    __slots__ = ("sequence", "date_ns", "pid", "kind", "payload", "offset", "length")

    def __init__(self, sequence, date_ns, pid, kind, payload, offset=0, length=0):
        self.sequence, self.date_ns, self.pid, self.kind, self.payload = sequence, date_ns, pid, kind, payload
        self.offset, self.length = offset, length

    def as_json(self):
        encoding, text = "base64", None
        if self.kind in (KIND_TEXT, KIND_JSON):
            try:
                text, encoding = self.payload.decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                pass
        if text is None:
            text = base64.b64encode(self.payload).decode("ascii")
        return {"sequence": self.sequence, "kind": KIND_NAMES.get(self.kind, str(self.kind)),
                "pid": self.pid, "date_ns": self.date_ns, "encoding": encoding, "payload": text}


class Problem:
    """Something a reader reports instead of a record: damage, a record too large for
    it, a gap (§11.4)."""
    __slots__ = ("code", "message", "offset", "sequence", "lost")

    def __init__(self, code, message, offset=None, sequence=None, lost=None):
        self.code, self.message, self.offset, self.sequence, self.lost = code, message, offset, sequence, lost

    def as_json(self):
        line = {"error": self.message, "code": self.code}
        if self.lost is not None:
            line["lost"] = self.lost
        return line

    def __str__(self):
        return self.message


def parse_record(data, log_id):
    """§8.3: whether `data` (exactly one record's bytes) is a valid record of this log.
    Returns (Record, None, _) or (None, reason, skippable): `skippable` when the record's
    frame is whole (its trailer matches) and only its contents fail."""
    marker, length, sequence, date_ns, _, _, pid, _, kind, role = _RECORD.unpack_from(data, 0)
    if marker != RECORD_MARKER or len(data) != RECORD_OVERHEAD + length:
        return None, "no record here", False
    if _U32.unpack_from(data, len(data) - 4)[0] != length:
        return None, f"record {sequence} does not end where its length says", False
    payload = bytes(data[RECORD_HEADER_SIZE:RECORD_HEADER_SIZE + length])
    if record_checksum(log_id, bytes(data[:52]), payload) != _U32.unpack_from(data, 52)[0]:
        return None, f"record {sequence} fails its checksum", True
    if kind not in KIND_NAMES:
        return None, f"record {sequence} has unknown kind {kind}", True
    if role > 3:
        return None, f"record {sequence} has unknown role {role}", True
    return Record(sequence, date_ns, pid, kind, payload), None, False


# --- file helpers -----------------------------------------------------------------------

def _pread(fd, size, offset):
    """Up to `size` bytes at `offset`: fewer only at the end of the file."""
    chunks, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _pwritev_all(fd, parts, offset):
    """One pwritev of the pieces (W6); continues after a short write."""
    views = [memoryview(part) for part in parts if len(part)]
    while views:
        written = os.pwritev(fd, views, offset)
        offset += written
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def _random_u64():
    while True:
        value = int.from_bytes(os.urandom(8), "little")
        if value:
            return value


def _read_header(fd, path):
    return Header.decode(os.pread(fd, HEADER_SIZE, 0), path)


# --- §9.3 walking the records ------------------------------------------------------------

class Walk:
    """Visits the records of an open log from `start` (§9.3). Iterating yields Record and
    Problem items; afterwards `end` is the offset just past the last whole record (or
    damage followed by one): bytes after it are incomplete or a torn tail, never read as
    records. Memory: one chunk, or one record of at most `maximum` payload bytes."""

    def __init__(self, fd, start, log_id, maximum, path="log"):
        self.fd, self.start, self.log_id, self.maximum, self.path = fd, start, log_id, maximum, path
        self.end = start

    def __iter__(self):
        fd = self.fd
        position = self.start
        buffer, base, short = b"", position, False
        pending = None

        def ensure(count):
            """Makes `buffer` hold [position, position + count) when the file has it."""
            nonlocal buffer, base, short
            local = position - base
            if 0 <= local and local + count <= len(buffer):
                return True
            request = max(count, CHUNK)
            buffer, base = _pread(fd, request, position), position
            short = len(buffer) < request
            return len(buffer) >= count

        while True:
            if not ensure(8):
                return                                   # nothing, or an incomplete start
            local = position - base
            length = None
            damage = None
            if buffer[local:local + 4] != RECORD_MARKER:
                damage = "no record marker at this offset"
            else:
                (payload_length,) = _U32.unpack_from(buffer, local + 4)
                if payload_length > MAXIMUM_PAYLOAD:
                    damage = f"a record declares {payload_length} bytes, more than the format allows"
                elif payload_length > self.maximum:
                    # §9.3: skipped unread once it is whole (its trailer is in place).
                    if not ensure(16):
                        return
                    (sequence,) = _U64.unpack_from(buffer, position - base + 8)
                    total = RECORD_OVERHEAD + payload_length
                    trailer = _pread(fd, 4, position + total - 4)
                    if len(trailer) < 4 or _U32.unpack(trailer)[0] != payload_length:
                        return                           # not whole yet: wait
                    if pending:
                        yield pending
                        pending = None
                    yield Problem("messageTooLarge",
                                  f"message {sequence} is {payload_length} bytes, more than this reader's limit "
                                  f"of {self.maximum}; skipped, at offset {position} of '{os.fsdecode(self.path)}'",
                                  offset=position, sequence=sequence)
                    position += total
                    self.end = position
                    continue
                else:
                    total = RECORD_OVERHEAD + payload_length
                    if not ensure(total):
                        return                           # incomplete: being written, or torn
                    local = position - base
                    record, reason, skippable = parse_record(memoryview(buffer)[local:local + total], self.log_id)
                    if record is not None:
                        if pending:
                            yield pending
                            pending = None
                        record.offset, record.length = position, total
                        yield record
                        position += total
                        self.end = position
                        continue
                    damage = reason
                    if skippable:
                        length = total
            # Damage (§9.3): remembered, reported once a whole record follows it.
            if pending is None:
                pending = Problem("corruptRecord", f"{damage}, at offset {position} of '{os.fsdecode(self.path)}'",
                                  offset=position)
            if length is not None:
                after = _pread(fd, 16, position + length)
                if len(after) == 16 and after[:4] == RECORD_MARKER and _U32.unpack_from(after, 4)[0] <= MAXIMUM_PAYLOAD:
                    position += length
                    continue
            local = position - base
            found = buffer.find(RECORD_MARKER, local + 1)
            if found >= 0:
                position = base + found
                continue
            if short:
                return                                   # damage at the end: a torn tail
            position = max(position + 1, base + len(buffer) - 3)


class Tail:
    """§9.2 W5: the end of the whole records, and the last one."""
    __slots__ = ("end", "last_sequence", "last_offset", "last_record")

    def __init__(self, end, last_sequence, last_offset=None, last_record=None):
        self.end, self.last_sequence, self.last_offset, self.last_record = end, last_sequence, last_offset, last_record


def find_tail(fd, size, header, maximum, path="log"):
    """§9.2 W5: from the end (the last 4 bytes give the last record's length), else by
    walking from offset 128. `last_record` is the last Record when it was read, or a
    Problem when it is too large for `maximum`."""
    empty = Tail(HEADER_SIZE, header.base_sequence)
    if size <= HEADER_SIZE:
        return empty
    if size - HEADER_SIZE >= RECORD_OVERHEAD:
        trailer = _pread(fd, 4, size - 4)
        if len(trailer) == 4:
            (payload_length,) = _U32.unpack(trailer)
            total = RECORD_OVERHEAD + payload_length
            start = size - total
            if start >= HEADER_SIZE and payload_length <= maximum:
                data = _pread(fd, total, start)
                if len(data) == total:
                    record, _, _ = parse_record(data, header.log_id)
                    if record is not None and record.sequence > header.base_sequence:
                        record.offset, record.length = start, total
                        return Tail(size, record.sequence, start, record)
            elif start >= HEADER_SIZE and payload_length <= MAXIMUM_PAYLOAD:
                head = _pread(fd, 16, start)
                if len(head) == 16 and head[:4] == RECORD_MARKER and _U32.unpack_from(head, 4)[0] == payload_length:
                    (sequence,) = _U64.unpack_from(head, 8)
                    if sequence > header.base_sequence:
                        problem = Problem("messageTooLarge",
                                          f"message {sequence} is {payload_length} bytes, more than this reader's "
                                          f"limit of {maximum}", offset=start, sequence=sequence)
                        return Tail(size, sequence, start, problem)
    tail = empty
    walk = Walk(fd, HEADER_SIZE, header.log_id, maximum, path)
    for item in walk:
        if isinstance(item, Record):
            tail = Tail(item.offset + item.length, max(tail.last_sequence, item.sequence), item.offset, item)
        elif item.code == "messageTooLarge":
            tail = Tail(item.offset, max(tail.last_sequence, item.sequence), item.offset, item)
    tail.end = walk.end
    return tail


# --- §12 listener claims -------------------------------------------------------------------

def _claims_directory(container, raw_identifier, create):
    top = _open_subdirectory(container.fd, CLAIMS.encode(), container.path + b"/" + CLAIMS.encode(), create)
    if top is None:
        return None
    try:
        return _open_subdirectory(top, raw_identifier, container.path + b"/" + CLAIMS.encode() + b"/" + raw_identifier, create)
    finally:
        os.close(top)


def _process_alive(name):
    """Whether the process whose id starts `name` (`<pid>-<hex>`) exists (§12.3)."""
    try:
        pid = int(name.split(b"-", 1)[0])
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_namespace():
    """The inode number of this process's PID namespace; 0 when /proc does not say."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def read_claim(fd, log_id):
    """§12.3 Q3: what a held claim keeps of the log `log_id`."""
    data = os.pread(fd, 24, 0)
    if len(data) >= 24:
        delivered, claim_log = struct.unpack_from("<QQ", data)
        return delivered if claim_log == log_id else 0
    return _U64.unpack(data[:8])[0] if len(data) >= 8 else 0


def lowest_live_claim(container, raw_identifier, log_id):
    """§12.3: the lowest claim of a live listener, deleting the claims of dead ones."""
    directory = _claims_directory(container, raw_identifier, create=False)
    if directory is None:
        return None
    lowest = None
    nobody_creating = None
    try:
        for name in os.listdir(directory):
            name = os.fsencode(name)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
            except OSError:
                continue                                                     # Q1
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                being_created = name.startswith(b".")
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)           # Q2
                except BlockingIOError:
                    if being_created:                                        # Q3
                        continue
                    value = read_claim(fd, log_id)
                    lowest = value if lowest is None else min(lowest, value)
                    continue
                except OSError:
                    continue                                                 # Q5
                fcntl.flock(fd, fcntl.LOCK_UN)
                if being_created:                                            # Q4
                    if nobody_creating is None:
                        try:
                            fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            nobody_creating = True
                        except OSError:
                            nobody_creating = False
                    if not nobody_creating or _process_alive(name[1:]):
                        continue
                try:
                    os.unlink(name, dir_fd=directory)
                except FileNotFoundError:
                    pass
            finally:
                os.close(fd)
    finally:
        os.close(directory)
    return lowest


class Claim:
    """§12.1, §12.2: a live listener's claim on the log of one identifier."""

    def __init__(self, container, identifier, step):
        raw = validate_identifier(identifier)
        self.step = max(1, step)
        self.directory = _claims_directory(container, raw, create=True)      # P1
        self.name = f"{os.getpid()}-{_random_u64():x}".encode()              # P2
        temporary = b"." + self.name
        fcntl.flock(self.directory, fcntl.LOCK_SH)                           # P3
        self.fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                          0o600, dir_fd=self.directory)                      # P3
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)                              # P4 (empty reads as 0)
            os.rename(temporary, self.name, src_dir_fd=self.directory, dst_dir_fd=self.directory)  # P5
            fcntl.flock(self.directory, fcntl.LOCK_UN)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=self.directory)
            finally:
                os.close(self.fd)
                os.close(self.directory)
            raise
        self.written = 0
        self.written_log = 0

    def update(self, delivered, log_id, force=False):
        """§12.2: written in batches: when it moved by the step, went back, moved to
        another log, or is forced; 24 bytes: delivered, logID, PID namespace."""
        if self.fd is None or (delivered == self.written and log_id == self.written_log):
            return
        if force or log_id != self.written_log or delivered < self.written or delivered - self.written >= self.step:
            _pwrite_all(self.fd, struct.pack("<QQQ", delivered, log_id, _pid_namespace()), 0)
            self.written = delivered
            self.written_log = log_id

    def close(self):
        if self.fd is not None:
            try:
                os.unlink(self.name, dir_fd=self.directory)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            os.close(self.directory)
            self.fd = None


# --- §9 writing, §10 compaction and clearing ---------------------------------------------

class Writer:
    """Appends to the log of one identifier, keeping the log open between passes and
    what it learned of its tail (§9.1: a steady pass is flock, fstat, pwritev, unlock)."""

    def __init__(self, directory, identifier, configuration=DEFAULT):
        self.raw = validate_identifier(identifier)
        self.name = self.raw + LOG_SUFFIX.encode()
        self.identifier = identifier
        self.configuration = configuration
        self.container = Container(directory)
        self.fd = None
        self.header = None
        self.tail = None

    @property
    def path(self):
        return self.container.file_path(self.name)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.container.close()

    def _locked(self, create, body, clearing=False, compacting=True):
        """W1-W5, then `body(header, tail)` -> (result, new tail), then W7 (or clearing)
        and W8. Returns None when there is no log and `create` is False."""
        for _ in range(64):
            if self.fd is None:
                try:
                    opened = self.container.open_file(self.name, write=True, create=create)   # W1
                except FileNotFoundError:
                    self.container.refresh()                                  # the container went away
                    opened = self.container.open_file(self.name, write=True, create=create)
                if opened is None:
                    return None
                self.fd, self.header, self.tail = opened[0], None, None
            fd = self.fd
            fcntl.flock(fd, fcntl.LOCK_EX)                                    # W2
            try:
                st = os.fstat(fd)                                             # W3
                if st.st_nlink == 0:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                    self.fd = None
                    continue
                size = st.st_size
                if self.header is None:                                       # W4
                    if size == 0:
                        if not create:
                            fcntl.flock(fd, fcntl.LOCK_UN)
                            return None
                        self.header = new_header(self.configuration)
                        _pwrite_all(fd, self.header.encode(), 0)
                        self.tail = Tail(HEADER_SIZE, 0)
                        size = HEADER_SIZE
                    else:
                        self.header = _read_header(fd, self.path)
                header = self.header
                tail = self._current_tail(size)                               # W5
                if tail.end < size:
                    os.ftruncate(fd, tail.end)                                # torn tail: cut
                self.tail = tail
                result, tail = body(header, tail)                             # W6
                self.tail = tail
                due = tail.end > header.byte_threshold or \
                    tail.last_sequence - header.base_sequence > header.record_threshold
                if clearing or (compacting and due):
                    try:                                                      # W7
                        new_fd, new_header_, new_tail = compact(self.container, self.raw, fd, header, tail,
                                                                clearing, self.configuration, self.path)
                    except (OSError, WormholeProtocolError) as error:
                        if clearing and isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
                            # K2': no room for a cleared copy: a header with everything
                            # cleared over the old one, then the records go.
                            emptied = new_header(self.configuration)
                            emptied.log_id = header.log_id
                            emptied.base_sequence = emptied.cleared_through = tail.last_sequence
                            _pwrite_all(fd, emptied.encode(), 0)
                            os.ftruncate(fd, HEADER_SIZE)
                            self.header, self.tail = emptied, Tail(HEADER_SIZE, tail.last_sequence, None)
                            fcntl.flock(fd, fcntl.LOCK_UN)
                            return result
                        if clearing:
                            raise
                        # The message is committed; the next pass compacts.
                        print(f"wormhole_log: could not compact '{self.path}': {error}", file=sys.stderr)
                    else:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                        os.close(fd)
                        self.fd, self.header, self.tail = new_fd, new_header_, new_tail
                        fcntl.flock(new_fd, fcntl.LOCK_UN)
                        return result
                fcntl.flock(fd, fcntl.LOCK_UN)                                # W8
                return result
            except BaseException:
                os.close(fd)                                                  # closing unlocks
                self.fd = None
                raise
        raise WormholeProtocolError(f"'{self.path}' kept being replaced")

    def _current_tail(self, size):
        known = self.tail
        if known is not None and known.end == size:
            return known
        if known is not None and known.end < size:
            walk = Walk(self.fd, known.end, self.header.log_id, MAXIMUM_PAYLOAD, self.path)
            tail = Tail(known.end, known.last_sequence, known.last_offset)
            for item in walk:
                if isinstance(item, Record):
                    tail = Tail(item.offset + item.length, max(tail.last_sequence, item.sequence), item.offset)
            tail.end = walk.end
            return tail
        return find_tail(self.fd, size, self.header, MAXIMUM_PAYLOAD, self.path)

    def append(self, kind, payload):
        """Passes one message (§9.1); returns its sequence number."""
        if kind not in KIND_NAMES:
            raise ValueError(f"unknown payload kind {kind}")
        payload = bytes(payload)
        if len(payload) > self.configuration.maximum_message_size:
            raise ValueError(f"message is {len(payload)} bytes; the limit is {self.configuration.maximum_message_size}")
        date_ns, pid = time.time_ns(), os.getpid()

        def body(header, tail):
            sequence = tail.last_sequence + 1
            head, trailer = encode_record_parts(header.log_id, sequence, date_ns, pid, kind, payload)
            try:
                _pwritev_all(self.fd, [head, payload, trailer], tail.end)     # W6
            except OSError:
                os.ftruncate(self.fd, tail.end)
                raise
            return sequence, Tail(tail.end + len(head) + len(payload) + len(trailer), sequence, tail.end)

        return self._locked(True, body)

    def clear(self):
        """§10.3: clearedThrough = the last sequence, by a compaction."""
        return self._locked(False, lambda header, tail: (True, tail), clearing=True)


def _torn_append(writer, kind, payload, keep):
    """Writes the first `keep` bytes of the next record under the lock, then stops, as a
    writer killed in the middle of its pwritev. Returns the record's sequence."""
    holder = {}

    def body(header, tail):
        sequence = tail.last_sequence + 1
        record = encode_record(header.log_id, sequence, time.time_ns(), os.getpid(), kind, payload)
        if not 0 < keep < len(record):
            raise ValueError(f"--torn must be between 1 and {len(record) - 1} for this message")
        _pwrite_all(writer.fd, record[:keep], tail.end)
        holder["sequence"] = sequence
        return sequence, tail          # the tail is unchanged: the record is not whole

    # A killed writer gets no further than W6: no compaction.
    writer._locked(True, body, compacting=False)
    return holder["sequence"]


def compact(container, raw_identifier, fd, header, tail, clearing, configuration, path):
    """§10.2 C1-C8, under the lock of `fd`. Returns the new file's descriptor (locked),
    header and tail."""
    entries = []                                                              # C1
    for item in Walk(fd, HEADER_SIZE, header.log_id, MAXIMUM_PAYLOAD, path):
        if isinstance(item, Record) and item.offset + item.length <= tail.end:
            entries.append((item.offset, item.sequence, item.length))
    new = header.copy()
    if clearing:
        new.cleared_through = tail.last_sequence                              # C2
    keep_from, count, size = tail.last_sequence + 1, 0, 0                     # C3
    for offset, sequence, length in reversed(entries):
        if sequence <= new.cleared_through:
            continue
        payload = length - RECORD_OVERHEAD
        if count > 0 and (count >= configuration.retained_count or size + payload > configuration.retained_bytes):
            break
        keep_from, count, size = sequence, count + 1, size + payload
    claim = lowest_live_claim(container, raw_identifier, header.log_id)       # C4
    if claim is not None and claim < 0xFFFFFFFFFFFFFFFF and claim + 1 < keep_from:
        following = claim + 1
        count, size, capped = 0, 0, keep_from
        for offset, sequence, length in reversed(entries):
            if sequence < following:
                continue
            count += 1
            size += length - RECORD_OVERHEAD
            if count > max(configuration.backlog_count, configuration.retained_count) or \
                    size > max(configuration.backlog_bytes, configuration.retained_bytes):
                break
            capped = sequence
        keep_from = min(keep_from, max(following, capped))
    kept = [entry for entry in entries if entry[1] >= keep_from]              # C5
    copied = sum(length for _, _, length in kept)
    new.base_sequence = kept[0][1] - 1 if kept else tail.last_sequence
    new.byte_threshold = HEADER_SIZE + 2 * max(configuration.retention_size(), copied)
    new.record_threshold = 2 * max(configuration.retained_count, len(kept))
    temporary = b"." + raw_identifier + LOG_SUFFIX.encode() + COMPACTING_SUFFIX.encode()
    out = container.create_exclusive(temporary)                               # C6, C7
    try:
        _pwrite_all(out, new.encode(), 0)
        target, index = HEADER_SIZE, 0
        while index < len(kept):                                              # runs of adjacent records
            start = kept[index][0]
            end = start + kept[index][2]
            index += 1
            while index < len(kept) and kept[index][0] == end:
                end += kept[index][2]
                index += 1
            while start < end:
                data = os.pread(fd, min(CHUNK, end - start), start)
                if not data:
                    raise WormholeProtocolError(f"'{path}' ended while it was being compacted")
                _pwrite_all(out, data, target)
                start += len(data)
                target += len(data)
        fcntl.flock(out, fcntl.LOCK_EX)                                       # C7
        os.rename(temporary, raw_identifier + LOG_SUFFIX.encode(), src_dir_fd=container.fd, dst_dir_fd=container.fd)  # C8
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=container.fd)
        except OSError:
            pass
        os.close(out)
        raise
    last_offset = target - kept[-1][2] if kept else None
    return out, new, Tail(target, tail.last_sequence, last_offset)


def append(directory, identifier, kind, payload, configuration=DEFAULT):
    writer = Writer(directory, identifier, configuration)
    try:
        return writer.append(kind, payload)
    finally:
        writer.close()


def clear(directory, identifier, configuration=DEFAULT):
    writer = Writer(directory, identifier, configuration)
    try:
        writer.clear()
    finally:
        writer.close()


# --- §11 reading -------------------------------------------------------------------------

def _open_log(container, raw_identifier):
    """(fd, stat, header-or-None) of the log for reading, or None when there is none."""
    name = raw_identifier + LOG_SUFFIX.encode()
    opened = container.open_file(name, write=False)
    if opened is None:
        return None
    fd, st = opened
    try:
        header = _read_header(fd, container.file_path(name)) if st.st_size > 0 else None
    except BaseException:
        os.close(fd)
        raise
    return fd, st, header


def read_latest(directory, identifier, configuration=DEFAULT):
    """§11.1: the latest record, or None. A latest record too large for this reader
    raises."""
    container = Container(directory)
    try:
        raw = validate_identifier(identifier)
        opened = _open_log(container, raw)
        if opened is None:
            return None
        fd, st, header = opened
        try:
            if header is None:
                return None
            tail = find_tail(fd, st.st_size, header, configuration.maximum_message_size,
                             container.file_path(raw + LOG_SUFFIX.encode()))
            if tail.last_record is None or tail.last_sequence <= header.cleared_through:
                return None
            if isinstance(tail.last_record, Problem):
                raise WormholeProtocolError(tail.last_record.message)
            return tail.last_record
        finally:
            os.close(fd)
    finally:
        container.close()


def read_all(directory, identifier, configuration=DEFAULT):
    """§11.2: every record in the log above clearedThrough, oldest first, and a Problem
    for each that cannot be read."""
    container = Container(directory)
    try:
        raw = validate_identifier(identifier)
        opened = _open_log(container, raw)
        if opened is None:
            return []
        fd, _, header = opened
        try:
            if header is None:
                return []
            items = []
            for item in Walk(fd, HEADER_SIZE, header.log_id, configuration.maximum_message_size,
                             container.file_path(raw + LOG_SUFFIX.encode())):
                if isinstance(item, Record) and item.sequence <= header.cleared_through:
                    continue
                items.append(item)
            return items
        finally:
            os.close(fd)
    finally:
        container.close()


# inotify through the C library (§11.3); ctypes is part of the standard library.
IN_MODIFY, IN_ATTRIB = 0x00000002, 0x00000004
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x00000040, 0x00000080, 0x00000100, 0x00000200
IN_DELETE_SELF, IN_MOVE_SELF = 0x00000400, 0x00000800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_CLOEXEC = 0x00004000, 0x00008000, 0x01000000, 0o2000000
LISTEN_MASK = (IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB
               | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_EVENT = struct.Struct("iIII")


class DirectoryWatch:
    """§11.3 S1: an inotify watch on the container directory itself (the one held open)."""

    def __init__(self, container):
        self.container = container
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._add()

    def _add(self):
        # Through /proc/self/fd: the watch is on the directory this process holds, even if
        # another took its name meanwhile.
        target = f"/proc/self/fd/{self.container.fd}".encode()
        if self.libc.inotify_add_watch(self.fd, target, LISTEN_MASK) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch", os.fsdecode(self.container.path))

    def wait(self, name, timeout):
        """Waits for events; returns (woken, replaced): whether anything happened to the
        log `name`, and whether the file at its name may be another one now."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False, False
        data = os.read(self.fd, 65536)
        woken = replaced = False
        position = 0
        while position + _EVENT.size <= len(data):
            _, mask, _, length = _EVENT.unpack_from(data, position)
            event_name = data[position + _EVENT.size:position + _EVENT.size + length].rstrip(b"\0")
            position += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                woken = replaced = True
            elif mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                woken = replaced = True
                if self.container.refresh():                                 # the directory went away
                    self._add()
            elif event_name == name:
                if mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO):
                    woken = replaced = True
                elif mask & IN_MODIFY:
                    woken = True
        return woken, replaced

    def close(self):
        os.close(self.fd)


class Listener:
    """§11.3: follows the log of one identifier; read() returns what is new."""

    def __init__(self, container, identifier, start="now", configuration=DEFAULT):
        self.container = container
        self.raw = validate_identifier(identifier)
        self.name = self.raw + LOG_SUFFIX.encode()
        self.path = container.file_path(self.name)
        self.configuration = configuration
        self.maximum = configuration.maximum_message_size
        self.fd = None
        self.inode = None
        self.header = None
        self.offset = HEADER_SIZE
        self.log_id = None
        self.delivered = 0
        self.invalidated = False
        self.reported_damage = -1
        self.claim = Claim(container, identifier, configuration.claim_step())  # S2 (S1 is the caller's)
        if start.startswith("after:"):
            self.delivered = int(start[6:])
        elif start not in ("now", "latest", "history"):
            raise ValueError(f"unknown starting point {start!r}")
        opened = _open_log(container, self.raw)                               # S3
        if opened is None:
            return
        self.fd, st, self.header = opened
        self.inode = (st.st_dev, st.st_ino)
        header = self.header
        if header is None:
            return                                                            # being created
        self.log_id = header.log_id
        if start in ("now", "latest", "history"):
            tail = find_tail(self.fd, st.st_size, header, self.maximum, self.path)
        if start in ("now", "latest"):
            self.delivered, self.offset = tail.last_sequence, tail.end
            if start == "latest" and tail.last_offset is not None and tail.last_sequence > header.cleared_through:
                self.delivered, self.offset = tail.last_sequence - 1, tail.last_offset
        elif start == "history":
            retained = self.configuration.retained_count
            last = tail.last_sequence
            self.delivered = max(header.cleared_through, header.base_sequence, last - retained if last > retained else 0)
        else:
            self.delivered = max(self.delivered, header.cleared_through)
        self.claim.update(self.delivered, self.log_id or 0, force=True)       # S4

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.claim.close()

    def invalidate(self):
        self.invalidated = True

    def read(self):
        """R1-R4: returns a list of Record and Problem items."""
        results = []
        while True:
            if self.fd is None:
                if not (self.invalidated and self._open_current()):
                    break
                continue
            if self.header is None:
                try:
                    self.header = _read_header(self.fd, self.path)
                except UnsupportedLog:
                    self.header = None
                if self.header is None:
                    if self.invalidated and self._open_current():
                        continue
                    break
            header = self.header
            if self.log_id is None:
                self.log_id = header.log_id
            after_damage = False
            walk = Walk(self.fd, self.offset, header.log_id, self.maximum, self.path)   # R1
            for item in walk:
                if isinstance(item, Record) or item.code == "messageTooLarge":
                    if item.sequence <= self.delivered:
                        continue
                    if not after_damage or not isinstance(item, Record):
                        self._report_gap(item.sequence, header.cleared_through, results)  # §11.4
                    after_damage = False
                    results.append(item)
                    self.delivered = item.sequence
                else:
                    after_damage = True
                    if item.offset > self.reported_damage:
                        self.reported_damage = item.offset
                        results.append(item)
            self.offset = walk.end
            if self.invalidated and self._open_current():                     # R3
                continue
            break
        self.claim.update(self.delivered, self.log_id or 0)                   # §12.2
        return results

    def _report_gap(self, sequence, cleared_through, results):
        base = max(self.delivered, cleared_through)
        if sequence > base + 1:
            lost = sequence - base - 1
            results.append(Problem("messagesLost",
                                   f"{lost} message{'s' if lost != 1 else ''} ({base + 1}...{sequence - 1}) "
                                   f"were dropped before this listener read them", sequence=sequence, lost=lost))

    def _open_current(self):
        """R3: once the held file is read to its end, the file at the name now."""
        self.invalidated = False
        try:
            self.container.refresh()
        except OSError:
            pass
        opened = _open_log(self.container, self.raw)
        if opened is None:
            if self.fd is not None:
                os.close(self.fd)
            self.fd, self.header, self.inode = None, None, None
            return False
        fd, st, header = opened
        if self.fd is not None and self.inode == (st.st_dev, st.st_ino):
            os.close(fd)
            return False
        if self.fd is not None:
            os.close(self.fd)
        if header is not None and self.log_id is not None and header.log_id != self.log_id:
            self.delivered = 0                                                # created anew
        if header is not None:
            self.log_id = header.log_id
        self.fd, self.header, self.inode = fd, header, (st.st_dev, st.st_ino)
        self.offset = HEADER_SIZE
        self.reported_damage = -1
        return True


# --- command line -----------------------------------------------------------------------

def _parse_kind(text):
    names = {"data": KIND_DATA, "text": KIND_TEXT, "json": KIND_JSON, "0": 0, "1": 1, "2": 2}
    if text not in names:
        raise SystemExit(f"unknown kind {text!r}: use data, text or json")
    return names[text]


def _emit(item):
    sys.stdout.write(json.dumps(item.as_json(), ensure_ascii=False) + "\n")
    sys.stdout.flush()


_CONFIGURATION_OPTIONS = {"--retain-count", "--retain-bytes", "--max-size", "--backlog-count", "--backlog-bytes"}


def _options(arguments, flags, valued):
    positional, options = [], {}
    iterator = iter(arguments)
    for argument in iterator:
        if argument in flags:
            options[argument] = True
        elif argument in valued or argument in _CONFIGURATION_OPTIONS:
            options[argument] = next(iterator, None)
            if options[argument] is None:
                raise SystemExit(f"{argument} needs a value")
        else:
            positional.append(argument)
    configuration = Configuration(
        retained_count=int(options.get("--retain-count", DEFAULT.retained_count)),
        retained_bytes=int(options.get("--retain-bytes", DEFAULT.retained_bytes)),
        maximum_message_size=int(options.get("--max-size", DEFAULT.maximum_message_size)),
        backlog_count=int(options.get("--backlog-count", DEFAULT.backlog_count)),
        backlog_bytes=int(options.get("--backlog-bytes", DEFAULT.backlog_bytes)))
    return positional, options, configuration


def _command_write(arguments):
    positional, options, configuration = _options(arguments, set(), {"--count", "--torn", "--pause-at", "--resume-on"})
    if len(positional) != 4 or ("--pause-at" in options) != ("--resume-on" in options):
        raise SystemExit("usage: write DIR ID KIND TEXT [--count N] [--torn BYTES] [--pause-at K --resume-on PATH]")
    directory, identifier, kind_name, text = positional
    kind = _parse_kind(kind_name)
    count = int(options.get("--count", 1))
    pause_at = int(options.get("--pause-at", 0))
    writer = Writer(directory, identifier, configuration)
    try:
        for index in range(1, count + 1):
            if text == "-":
                payload = sys.stdin.buffer.read()
            elif kind == KIND_DATA:
                payload = base64.b64decode(text, validate=True)
            else:
                payload = text.replace("{i}", str(index)).encode("utf-8")
            if "--torn" in options:
                sequence = _torn_append(writer, kind, payload, int(options["--torn"]))
                sys.stdout.write(json.dumps({"torn": sequence}) + "\n")
                break
            sequence = writer.append(kind, payload)
            sys.stdout.write(json.dumps({"sequence": sequence}) + "\n")
            if index == pause_at:
                deadline = time.monotonic() + 60
                while not os.path.exists(options["--resume-on"]):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{options['--resume-on']} did not appear within 60 seconds")
                    time.sleep(0.001)
    finally:
        writer.close()
    sys.stdout.flush()
    return 0


def _command_clear(arguments):
    positional, _, configuration = _options(arguments, set(), set())
    if len(positional) != 2:
        raise SystemExit("usage: clear DIR ID")
    clear(positional[0], positional[1], configuration)
    return 0


def follow(directory, identifier, wanted, start, timeout, ready, configuration, emit, until=None):
    """§11.3 with real inotify: emits items until `wanted` records arrived (or one with a
    sequence of at least `until`). Returns 0, or 3 on timeout."""
    deadline = time.monotonic() + timeout
    container = Container(directory)
    watch = DirectoryWatch(container)                                         # S1
    listener = Listener(container, identifier, start, configuration)          # S2-S4
    if ready:
        with open(ready, "w"):
            pass
    received = 0
    try:
        while True:
            for item in listener.read():                                      # S5
                emit(item)
                if isinstance(item, Record):
                    received += 1
                    if received >= wanted or (until is not None and item.sequence >= until):
                        return 0
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return 3
            # The wake-up is inotify; the timeout is a safety net only.
            _, replaced = watch.wait(listener.name, min(remaining, 1.0))
            if replaced:
                listener.invalidate()
    finally:
        listener.close()
        watch.close()
        container.close()


def _command_read(arguments):
    positional, options, configuration = _options(arguments, {"--latest"},
                                                  {"--follow", "--until", "--start", "--timeout", "--ready"})
    if len(positional) != 2:
        raise SystemExit("usage: read DIR ID [--latest | --follow N [--until S] [--start S] [--timeout T] [--ready PATH]]")
    directory, identifier = positional
    if "--follow" in options or "--until" in options:
        until = int(options["--until"]) if "--until" in options else None
        return follow(directory, identifier, int(options.get("--follow", 1 << 62)), options.get("--start", "now"),
                      float(options.get("--timeout", 60)), options.get("--ready"), configuration, _emit, until)
    if "--latest" in options:
        record = read_latest(directory, identifier, configuration)
        if record is not None:
            _emit(record)
        return 0
    for item in read_all(directory, identifier, configuration):
        _emit(item)
    return 0


# --- selftest -----------------------------------------------------------------------------

EXAMPLE_LOG_ID = 0x0123456789ABCDEF
EXAMPLE_DATE_NS = 1735689600 * 10**9


def _hex_block(document, marker):
    """The bytes of the hex block after an HTML comment marker in Protocol.md."""
    start = document.index(marker)
    block = document[document.index("```", start) + 3:]
    block = block[:block.index("```")]
    data = bytearray()
    for line in block.strip().splitlines():
        data.extend(bytes.fromhex(line.split("|")[0]))
    return bytes(data)


def example_record():
    return encode_record(EXAMPLE_LOG_ID, 1, EXAMPLE_DATE_NS, 4242, KIND_TEXT, b"hello", uid=1000)


def example_header():
    header = new_header(DEFAULT)
    header.log_id = EXAMPLE_LOG_ID
    return header


def _exercise(failures):
    """Runs the protocol in a temporary directory: each step checks what the document
    says about it."""
    def check(condition, what):
        if not condition:
            failures.append(what)

    small = Configuration(retained_count=4, retained_bytes=1 << 20)
    with tempfile.TemporaryDirectory(prefix="wormhole-selftest-") as scratch:
        directory = os.path.join(scratch, "container")
        writer = Writer(directory, "note", small)
        path = writer.path
        check(os.stat(directory).st_mode & 0o777 == 0o700, "the container is not created 0700")
        for index in range(1, 4):
            check(writer.append(KIND_TEXT, f"m{index}".encode()) == index, f"append {index} has the wrong sequence")
        check(os.stat(path).st_mode & 0o777 == 0o600, "the log is not created 0600")
        size = os.path.getsize(path)
        check(size == HEADER_SIZE + 3 * (RECORD_OVERHEAD + 2), "three records do not take 128 + 3 x 42 bytes")
        # A torn record: invisible to readers, cut by the next writer.
        other = Writer(directory, "note", small)
        _torn_append(other, KIND_TEXT, b"torn", 20)
        other.close()
        check(os.path.getsize(path) == size + 20, "the torn record was not left in place")
        check([r.sequence for r in read_all(directory, "note")] == [1, 2, 3], "a reader saw the torn record")
        check(read_latest(directory, "note").payload == b"m3", "the latest is not m3 beside a torn tail")
        check(writer.append(KIND_TEXT, b"m4") == 4, "the writer after a torn record did not take sequence 4")
        check(os.path.getsize(path) == size + RECORD_OVERHEAD + 2, "the torn tail was not cut")
        # Compaction: past 2 x 4 records the log keeps the newest 4.
        container = Container(directory)
        watch = DirectoryWatch(container)
        listener = Listener(container, "note", "history", small)
        first = [item.sequence for item in listener.read() if isinstance(item, Record)]
        check(first == [1, 2, 3, 4], f"history read {first}")
        for index in range(5, 31):
            writer.append(KIND_TEXT, f"m{index}".encode())
        with open(path, "rb") as handle:
            header = Header.decode(handle.read(HEADER_SIZE))
        check(header.base_sequence > 0, "the log was never compacted")
        replaced = False
        while True:                                      # the events the writes caused
            woken, moved = watch.wait(b"note.wormhole", 0.1)
            if not woken:
                break
            replaced = replaced or moved
        check(replaced, "inotify did not report the compaction's rename")
        listener.invalidate()
        got = [item.sequence for item in listener.read() if isinstance(item, Record)]
        check(got == list(range(5, 31)), f"a listener with a claim read {got}, not 5...30, through compaction")
        check(not any(name.endswith(b".compacting") for name in os.listdir(os.fsencode(directory))),
              "a compaction left its temporary file")
        # A listener that starts before the oldest kept record is told how many it lost.
        late = Listener(container, "note", "after:0", small)
        items = late.read()
        check(isinstance(items[0], Problem) and items[0].code == "messagesLost" and
              items[0].lost == header.base_sequence, "no gap report for messages compacted away")
        late.close()
        # Clearing: nothing to read, numbering goes on.
        writer.clear()
        check(read_all(directory, "note") == [] and read_latest(directory, "note") is None, "clearing hid nothing")
        check(writer.append(KIND_TEXT, b"after") == 31, "numbering did not go on after clearing")
        check(watch.wait(b"note.wormhole", 2)[0], "no inotify event for the log")
        listener.close()
        watch.close()
        container.close()
        writer.close()
        # A version 1 log is refused and left as it is.
        v1 = os.path.join(directory, "old.wormhole")
        with open(v1, "wb") as handle:
            handle.write(MAGIC + struct.pack("<II", 1, 128) + bytes(112))
        try:
            append(directory, "old", KIND_TEXT, b"x")
            failures.append("a version 1 log was appended to")
        except UnsupportedLog as error:
            check("earlier Wormhole" in str(error), "the version 1 error does not say what to do")
        check(os.path.getsize(v1) == 128, "a version 1 log was modified")


def _command_selftest(arguments):
    here = os.path.dirname(os.path.abspath(__file__))
    path = arguments[0] if arguments else os.path.join(here, "..", "..", "Docs", "Protocol.md")
    with open(path, encoding="utf-8") as handle:
        document = handle.read()
    failures = []
    if crc32(b"123456789") != 0xCBF43926 or crc32(b"") != 0:
        failures.append("crc32 test vectors fail")
    record = example_record()
    if record != _hex_block(document, "<!-- example-record -->"):
        failures.append("example record differs: " + record.hex(" "))
    parsed, _, _ = parse_record(record, EXAMPLE_LOG_ID)
    if parsed is None or parsed.payload != b"hello" or len(record) != 65:
        failures.append("example record does not parse back")
    if parse_record(record, EXAMPLE_LOG_ID ^ 1)[0] is not None:
        failures.append("the example record is valid in another log")
    header = example_header()
    if header.encode() != _hex_block(document, "<!-- example-header -->"):
        failures.append("example header differs: " + header.encode().hex(" "))
    decoded = Header.decode(header.encode())
    if decoded is None or decoded.encode() != header.encode():
        failures.append("example header does not decode back")
    for bad in ("e\u0301", "a\u202eb", "a\u0085b", "a/b", ".x", "\t"):
        try:
            validate_identifier(bad)
            failures.append(f"identifier {bad!r} accepted")
        except ValueError:
            pass
    _exercise(failures)
    for failure in failures:
        print(failure, file=sys.stderr)
    print("selftest " + ("failed" if failures else "passed"))
    return 1 if failures else 0


def main(argv):
    commands = {"write": _command_write, "read": _command_read, "clear": _command_clear,
                "selftest": _command_selftest}
    if len(argv) < 2 or argv[1] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return commands[argv[1]](argv[2:])
    except (WormholeProtocolError, ValueError, OSError) as error:
        print(f"wormhole_log: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
