#!/usr/bin/env python3
"""An independent implementation of the Wormhole on-disk protocol, version 1.

Written from Docs/Protocol.md alone, with the Python standard library only. Section
numbers in comments (§8.2, W3, ...) refer to that document.

Library use:

    import wormhole_log as w
    seq = w.append("/run/user/1000/app-groups/g", "note", w.KIND_TEXT, b"hi")
    for record in w.read_all("/run/user/1000/app-groups/g", "note"): ...
    latest = w.read_latest("/run/user/1000/app-groups/g", "note")

Command line:

    wormhole_log.py write DIR ID KIND TEXT [--count N] [--no-notify]
        KIND is data, text or json (or 0, 1, 2). For data, TEXT is the payload in
        base64. TEXT '-' reads the payload's bytes from standard input. With --count N,
        N messages are passed; '{i}' in TEXT becomes 1..N. Prints {"sequence": S} per
        message.
    wormhole_log.py read DIR ID [--latest]
        Prints each retained record (or the latest) as one JSON line:
        {"sequence", "kind", "pid", "date_ns", "encoding", "payload"}; the payload is
        UTF-8 text for kinds text and json when it decodes, else base64. An unreadable
        record prints {"error": "..."}.
    wormhole_log.py read DIR ID --follow N [--start now|latest|history|after:S]
                                [--timeout SECONDS] [--ready PATH]
        Listens (§9.3) with a claim (§10) and inotify (§11.2); prints the first N
        records that arrive, then exits. Creates PATH once listening has started.
        Exit status 3 on timeout.
    wormhole_log.py selftest [PROTOCOL_MD]
        Checks the CRC test vector and that this encoder reproduces the example record
        and header of the document byte for byte.

Compaction (§8.3) is not implemented: the document allows a foreign writer to omit it.
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
import time
import zlib

# §7.1, §7.2
MAGIC = b"WORMHOLE"
VERSION = 1
HEADER_SIZE = 128
RECORD_MARKER = b"WHR1"
RECORD_HEADER_SIZE = 36
LOG_SUFFIX = ".wormhole"
NOTIFICATION_SUFFIX = ".notification"

# §7.3
KIND_DATA, KIND_TEXT, KIND_JSON = 0, 1, 2
KIND_NAMES = {KIND_DATA: "data", KIND_TEXT: "text", KIND_JSON: "json"}

# §8.3: retention defaults, and the thresholds a writer puts in a new header.
RETAINED_MESSAGE_COUNT = 1000
RETAINED_BYTE_COUNT = 16 * 1024 * 1024

# Header layout after the 8-byte magic: version, headerSize, committedEnd, lastSequence,
# clearedThrough, logID, recordCount, compactionRecordThreshold, compactionByteThreshold,
# lastRecordOffset; then 56 reserved bytes.
_HEADER = struct.Struct("<8sIIQQQQIIQQ56x")
# Record header without the CRC: marker, length, sequence, date, pid, kind, 3 reserved.
_RECORD = struct.Struct("<4sIQqiB3x")
assert _HEADER.size == HEADER_SIZE and _RECORD.size == 32


class WormholeProtocolError(Exception):
    pass


class UnsupportedLog(WormholeProtocolError):
    """The file is not a version 1 log (§7.1): report, never modify."""


# --- §6 identifiers -------------------------------------------------------------------

def validate_identifier(identifier, what="identifier"):
    """Returns the identifier's UTF-8 bytes, or raises ValueError saying why not."""
    raw = identifier.encode("utf-8") if isinstance(identifier, str) else bytes(identifier)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {raw!r} is not valid UTF-8")
    if not raw:
        raise ValueError(f"{what} may not be empty")
    if len(raw) > 200:
        raise ValueError(f"{what} is {len(raw)} bytes long; the limit is 200")
    if raw in (b".", b".."):
        raise ValueError(f"{what} may not be '.' or '..'")
    if raw.startswith(b"."):
        raise ValueError(f"{what} may not start with '.'")
    if b"/" in raw:
        raise ValueError(f"{what} may not contain '/'")
    if b"\0" in raw:
        raise ValueError(f"{what} may not contain a NUL byte")
    if any(b < 0x20 or b == 0x7F for b in raw):
        raise ValueError(f"{what} may not contain control characters")
    return raw


# --- §4 container -----------------------------------------------------------------------

