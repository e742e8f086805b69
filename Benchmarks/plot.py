#!/usr/bin/env python3
"""Draws Docs/Images/latency.png from the benchmark's per-message latencies.

    python3 -m pip install matplotlib     # once, or in a venv (Benchmarks/run makes Benchmarks/.build/venv)
    python3 Benchmarks/plot.py [Benchmarks/Results/latency-samples.csv] [Docs/Images/latency.png]

The input is what `Benchmarks/run` writes: one line per message of the paced latency
measurement, in the order they arrived, round after round (filesystem, mechanism,
latency in microseconds). The chart has one panel
per file system: the distribution of one-way latency of each mechanism, as the share of
messages delivered within a time (log scale), with the p50 marked; the legend gives
p50, p99 and, from latest.csv beside the input, the messages that never arrived.
"""
import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "Results", "latency-samples.csv")
TARGET = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "Docs", "Images", "latency.png")

COLOURS = {
    "pipe": "#7f7f7f",
    "Unix socket": "#bcbd22",
    "Wormhole, raw bytes": "#1f77b4",
    "Wormhole, Codable": "#17becf",
    "naive file + rename (MMWormhole-style)": "#d62728",
    "C floor: protocol v2 calls, one thread": "#2ca02c",
    "D-Bus signal via dbus-daemon": "#9467bd",
}


def percentile(values, p):
    rank = max(0, min(len(values) - 1, int(-(-p / 100 * len(values) // 1)) - 1))
    return values[rank]


def losses():
    """Messages lost in the latency section, by (filesystem, mechanism), from latest.csv."""
    lost = {}
    path = os.path.join(os.path.dirname(os.path.abspath(SOURCE)), "latest.csv")
    if os.path.exists(path):
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                if row["section"] == "latency" and row["lost"]:
                    lost[(row["filesystem"], row["mechanism"])] = int(row["lost"])
    return lost


def main():
    lost = losses()
    samples = defaultdict(lambda: defaultdict(list))
    with open(SOURCE, newline="") as handle:
        for row in csv.DictReader(handle):
            samples[row["filesystem"]][row["mechanism"]].append(float(row["latency_us"]))
    systems = list(samples)
    figure, axes = plt.subplots(1, len(systems), figsize=(7 * len(systems), 5), squeeze=False, sharey=True)
    for axis, system in zip(axes[0], systems):
        for mechanism, values in samples[system].items():
            values.sort()
            shares = [(index + 1) / len(values) for index in range(len(values))]
            p50, p99 = percentile(values, 50), percentile(values, 99)
            missing = lost.get((system, mechanism), 0)
            note = f", {missing} of {len(values) + missing} lost" if missing else ""
            axis.step(values, shares, where="post", color=COLOURS.get(mechanism), linewidth=1.6,
                      label=f"{mechanism}: p50 {p50:.0f} µs, p99 {p99:.0f} µs{note}")
            axis.plot([p50], [0.5], "o", color=COLOURS.get(mechanism), markersize=4)
        axis.set_xscale("log")
        axis.set_xlim(1, None)
        axis.set_ylim(0, 1.01)
        axis.axhline(0.99, color="#cccccc", linewidth=0.8, linestyle=":")
        axis.grid(True, which="both", color="#eeeeee")
        axis.set_title(f"{system}: one-way latency, 16-byte messages 300 µs apart")
        axis.set_xlabel("latency (µs, log scale): receive time minus the sender's CLOCK_MONOTONIC stamp")
        axis.legend(loc="lower right", fontsize=8)
    axes[0][0].set_ylabel("share of messages delivered within")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(TARGET)), exist_ok=True)
    figure.savefig(TARGET, dpi=110)
    print(f"wrote {os.path.relpath(TARGET)}")


if __name__ == "__main__":
    main()
