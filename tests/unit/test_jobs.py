"""Training jobs, the pure parts: agent plans from the fabric model, the
expected volumes and analytical iteration times, and the job metrics
computed from what the agents report (synthetic agent results here)."""

import os

import pytest

from testbed.drill import jobs
from testbed.drill.jobs import agent_configs, rank_specs
from testbed.fabric.build import build_fabric
from testbed.fabric.records import Job
from testbed.results import emulator, trust
from testbed.results.analytical import analytical_iteration_s, expected_bytes_per_rank
from testbed.results.jobs import STALL_FACTOR, job_metrics

RATE = 40e6  # default HPN access links: 200 Gbit/s scaled down by 5000
HOSTS = ["s1h0", "s0h2", "s0h0", "s1h3"]  # deliberately not in fabric order


def job(
    name="j", hosts=None, collective="ring", size=1000, compute=0.2, overlap=0.0, iterations=4, groups=None
):
    """A job as the scenario loader hands it over (defaults filled in, scaled)."""
    return Job(
        name=name,
        hosts=tuple(hosts or HOSTS),
        collective=collective,
        groups=None if groups is None else tuple(tuple(g) for g in groups),
        bytes_real=size * 5000,
        bytes=size,
        compute_s=compute,
        overlap=overlap,
        iterations=iterations,
    )


@pytest.fixture(scope="module")
def fabric():
    return build_fabric({})


# --- plans ---------------------------------------------------------------------


def test_rank_specs_follow_host_order_and_carry_the_peers(fabric):
    specs = rank_specs(fabric, [job()])
    assert sorted(specs) == sorted(HOSTS)
    for rank, host in enumerate(HOSTS):
        [spec] = specs[host]
        assert spec["rank"] == rank and spec["id"] == 0 and spec["name"] == "j"
        assert (spec["collective"], spec["bytes"], spec["iterations"]) == ("ring", 1000, 4)
        assert spec["groups"] is None
        nics = [fabric.nics_of(h)[0] for h in HOSTS]
        assert spec["peers"] == [{"host": h, "ip": n.ip, "mac": n.mac} for h, n in zip(HOSTS, nics)]
    assert len({p["ip"] for p in specs[HOSTS[0]][0]["peers"]}) == 4


def test_rank_specs_number_jobs_and_map_groups_to_ranks(fabric):
    hier = job("h", collective="hierarchical", groups=[["s1h0", "s1h3"], ["s0h2", "s0h0"]])
    other = job("r", hosts=["s0h0", "s0h1"])
    specs = rank_specs(fabric, [hier, other])
    assert [(s["name"], s["id"], s["rank"]) for s in specs["s0h0"]] == [("h", 0, 2), ("r", 1, 0)]
    assert specs["s1h0"][0]["groups"] == [[0, 3], [1, 2]]
    assert [s["name"] for s in specs["s0h1"]] == ["r"]


def test_agent_configs_one_per_host(fabric, tmp_path):
    configs = agent_configs(fabric, [job(), job("r", hosts=["s0h0", "s0h1"])], str(tmp_path), 12.5)
    assert sorted(configs) == sorted(HOSTS + ["s0h1"])
    specs = rank_specs(fabric, [job(), job("r", hosts=["s0h0", "s0h1"])])
    for host, cfg in configs.items():
        nic = fabric.nics_of(host)[0]
        assert cfg["host"] == host
        assert cfg["deadline_s"] == 12.5
        assert cfg["out"] == os.path.join(str(tmp_path), f"agent-{host}.json")
        assert cfg["nic"] == {
            "ip": nic.ip,
            "mac": nic.mac,
            "ports": list(nic.ports),
            "rate_bps": pytest.approx(RATE),
        }
        assert len(cfg["nic"]["ports"]) == 2  # dual-ToR: one NIC, two ports
        assert cfg["jobs"] == specs[host]
    assert len(configs["s0h0"]["jobs"]) == 2


# --- volumes and analytical times -------------------------------------------------


