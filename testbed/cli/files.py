"""Subcommands that only read files (no root): check, topo show, topo draw."""

import json
import os

from testbed.fabric.problems import ConfigError, printable
from testbed.fabric.scenario import load_fabric, load_scenario_or_topology
from testbed.fabric.units import format_rate

from .common import INVALID, OK, add_topology_dir_option, err, print_problems

# --- check -------------------------------------------------------------------


def add_check(subparsers):
    p = subparsers.add_parser(
        "check",
        help="validate topology and scenario files (no root needed)",
        description="Validate each FILE as a scenario (it has a 'topology' key) or a topology.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON list: per file its kind and size, or its problems (file, field, message)",
    )
    add_topology_dir_option(p)
    p.set_defaults(run=run_check)


def run_check(args):
    status = OK
    found = []
    for path in args.files:
        try:
            kind, fabric = load_fabric(path, args.topology_dir)
        except ConfigError as e:
            status = INVALID
            if args.json:
                problems = [{"field": p.field, "message": p.message} for p in e.problems]
                found.append({"file": path, "valid": False, "problems": problems})
            else:
                print_problems(e)
            continue
        size = {"hosts": len(fabric.hosts()), "switches": len(fabric.switches()), "links": len(fabric.links)}
        if args.json:
            found.append({"file": path, "valid": True, "kind": kind, **size})
        else:
            print(
                printable(
                    f"OK {path} ({kind}: {size['hosts']} hosts, {size['switches']} switches, "
                    f"{size['links']} links)"
                )
            )
    if args.json:
        print(json.dumps(found, indent=1))
    return status


# --- topo show ---------------------------------------------------------------


def add_topo(subparsers):
    p = subparsers.add_parser("topo", help="inspect topologies")
    topo = p.add_subparsers(dest="topo_command", metavar="SUBCOMMAND", required=True)
    show = topo.add_parser(
        "show",
        help="print the fabric a topology or scenario file builds",
        description="Print the nodes, links and NICs that FILE (a topology or scenario) builds.",
    )
    show.add_argument("file", metavar="FILE")
    show.add_argument("--json", action="store_true", help="print the model as JSON instead")
    show.set_defaults(run=run_topo_show)
    draw = topo.add_parser(
        "draw",
        help="draw the fabric a topology or scenario file builds (SVG or PNG)",
        description="Draw the fabric that FILE (a topology or scenario) builds: planes coloured, "
        "tiers from hosts up, segments, rails and DCI links. A scenario's faulted links are "
        "drawn as failed.",
    )
    draw.add_argument("file", metavar="FILE")
    draw.add_argument(
        "--out", required=True, metavar="PATH", help="the picture to write: NAME.svg or NAME.png"
    )
    draw.set_defaults(run=run_topo_draw)


def run_topo_show(args):
    try:
        _, fabric = load_fabric(args.file)
    except ConfigError as e:
        print_problems(e)
        return INVALID
    if args.json:
        print(json.dumps(fabric.to_dict(), indent=2))
    else:
        print(describe_fabric(fabric))
    return OK


def run_topo_draw(args):
    from testbed.results.drawing import FORMATS, draw_fabric, failed_links

    if os.path.splitext(args.out)[1].lstrip(".").lower() not in FORMATS:
        return err(f"--out: expected a file name ending in .svg or .png, got {args.out!r}", INVALID)
    try:
        scenario, fabric = load_scenario_or_topology(args.file)
    except ConfigError as e:
        print_problems(e)
        return INVALID
    try:
        path = draw_fabric(fabric, args.out, down=failed_links(fabric, scenario.faults if scenario else ()))
    except OSError as e:
        return err(f"--out: cannot write {args.out}: {e.strerror or e}", INVALID)
    print(printable(f"wrote {path}"))
    return OK


def describe_fabric(fabric):
    """A human-readable multi-section summary of a Fabric."""
    planes = fabric.planes()
    lines = [
        f"fabric {fabric.name}: kind {fabric.kind}, scale 1:{fabric.scale:g}, MTU {fabric.mtu}, "
        f"{len(planes)} plane(s) ({', '.join(map(str, planes))})",
        f"{len(fabric.hosts())} hosts, {len(fabric.switches())} switches, "
        f"{len(fabric.links)} links, {len(fabric.nics)} NICs",
    ]
    dci_links = [l for l in fabric.links if l.kind == "dci"]
    if dci_links:
        dci = fabric.params.get("dci", {})
        lines.append(
            f"DCI: {len(dci_links)} links of {format_rate(dci_links[0].rate_bps)}, "
            f"delay {dci_links[0].delay_s * 1e3:g}ms, "
            f"oversubscription {dci.get('effective_oversubscription', '-')}"
        )
    lines += [
        "",
        "NODES",
        _table(
            ["name", "kind", "dc", "segment", "plane", "rail", "dpid"],
            [[n.name, n.kind, n.dc, n.segment, n.plane, n.rail, n.dpid] for n in fabric.nodes.values()],
        ),
    ]
    lines += [
        "",
        "LINKS",
        _table(
            ["a", "b", "kind", "plane", "rate", "scaled Mbit/s", "delay"],
            [
                [
                    l.a.ifname,
                    l.b.ifname,
                    l.kind,
                    l.plane,
                    format_rate(l.rate_bps),
                    f"{fabric.scaled_mbit(l):.6g}",
                    f"{l.delay_s * 1e3:g}ms",
                ]
                for l in fabric.links
            ],
        ),
    ]
    lines += [
        "",
        "NICS",
        _table(
            ["host", "rail", "ip", "mac", "ports"],
            [[n.host, n.rail, n.ip, n.mac, ", ".join(n.ports)] for n in fabric.nics],
        ),
    ]
    return "\n".join(lines)


def _table(headers, rows):
    """Left-aligned columns; None shows as '-'."""
    cells = [headers] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


COMMANDS = (add_check, add_topo)
