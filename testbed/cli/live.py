"""Subcommands on the fabric a running `hpnlab up` owns, from another shell
(root): status, exec, link, switch, pingall. Its tables (flows, queues)
are in tables.py."""

import argparse
import json
import os

from testbed.fabric.problems import printable

from .common import FAILED, INVALID, NOT_RUN, OK, err, need_root


def running_or_status(cmd: str):
    """(the running fabric, None); or (None, the exit status) once the
    reason it is not there (not root, no fabric up) was said on one line."""
    if need_root(cmd):
        return None, NOT_RUN
    from testbed.emulation.live import NoFabric, find

    try:
        return find(), None
    except NoFabric as e:
        others = other_fabrics()
        also = f" (also on this machine: {', '.join(others)})" if others else ""
        return None, err(f"{e}{also}")


def other_fabrics() -> list[str]:
    """The fabrics up on this machine besides the one this command serves:
    'the machine's' (started without a name) and each named one, as a user
    reaches it ('--fabric NAME')."""
    from testbed.emulation import ledger, named

    mine = named.current()
    others = [f"--fabric {n}" for n in named.running() if n != mine]
    if mine and ledger.lock_is_held(ledger.STATE_FILE):
        others.insert(0, "the machine's (no --fabric)")
    return others


# --- status --------------------------------------------------------------------


def add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="the running fabric: hosts, switches, links down, the controller's routes",
        description="Show the fabric a running 'hpnlab up' (or drill) owns: who started it, its "
        "hosts and switches, which links are down, and the controller's last routes version.",
    )
    p.add_argument("--json", action="store_true", help="print it as JSON")
    p.add_argument(
        "--draw", metavar="PICTURE", help="also draw the fabric, its links down marked (NAME.svg or NAME.png)"
    )
    p.set_defaults(run=run_status)


def status_of(live) -> dict:
    """What `status` reports, as a dict (pure but for the reads `live` makes)."""
    from testbed.drill.live_traffic import running as traffic_running
    from testbed.emulation import ledger
    from testbed.emulation.live import events, last_routes, link_states, read_from

    rec, fabric = live.record, live.fabric
    states = link_states(live)
    text, _ = read_from(live.controller_log, 0)
    evs = events(text)
    routes = last_routes(evs)
    controller = [p for p in rec.get("processes", ()) if "controllers.run" in p.get("cmd", "")]
    running = [p for p in controller if ledger.is_same_process(p["pid"], p.get("start"))]
    return {
        "fabric": fabric.name,
        "name": (rec.get("named") or {}).get("name"),
        "kind": fabric.kind,
        "owner_pid": rec.get("owner"),
        "user": rec.get("user"),
        "run_dir": live.run_dir,
        "hosts": [h.name for h in fabric.hosts()],
        "switches": len(fabric.switches()),
        "links": len(states),
        "links_down": [[link.a.node, link.b.node, link.name] for link, up in states if up is False],
        "controller": {
            "running": bool(running),
            "pid": running[-1]["pid"] if running else None,
            "routes_version": routes.get("version") if routes else None,
            "ports_down": routes.get("down", []) if routes else [],
        },
        "traffic": traffic_running(live.run_dir),
        "other_fabrics": other_fabrics(),
    }


def _user_name(user) -> str:
    """The ledger's user (a uid) as a login name where the machine knows it."""
    import pwd

    try:
        return pwd.getpwuid(int(user)).pw_name
    except (TypeError, ValueError, KeyError):
        return str(user) if user is not None else "?"


