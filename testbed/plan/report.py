"""A Plan as the text `hpnlab plan` prints: what each host asks, what the
switches ask, what the machine has, and the dilation that fits."""

from testbed.results.text import fmt, text_table

from .budget import CPU_SHARE, PROCESS_SHARE, Plan
from .demand import short_names


def _rate(x):
    return f"{x:,.0f}"


def render_plan(plan: Plan, dilation: float | None = None) -> str:
    """The plan as text; `dilation` (a number) adds how that one would fare."""
    load = plan.peak.load
    when = f"t = {fmt(load.t)} s" if len(plan.costs) > 1 else "while the traffic runs"
    lines = [
        f"capacity plan for {plan.scenario} at time dilation 1: the busiest moment "
        f"({when}, emulated time), every sender then communicating",
        "",
        _senders_table(plan),
        "",
    ]
    lines += _cores_lines(plan)
    lines.append("")
    lines += _dilation_lines(plan, dilation)
    return "\n".join(lines)


def _senders_table(plan):
    """What each sender asks at the busiest moment, or '(no traffic)'."""
    cal = plan.calibration
    rows = [
        [
            s.host,
            s.what,
            s.frame_bytes,
            _rate(s.pps),
            fmt(s.switch_hops),
            fmt(s.pps * cal.agent_us_per_packet / 1e6),
        ]
        for s in plan.peak.load.senders
    ]
    if not rows:
        return "(no traffic)"
    return text_table(["host", "sends", "frame B", "packets/s", "switch hops", "host cores"], rows)


def _cores_lines(plan):
    """The cores the hosts and switches ask, against the budget and the capacity."""
    peak, cal = plan.peak, plan.calibration
    load = peak.load
    process_cores = peak.process_cores()
    busiest = peak.busiest_process
    lines = [
        f"hosts:    {_rate(load.total_pps)} packets/s in all: {fmt(peak.agent_cores)} cores "
        f"at {cal.agent_us_per_packet:g} us per packet",
        f"switches: {_rate(load.packet_hops_per_s)} packet-hops/s ({fmt(load.mean_switch_hops)} "
        f"switches per packet): {fmt(peak.switch_cores)} cores at "
        f"{cal.switch_us_per_packet_hop:g} us per packet-hop",
        f"asked:    {fmt(peak.cores)} cores of a budget of {fmt(plan.budget_cores)} "
        f"({CPU_SHARE:.0%} of {cal.cores} cores); the busiest process "
        f"({short_names(busiest) if busiest else '-'}) {fmt(max(process_cores.values(), default=0.0))} "
        f"of {fmt(PROCESS_SHARE)} core",
        f"capacity: {cal.describe()}",
    ]
    if cal.is_default:
        lines.append(
            "          (no calibration stored on this machine: "
            "run 'sudo hpnlab doctor --calibrate' to measure it)"
        )
    elif cal.agent_processes and cal.agent_processes != len(peak.groups):
        lines.append(
            f"          (measured with the agents in {cal.agent_processes} processes, where this "
            f"scenario's run would start {len(peak.groups)}: their cost per packet differs; "
            "'sudo hpnlab doctor --calibrate' measures it as runs now play)"
        )
    return lines


def _dilation_lines(plan, dilation):
    """The recommended dilation, and how `dilation` would fare when given."""
    n, cores = plan.dilation, plan.peak.cores
    if plan.fits and n == 1:
        lines = ["recommended time dilation: 1 (none: this machine keeps up)"]
    elif plan.fits:
        lines = [
            f"recommended time dilation: {n:g} (rates /{n:g}, times x{n:g} on this "
            f"machine): {fmt(cores / n)} cores asked"
        ]
    else:
        lines = [
            f"does not fit even at time dilation {n:g}: {fmt(cores / n)} cores "
            "asked; use a smaller fabric or a larger machine"
        ]
    if dilation is not None and dilation != n:
        verdict = "fits" if plan.fits_at(dilation) else "does NOT fit the budget"
        lines.append(f"at time dilation {dilation:g}: {fmt(cores / dilation)} cores asked, {verdict}")
    return lines
