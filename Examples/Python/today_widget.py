#!/usr/bin/env python3
"""The today widget, in Python: the widget of `today-widget` (Widget.swift) against the
Swift app (`today-widget app`), through the same application group container.

    python3 Examples/Python/today_widget.py            # Enter presses [ Reset ], q closes
    python3 Examples/Python/today_widget.py --once     # the latest count, then exit
    python3 Examples/Python/today_widget.py --press --once
    python3 Examples/Python/today_widget.py --ask      # ask the running app (request/reply)

It uses the `wormhole` package (pip install ./Python; from a checkout it also runs as is).
"""

import argparse
import os
import signal
import sys
import threading

try:
    import wormhole
except ImportError:     # run from a checkout without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Python"))
    import wormhole

SNAPSHOT = "today.steps"            # {"goal": 10000, "handledAction": 0, "steps": 4210}
ACTION = "today.widget-action"      # {"kind": "reset"}
STATE = "today.state"               # requests {"asker": ...}, answered with a snapshot


def summary(snapshot: dict) -> str:
    """`4,210 of 10,000 steps (42%)`, as the Swift StepsSnapshot.summary."""
    steps, goal = snapshot["steps"], snapshot["goal"]
    percent = steps * 100 // goal if goal > 0 else 0
    return f"{steps:,} of {goal:,} steps ({percent}%)"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def press_button(shared: wormhole.Wormhole) -> None:
    say("widget: pressed [ Reset ]")
    shared.pass_message({"kind": "reset"}, ACTION)


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the widget: it shows the app's latest count and sends its "
                                                 "button back.")
    parser.add_argument("--group", default="group.example.today",
                        help="the application group the app and the widget share")
    parser.add_argument("--directory", help="use this directory instead of the group's container")
    parser.add_argument("--once", action="store_true", help="show the latest count and exit")
    parser.add_argument("--press", action="store_true", help="press the button once at launch")
    parser.add_argument("--updates", type=int, help="exit after showing this many counts")
    parser.add_argument("--ask", action="store_true",
                        help="ask the running app for its count (a request, answered by the app) and exit")
    arguments = parser.parse_args()
    if arguments.updates is not None and arguments.updates < 1:
        parser.error("--updates must be at least 1.")
    try:
        if arguments.directory:
            shared = wormhole.Wormhole(directory=arguments.directory)
        else:
            shared = wormhole.Wormhole(application_group_identifier=arguments.group, optional_directory="wormhole")
        if arguments.press:
            press_button(shared)
        if arguments.ask:
            try:
                snapshot = shared.request({"asker": "Python widget"}, STATE, timeout=2)
            except wormhole.WormholeError as error:
                if error.code != wormhole.WormholeError.TIMED_OUT:
                    raise
                say("widget: the app did not answer; is it running? (today-widget app)")
                return 2
            say(f"widget: the app says {summary(snapshot)}")
            return 0
        if arguments.once:
            snapshot = shared.message(SNAPSHOT)
            say(f"widget: {summary(snapshot)}" if snapshot else "widget: no steps yet; start the app: today-widget app")
            return 0

        ending = threading.Event()
        # Ctrl-C and SIGTERM close the widget, even when it was started with them blocked
        # (as from a thread of a program that blocks them): its listener goes with it.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda *_: ending.set())
        typing = sys.stdin.isatty()
        if typing:
            say("widget: [ Reset ] press Enter to reset the count; q or Ctrl-D closes the widget")
        shown = [0]

        def show(record: wormhole.Record) -> None:
            snapshot = record.value()
            say(f"widget: {summary(snapshot)} · updated {record.date.astimezone():%H:%M:%S}")
            shown[0] += 1
            if arguments.updates is not None and shown[0] >= arguments.updates:
                ending.set()

        # "latest": the current value at once (a widget never starts blank), then live.
        token = shared.listen_for_message(SNAPSHOT, show, start="latest", records=True,
                                          on_error=lambda error: say(f"widget: {error}"))
        if shared.record(SNAPSHOT) is None:
            say("widget: no steps yet; waiting for the app (today-widget app)")

        def read_input() -> None:
            for line in sys.stdin:
                if typing and line.strip() in ("q", "quit"):
                    break
                try:
                    press_button(shared)
                except wormhole.WormholeError as error:
                    say(f"widget: {error}")
            if typing:          # a person closing the input closes the widget; a pipe that ends does not
                ending.set()

        threading.Thread(target=read_input, daemon=True).start()
        ending.wait()
        token.cancel()
        shared.close()
        return 0
    except wormhole.WormholeError as error:
        sys.stderr.write(f"today-widget: {error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
