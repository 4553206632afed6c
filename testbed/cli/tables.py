"""The running fabric's tables, from another shell (root): a switch's
OpenFlow rules explained (flows) and the class queues' counters (queues)."""

import argparse
import json
import sys

from .common import INVALID, OK, err
from .live import print_lines, running_or_status

# --- flows ---------------------------------------------------------------------


def add_flows(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "flows",
        help="a switch's flow and group tables, each rule explained (route, pin, detour, Crux mark)",
        description="Dump SWITCH's OpenFlow tables and say what each rule is for: toward which host, "
        "out of which port to which node, through which ECMP or fast-failover group.",
    )
    p.add_argument("switch", metavar="SWITCH")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_flows)


def _ofctl(what: str, switch: str) -> str:
    import subprocess

    r = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "--no-names", what, switch],
        capture_output=True,
        text=True,
        timeout=10,
    )
    if r.returncode != 0:
        raise RuntimeError(f"ovs-ofctl {what} {switch}: {r.stderr.strip()}")
    return r.stdout


def run_flows(args: argparse.Namespace) -> int:
    from testbed.emulation.flowtable import explain_tables
    from testbed.emulation.live import NoFabric
    from testbed.results.text import text_table

    live, status = running_or_status("flows")
    if live is None:
        return status
    if args.switch not in {n.name for n in live.fabric.switches()}:
        return err(f"{args.switch!r} is not a switch of fabric {live.fabric.name}", INVALID)
    try:
        rules = explain_tables(
            live.fabric, args.switch, _ofctl("dump-flows", args.switch), _ofctl("dump-groups", args.switch)
        )
    except (NoFabric, RuntimeError) as e:
        return err(str(e))
    if args.json:
        print(json.dumps(rules, indent=1))
        return OK
    rows = [[r["table"], r["priority"], r["packets"], r["what"]] for r in rules]
    print_lines(text_table(["table", "priority", "packets", "what it is for"], rows))
    return OK


# --- queues --------------------------------------------------------------------


def add_queues(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "queues",
        help="the running fabric's class queues: backlog, rate, drops, ECN marks, PFC pauses",
        description="Read the queue engine's counters twice, INTERVAL seconds apart, and show each class "
        "queue that held or moved anything: its backlog now, what it sent in the interval, its drops and "
        "ECN marks (in the interval / since the fabric came up), and whether it is pausing its upstream. "
        "Name ports (like t0r0k0-e1) or nodes (all their ports) to see only those, idle classes too. "
        "The fabric must have queue classes: start it from a scenario that declares 'queues:'.",
    )
    p.add_argument("ports", nargs="*", metavar="PORT", help="a port or a node (default: every port)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two reads (default 1)")
    p.add_argument("--count", type=int, default=1, help="how many intervals to show; 0: until Ctrl-C")
    p.add_argument("--json", action="store_true", help="one JSON object per interval")
    p.set_defaults(run=run_queues)


def queue_table(rows: list, show_idle: bool) -> str:
    """The rows a user reads (pure): busy queues only unless `show_idle`."""
    from testbed.emulation.livequeues import busy
    from testbed.results.text import text_table

    shown = [r for r in rows if show_idle or busy(r)]
    if not shown:
        return "every queue idle"
    body = [
        [
            f"{r['port']} -> {r['to']}",
            r["class"],
            f"{r['backlog_bytes'] / 1000:.1f}",
            f"{r['sent_mbit_s']:.1f} / {r['port_mbit']:g}",
            f"{r['drops']} / {r['drops_total']}",
            f"{r['marks']} / {r['marks_total']}",
            ("PAUSING" if r["pausing_upstream"] else "-") + f" ({r['pauses_total']})",
        ]
        for r in shown
    ]
    heads = ["port", "class", "backlog KB", "sent Mbit/s / rate", "drops", "ECN marks", "upstream (pauses)"]
    return text_table(heads, body)


def run_queues(args: argparse.Namespace) -> int:
    import time

    from testbed.emulation.livequeues import Counters, ports_of, rows, select
    from testbed.emulation.queues import QueueSetupError

    if args.interval <= 0 or args.interval > 3600 or args.count < 0:
        return err("--interval must be in (0, 3600] seconds and --count at least 0", INVALID)
    live, status = running_or_status("queues")
    if live is None:
        return status
    fabric = live.fabric
    if fabric.queues is None:
        return err(
            f"fabric {fabric.name} has no queue classes: start it from a scenario that declares 'queues:'",
            INVALID,
        )
    try:
        ports = select(ports_of(fabric), args.ports)
    except ValueError as e:
        return err(str(e), INVALID)
    classes = [c.name for c in fabric.queues.classes]
    try:
        counters = Counters(fabric)
    except QueueSetupError as e:
        return err(f"the queue engine's counters cannot be read ({e}); is the fabric still coming up?")
    shown = 0
    try:
        before, t0 = counters.read(), time.monotonic()
        while args.count == 0 or shown < args.count:
            time.sleep(args.interval)  # the refresh rate the user asked for
            after, t1 = counters.read(), time.monotonic()
            table = rows(ports, classes, before, after, t1 - t0)
            if args.json:
                print(json.dumps({"seconds": round(t1 - t0, 4), "queues": table}), flush=True)
            else:
                print(f"--- {time.strftime('%H:%M:%S')}, over {t1 - t0:.2f} s")
                print_lines(queue_table(table, show_idle=bool(args.ports)))
                sys.stdout.flush()
            before, t0 = after, t1
            shown += 1
    except KeyboardInterrupt:
        pass
    finally:
        counters.close()
    return OK


COMMANDS = (add_flows, add_queues)
