#!/usr/bin/env python3
"""The weather widget: shows the service's latest reading, asks it for a forecast and
submits alert jobs, through the group's container (the `wormhole` package).

    widget.py --group group.example.weather --show
    widget.py --group group.example.weather --submit 1 2 3 --forecast 3 --timeout 10
    widget.py --group group.example.weather --submit 5 --slow 1.5

The actions run in that order: submit, forecast, show. Exit status 2 when the forecast
got no reply within the timeout. It runs as well in a sandbox that binds only the group's
container (README.md here).
"""

import argparse
import os
import sys
import time

try:
    import wormhole
except ImportError:     # run from a checkout without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Python"))
    import wormhole

CURRENT = "weather.current"      # {"celsius": 21.5, "at": "..."}
FORECAST = "weather.forecast"    # requests {"days": 3}, answered {"days": 3, "summary": ..., "pid": ...}
ALERTS = "weather.alerts"        # jobs {"job": 1, "text": ..., "seconds": 1.5}


def say(line: str) -> None:
    sys.stdout.write(f"widget[{os.getpid()}]: {line}\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description="The weather widget.")
    parser.add_argument("--group", default=os.environ.get("WORMHOLE_GROUP", "group.example.weather"),
                        help="the application group the service and the widget share")
    parser.add_argument("--submit", type=int, nargs="+", default=[], metavar="JOB",
                        help="submit these alert jobs (numbers)")
    parser.add_argument("--slow", type=float, metavar="SECONDS", help="each submitted job takes this long")
    parser.add_argument("--forecast", type=int, metavar="DAYS", help="ask the service for a forecast")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="how long to wait for the forecast, the service's start included")
    parser.add_argument("--show", action="store_true", help="show the latest reading")
    arguments = parser.parse_args()
    shared = wormhole.Wormhole(application_group_identifier=arguments.group)
    for job in arguments.submit:
        message = {"job": job, "text": f"storm warning #{job}"}
        if arguments.slow is not None:
            message["seconds"] = arguments.slow
        shared.pass_message(message, ALERTS)
        say(f"submitted alert job {job}")
    if arguments.forecast is not None:
        started = time.monotonic()
        try:
            reply = shared.request({"days": arguments.forecast}, FORECAST, timeout=arguments.timeout)
        except wormhole.WormholeError as error:
            if error.code != wormhole.WormholeError.TIMED_OUT:
                raise
            say(f"no forecast within {arguments.timeout:g} s")
            return 2
        say(f"forecast for {reply['days']} days: {reply['summary']} (from pid {reply['pid']}, "
            f"after {time.monotonic() - started:.2f} s)")
    if arguments.show:
        reading = shared.message(CURRENT)
        say(f"latest reading: {reading['celsius']:g} °C at {reading['at']}" if reading else "no reading yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