def run_status(args: argparse.Namespace) -> int:
    live, status = running_or_status("status")
    if live is None:
        return status
    st = status_of(live)
    if args.draw:
        drawn = _draw_live(live.fabric, args.draw, {name for _, _, name in st["links_down"]})
        if drawn != OK:
            return drawn
    if args.json:
        print(json.dumps(st, indent=1))
        return OK
    ctl = st["controller"]
    named = f" named {st['name']}" if st["name"] else ""
    lines = [
        f"fabric {st['fabric']}{named} ({st['kind']}), up by {_user_name(st['user'])} "
        f"(pid {st['owner_pid']}); logs in {st['run_dir']}",
        f"{len(st['hosts'])} hosts, {st['switches']} switches, "
        f"{st['links'] - len(st['links_down'])}/{st['links']} links up",
    ]
    lines += [f"  down: {a} <-> {b} ({name})" for a, b, name in st["links_down"]]
    lines.append(
        f"controller: {'running (pid ' + str(ctl['pid']) + ')' if ctl['running'] else 'not running'}, "
        f"routes version {ctl['routes_version']}, "
        f"{len(ctl['ports_down'])} switch port(s) counted down"
    )
    traffic = st["traffic"]
    if traffic:
        jobs = ", ".join(map(str, traffic.get("jobs") or [])) or "no jobs"
        lines.append(
            f"traffic: {traffic.get('scenario')} ({jobs}) since {traffic.get('started')}, "
            f"report in {traffic.get('out')}"
        )
    else:
        lines.append("traffic: none (hpnlab traffic start SCENARIO)")
    if st["other_fabrics"]:
        lines.append(f"other fabrics on this machine: {', '.join(st['other_fabrics'])}")
    if args.draw:
        lines.append(f"picture: {args.draw}")
    print_lines("\n".join(lines))
    return OK


def _draw_live(fabric, path: str, down: set) -> int:
    """The running fabric's picture at `path`, the links now down drawn as failed."""
    from testbed.results.drawing import FORMATS, draw_fabric

    if os.path.splitext(path)[1].lstrip(".").lower() not in FORMATS:
        return err(f"--draw: expected a file name ending in .svg or .png, got {path!r}", INVALID)
    if os.path.islink(path):  # root writes it: never through a link someone left there
        return err(f"--draw: {path} is a symbolic link; name a new file", INVALID)
    try:
        draw_fabric(fabric, path, down=down, title=f"{fabric.name}, live: {len(down)} link(s) down")
    except OSError as e:
        return err(f"--draw: cannot write {path}: {e.strerror or e}", INVALID)
    return OK


def print_lines(text: str) -> None:
    """Print `text` line by line, each shown as text only (names come from
    files others wrote)."""
    print("\n".join(printable(line) for line in text.split("\n")))


# --- exec ----------------------------------------------------------------------


def add_exec(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "exec",
        help="run a command in a host of the running fabric (a shell without one)",
        description="Run CMD in HOST's network namespace, e.g. 'hpnlab exec s0h0 -- ping -c 3 10.0.1.1'; "
        "without CMD, an interactive shell there. The command's exit status is hpnlab's.",
    )
    p.add_argument("host", metavar="HOST")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    p.set_defaults(run=run_exec)


def run_exec(args: argparse.Namespace) -> int:
    from testbed.emulation.live import NoFabric

    live, status = running_or_status("exec")
    if live is None:
        return status
    if args.host not in {h.name for h in live.fabric.hosts()}:
        hosts = ", ".join(h.name for h in live.fabric.hosts()[:6])
        return err(f"{args.host!r} is not a host of fabric {live.fabric.name} (hosts: {hosts}, ...)", INVALID)
    try:
        pid = live.host_pid(args.host)
    except NoFabric as e:
        return err(str(e))
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:  # a shell there: interactive on a terminal, else it reads commands from stdin
        env = dict(os.environ, PS1=f"{args.host}# ")
        cmd = ["bash", "--norc", "-i"] if os.isatty(0) else ["bash", "--norc"]
    else:
        env = dict(os.environ)
    argv = ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *cmd]
    try:
        os.execvpe(argv[0], argv, env)  # the command's exit status becomes ours
    except OSError as e:
        return err(f"cannot run {cmd[0]!r} in {args.host}: {e.strerror or e}")


# --- link ----------------------------------------------------------------------