@pytest.mark.parametrize(
    "collective, n, size, expected",
    [
        ("ring", 4, 1000, 1500),
        ("ring", 8, 1_000_000, 1_750_000),
        ("halving-doubling", 8, 800, 1400),
        ("halving-doubling", 2, 10, 10),
    ],
)
def test_expected_bytes_per_rank_is_2_n_minus_1_over_n_times_s(collective, n, size, expected):
    assert (
        expected_bytes_per_rank(job(hosts=[f"h{i}" for i in range(n)], collective=collective, size=size))
        == expected
    )
    assert expected == 2 * (n - 1) * size / n


@pytest.mark.parametrize(
    "collective, size",
    [
        ("all-to-all", 1000),
        ("pipeline", 1000),
        ("hierarchical", 1000),
        ("ring", 1001),  # not divisible: the formula is not exact, no reference
    ],
)
def test_expected_bytes_per_rank_only_for_exact_allreduces(collective, size):
    assert expected_bytes_per_rank(job(collective=collective, size=size)) is None


def test_analytical_iteration_of_a_ring():
    n, size, compute = 4, 1_000_000, 0.2
    comm = 2 * (n - 1) * (size / n) * 8 / RATE  # 0.3 s
    assert analytical_iteration_s(job(size=size, compute=compute), RATE) == pytest.approx(compute + comm)
    assert analytical_iteration_s(job(size=size, compute=compute), RATE, latency_s=0.001) == pytest.approx(
        compute + comm + 2 * (n - 1) * 0.001
    )


@pytest.mark.parametrize("compute, overlap", [(0.2, 0.5), (0.2, 1.0), (0.5, 1.0), (1.0, 0.8)])
def test_analytical_iteration_hides_the_overlapped_compute(compute, overlap):
    comm = 2 * 3 * 250_000 * 8 / RATE
    got = analytical_iteration_s(job(size=1_000_000, compute=compute, overlap=overlap), RATE)
    assert got == pytest.approx(max(compute, (1 - overlap) * compute + comm))


# --- job metrics on synthetic agent results ----------------------------------------


def rank_result(name, rank, ends, compute=0.2, received=1500, planned=4, counters=None):
    """One rank's entry in an agent's results: iterations back to back from 0,
    iteration k ending at ends[k]; `received` per iteration or a list."""
    received = received if isinstance(received, list) else [received] * len(ends)
    iterations, start = [], 0.0
    for k, (end, got) in enumerate(zip(ends, received)):
        iterations.append(
            {
                "iter": k,
                "start": start,
                "end": end,
                "compute_s": compute,
                "comm_s": end - start - compute,
                "iter_s": end - start,
                "bytes_sent": 1500,
                "bytes_received": got,
            }
        )
        start = end
    base = {
        "retransmitted": 0,
        "timeouts": 0,
        "naks_received": 0,
        "cnps_received": 0,
        "cnps_sent": 0,
        "ce_marks": 0,
        "gaps_seen": 0,
        "gap_events": [],
    }
    return {
        "name": name,
        "rank": rank,
        "iterations_planned": planned,
        "iterations": iterations,
        "bytes_sent": 1500 * len(ends),
        "bytes_received": sum(received),
        "packets_sent": 2 * len(ends),
        **base,
        **(counters or {}),
        "bytes_per_iteration_planned": 1500,
    }


def agent(host, *ranks):
    return {
        "host": host,
        "jobs": list(ranks),
        "pacing": {"late_packets": 0, "max_lag_s": 0.0, "lost_s": 0.0, "tx_s": 1.0},
    }


# Per rank, the end of iterations 0..3; the job-level ends are the column
# maxima 0.9, 1.5, 2.1, 2.8, so the iterations took 0.9, 0.6, 0.6, 0.7 s.
ENDS = [
    [0.90, 1.45, 2.10, 2.75],
    [0.80, 1.50, 2.05, 2.80],
    [0.85, 1.40, 2.00, 2.70],
    [0.70, 1.30, 2.02, 2.60],
]


