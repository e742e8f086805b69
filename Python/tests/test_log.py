"""The log: both record versions, the conversion of a version 2 log, torn records, a
writer killed with SIGKILL, compaction, clearing, and logs changed outside the protocol."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import threading
import time
import unittest
import zlib

from support import Collector, ScratchTestCase, eventually, scaled

from wormhole import Configuration, Record, Wormhole, WormholeError
from wormhole.queues import WorkQueueState
from wormhole.format import (HEADER_SIZE, V2, V3, Header, crc32, encode_record, parse_record, read_header)

PROTOCOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Docs", "Protocol.md")


def documented_bytes(marker: str) -> bytes:
    with open(PROTOCOL, encoding="utf-8") as handle:
        document = handle.read()
    start = document.index(marker)
    block = document[document.index("```", start) + 3:]
    block = block[:block.index("```")]
    return bytes.fromhex(" ".join(line.split("|")[0] for line in block.strip().splitlines()))


def read_document() -> str:
    with open(PROTOCOL, encoding="utf-8") as handle:
        return handle.read()


def paragraph_after(marker: str) -> str:
    """The lines after ``marker`` in Protocol.md, up to the first blank line."""
    document = read_document()
    rest = document[document.index(marker) + len(marker):].lstrip("\n")
    return rest.split("\n\n", 1)[0]


def section(heading: str) -> str:
    """The text of the section whose heading starts with ``heading`` (``### 18.1``)."""
    document = read_document()
    start = document.index("\n" + heading + " ") + 1
    end = document.find("\n#", start)
    return document[start:end if end >= 0 else len(document)]


def table_rows(text: str) -> list:
    """The cells of each table row in ``text``, the rule rows left out."""
    return [[cell.strip() for cell in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("|") and not line.startswith(("|-", "|:"))]


def code_spans(text: str) -> list:
    return text.replace("\n", " ").split("`")[1::2]


def evaluate(expression: str):
    """An arithmetic expression as the document writes one (digits grouped by spaces or
    commas, ``+``, ``×``, parentheses); None for anything else."""
    compact = expression.replace(" ", "").replace(",", "").replace("\u202f", "").replace("×", "*")
    if not compact or not re.fullmatch(r"[0-9+*()]+", compact):
        return None
    return eval(compact, {"__builtins__": {}})  # digits, + and * only


def value_of(span: str) -> int:
    """The value of a span such as ``name = 128 + 2 × 16 = 160``; every arithmetic part
    must come to the same number."""
    values = [value for value in (evaluate(part) for part in span.split("=")) if value is not None]
    assert values and len(set(values)) == 1, f"`{span}` does not add up: {values}"
    return values[0]


def documented_fields(marker: str) -> dict:
    """The fields of the hex block after ``marker``, by name: (offset, bytes)."""
    document = read_document()
    start = document.index(marker)
    block = document[document.index("```", start) + 3:]
    block = block[:block.index("```")]
    fields = {}
    for line in block.strip().splitlines():
        data, note = line.split("|", 1)
        words = note.split()
        if len(words) > 1:
            fields[words[1]] = (int(words[0]), bytes.fromhex(data))
        else:      # a field continued on the next line
            fields[last] = (fields[last][0], fields[last][1] + bytes.fromhex(data))
            continue
        last = words[1]
    return fields


def new_log_header(directory: str) -> bytes:
    """The header of a log that a wormhole with the default configuration creates."""
    wormhole = Wormhole(directory=directory)
    try:
        wormhole.pass_message("hello", "note")
    finally:
        wormhole.close()
    with open(os.path.join(directory, "note.wormhole"), "rb") as handle:
        return handle.read(HEADER_SIZE)


def write_version_2_log(path: str, log_id: int, payloads) -> None:
    """A version 2 log as an earlier writer left it."""
    header = Header(log_id, 0, 0, 10 ** 9, 2000, version=2)
    data = header.encode()
    for sequence, (kind, payload) in enumerate(payloads, 1):
        data += b"".join(encode_record(V2, log_id, Record(sequence, 1735689600 * 10 ** 9, 4242, kind, payload)))
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


class FormatTests(ScratchTestCase):
    def test_crc_vectors(self) -> None:
        self.assertEqual(crc32(b"123456789"), 0xCBF43926)
        self.assertEqual(crc32(b""), 0)

    def test_the_documented_example_record_and_header(self) -> None:
        record = documented_bytes("<!-- example-record -->")
        header = documented_bytes("<!-- example-header -->")
        decoded = Header.decode(header)
        self.assertEqual(decoded.log_id, 0x0123456789ABCDEF)
        self.assertEqual(decoded.encode(), header)
        layout = decoded.layout
        parsed, reason, _ = parse_record(layout, record, decoded.log_id)
        self.assertIsNone(reason)
        self.assertEqual((parsed.sequence, parsed.pid, parsed.payload), (1, 4242, b"hello"))
        self.assertEqual(b"".join(encode_record(layout, decoded.log_id, parsed)), record)
        self.assertIsNone(parse_record(layout, record, decoded.log_id ^ 1)[0], "valid in another log")

    def test_the_crc_recipe_gives_the_example_record_its_checksum(self) -> None:
        """§8.4's recipe, in Python (run as written) and in C, over §8.5's example record."""
        recipe = paragraph_after("<!-- crc-recipe -->")
        python, c = code_spans(recipe)[0], code_spans(recipe)[1]
        covered = int(re.search(r"record\[0:([0-9]+)\]", python).group(1))
        self.assertEqual(int(re.search(r"record, ([0-9]+)\)", c).group(1)), covered, recipe)
        record = documented_fields("<!-- example-record -->")
        header = documented_fields("<!-- example-header -->")
        data = b"".join(field for _, field in sorted(record.values()))
        log_id = struct.unpack("<Q", header["logID"][1])[0]
        offset, stored = record["crc"]
        computed = eval(python, {"zlib": zlib, "struct": struct},
                        {"record": data, "payload": record["payload"][1], "log_id": log_id})
        self.assertEqual(computed, struct.unpack("<I", stored)[0],
                         f"the recipe gives {computed:08x}, the example stores {struct.unpack('<I', stored)[0]:08x}")
        self.assertEqual(covered, offset)

    def test_the_quick_reference_checks_accept_the_examples(self) -> None:
        """§17's checks of a header and of a record, run on §8.5's example header and record."""
        rows = {row[0]: row[-1] for row in table_rows(section("## 17."))}
        header_check, record_check = rows["check a header"], rows["check a record at `p`"]
        header = b"".join(field for _, field in sorted(documented_fields("<!-- example-header -->").values()))
        fields = documented_fields("<!-- example-record -->")
        record = b"".join(field for _, field in sorted(fields.values()))
        log_id = struct.unpack_from("<Q", header, 16)[0]
        u32 = lambda data: struct.unpack("<I", data)[0]                     # noqa: E731 (the document's name)
        for check in code_spans(header_check):
            if check.startswith(("h[", "u32(h", "zlib.crc32(h")):
                self.assertTrue(eval(check, {"zlib": zlib, "u32": u32}, {"h": header}), check)
        version = re.search(r"u32\(h\[8:12\]\) == ([0-9]+)", header_check)
        self.assertEqual(int(version.group(1)), Header.decode(new_log_header(self.directory)).version)
        crc = next(span for span in code_spans(record_check) if span.startswith("zlib.crc32"))
        # Run as written, with the document's shorthands spelled out: logID_le8, u32(p+N).
        runnable = re.sub(r"u32\(p\+([0-9]+)\)", r"u32(rec[p + \1:p + \1 + 4])",
                          crc.replace("logID_le8", "struct.pack('<Q', log_id)"))
        _, payload = fields["payload"]
        self.assertTrue(eval(runnable, {"zlib": zlib, "struct": struct, "u32": u32},
                             {"rec": record, "payload": payload, "log_id": log_id, "p": 0}), crc)
        self.assertEqual([int(n) for n in re.search(r"rec\[0:([0-9]+)\].*== u32\(p\+([0-9]+)\)", crc).groups()],
                         [fields["crc"][0]] * 2)

    def test_the_thresholds_of_a_new_log_are_the_documented(self) -> None:
        """§10.1's and §8.5's thresholds add up and are what a new log's header holds."""
        header = Header.decode(new_log_header(self.directory))
        for marker in ("<!-- default-thresholds -->", "<!-- example-thresholds -->"):
            spans = code_spans(paragraph_after(marker))
            self.assertEqual(value_of(spans[0]), header.byte_threshold, f"{marker}: `{spans[0]}`")
            self.assertEqual(value_of(spans[1]), header.record_threshold, f"{marker}: `{spans[1]}`")

    def test_the_header_table_gives_the_values_a_new_log_holds(self) -> None:
        """Every value §7.1's table gives a field is what a new log's header holds there."""
        data = new_log_header(self.directory)
        checked = []
        for row in table_rows(section("### 7.1")):
            if len(row) != 5 or not row[0].isdigit():
                continue
            offset, size, field, meaning = int(row[0]), int(row[1]), row[3], row[4]
            spans = code_spans(meaning)
            stored = data[offset:offset + size]
            if meaning.startswith("`") and spans[0].isdigit():
                self.assertEqual(int.from_bytes(stored, "little"), int(spans[0]), f"7.1 gives {field} as {spans[0]}")
            elif meaning.startswith("ASCII `"):
                self.assertEqual(stored, spans[0].encode(), f"7.1 gives {field} as {spans[0]}")
            else:
                continue
            checked.append(field)
        self.assertEqual(checked, ["magic", "version", "headerSize"])

    def test_the_largest_queue_state_is_the_documented(self) -> None:
        """§18.1's largest state, its entry count and its layout are the package's."""
        text = section("### 18.1")
        documented = evaluate(re.search(r"at most ([0-9][0-9, ]*) bytes", text).group(1))
        self.assertEqual(documented, WorkQueueState.MAXIMUM_SIZE, f"18.1 says at most {documented} bytes")
        rows = table_rows(text)
        count = next(row for row in rows if len(row) > 4 and row[3] == "count")
        self.assertEqual(int(re.search(r"at most ([0-9]+)", count[4]).group(1)), WorkQueueState.MAXIMUM_ENTRIES)
        crc = next(row for row in rows if len(row) > 4 and row[3] == "crc")
        self.assertEqual(evaluate(crc[0].replace("count", str(WorkQueueState.MAXIMUM_ENTRIES))) + 4, documented)

    def test_the_json_form_snippet_reads_the_documented_example(self) -> None:
        """§8.2's Python snippet, run as the document gives it, on the object of its
        examples (the keys' example with the dates' example in it)."""
        import datetime
        text = section("#### The JSON form")
        rows = {row[0].split()[0].strip("`"): code_spans(row[2])[0] for row in table_rows(text)[1:]}
        date = rows["dates"]
        payload = rows["object"].replace("...", date).encode()
        snippet = text[text.index("```python") + len("```python"):]
        snippet = snippet[:snippet.index("```")]
        scope: dict = {"payload": payload}
        exec(snippet, scope)
        self.assertEqual(scope["value"]["zone"], "kitchen")
        self.assertEqual(scope["updated"], datetime.datetime.fromisoformat(date.strip('"').replace("Z", "+00:00")))
        self.assertEqual(scope["updated"].utcoffset(), datetime.timedelta(0))
        self.assertEqual(list(scope["value"]), sorted(scope["value"]), "keys in order")

    def test_the_example_claim_position_and_queue_state_are_the_packages(self) -> None:
        """§12.2's claim, §12.4's durable position and §18.1's state, as the document shows
        them, are what the package reads and writes; each field's offset is the bytes
        before it, and the tables' offsets are the examples'."""
        from wormhole.claims import DurableValue, read_claim
        from wormhole.queues import Entry

        def values(marker: str):
            document = read_document()
            start = document.index(marker)
            block = document[document.index("```", start) + 3:]
            block = block[:block.index("```")]
            data, named = b"", {}
            for line in block.strip().splitlines():
                hex_part, note = line.split("|", 1)
                words = note.split()
                field = bytes.fromhex(hex_part)
                self.assertEqual(int(words[0]), len(data), f"{marker} {words[1]}")
                if len(words) > 2 and re.fullmatch(r"0x[0-9A-Fa-f]+|[0-9]+", words[2]):
                    value = int(words[2], 0)
                    self.assertEqual(int.from_bytes(field, "little"), value, f"{marker} {words[1]}")
                    named.setdefault(words[1], (int(words[0]), value))
                data += field
            return data, {name: value for name, (_, value) in named.items()}, {name: offset for name, (offset, _) in named.items()}

        def table_offsets(heading: str) -> dict:
            return {row[3]: int(row[0]) for row in table_rows(section(heading)) if len(row) > 4 and row[0].isdigit()}

        data, claim, _ = values("<!-- example-claim -->")
        path = os.path.join(self.scratch, "claim")
        with open(path, "wb") as handle:
            handle.write(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(read_claim(fd), (claim["delivered"], claim["logID"], claim["pidns"]))
        finally:
            os.close(fd)

        data, durable, offsets = values("<!-- example-durable -->")
        value = DurableValue(durable["position"], durable["logID"], durable["pid"], durable["pidns"])
        self.assertEqual(value.encode(), data)
        decoded = DurableValue.decode(data)
        assert decoded is not None
        self.assertEqual((decoded.position, decoded.log_id, decoded.pid, decoded.pid_namespace),
                         (value.position, value.log_id, value.pid, value.pid_namespace))
        table = table_offsets("### 12.4")
        for name in ("position", "logID", "pid", "pidns"):
            self.assertEqual(table[name], offsets[name], f"12.4's table puts {name} at {table[name]}")

        data, queue, offsets = values("<!-- example-queue-state -->")
        self.assertEqual(data[:4], b"WHQ1")
        self.assertEqual(queue["count"], 1)
        state = WorkQueueState(taken=queue["taken"], acknowledged=queue["acknowledged"],
                               dead_lettered=queue["deadLettered"], expired=queue["expired"], lost=queue["lost"],
                               log_id=queue["logID"], entries=[Entry(queue["sequence"], queue["member"],
                                                                     queue["deliveries"], queue["delivered"])])
        self.assertEqual(state.encode(), data)
        decoded_state = WorkQueueState.decode(data)
        assert decoded_state is not None
        self.assertEqual(decoded_state.key(), state.key())
        table = table_offsets("### 18.1")
        for name in ("count", "taken", "acknowledged", "deadLettered", "expired", "lost", "logID"):
            self.assertEqual(table[name], offsets[name], f"18.1's table puts {name} at {table[name]}")

    def test_version_3_records_carry_uid_expiry_correlation_and_role(self) -> None:
        record = Record(7, 123, 99, 2, b'{"a":1}', uid=1000, expires_ns=456, correlation=0xABC, role=2)
        data = b"".join(encode_record(V3, 42, record))
        self.assertEqual(len(data), 60 + 7)
        self.assertEqual(data[:4], b"WHR3")
        parsed, _, _ = parse_record(V3, data, 42)
        self.assertEqual((parsed.sequence, parsed.date_ns, parsed.pid, parsed.uid, parsed.expires_ns,
                          parsed.correlation, parsed.role, parsed.kind, parsed.payload),
                         (7, 123, 99, 1000, 456, 0xABC, 2, 2, b'{"a":1}'))
        unknown = b"".join(encode_record(V3, 42, Record(1, 0, 1, 0, b"", uid=None)))
        self.assertIsNone(parse_record(V3, unknown, 42)[0].uid)
        bad_role = bytearray(data)
        bad_role[49] = 9
        self.assertIsNone(parse_record(V3, bytes(bad_role), 42)[0])

    def test_a_new_log_is_version_3_with_the_records_the_brief_lays_out(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message("hello", "note")
        path = os.path.join(self.directory, "note.wormhole")
        with open(path, "rb") as handle:
            data = handle.read()
        header = Header.decode(data[:128])
        self.assertEqual(header.version, 3)
        self.assertEqual(len(data), HEADER_SIZE + 60 + 5)
        marker, length, sequence, date, expires, correlation, pid, uid, kind, role = \
            struct.unpack_from("<4sIQqqQiIBB", data, 128)
        self.assertEqual((marker, length, sequence, expires, correlation, pid, uid, kind, role),
                         (b"WHR3", 5, 1, 0, 0, os.getpid(), os.geteuid(), 1, 0))
        self.assertEqual(struct.unpack_from("<I", data, 128 + 52)[0],
                         crc32(b"hello", crc32(data[128:180], crc32(struct.pack("<Q", header.log_id)))))
        self.assertEqual(data[128 + 56:128 + 61], b"hello")
        self.assertEqual(struct.unpack_from("<I", data, len(data) - 4)[0], 5)


class VersionConversionTests(ScratchTestCase):
    def test_a_damaged_last_record_is_skipped_not_cut_and_its_number_not_given_again(self) -> None:
        """Protocol.md §9.3: a whole record with a wrong checksum at the end is damage."""
        os.mkdir(self.directory, 0o700)
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for text in ("one", "two", "three"):
            wormhole.pass_message(text, "note")
        path = os.path.join(self.directory, "note.wormhole")
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:      # in place, as a bit flip would
            handle.seek(size - 5)
            byte = handle.read(1)
            handle.seek(size - 5)
            handle.write(bytes([byte[0] ^ 0x20]))
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        self.assertEqual(other.pass_message("four", "note"), 4)
        self.assertGreater(os.path.getsize(path), size)
        items = other.retained_records("note")
        self.assertEqual([r.sequence for r in items if isinstance(r, Record)], [1, 2, 4])
        self.assertEqual(len([r for r in items if not isinstance(r, Record)]), 1)

    def test_a_damaged_last_record_holds_the_number_after_the_last_whole_record_and_is_the_latest(self) -> None:
        """Protocol.md §9.3 and §11.1 L4: a damaged last record, whole, took the number one
        above the last whole record, whatever its own (damaged) sequence field says, and
        reading the latest reports it: the message before it is not the latest."""
        os.mkdir(self.directory, 0o700)
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for text in ("one", "two", "three"):
            wormhole.pass_message(text, "note")
        path = os.path.join(self.directory, "note.wormhole")
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:      # "three"'s sequence field now says 9
            handle.seek(size - (60 + len("three")) + 8)
            handle.write(struct.pack("<Q", 9))
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        with self.assertRaises(WormholeError) as raised:
            other.record("note")
        self.assertEqual(raised.exception.code, WormholeError.CORRUPT_RECORD)
        self.assertIn("the latest message of 'note' (3) is damaged", str(raised.exception))
        self.assertEqual(other.pass_message("four", "note"), 4)
        self.assertEqual(other.message("note"), "four")

    def test_a_version_2_log_is_read_and_converted_by_the_next_writer(self) -> None:
        os.mkdir(self.directory, 0o700)
        path = os.path.join(self.directory, "note.wormhole")
        write_version_2_log(path, 0x1234, [(1, b"one"), (0, b"\x00\xff"), (2, b'{"n":3}')])
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        self.assertEqual(wormhole.message("note"), {"n": 3})
        self.assertEqual([r.payload for r in wormhole.retained_records("note")], [b"one", b"\x00\xff", b'{"n":3}'])
        self.assertIsNone(wormhole.record("note").uid)
        self.assertEqual(wormhole.pass_message("four", "note"), 4)
        with open(path, "rb") as handle:
            header = read_header(handle.fileno(), path)
        self.assertEqual((header.version, header.log_id), (3, 0x1234))
        records = wormhole.retained_records("note")
        self.assertEqual([(r.sequence, r.payload, r.uid, r.pid) for r in records],
                         [(1, b"one", None, 4242), (2, b"\x00\xff", None, 4242), (3, b'{"n":3}', None, 4242),
                          (4, b"four", os.geteuid(), os.getpid())])

    def test_the_documented_conversion(self) -> None:
        """§2's example: a version 2 log converted by the next pass with the default
        configuration gets the header and keeps the records the example shows."""
        rows = {row[0].strip("`"): row for row in table_rows(paragraph_after("<!-- example-conversion -->"))}

        def numbers(cell: str) -> list:
            return [int(word, 0) for word in re.split(r"[ –:]", cell.replace("`", "")) if re.fullmatch(r"0x[0-9A-Fa-f]+|[0-9]+", word)]

        before = {name: numbers(row[1]) for name, row in rows.items() if name}
        after = {name: numbers(row[2]) for name, row in rows.items() if name}
        os.mkdir(self.directory, 0o700)
        path = os.path.join(self.directory, "old.wormhole")
        log_id = before["logID"][0]
        header = Header(log_id, before["baseSequence"][0], before["clearedThrough"][0],
                        before["compactionByteThreshold"][0], before["compactionRecordThreshold"][0], version=2)
        first, last = before["records"][:2]
        with open(path, "wb") as handle:
            handle.write(header.encode())
            for sequence in range(first, last + 1):
                record = Record(sequence, 1735689600 * 10 ** 9, 4242, 1, f"m{sequence}".encode())
                handle.write(b"".join(encode_record(V2, log_id, record)))
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        self.assertEqual(wormhole.pass_message("next", "old"), last + 1)
        with open(path, "rb") as handle:
            converted = read_header(handle.fileno(), path)
        self.assertEqual(converted.version, 3)
        self.assertEqual([converted.log_id], after["logID"])
        self.assertEqual([converted.base_sequence], after["baseSequence"])
        self.assertEqual([converted.cleared_through], after["clearedThrough"])
        self.assertEqual([converted.byte_threshold], after["compactionByteThreshold"])
        self.assertEqual([converted.record_threshold], after["compactionRecordThreshold"])
        kept_first, kept_last = after["records"][:2]
        with open(path, "rb") as handle:
            data = handle.read()
        sequences, offset = [], HEADER_SIZE
        while offset < len(data):                    # the file's records, each a whole version 3 record
            length = V3.overhead + struct.unpack_from("<I", data, offset + 4)[0]
            record, reason, _ = parse_record(V3, data[offset:offset + length], log_id)
            self.assertIsNone(reason, f"at {offset}")
            sequences.append(record.sequence)
            offset += length
        self.assertEqual((sequences[0], len(sequences)), (kept_first, kept_last - kept_first + 2))
        self.assertEqual(sequences, list(range(kept_first, kept_last + 1)) + [last + 1])

    def test_a_listener_of_a_version_2_log_follows_it_through_the_conversion(self) -> None:
        os.mkdir(self.directory, 0o700)
        write_version_2_log(os.path.join(self.directory, "note.wormhole"), 0x99, [(1, b"a"), (1, b"b")])
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        received, errors = Collector(), Collector()
        token = wormhole.listen_for_message("note", received.append, start="history", on_error=errors.append)
        self.addCleanup(token.cancel)
        self.assertEqual(received.wait_for(2), ["a", "b"])
        wormhole.pass_message("c", "note")
        self.assertEqual(received.wait_for(3), ["a", "b", "c"])
        self.assertEqual(errors.items, [])


class TornAndKilledWriterTests(ScratchTestCase):
    def test_a_torn_record_is_invisible_and_cut_by_the_next_writer(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for index in range(3):
            wormhole.pass_message(f"m{index + 1}", "note")
        path = os.path.join(self.directory, "note.wormhole")
        size = os.path.getsize(path)
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        other._writer("note").append(1, b"torn", torn=30)
        self.assertEqual(os.path.getsize(path), size + 30)
        self.assertEqual([r.sequence for r in wormhole.retained_records("note")], [1, 2, 3])
        self.assertEqual(wormhole.message("note"), "m3")
        self.assertEqual(wormhole.pass_message("m4", "note"), 4)
        self.assertEqual(os.path.getsize(path), size + 60 + 2)

    def test_a_writer_killed_with_sigkill_leaves_whole_records_only(self) -> None:
        code = ("import sys, wormhole\n"
                "w = wormhole.Wormhole(directory=sys.argv[1])\n"
                "print('ready', flush=True)\n"
                "i = 0\n"
                "while True:\n"
                "    i += 1\n"
                "    w.pass_message(b'x' * (i % 5000), 'note')\n")
        for _ in range(scaled(3)):
            child = self.child(code, self.directory)
            self.assertEqual(child.stdout.readline().strip(), b"ready")
            wormhole = Wormhole(directory=self.directory)
            self.assertTrue(eventually(lambda: (wormhole.record("note") or Record(0, 0, 0, 0, b"")).sequence > 50))
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            child.stdout.close()
            child.stderr.close()
            records = wormhole.retained_records("note")
            self.assertTrue(all(isinstance(r, Record) for r in records), records[:3])
            sequences = [r.sequence for r in records]
            self.assertEqual(sequences, list(range(sequences[0], sequences[0] + len(sequences))))
            after = wormhole.pass_message("after", "note")
            self.assertEqual(after, sequences[-1] + 1)
            self.assertEqual(wormhole.message("note"), "after")
            wormhole.close()


class CompactionAndClearingTests(ScratchTestCase):
    def test_compaction_keeps_the_retention_and_numbering(self) -> None:
        wormhole = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=4))
        self.addCleanup(wormhole.close)
        for index in range(1, 31):
            self.assertEqual(wormhole.pass_message(f"m{index}", "note"), index)
        with open(os.path.join(self.directory, "note.wormhole"), "rb") as handle:
            header = Header.decode(handle.read(128))
        self.assertGreater(header.base_sequence, 0)
        self.assertLessEqual(len(wormhole.retained_records("note")), 8)
        self.assertEqual(wormhole.message("note"), "m30")
        self.assertFalse([n for n in os.listdir(self.directory) if n.endswith(".compacting")])

    def test_a_listener_follows_through_many_compactions_without_loss(self) -> None:
        small = Configuration(retained_message_count=8)
        wormhole = Wormhole(directory=self.directory, configuration=small)
        self.addCleanup(wormhole.close)
        received, errors = Collector(), Collector()
        token = wormhole.listen_for_message("note", received.append, on_error=errors.append)
        self.addCleanup(token.cancel)
        count = scaled(2000)
        code = ("import sys, wormhole\n"
                "w = wormhole.Wormhole(directory=sys.argv[1], "
                "configuration=wormhole.Configuration(retained_message_count=8))\n"
                "for i in range(int(sys.argv[2])): w.pass_message(i, 'note')\n")
        child = self.child(code, self.directory, str(count))
        self.assertEqual(child.wait(), 0, child.stderr.read())
        child.stdout.close()
        child.stderr.close()
        self.assertEqual(received.wait_for(count), list(range(count)))
        self.assertEqual(errors.items, [])

    def test_a_listener_that_falls_behind_the_backlog_cap_is_told_how_many_it_lost(self) -> None:
        capped = Configuration(retained_message_count=4, maximum_backlog_message_count=10)
        wormhole = Wormhole(directory=self.directory, configuration=capped)
        self.addCleanup(wormhole.close)
        import threading
        gate, entered = threading.Event(), threading.Event()
        received, errors = Collector(), Collector()

        def slow(value):
            entered.set()
            gate.wait(20)
            received.append(value)

        token = wormhole.listen_for_message("note", slow, on_error=errors.append)
        self.addCleanup(token.cancel)
        wormhole.pass_message(0, "note")
        self.assertTrue(entered.wait(20), "the listener never got the first message")
        for index in range(1, 101):               # while its callback is held on message 0
            wormhole.pass_message(index, "note")
        gate.set()
        self.assertTrue(eventually(lambda: received.items[-1:] == [100]))
        values = received.items
        lost = errors.items
        self.assertEqual([error.code for error in lost], [WormholeError.MESSAGES_LOST] * len(lost))
        self.assertGreaterEqual(len(lost), 1)
        self.assertEqual(sum(error.missed_message_count for error in lost) + len(values), 101, (values, lost))
        self.assertEqual(values, sorted(values))
        self.assertEqual(values[-1], 100)

    def test_clearing_hides_messages_and_numbering_goes_on(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        wormhole.pass_message("a", "one")
        wormhole.pass_message("b", "two")
        wormhole.clear_message_contents("one")
        self.assertIsNone(wormhole.message("one"))
        self.assertEqual(wormhole.message("two"), "b")
        wormhole.clear_all_message_contents()
        self.assertIsNone(wormhole.message("two"))
        self.assertEqual(wormhole.retained_records("one"), [])
        self.assertEqual(wormhole.pass_message("c", "one"), 2)
        wormhole.clear_message_contents("never-passed")      # nothing to clear
        self.assertNotIn("never-passed.wormhole", os.listdir(self.directory))


PAYLOADS = [f"m{n}".encode() for n in range(1, 11)]


def damage_length(path: str, sequence: int, length: int, overhead: int = V3.overhead) -> None:
    """Writes ``length`` into the length field of record ``sequence`` of a log of PAYLOADS."""
    offset = HEADER_SIZE + sum(overhead + len(payload) for payload in PAYLOADS[:sequence - 1])
    with open(path, "r+b") as handle:
        handle.seek(offset + 4)
        handle.write(struct.pack("<I", length))


class DamagedLengthTests(ScratchTestCase):
    """§9.3: a record whose length runs past the end of the file is damage, not a record
    being written, once a whole record follows it: readers, compaction, clearing and the
    conversion of a version 2 log keep every record after it whose checksum holds."""

    def listen(self, wormhole: Wormhole, count: int, **options) -> tuple:
        records, errors = Collector(), Collector()
        token = wormhole.listen_for_message("log", records.append, records=True, on_error=errors.append, **options)
        records.wait_for(count)
        time.sleep(0.1)
        token.cancel()
        return [r.payload for r in records.items], errors.items

    def passed_with_parked_durable_name(self) -> Wormhole:
        """m1..m10 passed; the durable name "parked" handled m1 and m2 only; record 3's
        length then set to 1 MiB."""
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        parked = Collector()
        token = wormhole.listen_for_message("log", parked.append, durable_name="parked", start="history")
        for payload in PAYLOADS[:2]:
            wormhole.pass_message(payload, "log")
        parked.wait_for(2)
        # Its position is stored once a message is handled, after the callback returns:
        # cancelled before that, it would get m2 (or m1) again, as the guarantee says.
        self.assertTrue(eventually(lambda: any(status.durable_name == "parked" and status.position == 2
                                               for status in wormhole.listeners("log"))))
        token.cancel()
        for payload in PAYLOADS[2:]:
            wormhole.pass_message(payload, "log")
        damage_length(os.path.join(self.directory, "log.wormhole"), 3, 1 << 20)
        return wormhole

    def test_readers_and_the_next_pass_keep_every_intact_record_after_a_damaged_length(self) -> None:
        wormhole = self.passed_with_parked_durable_name()
        expected = PAYLOADS[:2] + PAYLOADS[3:]
        items = wormhole.retained_records("log")
        self.assertEqual([r.payload for r in items if isinstance(r, Record)], expected)
        history, errors = self.listen(wormhole, 9, start="history")
        self.assertEqual(history, expected)
        self.assertEqual([e.code for e in errors], [WormholeError.CORRUPT_RECORD])
        self.assertEqual(errors[0].missed_message_count, 1)
        self.assertIn("1048576 bytes", str(errors[0]))
        self.assertIn("message 3 of 'log'", str(errors[0]))
        resumed, errors = self.listen(wormhole, 7, durable_name="parked")
        self.assertEqual(resumed, PAYLOADS[3:])
        self.assertEqual([(e.code, e.missed_message_count) for e in errors], [(WormholeError.CORRUPT_RECORD, 1)])
        self.assertEqual(wormhole.pass_message("m11", "log"), 11)
        self.assertEqual([r.payload for r in wormhole.retained_records("log") if isinstance(r, Record)],
                         expected + [b"m11"])

    def test_clearing_keeps_the_intact_records_a_durable_name_has_not_read(self) -> None:
        wormhole = self.passed_with_parked_durable_name()
        wormhole.clear_message_contents("log")
        resumed, errors = self.listen(wormhole, 7, durable_name="parked")
        self.assertEqual(resumed, PAYLOADS[3:])
        self.assertEqual([(e.code, e.missed_message_count) for e in errors], [(WormholeError.MESSAGES_LOST, 1)])
        self.assertIn("(3...3)", str(errors[0]))
        self.assertNotIn("backlog cap", str(errors[0]))
        self.assertEqual(wormhole.pass_message("m11", "log"), 11)

    def test_a_version_2_log_with_a_damaged_length_is_converted_with_every_intact_record(self) -> None:
        os.mkdir(self.directory, 0o700)
        path = os.path.join(self.directory, "log.wormhole")
        write_version_2_log(path, 0x1234, [(1, payload) for payload in PAYLOADS])
        damage_length(path, 3, 1 << 20, V2.overhead)
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        self.assertEqual(wormhole.pass_message("m11", "log"), 11)
        records = [r for r in wormhole.retained_records("log") if isinstance(r, Record)]
        self.assertEqual([r.sequence for r in records], [1, 2, 4, 5, 6, 7, 8, 9, 10, 11])

    def test_a_record_running_past_the_end_with_nothing_after_it_is_waited_on(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        for payload in PAYLOADS[:3]:
            wormhole.pass_message(payload, "log")
        damage_length(os.path.join(self.directory, "log.wormhole"), 3, 1 << 20)
        items = wormhole.retained_records("log")
        self.assertEqual([r.payload if isinstance(r, Record) else str(r) for r in items], PAYLOADS[:2])
        # A writer that did not write it takes it for a torn tail (§9.1 W5): it cuts it.
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        self.assertEqual(other.pass_message("again", "log"), 3)


class ChangedOutsideTests(ScratchTestCase):
    def test_a_log_emptied_by_another_program_keeps_its_numbers(self) -> None:
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        received, errors = Collector(), Collector()
        token = wormhole.listen_for_message("note", received.append, on_error=errors.append)
        self.addCleanup(token.cancel)
        for index in range(1, 6):
            wormhole.pass_message(index, "note")
        self.assertEqual(received.wait_for(5), [1, 2, 3, 4, 5])
        os.truncate(os.path.join(self.directory, "note.wormhole"), 0)        # `: > note.wormhole`
        self.assertEqual(wormhole.pass_message(6, "note"), 6)                # W3': not 1 again
        self.assertEqual(received.wait_for(6), [1, 2, 3, 4, 5, 6])
        self.assertEqual(wormhole.message("note"), 6)

    def test_appended_garbage_is_reported_once_as_rewritten_and_listening_goes_on(self) -> None:
        """§11.3 R5: bytes that are no record, appended, are a rewrite (the file is not
        shorter), reported once; the listener neither reports it again nor reads for
        ever, and hears the next message (its writer cuts the garbage, §9.1 W5)."""
        wormhole = Wormhole(directory=self.directory)
        self.addCleanup(wormhole.close)
        received, errors = Collector(), Collector()
        token = wormhole.listen_for_message("note", received.append, on_error=errors.append)
        for index in range(1, 4):
            wormhole.pass_message(f"m{index}", "note")
        self.assertEqual(received.wait_for(3), ["m1", "m2", "m3"])
        with open(os.path.join(self.directory, "note.wormhole"), "ab") as handle:
            handle.write(b"\xab" * 16)
        self.assertTrue(eventually(lambda: any(e.code == WormholeError.LOG_CHANGED_OUTSIDE_WORMHOLE
                                                 for e in errors.items)))
        time.sleep(0.3)       # a listener that read on for ever would report it again meanwhile
        changed = [str(e) for e in errors.items if e.code == WormholeError.LOG_CHANGED_OUTSIDE_WORMHOLE]
        self.assertEqual(len(changed), 1, changed[:3])
        self.assertIn("rewritten by another program", changed[0])
        self.assertNotIn("cut by", changed[0])
        other = Wormhole(directory=self.directory)
        self.addCleanup(other.close)
        other.pass_message("m4", "note")
        self.assertEqual(received.wait_for(4), ["m1", "m2", "m3", "m4"])
        cancelled = threading.Thread(target=token.cancel, daemon=True)
        cancelled.start()
        cancelled.join(10)
        self.assertFalse(cancelled.is_alive(), "cancel() returned")

    def test_a_new_writer_finds_the_numbers_listeners_passed_in_a_cut_log(self) -> None:
        wormhole = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=4))
        self.addCleanup(wormhole.close)
        received = Collector()
        token = wormhole.listen_for_message("note", received.append)
        self.addCleanup(token.cancel)
        for index in range(1, 11):
            wormhole.pass_message(index, "note")
        self.assertEqual(received.wait_for(10), list(range(1, 11)))
        path = os.path.join(self.directory, "note.wormhole")
        with open(path, "rb") as handle:
            data = handle.read()
        os.truncate(path, 128)                   # cut after the header
        fresh = Wormhole(directory=self.directory, configuration=Configuration(retained_message_count=4))
        self.addCleanup(fresh.close)
        # The listener's claim says at least 8 (written every R/4 = 1 message here).
        self.assertGreaterEqual(fresh.pass_message(11, "note"), 11)
        self.assertEqual(received.wait_for(11)[-1], 11)


if __name__ == "__main__":
    unittest.main()
