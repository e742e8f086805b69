#!/usr/bin/env python3
"""A peer process of the Python package's public API (Python/, `import wormhole`), for the
Swift suite's PythonInteropTests: it passes and listens the way a Python program would.

    python_peer.py send DIR ID KIND PAYLOAD_BASE64 [COUNT]
        Passes the payload COUNT times (default 1) with pass_payload (KIND: data, text,
        json); with COUNT > 1, '{i}' in a text or json payload becomes 1..COUNT. Prints
        each sequence number.
    python_peer.py message DIR ID VALUE_JSON
        Passes the decoded JSON value with pass_message (str as text, bytes never).
    python_peer.py listen DIR ID COUNT OUT [--start S] [--durable NAME] [--stop TEXT]
        Listens (listen_for_message with records) and appends one line per record to
        OUT: "SEQUENCE KIND PID UID BASE64", or "error CODE [LOST]"; creates OUT.ready
        once it listens; exits after COUNT records, or after the record whose payload
        is TEXT (--stop). Exit status 3 if that does not happen within 120 s.
    python_peer.py latest DIR ID
        Prints the latest record as "SEQUENCE KIND BASE64", or "none".
    python_peer.py work DIR ID QUEUE OUT [--poison TEXT] [--hang TEXT] [--delay SECONDS]
                        [--retry-delay SECONDS] [--times FILE] [--leave-after-failure]
        Joins the work queue QUEUE of ID (listen_for_message with work_queue) and appends
        "SEQUENCE DELIVERIES PAYLOAD" to OUT for each job, "lost N" or "error CODE ..."
        for each error; raises on the job whose payload is TEXT (3 deliveries, then the
        dead letters); never returns from the job whose payload is --hang's TEXT (to be
        killed holding it); creates OUT.ready once it is a member; runs until killed.
        --retry-delay: the queue's retry_delay (default 0: handed out again at once);
        --times: appends "SEQUENCE DELIVERIES NS" (time.time_ns() when handed the job)
        to FILE; --leave-after-failure: cancels the member once a job raised (its give
        back stored), creates OUT.left, and runs on until killed.
    python_peer.py respond DIR ID NAME OUT [--fail TEXT]
        Responds (respond) to text requests with "NAME:REQUEST", raising on TEXT;
        appends each request to OUT; creates OUT.ready; runs until killed.
    python_peer.py request DIR ID COUNT TAG OUT [--timeout SECONDS]
        Requests "TAG:1"...: writes "I ok REPLY MS" or "I error CODE MS MESSAGE" per
        request to OUT (at the end).

DIR is a container directory, or group:GROUP (resolved as the Swift library resolves an
application group: Wormhole(application_group_identifier=GROUP)). --retain N (any
command) sets the retained message count.
"""

import base64
import json
import os
import sys
import threading
import time

try:
    import wormhole
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Python"))
    import wormhole


def option(arguments, name, default=None):
    if name in arguments:
        index = arguments.index(name)
        return arguments[index + 1]
    return default