def check_directory(path):
    """§4: a real directory, owned by us, not writable by group or others."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise WormholeProtocolError(f"'{path}' is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise WormholeProtocolError(f"'{path}' is not a directory")
    if st.st_uid != os.geteuid():
        raise WormholeProtocolError(f"'{path}' belongs to user {st.st_uid}")
    if st.st_mode & 0o022:
        raise WormholeProtocolError(f"'{path}' has mode {oct(st.st_mode & 0o7777)}")


def prepare_directory(path, parents=True):
    """Creates a missing directory 0700 (and its parents, when asked), then checks it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        if not parents:
            raise
        os.makedirs(os.path.dirname(path) or "/", 0o700, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    check_directory(path)


def _log_path(directory, identifier):
    return os.path.join(os.fsencode(directory), validate_identifier(identifier) + LOG_SUFFIX.encode())


# --- §7.4 CRC, §7.1 header, §7.2 records -----------------------------------------------

def crc32(data):
    return zlib.crc32(data) & 0xFFFFFFFF


class Header:
    __slots__ = ("committed_end", "last_sequence", "cleared_through", "log_id", "record_count",
                 "record_threshold", "byte_threshold", "last_record_offset")

    def __init__(self, committed_end=HEADER_SIZE, last_sequence=0, cleared_through=0, log_id=0,
                 record_count=0, record_threshold=0, byte_threshold=0, last_record_offset=0):
        self.committed_end = committed_end
        self.last_sequence = last_sequence
        self.cleared_through = cleared_through
        self.log_id = log_id
        self.record_count = record_count
        self.record_threshold = record_threshold
        self.byte_threshold = byte_threshold
        self.last_record_offset = last_record_offset

    def encode(self):
        return _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, self.committed_end, self.last_sequence,
                            self.cleared_through, self.log_id, self.record_count,
                            self.record_threshold, self.byte_threshold, self.last_record_offset)

    @staticmethod
    def decode(data, path="log"):
        """§7.1: None for an empty file; a Header; or UnsupportedLog."""
        if len(data) == 0:
            return None
        if len(data) < HEADER_SIZE or data[:8] != MAGIC:
            raise UnsupportedLog(f"'{os.fsdecode(path)}' is not a Wormhole message log")
        (_, version, _, committed_end, last_sequence, cleared_through, log_id, record_count,
         record_threshold, byte_threshold, last_record_offset) = _HEADER.unpack(data[:HEADER_SIZE])
        if version != VERSION:
            raise UnsupportedLog(f"'{os.fsdecode(path)}' is a version {version} log; this reads version {VERSION}")
        if committed_end < HEADER_SIZE:
            raise UnsupportedLog(f"'{os.fsdecode(path)}' has a damaged header (commit offset {committed_end})")
        return Header(committed_end, last_sequence, cleared_through, log_id, record_count,
                      record_threshold, byte_threshold, last_record_offset)


class Record:
    __slots__ = ("sequence", "date_ns", "pid", "kind", "payload")

    def __init__(self, sequence, date_ns, pid, kind, payload):
        self.sequence, self.date_ns, self.pid, self.kind, self.payload = sequence, date_ns, pid, kind, payload

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


def encode_record(sequence, date_ns, pid, kind, payload):
    head = _RECORD.pack(RECORD_MARKER, len(payload), sequence, date_ns, pid, kind)
    return head + struct.pack("<I", crc32(head + payload)) + payload


# Outcomes of parse_record.
VALID, INCOMPLETE, CORRUPT = "valid", "incomplete", "corrupt"


def peek_record(data, position):
    """(sequence, length) when a marker and a whole record header are at position."""
    if position + RECORD_HEADER_SIZE > len(data) or data[position:position + 4] != RECORD_MARKER:
        return None
    length, sequence = struct.unpack_from("<IQ", data, position + 4)
    return sequence, RECORD_HEADER_SIZE + length


def parse_record(data, position):
    """§7.2 validity. Returns (VALID, Record, length), (INCOMPLETE, None, None) or
    (CORRUPT, reason, length-or-None)."""
    if position + RECORD_HEADER_SIZE > len(data):
        return INCOMPLETE, None, None
    if data[position:position + 4] != RECORD_MARKER:
        return CORRUPT, f"no record marker at position {position}", None
    marker, length, sequence, date_ns, pid, kind = _RECORD.unpack_from(data, position)
    total = RECORD_HEADER_SIZE + length
    if position + total > len(data):
        return INCOMPLETE, None, None
    (stored,) = struct.unpack_from("<I", data, position + 32)
    payload = bytes(data[position + RECORD_HEADER_SIZE:position + total])
    if crc32(bytes(data[position:position + 32]) + payload) != stored:
        return CORRUPT, f"record {sequence} fails its checksum", total
    if kind not in KIND_NAMES:
        return CORRUPT, f"record {sequence} has unknown kind {kind}", total
    return VALID, Record(sequence, date_ns, pid, kind, payload), total


