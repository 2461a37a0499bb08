"""How fast is this machine right now? The CPU time of one fixed loop, every few seconds.

    python benchmark/machine_speed.py [--every 5] [--minutes 30] [--json]

Run it beside a long benchmark (soak.py) to tell the machine's own drift from the
system's: the loop's work never changes, so its CPU time (not its wall time, which
waiting for a core would lengthen) moves only with what the processor gives this
process — on a shared virtual machine, with what the host's other tenants take. One
loop costs about 30 ms of a core, under 1 % of one at the default interval.

Prints a line per loop (UTC time, CPU ms, wall ms) and, at the end, the median CPU
ms of each minute; with --json, one JSON document of both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timezone

from common import emit

LOOP = 300_000  # iterations of the fixed loop


def fixed_loop() -> tuple[float, float]:
    """The CPU and wall milliseconds of one run of the fixed loop."""
    cpu, wall = time.process_time(), time.perf_counter()
    total = 0
    for i in range(LOOP):
        total += i * i % 7
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000


def by_minute(loops: list[dict]) -> list[dict]:
    """The median CPU ms of the loops of each minute (from the first loop), in order."""
    minutes: dict[int, list[float]] = {}
    start = loops[0]["t"] if loops else 0.0
    for loop in loops:
        minutes.setdefault(int((loop["t"] - start) // 60), []).append(loop["cpu_ms"])
    return [{"minute": m + 1, "cpu_ms": round(statistics.median(v), 2)} for m, v in sorted(minutes.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between two loops")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    loops: list[dict] = []
    end = time.monotonic() + args.minutes * 60
    while True:
        cpu_ms, wall_ms = fixed_loop()
        loops.append({"t": time.time(), "cpu_ms": round(cpu_ms, 2), "wall_ms": round(wall_ms, 2)})
        if not args.json:
            at = datetime.fromtimestamp(loops[-1]["t"], timezone.utc).strftime("%H:%M:%S")
            print(f"{at} cpu {cpu_ms:.1f} ms wall {wall_ms:.1f} ms", flush=True)
        if time.monotonic() + args.every > end:
            break
        time.sleep(args.every)
    minutes = by_minute(loops)
    if args.json:
        emit({"loop_iterations": LOOP, "every_s": args.every, "loops": loops, "minutes": minutes}, True)
        return
    print("median CPU ms by minute: " + ", ".join(f"{m['cpu_ms']:g}" for m in minutes))


if __name__ == "__main__":
    main()
