#!/usr/bin/env python3
"""The benchmark's Python listener: the `wormhole` package (Python/) listening the way a
Python program would (listen_for_message with records, on its listener thread), in the
harness's listener protocol (Benchmarks/C/peer.h): READY when it listens, WARM once the 20
warm-up messages arrived, then RESULT and SAMPLES when every message arrived (or nothing
came for 3 s after the first, or nothing at all in 60 s).

    listener.py --dir D --count C [--size S]

Messages are the harness's frames: the sender's CLOCK_MONOTONIC stamp and the index, 8
bytes each, little-endian (warm-up messages have bit 63 of the index set).
"""

import argparse
import os
import resource
import struct
import sys
import threading
import time

try:
    import wormhole
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Python"))
    import wormhole

WARM_UP_BIT = 1 << 63
WARM_UP_COUNT = 20
_FRAME = struct.Struct("<QQ")


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def usage():
    """(CPU time in microseconds, voluntary context switches) of this process."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return int((own.ru_utime + own.ru_stime) * 1e6), own.ru_nvcsw


def resident_kib() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGESIZE") // 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--size", type=int, default=16)
    arguments, _ = parser.parse_known_args()
    count = arguments.count
    seen = bytearray(count)
    latencies = []
    state = {"warm": 0, "highest": -1, "duplicates": 0, "order": 0, "first": 0, "last": 0, "at_first": None}
    done = threading.Event()
    lock = threading.Lock()

    def record(item: wormhole.Record) -> None:
        now = time.monotonic_ns()          # CLOCK_MONOTONIC, as the sender's stamp
        if len(item.payload) < 16:
            return
        stamp, index = _FRAME.unpack_from(item.payload)
        with lock:
            if index & WARM_UP_BIT:
                state["warm"] += 1
                if state["warm"] == WARM_UP_COUNT:
                    emit("WARM")
                return
            if index >= count:
                return
            if seen[index]:
                state["duplicates"] += 1
                return
            seen[index] = 1
            if index < state["highest"]:
                state["order"] += 1
            state["highest"] = max(state["highest"], index)
            latencies.append(now - stamp if now >= stamp else 0)
            if state["first"] == 0:
                state["first"] = now
                state["at_first"] = usage()
            state["last"] = now
            if len(latencies) >= count:
                done.set()

    shared = wormhole.Wormhole(directory=arguments.dir,
                               configuration=wormhole.Configuration(maximum_message_size=max(8 << 20, arguments.size)))
    token = shared.listen_for_message("bench", record, records=True)
    start = usage()
    emit("READY")
    began = time.monotonic()
    while not done.wait(0.1):
        with lock:
            last = state["last"]
        now = time.monotonic_ns()
        if (last == 0 and time.monotonic() - began > 60) or (last != 0 and now - last > 3_000_000_000):
            break
    with lock:
        cpu, switches = usage()
        cpu_from, switches_from = state["at_first"] or start
        missing = [str(i) for i in range(count) if not seen[i]][:5]
        emit(f"RESULT expected={count} received={len(latencies)} duplicates={state['duplicates']} "
             f"order={state['order']} first={state['first']} last={state['last']} cpu_us={cpu - cpu_from} "
             f"rss_kb={resident_kib()} switches={switches - switches_from} "
             f"missing={','.join(missing) if missing else 'none'}")
        emit("SAMPLES " + ",".join(str(value) for value in latencies))
    token.cancel()
    shared.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
