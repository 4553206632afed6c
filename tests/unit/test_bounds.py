"""The bounds on what a file may cost (testbed/fabric/bounds.py) hold to
what they bound: the counts to the schedules the agents build, the sample
rates and limits to the parts of hpnlab that set them, and the near-miss
units to the spelling hpnlab takes."""

import inspect
import json

import pytest

from controllers.channel import MAX_REQUEST
from testbed.drill import queue_sampler, sampler
from testbed.drill.announce import announcement
from testbed.drill.announce import connections as announced_connections
from testbed.emulation.queues import MAX_SLOTS
from testbed.fabric import bounds, units
from testbed.fabric.build import ModelError, build_fabric
from testbed.fabric.problems import ConfigError
from testbed.fabric.records import Job
from testbed.fabric.scenario import load_scenario
from traffic import collectives


def _schedule(collective, n, groups=None, microbatches=1):
    ranks = (
        None
        if groups is None
        else [list(range(sum(groups[:k]), sum(groups[: k + 1]))) for k in range(len(groups))]
    )
    return collectives.for_job(collective, n, 1 << 20, groups=ranks, microbatches=microbatches)


CASES = (
    [("ring", n, None, 1) for n in (2, 3, 8, 13)]
    + [("halving-doubling", n, None, 1) for n in (2, 4, 16)]
    + [("all-to-all", n, None, 1) for n in (2, 5, 12)]
    + [("pipeline", n, None, m) for n, m in ((2, 1), (5, 3), (8, 4))]
    + [
        ("hierarchical", sum(g), g, 1)
        for g in ([4], [2, 2], [4, 4], [3, 5], [1, 3], [2, 3, 4], [5, 2, 7], [1, 1, 1], [6, 3])
    ]
)


@pytest.mark.parametrize(
    "collective,n,groups,microbatches",
    CASES,
    ids=lambda v: str(v) if not isinstance(v, list) else "-".join(map(str, v)),
)
def test_counts_are_those_of_the_schedule(collective, n, groups, microbatches):
    sched = _schedule(collective, n, groups, microbatches)
    sends = [(r, s.peer) for r, steps in sched.steps.items() for s in steps if s.kind == "send"]
    assert bounds.transfers(collective, n, groups, microbatches) == len(sends)
    assert bounds.connections(collective, n, groups, microbatches) == len(set(sends))


def test_connections_are_those_the_announcement_lists(tmp_path):
    hosts = [f"s{s}h{h}" for s in range(2) for h in range(4)]
    jobs = "".join(
        f"  - {{name: {c}, collective: {c}, bytes: 1GB, hosts: [{', '.join(hosts)}]}}\n"
        for c in ("ring", "halving-doubling", "all-to-all", "pipeline", "hierarchical")
    )
    path = tmp_path / "jobs.yaml"
    path.write_text(f"name: jobs\ntopology: {{kind: hpn}}\nduration: 10\njobs:\n{jobs}")
    sc = load_scenario(path)
    for job_id, job in enumerate(sc.jobs):
        sizes = [len(g) for g in job.groups] if job.groups else None
        assert bounds.connections(job.collective, len(job.hosts), sizes) == len(
            announced_connections(job, job_id, sc.fabric)
        ), job.name


def test_the_connection_limit_fits_the_controllers_request_limit():
    # the longest names a region has (two digits of DC, segment and host)
    fabric = build_fabric(
        {"kind": "region", "fabrics": [{"kind": "hpn"}] * 15, "dci": {"oversubscription": 1}}
    )
    hosts = [n.name for n in fabric.hosts()][-16:]
    job = Job(
        name="a2a-with-a-long-name",
        hosts=tuple(hosts),
        collective="all-to-all",
        bytes=1 << 30,
        bytes_real=1 << 30,
        compute_s=0.2,
        paths="precise",
        priority="crux",
    )
    message = json.dumps({"announce": announcement(fabric, [job] * 8)})
    per_connection = len(message) / (8 * bounds.connections("all-to-all", len(hosts)))
    assert per_connection * bounds.MAX_CONNECTIONS < MAX_REQUEST / 2


def test_sample_rates_and_slots_are_those_of_the_samplers_and_the_engine():
    assert bounds.QUEUE_SAMPLE_HZ == pytest.approx(1 / queue_sampler.INTERVAL_S)
    interval = inspect.signature(sampler.LinkSampler).parameters["interval"].default
    assert bounds.LINK_SAMPLE_HZ == pytest.approx(1 / interval)
    assert bounds.QUEUE_ENGINE_PORTS == MAX_SLOTS


@pytest.mark.parametrize(
    "kind,text,hint",
    [
        ("rate", "40 Gbit/s", "did you mean '40Gbit'?"),
        ("rate", "40mbit", "did you mean '40Mbit'?"),
        ("rate", "40Kbit", "did you mean '40kbit'?"),
        ("rate", "40 gbps", "did you mean '40Gbit'?"),
        ("rate", "40Mbits/s", "did you mean '40Mbit'?"),
        ("rate", "200G", "did you mean '200Gbit'?"),
        ("rate", "40MB/s", "rates are in bits per second: did you mean '320Mbit'?"),
        ("rate", "1 GBps", "rates are in bits per second: did you mean '8Gbit'?"),
        ("rate", "fast", None),
        ("rate", "40", None),
        ("time", "25 sec", "did you mean '25s'?"),
        ("time", "2 msec", "did you mean '2ms'?"),
        ("time", "500\u00b5s", "did you mean '500us'?"),
        ("time", "1.5 minutes", "did you mean '90s'?"),
        ("time", "100ns", "did you mean '0.1us'?"),
        ("time", "2m", None),  # accepted: minutes, as systemd and Go write them
        ("size", "5gb", "did you mean '5GB'?"),
        ("size", "4mib", "did you mean '4MiB'?"),
        ("size", "550 MBytes", "did you mean '550MB'?"),
        ("size", "800Mbit", "sizes are in bytes: did you mean '100MB'?"),
        ("amount", "5 msec", "did you mean '5ms'?"),
        ("amount", "300kb", "did you mean '300kB'?"),
        ("rate", "4" * 40 + "Gbit/s", None),  # too long to be a near miss
    ],
)
def test_a_near_miss_unit_gets_the_accepted_spelling(kind, text, hint):
    assert units.spelling_hint(kind, text) == hint


