"""Time dilation: a scenario played N times slower than the fabric it
emulates, so that a machine short of CPU can still emulate it faithfully.

Every link rate is divided by N and every time multiplied by N (link
delays, the run's duration, when iperf3 flows start and faults strike,
jobs' compute phases and starts); bytes stay as they are. The run then
sends the same packets as the undilated one, in the same ratio of compute
to communication, and every packet gets N times the CPU. This is the one
place that stretches a scenario; testbed/results/dilation.py is the one
place that brings what was measured back to emulated time.

Not stretched here: the traffic agents' transport timers (the agent
stretches them itself, told N by its config: drill/jobs.py), and what no
setting reaches (the kernel's TCP timers of iperf3 flows, the controller's
reaction, Open vSwitch's own timers; see "Time dilation" in docs/scenarios.md).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # scenario.py imports this module
    from .scenario import Scenario

AUTO = "auto"
MIN_DILATION, MAX_DILATION = 1.0, 64.0


def parse_setting(text: Any) -> float | str:
    """The value of `--dilation`: 'auto' or a number from 1 to 64;
    ValueError saying what was expected otherwise."""
    if str(text).strip() == AUTO:
        return AUTO
    try:
        n = float(text)
    except (TypeError, ValueError):
        n = None
    if n is None or not MIN_DILATION <= n <= MAX_DILATION:  # NaN fails this too
        raise ValueError(
            f"expected a number from {MIN_DILATION:g} to {MAX_DILATION:g}, or 'auto', got {text!r}"
        )
    return n


def dilate(sc: Scenario, n: float) -> Scenario:
    """A copy of Scenario `sc` to be played `n` times slower: its fabric
    shaped at rates /n and delays xn, its times xn, its bytes, expectations
    (emulated units) and transport knobs unchanged."""
    if isinstance(n, str) or not MIN_DILATION <= n <= MAX_DILATION:
        raise ValueError(
            f"time dilation must be a number from {MIN_DILATION:g} to "
            f"{MAX_DILATION:g}, got {n!r} (resolve 'auto' first)"
        )
    if sc.fabric.time_dilation != 1:
        raise ValueError(
            f"scenario {sc.name} is already dilated ({sc.fabric.time_dilation:g}); dilate the original"
        )
    n = float(n)
    f = sc.fabric
    fabric = dataclasses.replace(
        f, nodes=dict(f.nodes), links=list(f.links), nics=list(f.nics), time_dilation=n
    )
    return dataclasses.replace(
        sc,
        fabric=fabric,
        duration_s=sc.duration_s * n,
        traffic=[t.dilated(n) for t in sc.traffic],
        faults=[x.dilated(n) for x in sc.faults],
        controller_timeline=[dict(x, at=x["at"] * n) for x in sc.controller_timeline],
        jobs=tuple(j.dilated(n) for j in sc.jobs),
        crux=sc.crux.dilated(n) if sc.crux is not None else None,
        time_dilation=n,
    )