def next_marker(data, position):
    """§9.4 resynchronisation: the next WHR1 after position, or the end."""
    found = data.find(RECORD_MARKER, position + 1)
    return len(data) if found < 0 else found


# --- file helpers -----------------------------------------------------------------------

def _pread_exactly(fd, size, offset):
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


def _read_header(fd, path):
    return Header.decode(os.pread(fd, HEADER_SIZE, 0), path)


def _random_u64():
    while True:
        value = int.from_bytes(os.urandom(8), "little")
        if value:
            return value


# --- §11 notifications ------------------------------------------------------------------

def post(directory, name):
    """§11.1: touch <dir>/<name>.notification, creating it when missing."""
    path = os.path.join(os.fsencode(directory), validate_identifier(name, "notification name") + NOTIFICATION_SUFFIX.encode())
    try:
        os.utime(path, None, follow_symlinks=False)  # utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW)
        return
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    os.utime(path, None, follow_symlinks=False)


def get_state(directory, name):
    """§11.3."""
    path = os.path.join(os.fsencode(directory), validate_identifier(name, "notification name") + NOTIFICATION_SUFFIX.encode())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        data = os.pread(fd, 8, 0)
    finally:
        os.close(fd)
    return struct.unpack("<Q", data)[0] if len(data) == 8 else 0


def set_state(directory, name, value):
    """§11.3: does not post."""
    path = os.path.join(os.fsencode(directory), validate_identifier(name, "notification name") + NOTIFICATION_SUFFIX.encode())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _pwrite_all(fd, struct.pack("<Q", value), 0)
    finally:
        os.close(fd)


# --- §8 writing -------------------------------------------------------------------------

def _open_locked_log(directory, identifier, create):
    """W1-W5: returns (fd, header-or-None) with the lock held, or None when there is no
    log and create is False. Every call opens its own descriptor, so threads of one
    process are excluded from each other by the flock as well (§8.1)."""
    path = _log_path(directory, identifier)                                  # W1
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    for _ in range(64):
        try:
            fd = os.open(path, flags, 0o600)                                 # W2
        except FileNotFoundError:
            if not create:
                return None
            prepare_directory(os.fsencode(directory))
            fd = os.open(path, flags, 0o600)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise WormholeProtocolError(f"'{os.fsdecode(path)}' is a symbolic link; refused")
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)                                   # W3 (EINTR retried by Python)
            if os.fstat(fd).st_nlink == 0:                                   # W4
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                continue
            return fd, _read_header(fd, path)                                # W5
        except BaseException:
            os.close(fd)  # closing releases the lock
            raise
    raise WormholeProtocolError(f"'{os.fsdecode(path)}' kept being replaced")


def append(directory, identifier, kind, payload, notify=True):
    """§8.1-8.2: passes one message; returns its sequence number."""
    if kind not in KIND_NAMES:
        raise ValueError(f"unknown payload kind {kind}")
    payload = bytes(payload)
    if len(payload) > 0xFFFFFFFF:
        raise ValueError("payload too large for a version 1 record")
    fd, header = _open_locked_log(directory, identifier, create=True)
    try:
        if header is None:                                                   # W6
            header = Header(log_id=_random_u64(),
                            record_threshold=2 * RETAINED_MESSAGE_COUNT,
                            byte_threshold=HEADER_SIZE + 2 * RETAINED_BYTE_COUNT)
            _pwrite_all(fd, header.encode(), 0)
        sequence = header.last_sequence + 1                                  # A1
        record = encode_record(sequence, time.time_ns(), os.getpid(), kind, payload)  # A2
        _pwrite_all(fd, record, header.committed_end)                        # A3
        header.last_record_offset = header.committed_end                     # A4
        header.committed_end += len(record)
        header.last_sequence = sequence
        header.record_count += 1
        _pwrite_all(fd, header.encode(), 0)                                  # A5: commit
        # A6: compaction omitted (allowed for foreign writers, §8.3).
    finally:
        os.close(fd)                                                         # A7: unlock
    if notify:
        post(directory, identifier)                                          # A8
    return sequence


