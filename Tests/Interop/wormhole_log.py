#!/usr/bin/env python3
"""The command line of the Python implementation of the Wormhole protocol, for the
interoperability tests (Tests/WormholeTests/ProtocolInteropTests.swift): a thin layer over
the `wormhole` package in Python/ (Docs/Python.md), which implements Docs/Protocol.md
with the standard library only.

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
        {"sequence", "kind", "pid", "uid", "date_ns", "encoding", "payload"}; the payload
        is UTF-8 text for kinds text and json when it decodes, else base64. A record that
        cannot be read prints {"error": "...", "code": "..."}.
    wormhole_log.py read DIR ID --follow N [--until S] [--start now|latest|history|after:S]
                                [--durable NAME] [--timeout SECONDS] [--ready PATH]
        Listens (§11) with a claim (§12) and inotify; prints the first N records that
        arrive (or the records up to the first one with sequence S or above, with
        --until), and every error before them (a gap prints
        {"error": ..., "code": "messagesLost", "lost": COUNT}), then exits. With
        --durable NAME, as the durable listener NAME (§12.4): it resumes after the last
        record it printed. Creates PATH once listening has started. Exit status 3 on
        timeout.
    wormhole_log.py clear DIR ID
        Clears the messages of ID (§10.3).
    wormhole_log.py selftest [PROTOCOL_MD]
        Checks the CRC test vectors, that the package reproduces the example record and
        header of the document byte for byte, and runs the protocol (append, torn tail,
        compaction, clearing, listening with a gap) in a temporary directory.

Exit status 1 with a message on standard error for any error (an unsupported log, a bad
identifier, an unsafe container).
"""

import base64
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Python"))

from wormhole import Configuration, Record, StartingPoint, WormholeError  # noqa: E402
from wormhole import claims, identifiers, inotify  # noqa: E402
from wormhole.container import ContainerDirectory  # noqa: E402
from wormhole.format import (HEADER_SIZE, KIND_DATA, KIND_JSON, KIND_NAMES, KIND_TEXT, LAYOUTS,  # noqa: E402
                             Header, crc32, encode_record, parse_record)
from wormhole import reader  # noqa: E402
from wormhole.reader import Cursor  # noqa: E402
from wormhole.writer import Writer  # noqa: E402


# The library functions of this module's earlier versions, by path (JSONCodingTests and
# scripts use them): each opens the container, does one thing and closes it.
def _in_container(directory, identifier, body):
    identifiers.validate(identifier)
    container = ContainerDirectory(directory)
    try:
        return body(container)
    finally:
        container.close()


def read_latest(directory, identifier, configuration=None):
    """The latest record of `identifier` in the container `directory`, or None."""
    return _in_container(directory, identifier,
                         lambda c: reader.read_latest(c, identifier, configuration or Configuration()))


def read_all(directory, identifier, configuration=None):
    """Every retained record (and a WormholeError for each that cannot be read)."""
    return _in_container(directory, identifier,
                         lambda c: reader.read_all(c, identifier, configuration or Configuration()))


def append(directory, identifier, kind, payload, configuration=None):
    """Passes one message; returns its sequence number."""
    return _in_container(directory, identifier,
                         lambda c: Writer(c, identifier, configuration or Configuration()).append(kind, payload))


def clear(directory, identifier, configuration=None):
    """Clears the messages of `identifier`."""
    return _in_container(directory, identifier,
                         lambda c: Writer(c, identifier, configuration or Configuration()).clear())


def record_json(item):
    if isinstance(item, WormholeError):
        line = {"error": str(item), "code": item.code}
        if item.missed_message_count is not None:
            line["lost"] = item.missed_message_count
        return line
    encoding, text = "base64", None
    if item.kind in (KIND_TEXT, KIND_JSON):
        try:
            text, encoding = item.payload.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    if text is None:
        text = base64.b64encode(item.payload).decode("ascii")
    return {"sequence": item.sequence, "kind": KIND_NAMES.get(item.kind, str(item.kind)), "pid": item.pid,
            "uid": item.uid, "date_ns": item.date_ns, "encoding": encoding, "payload": text}