def add_link(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "link",
        help="pull or replug a cable of the running fabric, and wait for the controller",
        description="Set the link between nodes A and B down or up, as a drill's fault does (the "
        "switch-side end goes down: the host sees carrier loss), then wait until the controller's "
        "routes, acknowledged by every switch, count the change, and say how long that took.",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("state", choices=("down", "up"))
    p.add_argument("--index", type=int, default=0, help="which link when A and B have several (default 0)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_link)


def run_link(args: argparse.Namespace) -> int:
    from testbed.emulation.live import NoFabric, find_link, set_link

    live, status = running_or_status("link")
    if live is None:
        return status
    try:
        link = find_link(live.fabric, args.a, args.b, args.index)
        routes, took = set_link(live, link, up=args.state == "up")
    except ValueError as e:
        return err(str(e), INVALID)
    except NoFabric as e:
        return err(str(e))
    return _say_converged(
        args, routes, took, f"{args.a} <-> {args.b}", {"link": [args.a, args.b], "name": link.name}
    )


def add_switch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "switch",
        help="fail or restore a whole switch of the running fabric, and wait for the controller",
        description="Set every port of switch NAME down (its neighbours lose carrier, as when a switch "
        "dies) or up again, then wait until the controller's routes, acknowledged by every switch, count "
        "all of them, and say how long that took.",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("state", choices=("down", "up"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_switch)


def run_switch(args: argparse.Namespace) -> int:
    from testbed.emulation.live import NoFabric, set_switch, switch_links

    live, status = running_or_status("switch")
    if live is None:
        return status
    try:
        ports = len(switch_links(live.fabric, args.name))
        routes, took = set_switch(live, args.name, up=args.state == "up")
    except ValueError as e:
        return err(str(e), INVALID)
    except NoFabric as e:
        return err(str(e))
    return _say_converged(args, routes, took, f"{args.name} ({ports} ports)", {"switch": args.name})


def _say_converged(args, routes, took, what: str, which: dict) -> int:
    """What `link` and `switch` print once the controller counted the change
    (or did not within the timeout); `which`: what changed, for --json."""
    out = {
        **which,
        "state": args.state,
        "converged_s": round(took, 4) if routes else None,
        "routes_version": routes.get("version") if routes else None,
    }
    if args.json:
        print(json.dumps(out, indent=1))
    elif routes:
        print(
            printable(
                f"{what} {args.state}: routes version {out['routes_version']} acknowledged "
                f"by every switch {took * 1000:.0f} ms later"
            )
        )
    else:
        print(printable(f"{what} {args.state}: the controller did not converge within {took:.0f} s"))
    return OK if routes else NOT_RUN


# --- pingall -------------------------------------------------------------------


def add_pingall(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pingall",
        help="every host to every other host of its rail, out of each of its ports: a matrix",
        description="Probe every host's NIC of the same rail from every port of every host, all hosts at "
        "once, and print the round-trip times as a matrix (x: no answer). Exit status 1 if any pair fails.",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_pingall)


def pingall_matrix(fabric, reach: dict) -> str:
    """Rows: each host port; columns: destination hosts; cells: RTT in ms,
    x where no answer came, . for the host itself (pure)."""
    from testbed.results.text import text_table

    by_ip = {nic.ip: nic.host for nic in fabric.nics}
    hosts = [h.name for h in fabric.hosts()]
    rows = []
    for host in hosts:
        ports: dict = {}
        for pair, rtt in reach.get(host, {}).items():
            port, ip = pair.split(":", 1)
            ports.setdefault(port, {})[by_ip.get(ip)] = rtt
        for port, answers in sorted(ports.items()):
            cells = []
            for dst in hosts:
                if dst == host:
                    cells.append(".")
                elif dst not in answers:
                    cells.append("")
                else:
                    rtt = answers[dst]
                    cells.append("x" if rtt is None else f"{rtt:.1f}")
            rows.append([port, *cells])
    return text_table(["port \\ to", *hosts], rows) + "\n(round-trip ms; x: no answer)"


def run_pingall(args: argparse.Namespace) -> int:
    from testbed.emulation import reachability
    from testbed.emulation.live import NoFabric

    live, status = running_or_status("pingall")
    if live is None:
        return status
    try:
        reach = reachability.check(live.fabric, live.ns_argv)
    except (NoFabric, RuntimeError) as e:
        return err(str(e))
    bad = reachability.unreachable(reach)
    if args.json:
        print(json.dumps({"reach": reach, "unreachable": bad}, indent=1))
    else:
        print_lines(pingall_matrix(live.fabric, reach))
        pairs = sum(len(d) for d in reach.values())
        print(f"{pairs - len(bad)}/{pairs} host-port pairs answered")
    return OK if not bad else FAILED


COMMANDS = (add_status, add_exec, add_link, add_switch, add_pingall)