def clear(directory, identifier):
    """§8.4 without compaction (allowed for foreign writers)."""
    opened = _open_locked_log(directory, identifier, create=False)           # K1
    if opened is None:
        return
    fd, header = opened
    try:
        if header is not None:
            header.cleared_through = header.last_sequence                    # K2
            _pwrite_all(fd, header.encode(), 0)
    finally:
        os.close(fd)                                                         # K4


# --- §9 reading -------------------------------------------------------------------------

def _open_for_reading(path):
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def read_latest(directory, identifier):
    """§9.1: the latest record, or None."""
    path = _log_path(directory, identifier)
    fd = _open_for_reading(path)                                             # L1
    if fd is None:
        return None
    try:
        header = _read_header(fd, path)                                      # L2
        if header is None:
            return None
        if header.last_record_offset < HEADER_SIZE or header.last_sequence <= header.cleared_through:  # L3
            return None
        data = _pread_exactly(fd, header.committed_end - header.last_record_offset, header.last_record_offset)
        outcome, record, _ = parse_record(data, 0)                           # L4
        if outcome != VALID:
            raise WormholeProtocolError(f"the latest record of '{os.fsdecode(path)}' is unreadable")
        return record
    finally:
        os.close(fd)


def read_all(directory, identifier, errors=None):
    """§9.2: every retained, uncleared record, oldest first. Unreadable records are
    appended to `errors` (a list) when given."""
    path = _log_path(directory, identifier)
    fd = _open_for_reading(path)                                             # H1
    if fd is None:
        return []
    try:
        for attempt in range(2):
            header = _read_header(fd, path)
            if header is None:
                return []
            body = _pread_exactly(fd, header.committed_end - HEADER_SIZE, HEADER_SIZE)  # H2
            if len(body) == header.committed_end - HEADER_SIZE:
                break
        records, position = [], 0
        while position < len(body):                                          # H3, §9.4
            outcome, value, length = parse_record(body, position)
            if outcome == VALID:
                if value.sequence > header.cleared_through:
                    records.append(value)
                position += length
            elif outcome == INCOMPLETE:
                if errors is not None:
                    errors.append(f"record at offset {HEADER_SIZE + position} runs past the commit offset")
                position = next_marker(body, position)
            else:
                if errors is not None:
                    errors.append(value)
                if length is not None and position + length <= len(body) and (
                        position + length == len(body) or peek_record(body, position + length)):
                    position += length
                else:
                    position = next_marker(body, position)
        return records
    finally:
        os.close(fd)


class Claim:
    """§10: a live listener's claim on the log of one identifier."""

    def __init__(self, directory, identifier):
        raw = validate_identifier(identifier)
        listeners = os.path.join(os.fsencode(directory), b".listeners")
        prepare_directory(listeners)                                         # P1
        folder = os.path.join(listeners, raw)
        prepare_directory(folder, parents=False)
        name = f"{os.getpid()}-{_random_u64():x}".encode()                   # P2
        temporary = os.path.join(folder, b"." + name)
        self.path = os.path.join(folder, name)
        self.fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)  # P3
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)                              # P4
            _pwrite_all(self.fd, struct.pack("<Q", 0), 0)
            os.rename(temporary, self.path)                                  # P5
        except BaseException:
            try:
                os.unlink(temporary)
            finally:
                os.close(self.fd)
            raise

    def update(self, delivered):
        _pwrite_all(self.fd, struct.pack("<Q", delivered), 0)               # §10.2

    def close(self):
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None