def _emit(item):
    sys.stdout.write(json.dumps(record_json(item), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _parse_kind(text):
    names = {"data": KIND_DATA, "text": KIND_TEXT, "json": KIND_JSON, "0": 0, "1": 1, "2": 2}
    if text not in names:
        raise SystemExit(f"unknown kind {text!r}: use data, text or json")
    return names[text]


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
    default = Configuration()
    configuration = Configuration(
        retained_message_count=int(options.get("--retain-count", default.retained_message_count)),
        retained_byte_count=int(options.get("--retain-bytes", default.retained_byte_count)),
        maximum_message_size=int(options.get("--max-size", default.maximum_message_size)),
        maximum_backlog_message_count=int(options.get("--backlog-count", default.maximum_backlog_message_count)),
        maximum_backlog_byte_count=int(options.get("--backlog-bytes", default.maximum_backlog_byte_count)))
    return positional, options, configuration


def _command_write(arguments):
    positional, options, configuration = _options(arguments, set(), {"--count", "--torn", "--pause-at", "--resume-on"})
    if len(positional) != 4 or ("--pause-at" in options) != ("--resume-on" in options):
        raise SystemExit("usage: write DIR ID KIND TEXT [--count N] [--torn BYTES] [--pause-at K --resume-on PATH]")
    directory, identifier, kind_name, text = positional
    kind = _parse_kind(kind_name)
    count = int(options.get("--count", 1))
    pause_at = int(options.get("--pause-at", 0))
    identifiers.validate(identifier)
    container = ContainerDirectory(directory)
    writer = Writer(container, identifier, configuration)
    try:
        for index in range(1, count + 1):
            if text == "-":
                payload = sys.stdin.buffer.read()
            elif kind == KIND_DATA:
                payload = base64.b64decode(text, validate=True)
            else:
                payload = text.replace("{i}", str(index)).encode("utf-8")
            if "--torn" in options:
                sequence = writer.append(kind, payload, torn=int(options["--torn"]))
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
        container.close()
    sys.stdout.flush()
    return 0


def _command_clear(arguments):
    positional, _, configuration = _options(arguments, set(), set())
    if len(positional) != 2:
        raise SystemExit("usage: clear DIR ID")
    identifiers.validate(positional[1])
    container = ContainerDirectory(positional[0])
    try:
        Writer(container, positional[1], configuration).clear()
    finally:
        container.close()
    return 0


def follow(directory, identifier, wanted, start, timeout, ready, configuration, emit, until=None, durable_name=None):
    """§11.3 with real inotify: emits items until `wanted` records arrived (or one with a
    sequence of at least `until`). Returns 0, or 3 on timeout."""
    identifiers.validate(identifier)
    deadline = time.monotonic() + timeout
    container = ContainerDirectory(directory)
    woken = threading.Event()
    replaced = [False]
    name = identifier + ".wormhole"

    def events(batch):
        for mask, file in batch:
            if mask & inotify.IN_Q_OVERFLOW or (not file and inotify.directory_gone(mask)):
                replaced[0] = True
            elif file == name and mask & (inotify.IN_CREATE | inotify.IN_DELETE | inotify.IN_MOVED_FROM
                                          | inotify.IN_MOVED_TO):
                replaced[0] = True
            elif not (file == name and mask & inotify.IN_MODIFY):
                continue
            woken.set()

    watch = inotify.Watch(container.fd, container.path, events)                        # S1
    durable = claims.DurablePosition(container, identifier, durable_name) if durable_name else None
    cursor = Cursor(container, identifier, StartingPoint.parse(start), configuration, durable)   # S2-S4
    if ready:
        with open(ready, "w"):
            pass
    received = 0
    try:
        while True:
            if replaced[0]:
                replaced[0] = False
                if container.refresh():
                    watch.rewatch(container.fd)
                cursor.invalidate()
            for item in cursor.read(one_log=durable is not None):                      # S5
                emit(item)
                if isinstance(item, Record):
                    if durable is not None:
                        durable.store(item.sequence, cursor.log_id or 0)                # D5
                    received += 1
                    if received >= wanted or (until is not None and item.sequence >= until):
                        return 0
            if getattr(cursor, "more", False):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return 3
            # The wake-up is inotify; the timeout is a safety net only.
            woken.wait(min(remaining, 1.0))
            woken.clear()
    finally:
        watch.close()
        cursor.close()
        container.close()


def _command_read(arguments):
    positional, options, configuration = _options(arguments, {"--latest"},
                                                  {"--follow", "--until", "--start", "--timeout", "--ready",
                                                   "--durable"})
    if len(positional) != 2:
        raise SystemExit("usage: read DIR ID [--latest | --follow N [--until S] [--start S] [--durable NAME] "
                         "[--timeout T] [--ready PATH]]")
    directory, identifier = positional
    if "--follow" in options or "--until" in options:
        until = int(options["--until"]) if "--until" in options else None
        return follow(directory, identifier, int(options.get("--follow", 1 << 62)), options.get("--start", "now"),
                      float(options.get("--timeout", 60)), options.get("--ready"), configuration, _emit, until,
                      options.get("--durable"))
    identifiers.validate(identifier)
    container = ContainerDirectory(directory)
    try:
        if "--latest" in options:
            record = reader.read_latest(container, identifier, configuration)
            if record is not None:
                _emit(record)
            return 0
        for item in reader.read_all(container, identifier, configuration):
            _emit(item)
    finally:
        container.close()
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


def _exercise(failures):
    """Runs the protocol through the package in a temporary directory."""
    def check(condition, what):
        if not condition:
            failures.append(what)

    small = Configuration(retained_message_count=4, retained_byte_count=1 << 20)
    with tempfile.TemporaryDirectory(prefix="wormhole-selftest-") as scratch:
        container = ContainerDirectory(os.path.join(scratch, "container"))
        overhead = LAYOUTS[3].overhead
        writer = Writer(container, "note", small)
        for index in range(1, 4):
            check(writer.append(KIND_TEXT, f"m{index}".encode()) == index, f"append {index} has the wrong sequence")
        size = os.path.getsize(writer.path)
        check(size == HEADER_SIZE + 3 * (overhead + 2), "three records do not take 128 + 3 x (overhead + 2) bytes")
        other = Writer(container, "note", small)
        other.append(KIND_TEXT, b"torn", torn=20)
        other.close()
        check([r.sequence for r in reader.read_all(container, "note")] == [1, 2, 3], "a reader saw the torn record")
        check(writer.append(KIND_TEXT, b"m4") == 4, "the writer after a torn record did not take sequence 4")
        cursor = Cursor(container, "note", StartingPoint.HISTORY, small)
        check([i.sequence for i in cursor.read() if isinstance(i, Record)] == [1, 2, 3, 4], "history")
        for index in range(5, 31):
            writer.append(KIND_TEXT, f"m{index}".encode())
        cursor.invalidate()
        got = [i.sequence for i in cursor.read() if isinstance(i, Record)]
        check(got == list(range(5, 31)), f"a listener with a claim read {got}, not 5...30, through compaction")
        late = Cursor(container, "note", StartingPoint.after(0), small)
        items = late.read()
        check(isinstance(items[0], WormholeError) and items[0].code == "messagesLost", "no gap report")
        late.close()
        writer.clear()
        check(reader.read_all(container, "note") == [] and reader.read_latest(container, "note") is None,
              "clearing hid nothing")
        check(writer.append(KIND_TEXT, b"after") == 31, "numbering did not go on after clearing")
        cursor.close()
        writer.close()
        container.close()


def _command_selftest(arguments):
    here = os.path.dirname(os.path.abspath(__file__))
    path = arguments[0] if arguments else os.path.join(here, "..", "..", "Docs", "Protocol.md")
    with open(path, encoding="utf-8") as handle:
        document = handle.read()
    failures = []
    if crc32(b"123456789") != 0xCBF43926 or crc32(b"") != 0:
        failures.append("crc32 test vectors fail")
    documented_header = _hex_block(document, "<!-- example-header -->")
    header = Header.decode(documented_header)
    layout = header.layout
    record = b"".join(encode_record(layout, EXAMPLE_LOG_ID,
                                    Record(1, EXAMPLE_DATE_NS, 4242, KIND_TEXT, b"hello", uid=None)))
    documented_record = _hex_block(document, "<!-- example-record -->")
    parsed, _, _ = parse_record(layout, documented_record, EXAMPLE_LOG_ID)
    if parsed is None or parsed.payload != b"hello":
        failures.append("the example record does not parse")
    elif b"".join(encode_record(layout, EXAMPLE_LOG_ID, parsed)) != documented_record:
        failures.append("example record differs: " + record.hex(" "))
    if parse_record(layout, documented_record, EXAMPLE_LOG_ID ^ 1)[0] is not None:
        failures.append("the example record is valid in another log")
    if header.log_id != EXAMPLE_LOG_ID or header.encode() != documented_header:
        failures.append("example header does not decode back")
    for bad in ("e\u0301", "a\u202eb", "a\u0085b", "a/b", ".x", "\t"):
        try:
            identifiers.validate(bad)
            failures.append(f"identifier {bad!r} accepted")
        except WormholeError:
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
    except (WormholeError, ValueError, OSError) as error:
        print(f"wormhole_log: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