def main(argv):
    command, directory, identifier = argv[1], argv[2], argv[3]
    retain = option(argv, "--retain")
    configuration = wormhole.Configuration(retained_message_count=int(retain)) if retain else None
    if directory.startswith("group:"):
        shared = wormhole.Wormhole(application_group_identifier=directory[6:], configuration=configuration)
    else:
        shared = wormhole.Wormhole(directory=directory, configuration=configuration)
    if command == "send":
        kind, payload = argv[4], base64.b64decode(argv[5])
        count = int(argv[6]) if len(argv) > 6 and not argv[6].startswith("--") else 1
        for index in range(1, count + 1):
            data = payload.replace(b"{i}", str(index).encode()) if count > 1 and kind != "data" else payload
            print(shared.pass_payload(data, kind, identifier), flush=True)
        return 0
    if command == "message":
        print(shared.pass_message(json.loads(argv[4]), identifier), flush=True)
        return 0
    if command == "latest":
        record = shared.record(identifier)
        print("none" if record is None else
              f"{record.sequence} {record.kind_name} {base64.b64encode(record.payload).decode()}")
        return 0
    if command == "listen":
        count, out = int(argv[4]), argv[5]
        stop = option(argv, "--stop")
        stop = stop.encode() if stop is not None else None
        done = threading.Event()
        handle = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        received = [0]

        def line(text):
            os.write(handle, (text + "\n").encode())        # one write per line

        def got(record):
            uid = "-" if record.sender_uid is None else str(record.sender_uid)
            line(f"{record.sequence} {record.kind_name} {record.sender_pid} {uid} "
                 f"{base64.b64encode(record.payload).decode()}")
            received[0] += 1
            if received[0] >= count or (stop is not None and record.payload == stop):
                done.set()

        def failed(error):
            line(f"error {error.code}" + (f" {error.missed_message_count}" if error.missed_message_count else ""))

        token = shared.listen_for_message(identifier, got, start=option(argv, "--start", "now"),
                                          durable_name=option(argv, "--durable"), on_error=failed, records=True)
        open(out + ".ready", "w").close()
        finished = done.wait(120)
        token.cancel()
        shared.close()
        return 0 if finished else 3
    if command == "work":
        queue, out = argv[4], argv[5]
        poison, hang, delay = option(argv, "--poison"), option(argv, "--hang"), float(option(argv, "--delay", "0"))
        retry_delay, times = float(option(argv, "--retry-delay", "0")), option(argv, "--times")
        failure = threading.Event()
        handle = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        times_handle = os.open(times, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if times else None

        def job(record, deliveries):
            if times_handle is not None:
                os.write(times_handle, f"{record.sequence} {deliveries} {time.time_ns()}\n".encode())
            payload = record.payload.decode("utf-8", "replace")
            os.write(handle, f"{record.sequence} {deliveries} {payload}\n".encode())
            if delay:
                time.sleep(delay)
            while payload == hang:
                time.sleep(60)
            if payload == poison:
                failure.set()
                raise ValueError(f"cannot handle {payload}")

        def failed(error):
            text = f"lost {error.missed_message_count}" if error.code == "messagesLost" else f"error {error.code} {error}"
            os.write(handle, (text + "\n").encode())

        options = wormhole.WorkQueueOptions(maximum_deliveries=3 if poison else 1000, redelivery_interval=0.05,
                                            retry_delay=retry_delay, maximum_retry_delay=max(retry_delay, 300))
        member = shared.listen_for_message(identifier, job, work_queue=queue, options=options, on_error=failed,
                                           records=True)
        open(out + ".ready", "w").close()
        if "--leave-after-failure" in argv:
            failure.wait()
            member.cancel()         # waits for the drain: the give back is stored
            open(out + ".left", "w").close()
        threading.Event().wait()
    if command == "respond":
        name, out, fail = argv[4], argv[5], option(argv, "--fail")
        handle = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

        def answer(request):
            os.write(handle, f"{request}\n".encode())
            if request == fail:
                raise ValueError(f"cannot answer {request}")
            return f"{name}:{request}"

        shared.respond(identifier, answer)
        open(out + ".ready", "w").close()
        threading.Event().wait()
    if command == "request":
        count, tag, out = int(argv[4]), argv[5], argv[6]
        timeout = float(option(argv, "--timeout", "5"))
        lines = []
        for index in range(1, count + 1):
            started = time.monotonic()
            try:
                reply = shared.request(f"{tag}:{index}", identifier, timeout=timeout)
                lines.append(f"{index} ok {reply} {int((time.monotonic() - started) * 1000)}")
            except wormhole.WormholeError as error:
                lines.append(f"{index} error {error.code} {int((time.monotonic() - started) * 1000)} {error}")
        with open(out, "w") as file:
            file.write("\n".join(lines) + "\n")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except wormhole.WormholeError as error:
        print(f"python_peer: {error}", file=sys.stderr)
        sys.exit(1)