class Listener:
    """§9.3: follows the log of one identifier; read() returns what is new."""

    def __init__(self, directory, identifier, start="now"):
        self.directory = directory
        self.identifier = identifier
        self.path = _log_path(directory, identifier)
        self.fd = None
        self.offset = HEADER_SIZE
        self.log_id = None
        self.delivered = 0
        self.saw_unlinked = False
        self.reported_unsupported = False
        self.claim = Claim(directory, identifier)                             # S2 (S1 is the caller's)
        if start.startswith("after:"):
            self.delivered = int(start[6:])
        self.fd = _open_for_reading(self.path)                               # S3
        header = None
        if self.fd is not None:
            try:
                header = _read_header(self.fd, self.path)
            except UnsupportedLog:
                header = None
        if header is not None:
            self.log_id = header.log_id
            if start == "now":
                self.delivered = header.last_sequence
                self.offset = header.committed_end
            elif start == "latest":
                self.delivered = max(header.cleared_through, max(header.last_sequence - 1, 0))
                if header.last_record_offset >= HEADER_SIZE:
                    self.offset = header.last_record_offset
            elif start == "history":
                self.delivered = header.cleared_through
            elif start.startswith("after:"):
                self.delivered = max(self.delivered, header.cleared_through)
            else:
                raise ValueError(f"unknown starting point {start!r}")
        self.claim.update(self.delivered)                                    # S4

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.claim.close()

    def read(self):
        """One read (R1-R6). Returns a list of Record or error strings."""
        results = []
        retried_header = False
        while True:
            if self.fd is None:                                              # R1
                self.fd = _open_for_reading(self.path)
                self.saw_unlinked = False
                if self.fd is None:
                    break
            try:                                                             # R2
                header = _read_header(self.fd, self.path)
            except UnsupportedLog as error:
                if not self.reported_unsupported:
                    results.append(str(error))
                self.reported_unsupported = True
                break
            self.reported_unsupported = False
            if header is None:
                break
            if self.log_id is not None and self.log_id != header.log_id:     # R3
                self.delivered = 0
                self.offset = HEADER_SIZE
                try:
                    renewed = Claim(self.directory, self.identifier)
                except OSError:
                    renewed = None
                if renewed is not None:
                    self.claim.close()
                    self.claim = renewed
            self.log_id = header.log_id
            end = header.committed_end                                       # R4
            if self.offset >= end:
                if os.fstat(self.fd).st_nlink > 0:
                    break
                if not self.saw_unlinked:
                    self.saw_unlinked = True
                    continue
                os.close(self.fd)
                self.fd = None
                self.offset = HEADER_SIZE
                continue
            data = _pread_exactly(self.fd, end - self.offset, self.offset)   # R5
            position, retry = 0, False
            while position < len(data):
                peeked = peek_record(data, position)
                if peeked and peeked[0] <= self.delivered and position + peeked[1] <= len(data):
                    position += peeked[1]
                    continue
                outcome, value, length = parse_record(data, position)
                if outcome == VALID:
                    results.append(value)
                    self.delivered = value.sequence
                    position += length
                    continue
                if not retried_header:                                       # §9.4: torn header?
                    retry = True
                    break
                if outcome == INCOMPLETE:
                    results.append(f"the record at offset {self.offset + position} runs past the commit offset")
                    position = next_marker(data, position)
                else:
                    results.append(value)
                    if length is not None and position + length <= len(data) and (
                            position + length == len(data) or peek_record(data, position + length)):
                        position += length
                    else:
                        position = next_marker(data, position)
            self.offset += position
            if retry:
                retried_header = True
                continue
            retried_header = False
            if position == 0:
                break
        if any(isinstance(item, Record) for item in results):
            self.claim.update(self.delivered)                                # R6
        return results


# inotify through the C library (§11.2); ctypes is part of the standard library.
IN_ATTRIB, IN_DELETE_SELF, IN_MOVE_SELF = 0x00000004, 0x00000400, 0x00000800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_CLOEXEC = 0x00004000, 0x00008000, 0x01000000, 0o2000000
_EVENT = struct.Struct("iIII")