@pytest.mark.parametrize(
    "text, seconds",
    [("2min", 120.0), ("2m", 120.0), ("1.5 min", 90.0), ("1h", 3600.0), ("250ms", 0.25), (7, 7.0)],
)
def test_durations_in_minutes_and_hours(text, seconds):
    assert units.parse_time(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text, unit, value",
    [
        ("45%", "", 0.45),
        ("120 %", "", 1.2),
        (0.45, "", 0.45),
        ("2s", "s", 2.0),
        ("2s", "ms", 2000.0),
        ("1min", "s", 60.0),
    ],
)
def test_a_bound_is_converted_to_its_metrics_unit(text, unit, value):
    assert units.parse_bound(text, unit) == pytest.approx(value)


@pytest.mark.parametrize("text", ["40 Gbit/s", "40mbit", "40MB/s", "40Kbit", "200G"])
def test_a_near_miss_rate_is_refused_not_read(text):
    with pytest.raises(ValueError):
        units.parse_rate(text)


def test_every_hint_is_a_spelling_that_parses():
    for kind, text, parse in (
        ("rate", "40 Gbit/s", units.parse_rate),
        ("time", "1.5 minutes", units.parse_time),
        ("size", "5gb", units.parse_bytes),
    ):
        spelling = units.spelling_hint(kind, text).split("'")[1]
        assert parse(spelling) > 0


def _write(tmp_path, duration, extra):
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\ntopology: {{kind: hpn}}\nduration: {duration}\n"
        "traffic: [{src: s0h0, dst: s1h0}]\n" + extra
    )
    return path


@pytest.mark.parametrize(
    "transport",
    [
        "{rto: 10ms}",
        "{rto: 10s}",
        "{dcqcn: {increase_period: 100us}}",
        "{dcqcn: {alpha_period: 1s, cnp_interval: 0s}}",
    ],
)
def test_the_ends_of_the_transport_ranges_are_accepted(tmp_path, transport):
    load_scenario(_write(tmp_path, 10, f"transport: {transport}\n"))


@pytest.mark.parametrize(
    "duration,extra",
    [
        (3600, "time_dilation: 4\n"),  # 4 hours on the clock
        (3600, "queues: {classes: [{name: a, dscp: [26]}, {name: b}]}\n"),  # an hour of 2 classes
        (10, "capture: {hosts: [s0h0], packets: 100000}\n"),  # one host's full capture
    ],
    ids=["wall-time", "samples", "capture"],
)
def test_the_limits_leave_room_for_real_drills(tmp_path, duration, extra):
    load_scenario(_write(tmp_path, duration, extra))


def test_auto_dilation_is_bounded_by_the_largest_it_may_choose(tmp_path):
    path = _write(tmp_path, 3600, "time_dilation: auto\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert [str(p) for p in info.value.problems] == [
        f"{path}: time_dilation: expected duration x time_dilation of at most 14400s (4 hours of "
        "wall time), got 3600s x up to 64 ('auto') = 230400s"
    ]


@pytest.mark.parametrize(
    "params,field",
    [
        ({"kind": "hpn", "rates": {"host": "1Tbit"}, "scale": 1}, "rates.host"),
        ({"kind": "hpn", "oversubscription": 1e-6}, "oversubscription"),
        (
            {
                "kind": "region",
                "fabrics": [{"kind": "hpn"}, {"kind": "hpn", "rates": {"host": "1Gbit"}}],
                "dci": {"rate": "100Gbit"},
            },
            "fabrics[1].rates.host",
        ),
        (
            {"kind": "region", "fabrics": [{"kind": "hpn"}, {"kind": "hpn"}], "dci": {"rate": "1Gbit"}},
            "dci.rate",
        ),
        (
            {
                "kind": "region",
                "fabrics": [{"kind": "hpn"}, {"kind": "hpn"}],
                "dci": {"oversubscription": 1000},
            },
            "dci.oversubscription",
        ),
        (
            {
                "kind": "region",
                "fabrics": [{"kind": "fat-tree"}, {"kind": "clos", "oversubscription": 1e-6}],
                "dci": {"rate": "100Gbit"},
            },
            "fabrics[1].oversubscription",
        ),
        (
            {
                "kind": "region",
                "fabrics": [{"kind": "clos"}, {"kind": "fat-tree", "rates": {"host": "1Gbit"}}],
                "dci": {"rate": "100Gbit"},
            },
            "fabrics[1].rates.host",
        ),
    ],
)
def test_a_link_out_of_range_names_the_parameter_that_set_it(params, field):
    with pytest.raises(ModelError) as info:
        build_fabric(params)
    assert info.value.field == field, info.value