def ring_results(ends=ENDS, per_rank=None):
    """Agent results of job() with rank r ending its iterations at ends[r];
    per_rank: {rank: extra rank_result arguments}."""
    per_rank = per_rank or {}
    return {h: agent(h, rank_result("j", r, ends[r], **per_rank.get(r, {}))) for r, h in enumerate(HOSTS)}


def test_job_level_iterations_end_with_their_last_rank():
    results = ring_results(
        per_rank={
            1: {"received": [1500, 1497, 1500, 1500], "counters": {"retransmitted": 3, "timeouts": 1}},
            2: {"received": [1500, 1500, 1502, 1500], "counters": {"cnps_received": 4, "ce_marks": 9}},
        }
    )
    out = job_metrics([job()], results, RATE)
    m = out["jobs"]["j"]
    assert m["ranks"] == 4 and m["collective"] == "ring"
    assert (m["iterations_planned"], m["iterations_completed"]) == (4, 4)
    assert m["iteration_ends_s"] == pytest.approx([0.9, 1.5, 2.1, 2.8])
    assert m["iteration_times_s"] == pytest.approx([0.9, 0.6, 0.6, 0.7])
    # steady state: the first iteration (start-up skew) is left out
    assert m["iteration_time_s"] == pytest.approx((0.6 + 0.6 + 0.7) / 3)
    assert m["iteration_time_p50_s"] == pytest.approx(0.6)
    assert m["iteration_time_p99_s"] == pytest.approx(0.7)
    assert m["job_completion_s"] == pytest.approx(2.8)
    assert m["analytical_iteration_s"] == pytest.approx(analytical_iteration_s(job(), RATE))
    assert m["iteration_time_vs_analytical"] == pytest.approx(
        m["iteration_time_s"] / m["analytical_iteration_s"]
    )
    # 1497/1500 is further from 1 than 1502/1500
    assert m["bytes_per_rank_expected"] == 1500
    assert m["bytes_per_rank_ratio"] == pytest.approx(1497 / 1500)
    assert m["bytes_received"] == 4 * 4 * 1500 - 3 + 2
    assert (m["retransmissions"], m["timeouts"], m["cnps"], m["ce_marks"]) == (3, 1, 4, 9)
    # every rank computed 4 x 0.2 s out of its last end
    util = sum(0.8 / ends[-1] for ends in ENDS) / 4
    assert m["gpu_utilization"] == pytest.approx(util)
    assert out["gpu_utilization"] == pytest.approx(util)
    assert m["stalled_iterations"] == 0
    assert not any(k.startswith("iteration_before") for k in m)  # no faults, no phases


def test_bytes_ratio_picks_a_large_excess_too():
    results = ring_results(
        per_rank={0: {"received": [1500, 1500, 1530, 1500]}, 3: {"received": [1490, 1500, 1500, 1500]}}
    )
    m = job_metrics([job()], results, RATE)["jobs"]["j"]
    assert m["bytes_per_rank_ratio"] == pytest.approx(1530 / 1500)


def test_bytes_ratio_needs_a_formula_not_the_schedule():
    # Every rank received exactly what its schedule plans, but an all-to-all
    # has no formula here: comparing with the schedule would check the
    # schedule against itself, so there is no ratio.
    m = job_metrics([job(collective="all-to-all")], ring_results(), RATE)["jobs"]["j"]
    assert m["bytes_per_rank_expected"] is None and m["bytes_per_rank_ratio"] is None
    # A ring judges what the receivers counted against 2(N-1)/N x S.
    short = ring_results(per_rank={2: {"received": [1500, 1500, 1125, 1500]}})
    m = job_metrics([job()], short, RATE)["jobs"]["j"]
    assert m["bytes_per_rank_ratio"] == pytest.approx(0.75)