class DirectoryWatch:
    """Observes the posts of one name in a container (§11.2)."""

    def __init__(self, directory, name):
        self.directory = os.fsencode(directory)
        self.file = validate_identifier(name, "notification name") + NOTIFICATION_SUFFIX.encode()
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._add()

    def _add(self):
        mask = IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
        if self.libc.inotify_add_watch(self.fd, self.directory, mask) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch", os.fsdecode(self.directory))

    def wait(self, timeout):
        """True when the name was posted (or anything may have changed) within timeout."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        data = os.read(self.fd, 65536)
        posted, position = False, 0
        while position + _EVENT.size <= len(data):
            _, mask, _, length = _EVENT.unpack_from(data, position)
            name = data[position + _EVENT.size:position + _EVENT.size + length].rstrip(b"\0")
            position += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                posted = True                                                # O3
            elif mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                prepare_directory(self.directory)                            # O4
                self._add()
                posted = True
            elif mask & IN_ATTRIB and name == self.file:                     # O2
                posted = True
        return posted

    def close(self):
        os.close(self.fd)


# --- command line -----------------------------------------------------------------------

def _parse_kind(text):
    names = {"data": KIND_DATA, "text": KIND_TEXT, "json": KIND_JSON, "0": 0, "1": 1, "2": 2}
    if text not in names:
        raise SystemExit(f"unknown kind {text!r}: use data, text or json")
    return names[text]


def _emit(item):
    line = item.as_json() if isinstance(item, Record) else {"error": str(item)}
    sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _options(arguments, flags, valued):
    positional, options = [], {}
    iterator = iter(arguments)
    for argument in iterator:
        if argument in flags:
            options[argument] = True
        elif argument in valued:
            options[argument] = next(iterator, None)
            if options[argument] is None:
                raise SystemExit(f"{argument} needs a value")
        else:
            positional.append(argument)
    return positional, options


def _command_write(arguments):
    positional, options = _options(arguments, {"--no-notify"}, {"--count"})
    if len(positional) != 4:
        raise SystemExit("usage: write DIR ID KIND TEXT [--count N] [--no-notify]")
    directory, identifier, kind_name, text = positional
    kind = _parse_kind(kind_name)
    count = int(options.get("--count", 1))
    for index in range(1, count + 1):
        if text == "-":
            payload = sys.stdin.buffer.read()
        elif kind == KIND_DATA:
            payload = base64.b64decode(text, validate=True)
        else:
            payload = text.replace("{i}", str(index)).encode("utf-8")
        sequence = append(directory, identifier, kind, payload, notify="--no-notify" not in options)
        sys.stdout.write(json.dumps({"sequence": sequence}) + "\n")
    sys.stdout.flush()
    return 0


def _command_read(arguments):
    positional, options = _options(arguments, {"--latest"}, {"--follow", "--start", "--timeout", "--ready"})
    if len(positional) != 2:
        raise SystemExit("usage: read DIR ID [--latest | --follow N [--start S] [--timeout T] [--ready PATH]]")
    directory, identifier = positional
    if "--follow" in options:
        wanted = int(options["--follow"])
        deadline = time.monotonic() + float(options.get("--timeout", 60))
        watch = DirectoryWatch(directory, identifier)                        # S1
        listener = Listener(directory, identifier, options.get("--start", "now"))  # S2-S4
        if "--ready" in options:
            with open(options["--ready"], "w"):
                pass
        received = 0
        try:
            while received < wanted:                                         # S5
                for item in listener.read():
                    if isinstance(item, Record):
                        if received == wanted:
                            break
                        received += 1
                    _emit(item)
                if received >= wanted:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return 3
                # A timeout is a safety net only: the wake-up is the notification.
                watch.wait(min(remaining, 1.0))
        finally:
            listener.close()
            watch.close()
        return 0
    if "--latest" in options:
        record = read_latest(directory, identifier)
        if record is not None:
            _emit(record)
        return 0
    errors = []
    for record in read_all(directory, identifier, errors):
        _emit(record)
    for error in errors:
        _emit(error)
    return 0


def _hex_block(document, marker):
    """The bytes of the hex block after an HTML comment marker in Protocol.md."""
    start = document.index(marker)
    block = document[document.index("```", start) + 3:]
    block = block[:block.index("```")]
    data = bytearray()
    for line in block.strip().splitlines():
        data.extend(bytes.fromhex(line.split("|")[0]))
    return bytes(data)


def _command_selftest(arguments):
    here = os.path.dirname(os.path.abspath(__file__))
    path = arguments[0] if arguments else os.path.join(here, "..", "..", "Docs", "Protocol.md")
    with open(path, encoding="utf-8") as handle:
        document = handle.read()
    failures = []
    if crc32(b"123456789") != 0xCBF43926:
        failures.append("crc32(b'123456789') is not 0xCBF43926")
    record = encode_record(1, 1735689600 * 10**9, 4242, KIND_TEXT, b"hello")
    if record != _hex_block(document, "<!-- example-record -->"):
        failures.append("example record differs: " + record.hex(" "))
    outcome, parsed, length = parse_record(record, 0)
    if outcome != VALID or parsed.payload != b"hello" or length != 41:
        failures.append("example record does not parse back")
    header = Header(committed_end=HEADER_SIZE + len(record), last_sequence=1, log_id=0x0123456789ABCDEF,
                    record_count=1, record_threshold=2 * RETAINED_MESSAGE_COUNT,
                    byte_threshold=HEADER_SIZE + 2 * RETAINED_BYTE_COUNT, last_record_offset=HEADER_SIZE)
    if header.encode() != _hex_block(document, "<!-- example-header -->"):
        failures.append("example header differs: " + header.encode().hex(" "))
    for failure in failures:
        print(failure, file=sys.stderr)
    print("selftest " + ("failed" if failures else "passed"))
    return 1 if failures else 0


def main(argv):
    commands = {"write": _command_write, "read": _command_read, "selftest": _command_selftest}
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