def test_gpu_utilization_is_weighted_by_ranks_across_jobs():
    def uniform(name, rank, compute, iter_s, n):
        return rank_result(name, rank, [iter_s * (k + 1) for k in range(n)], compute=compute)

    results = {h: agent(h, uniform("a", r, 0.2, 0.8, 3)) for r, h in enumerate(HOSTS)}
    for r, h in enumerate(["s0h1", "s0h3"]):
        results[h] = agent(h, uniform("b", r, 0.3, 0.5, 3))
    jobs = [job("a", iterations=3), job("b", hosts=["s0h1", "s0h3"], iterations=3)]
    out = job_metrics(jobs, results, RATE)
    assert out["jobs"]["a"]["gpu_utilization"] == pytest.approx(0.25)
    assert out["jobs"]["b"]["gpu_utilization"] == pytest.approx(0.6)
    assert out["gpu_utilization"] == pytest.approx((4 * 0.25 + 2 * 0.6) / 6)


def test_stalled_iterations_are_over_three_times_the_median():
    times = [0.5, 0.5, 0.5, 2.0, 0.5, 1.4, 0.5]  # 2.0 > 3 x 0.5 > 1.4
    ends = [round(sum(times[: k + 1]), 6) for k in range(len(times))]
    results = ring_results(ends=[ends] * 4)
    m = job_metrics([job(iterations=len(times))], results, RATE)["jobs"]["j"]
    assert m["iteration_time_p50_s"] == pytest.approx(0.5)
    assert 1.4 < STALL_FACTOR * 0.5 < 2.0
    assert m["stalled_iterations"] == 1


def test_iterations_grouped_before_during_and_after_an_outage():
    #                           before        |  down 2.0 .. up 4.0  |  after
    ends = [0.5, 1.0, 1.5, 2.0, 3.2, 4.0, 4.5, 5.0]
    faults = [
        {"at": 2.0, "applied_at": 2.0, "action": "link-down", "link": ["s0h0", "t0a"]},
        {"at": 4.0, "applied_at": 4.0, "action": "link-up", "link": ["t0a", "s0h0"]},
    ]
    results = ring_results(ends=[ends] * 4)
    m = job_metrics([job(iterations=8)], results, RATE, faults, 6.0)["jobs"]["j"]
    assert m["iteration_before_s"] == pytest.approx(0.5)
    assert m["iteration_during_s"] == pytest.approx((1.2 + 0.8) / 2)
    assert m["iteration_after_s"] == pytest.approx(0.5)


def test_an_outage_never_restored_lasts_to_the_end():
    ends = [0.5, 1.0, 2.5, 4.2]  # the outage starts at 1.01 s and never ends
    faults = [{"at": 1.0, "applied_at": 1.01, "action": "link-down", "link": ["s0h0", "t0a"]}]
    m = job_metrics([job()], ring_results(ends=[ends] * 4), RATE, faults, 6.0)["jobs"]["j"]
    assert m["iteration_before_s"] == pytest.approx(0.5)
    assert m["iteration_during_s"] == pytest.approx((1.5 + 1.7) / 2)
    assert m["iteration_after_s"] is None


def test_a_rank_missing_iterations_leaves_them_incomplete():
    ends = [row[:2] for row in ENDS[3:]]  # the last rank stopped after two
    results = ring_results(ends=ENDS[:3] + ends)
    m = job_metrics([job()], results, RATE)["jobs"]["j"]
    assert m["iterations_completed"] == 2
    assert m["iteration_ends_s"] == pytest.approx([0.9, 1.5])
    assert m["iteration_times_s"] == pytest.approx([0.9, 0.6])
    assert m["job_completion_s"] is None


def test_an_agent_without_results_completes_nothing():
    results = ring_results()
    results["s0h2"] = None
    out = job_metrics([job()], results, RATE)
    m = out["jobs"]["j"]
    assert m["iterations_completed"] == 0
    assert m["iteration_times_s"] == [] and m["iteration_ends_s"] == []
    assert m["iteration_time_s"] is None and m["iteration_time_p99_s"] is None
    assert m["job_completion_s"] is None
    assert m["stalled_iterations"] == 0
    # the ranks that did report still measured their own compute share
    assert m["gpu_utilization"] == pytest.approx(sum(0.8 / ENDS[r][-1] for r in (0, 2, 3)) / 3)


def test_scenario_transport_knobs_reach_the_agents(tmp_path):
    from testbed.fabric.scenario import load_scenario
    from traffic.transport import DcqcnParams

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: knobs\ntopology: {kind: hpn}\nduration: 5\n"
        "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB}]\n"
        "transport: {window: 16, rto: 120ms, dcqcn: {g: 0.01, ai_rate: 0.05, cnp_interval: 2ms}}\n"
    )
    sc = load_scenario(path)
    cfg = jobs.agent_configs(sc.fabric, sc.jobs, str(tmp_path), 5, sc.transport)["s0h0"]
    assert cfg["window"] == 16 and abs(cfg["rto_s"] - 0.12) < 1e-12
    params = DcqcnParams(line_rate_bps=cfg["nic"]["rate_bps"], **cfg["dcqcn"])
    assert params.ai_rate_bps == 0.05 * 40e6 and params.g == 0.01
    assert abs(params.cnp_interval_s - 0.002) < 1e-12


def test_retransmission_ratio_and_gap_events_are_gathered_across_ranks():
    gap = {"t": 1.25, "from": "s0h2", "iter": 1, "expected_psn": 7, "got_psn": 9}
    results = ring_results(
        per_rank={
            0: {"counters": {"retransmitted": 3, "gaps_seen": 1, "gap_events": [gap]}},
            3: {
                "counters": {
                    "retransmitted": 1,
                    "gaps_seen": 2,
                    "gap_events": [dict(gap, t=0.5, got_psn=8), dict(gap, t=2.0)],
                }
            },
        }
    )
    m = job_metrics([job()], results, RATE)["jobs"]["j"]
    assert m["packets_sent"] == 4 * 8
    assert m["retransmission_ratio"] == pytest.approx(4 / 32)
    assert m["gaps_seen"] == 3
    # in time order, each naming its receiver (rank 0 is s1h0, rank 3 is s1h3)
    assert [(e["t"], e["to"]) for e in m["gap_events"]] == [(0.5, "s1h3"), (1.25, "s1h0"), (2.0, "s1h3")]


def test_clean_run_has_zero_ratio_and_no_gaps():
    m = job_metrics([job()], ring_results(), RATE)["jobs"]["j"]
    assert (m["retransmission_ratio"], m["gaps_seen"], m["gap_events"]) == (0.0, 0, [])


def test_loss_is_unexplained_only_without_queue_drops_and_faults():
    jm = {"a": {"gaps_seen": 2}, "b": {"gaps_seen": 0}}
    lost = emulator.unexplained_loss(jm, {}, [])
    assert lost["gaps_seen"] == {"a": 2} and "emulator lost them" in lost["note"]
    assert emulator.unexplained_loss(jm, {"t0r0k0~a0n0 (t0r0k0-e5 egress)": 3}, []) is None
    assert emulator.unexplained_loss(jm, {}, [{"action": "link-down"}]) is None
    assert emulator.unexplained_loss({"a": {"gaps_seen": 0}}, {}, []) is None


def test_frames_the_kernel_saw_dropped_outside_the_model_are_loss_even_without_gaps():
    # A frame lost at the end of a transfer leaves no gap, only a timeout.
    quiet = {"a": {"gaps_seen": 0}}
    lost = emulator.unexplained_loss(quiet, {}, [], 0, {"ovs_socket_drops": 17, "backlog_drops": 0})
    assert lost["dropped"] == {"ovs_socket_drops": 17}
    assert "Open vSwitch's packet sockets dropped 17 frames" in lost["note"]
    # known beside modeled drops and faults, which cannot explain them
    assert emulator.unexplained_loss(quiet, {"x": 3}, [{"action": "link-down"}], 0, {"backlog_drops": 2})
    assert emulator.unexplained_loss(quiet, {}, [], 0, {"ovs_socket_drops": 0, "backlog_drops": None}) is None
    check = trust._loss_check({"jobs": quiet, "emulator_drops": {"ovs_socket_drops": 17}}, [])
    assert (check["ok"], check["value"]) == (False, 17) and "17" in check["reason"]
