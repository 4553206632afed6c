"""The fidelity gate: the worst port and the worst agent are judged, loss the
emulator caused, a late timeline and a slow control plane make a run
untrustworthy, with the failed measurement named; results written before
the checks existed still read the same. The last tests run the runner's
judging half on synthetic recordings of the shipped scenarios."""

import os

import pytest
from entries import evaluate

from testbed.drill import measure
from testbed.drill.faults import link_switch_ports
from testbed.fabric.scenario import load_scenario
from testbed.results import analytical, counters, emulator, trust, verdicts
from testbed.results.emulator import generator_metrics
from testbed.results.markdown import _generators_text
from testbed.results.trust import assess
from testbed.results.verdicts import low_fidelity, reasons, verdict

HOSTS8 = ["s0h0", "s0h1", "s0h2", "s0h3", "s1h0", "s1h1", "s1h2", "s1h3"]


def agents(starved=None, lost=4.0, tx=3.0, per_port=True):
    """Results of eight agents with two NIC ports each, every port on time;
    `starved` = (host, port index) that sat idle `lost` s while it had
    packets ready. per_port=False: the older results, totals only."""
    out = {}
    for h in HOSTS8:
        ports = {f"{h}-n0p{k}": {"tx_s": tx, "lost_s": 0.0, "packets": 2000} for k in (0, 1)}
        if starved and starved[0] == h:
            ports[f"{h}-n0p{starved[1]}"]["lost_s"] = lost
        pacing = {
            "late_packets": 10,
            "max_lag_s": 0.002,
            "tx_s": sum(p["tx_s"] for p in ports.values()),
            "lost_s": sum(p["lost_s"] for p in ports.values()),
        }
        if per_port:
            pacing["ports"] = ports
        out[h] = {"host": h, "jobs": [{"packets_sent": 4000}], "pacing": pacing}
    return out


def job_metrics_of(gaps=0):
    return {"ring8": {"gaps_seen": gaps, "gap_events": []}}


def metrics_with(agent_results, links=None, jobs=None, queue_drops=None, cpu=None):
    gen = generator_metrics(agent_results)
    fid = {"links": links or {}, "min": None}
    if links:
        fid["min"] = min(v["fidelity"] for v in links.values())
    emulator.fold_generators(fid, gen)
    return {
        "fidelity": fid,
        "generators": gen,
        "jobs": jobs or job_metrics_of(),
        "queue_drops": queue_drops or {},
        "host_cpu": cpu or {"mean_busy": 0.4, "saturated_share": 0.1},
    }


def check(verdict_, name):
    [c] = [c for c in verdict_["checks"] if c["name"] == name]
    return c


# --- generators: the worst port of the worst agent ---------------------------------


def test_one_starved_port_among_sixteen_makes_the_run_untrustworthy():
    results = agents(starved=("s1h2", 1))
    gen = generator_metrics(results)
    # Averaged over every agent and port it would still pass the old gate ...
    assert gen["mean_on_time"] == pytest.approx(48 / 52)
    assert trust.is_trustworthy(gen["mean_on_time"])
    # ... but the starved port kept its pacing only 3/7 of the time.
    assert gen["worst"]["host"] == "s1h2" and gen["worst"]["port"] == "s1h2-n0p1"
    assert gen["on_time"] == pytest.approx(3 / 7)
    out = assess(metrics_with(results))
    assert out["trustworthy"] is False and out["failed"] == ["generator_fidelity"]
    c = check(out, "generator_fidelity")
    assert c["value"] == pytest.approx(3 / 7) and c["threshold"] == 0.9
    assert "s1h2" in c["reason"] and "s1h2-n0p1" in c["reason"]


def test_healthy_agents_pass_and_the_same_numbers_decide_expectations():
    out = assess(metrics_with(agents()))
    assert out["trustworthy"] is True and out["failed"] == []
    assert check(out, "generator_fidelity")["value"] == 1.0
    starved = assess(metrics_with(agents(starved=("s0h0", 0))))
    [exp] = evaluate(
        [{"metric": "iterations_completed", "job": "ring8", "min": 8}],
        {"jobs": {"ring8": {"iterations_completed": 8}}},
        starved["trustworthy"],
    )
    assert exp["status"] == "untrustworthy" and exp["passed"] is False
    assert "would pass" in exp["reason"]


def test_a_fully_starved_port_is_judged_though_it_sent_little():
    results = agents(starved=("s0h3", 0), lost=2.0)
    results["s0h3"]["pacing"]["ports"]["s0h3-n0p0"]["tx_s"] = 0.05
    gen = generator_metrics(results)
    assert (gen["worst"]["host"], gen["worst"]["port"]) == ("s0h3", "s0h3-n0p0")
    assert gen["on_time"] == pytest.approx(0.05 / 2.05)


def test_ports_with_too_little_traffic_are_named_and_not_judged():
    results = agents(tx=0.2)
    results["s0h0"]["pacing"]["ports"]["s0h0-n0p0"]["tx_s"] = 2.0
    gen = generator_metrics(results)
    assert (gen["worst"]["host"], gen["worst"]["port"]) == ("s0h0", "s0h0-n0p0")
    assert len(gen["too_little"]) == 15 and "s0h0 s0h0-n0p1 (0.2 s)" in gen["too_little"]
    c = check(assess(metrics_with(results)), "generator_fidelity")
    assert c["ok"] is True and c["note"].startswith("too little traffic to judge on 15 agent ports: ")
    # A large fabric's every port named would make one line of hundreds:
    # the note names the first eight and counts the rest.
    assert c["note"].endswith(", and 7 more") and c["note"].count("(0.2 s)") == 8


def test_older_results_without_ports_are_judged_per_agent():
    results = agents(starved=("s1h2", 1), per_port=False)
    gen = generator_metrics(results)
    assert gen["worst"]["host"] == "s1h2" and gen["worst"]["port"] == emulator.ALL_PORTS
    assert gen["on_time"] == pytest.approx(6 / 10)
    out = assess(metrics_with(results))
    assert out["failed"] == ["generator_fidelity"]
    assert "the agent on s1h2 kept" in check(out, "generator_fidelity")["reason"]


def test_an_agent_without_results_fails_the_run():
    results = agents()
    results["s0h2"] = None
    out = assess(metrics_with(results))
    assert out["failed"] == ["agent_results"]
    assert "s0h2" in check(out, "agent_results")["reason"]


# --- links: every busy egress, switch ports included, the worst one judged ------------


def test_worst_busy_egress_is_named():
    links = {
        "t0r0k0~a0n0 (t0r0k0-e5 egress)": {"fidelity": 0.62, "switch": True, "node": "t0r0k0"},
        "s0h0-n0p0~t0r0k0-e1 (s0h0-n0p0 egress)": {"fidelity": 1.0, "switch": False},
    }
    out = assess(metrics_with(agents(), links=links))
    c = check(out, "link_fidelity")
    assert out["failed"] == ["link_fidelity"] and c["value"] == 0.62
    assert "t0r0k0~a0n0 (t0r0k0-e5 egress)" in c["reason"]
    assert "2 busy egresses judged, 1 of them switch ports" in c["note"]


def test_the_report_says_when_no_switch_port_was_busy():
    links = {"s0h0-n0p0~t0r0k0-e1 (s0h0-n0p0 egress)": {"fidelity": 0.99, "switch": False}}
    c = check(assess({"fidelity": {"links": links, "min": 0.99}}), "link_fidelity")
    assert c["ok"] is True and "no switch port had packets waiting" in c["note"]


def test_nothing_busy_and_no_agents_means_fidelity_unknown():
    out = assess({"fidelity": {"links": {}, "min": None}})
    assert out["failed"] == ["link_fidelity"]
    assert "fidelity is unknown" in check(out, "link_fidelity")["reason"]


NAMES = {"sw-e1": "sw~x", "h-e0": "h~sw"}
OWNERS = {"sw-e1": ("sw", True), "h-e0": ("h", False)}


def backlogged(sends, backlogs, dev="sw-e1", dt=0.1):
    """Samples of one egress: bytes sent in each interval, backlog at each sample."""
    rows, total = [], 0
    for k, backlog in enumerate(backlogs):
        rows.append((round(k * dt, 3), {dev: (total, backlog, 0)}))
        if k < len(sends):
            total += sends[k]
    return rows


def test_a_switch_port_busy_now_and_then_is_judged_per_interval():
    # 10 Mbit/s: 125,000 bytes per 0.1 s. Busy in 12 intervals of 40, in
    # bursts; each time it sent what waited (60 kB), never its full rate.
    backlogs, sends = [], []
    for k in range(40):
        busy = k % 3 == 0
        backlogs.append(60_000 if busy else 0)
        sends.append(60_000 if busy else 20_000)
    backlogs.append(0)
    out = counters.fidelity(backlogged(sends, backlogs), {"sw-e1": 10.0}, NAMES, OWNERS, frame_bytes=9014)
    link = out["sw~x (sw-e1 egress)"]
    assert link["fidelity"] == pytest.approx(1.0)
    assert link["switch"] is True and link["node"] == "sw"
    assert link["busy_s"] == pytest.approx(1.4)


def test_a_switch_port_that_sent_less_than_waited_is_caught():
    # A full queue (200 kB) at every sample, but only 60 kB a tenth of a second left.
    out = counters.fidelity(
        backlogged([60_000] * 20, [200_000] * 21), {"sw-e1": 10.0}, NAMES, OWNERS, frame_bytes=9014
    )
    owed = 125_000 * 0.95 - 9014
    assert out["sw~x (sw-e1 egress)"]["fidelity"] == pytest.approx(60_000 / owed)
    links = {name: v for name, v in out.items()}
    assert assess({"fidelity": {"links": links, "min": None}})["failed"] == ["link_fidelity"]


def test_a_queue_flushed_by_a_link_going_down_is_not_a_shortfall():
    # Full queue for 1.5 s; the link goes down at 1.42 s and its queue is
    # flushed, 30 kB sent that interval.
    sends = [125_000] * 14 + [30_000] + [0] * 10
    rows = backlogged(sends, [200_000] * 15 + [0] * 11)
    skip = {"sw-e1": [(1.4, 2.6)]}
    out = counters.fidelity(rows, {"sw-e1": 10.0}, NAMES, OWNERS, skip=skip, frame_bytes=9014)
    assert out["sw~x (sw-e1 egress)"]["fidelity"] == pytest.approx(1.0)
    unskipped = counters.fidelity(rows, {"sw-e1": 10.0}, NAMES, OWNERS, frame_bytes=9014)
    assert unskipped["sw~x (sw-e1 egress)"]["fidelity"] < 1.0


# --- loss the emulator caused ---------------------------------------------------------


def test_unexplained_gaps_make_the_run_untrustworthy():
    out = assess(metrics_with(agents(), jobs=job_metrics_of(gaps=3)))
    assert out["trustworthy"] is False and out["failed"] == ["emulator_loss"]
    c = check(out, "emulator_loss")
    assert c["value"] == 3 and "ring8: 3" in c["reason"] and "emulator lost" in c["reason"]


def test_frames_the_agents_did_not_read_in_time_are_emulator_loss_beside_modeled_drops():
    results = agents()
    # two agents in one host share its namespace's counter: 7 frames, not 14
    results["s0h0"]["rx_overflows"] = 7
    results["s0h0-rail1"] = {**results["s0h0"], "pacing": {**results["s0h0"]["pacing"]}}
    results["s0h1"]["rx_overflows"] = 2
    results["s0h2"]["rx_overflows"] = 0
    out = assess(
        metrics_with(results, jobs=job_metrics_of(gaps=3), queue_drops={"d0b0~d1b0 (d0b0-e9 egress)": 40})
    )
    assert out["trustworthy"] is False and out["failed"] == ["emulator_loss"]
    assert "dropped 9 frames they did not read in time" in check(out, "emulator_loss")["reason"]
    assert generator_metrics(agents())["rx_overflows"] == 0


def test_gaps_a_modeled_queue_or_a_fault_explains_are_no_emulator_loss():
    drops = {"d0b0~d1b0 (d0b0-e9 egress)": 40}
    out = assess(metrics_with(agents(), jobs=job_metrics_of(gaps=3), queue_drops=drops))
    assert out["trustworthy"] is True
    assert check(out, "emulator_loss")["note"] == "3 gaps, explained by modeled queue drops"
    fault = {
        "at": 5,
        "applied_at": 5.01,
        "action": "link-down",
        "link": ["s0h0", "t0r0k0"],
        "converged_s": 0.02,
    }
    assert assess(metrics_with(agents(), jobs=job_metrics_of(gaps=3)), [fault])["trustworthy"]


# --- the timeline and the control plane ---------------------------------------------


def faults(lag_down=0.01, lag_up=0.01, conv_down=0.02, conv_up=0.02):
    return [
        {
            "at": 5,
            "applied_at": 5 + lag_down,
            "action": "link-down",
            "link": ["s0h0", "t0r0k0"],
            "index": 0,
            "converged_s": conv_down,
        },
        {
            "at": 15,
            "applied_at": 15 + lag_up,
            "action": "link-up",
            "link": ["s0h0", "t0r0k0"],
            "index": 0,
            "converged_s": conv_up,
        },
    ]


def tcp_metrics():
    links = {"s0h0-n0p0~t0r0k0-e1 (s0h0-n0p0 egress)": {"fidelity": 0.999, "switch": False}}
    return {
        "fidelity": {"links": links, "min": 0.999},
        "host_cpu": {"mean_busy": 0.5, "saturated_share": 0.2},
    }


def test_a_fault_applied_late_is_named():
    out = assess(tcp_metrics(), faults(lag_down=0.39))
    assert out["failed"] == ["fault_lag"]
    assert check(out, "fault_lag")["reason"].startswith(
        "fault 1 (link-down s0h0-t0r0k0) applied 390 ms late (limit 100 ms)"
    )


def test_slow_convergence_is_named():
    out = assess(tcp_metrics(), faults(conv_up=1.17))
    assert out["failed"] == ["convergence"]
    assert check(out, "convergence")["value"] == 1.17
    assert (
        "routes converged 1170 ms after fault 2 (link-up s0h0-t0r0k0)" in check(out, "convergence")["reason"]
    )


def test_a_controller_that_never_answers_fails_convergence():
    out = assess(tcp_metrics(), faults(conv_up=None))
    assert out["failed"] == ["convergence"]
    assert "acknowledged no routes after fault 2 (link-up" in check(out, "convergence")["reason"]


def test_the_slow_vm_run_is_untrustworthy_on_both_counts():
    # 390 ms late, converged in 1.17 s: the run the emulator reported as 0.979.
    out = assess(tcp_metrics(), faults(lag_down=0.39, conv_down=1.17))
    assert out["trustworthy"] is False and out["failed"] == ["fault_lag", "convergence"]


def test_timely_faults_pass():
    out = assess(tcp_metrics(), faults())
    assert out["trustworthy"] is True
    assert [check(out, n)["ok"] for n in ("fault_lag", "convergence")] == [True, True]


def held(in_force_p99, resume_p99):
    def stats(p99):
        return {"n": 700, "median": 0.02, "p99": p99, "max": p99 * 2}

    return {"pfc": {"machine_held_ms": {"in_force": stats(in_force_p99), "resume": stats(resume_p99)}}}


def test_a_pause_daemon_the_machine_held_past_the_limit_at_the_p99_is_named():
    out = assess({**tcp_metrics(), **held(0.5, 3.1)})
    assert out["trustworthy"] is False and out["failed"] == ["pause_lag"]
    c = check(out, "pause_lag")
    assert c["value"] == pytest.approx(0.0031) and "resumes" in c["reason"] and "3.10 ms" in c["reason"]


def test_a_pause_daemon_held_less_than_the_limit_passes_and_no_pauses_are_not_judged():
    out = assess({**tcp_metrics(), **held(2.4, 1.2)})
    assert out["trustworthy"] is True and check(out, "pause_lag")["value"] == pytest.approx(0.0024)
    assert check(assess(tcp_metrics()), "pause_lag")["ok"] is None
    # a run whose daemon measured no hold (older results): not judged either
    assert check(assess({**tcp_metrics(), "pfc": {"pauses": 3}}), "pause_lag")["ok"] is None


# --- CPU: a warning, named when something else failed --------------------------------


def test_a_saturated_cpu_alone_only_warns():
    metrics = tcp_metrics()
    metrics["host_cpu"]["saturated_share"] = 0.8
    out = assess(metrics, faults())
    assert out["trustworthy"] is True and out["warnings"] == ["host_cpu"]
    spoiled = assess(metrics, faults(lag_down=0.5))
    results = {"trustworthy": False, "trust": spoiled}
    said = reasons(results)
    assert said[0].startswith("fault_lag: fault 1 (link-down s0h0-t0r0k0) applied 500 ms late")
    assert said[1].startswith("host_cpu: every core was saturated in 80% of the samples")


def _readers(late_s, **late):
    results = agents()
    for h in HOSTS8:
        results[h]["reading"] = {"rx_s": 3.0, "late_s": late.get(h, late_s), "max_wait_s": 0.004}
    results["s0h0"]["reading"] = {"rx_s": 0.1, "late_s": 0.2, "max_wait_s": 0.2}  # too little to judge
    return results


def test_one_agent_far_behind_in_reading_makes_the_run_untrustworthy_and_is_named():
    results = _readers(0.01, s1h2=1.5)
    results["s1h2"]["reading"]["max_wait_s"] = 0.09
    metrics = metrics_with(results)
    assert metrics["generators"]["reading_worst"]["host"] == "s1h2"
    out = assess(metrics)
    c = check(out, "agent_reading")
    assert c["ok"] is False and c["value"] == pytest.approx(3 / 3.01) and c["threshold"] == 0.85
    assert (
        c["reason"].startswith("the agent on s1h2 read its frames in time only 0.667")
        and "90 ms" in c["reason"]
    )
    assert out["trustworthy"] is False and out["failed"] == ["agent_reading"]
    # 1 s late in 3 s of receiving: 0.75, above the floor for one agent
    results["s1h2"]["reading"]["late_s"] = 1.0
    out = assess(metrics_with(results))
    assert check(out, "agent_reading")["ok"] is True and out["trustworthy"] is True


def test_every_agent_somewhat_late_makes_the_run_untrustworthy():
    # 0.6 s late in 3 s: each 0.833, none below the floor, the median below 0.85
    out = assess(metrics_with(_readers(0.6)))
    c = check(out, "agent_reading")
    assert c["ok"] is False and c["value"] == pytest.approx(0.8333, abs=1e-3)
    assert c["reason"].startswith("the median agent read its frames in time 0.833")
    assert out["failed"] == ["agent_reading"]
    # 0.5 s late: 0.857, within
    assert check(assess(metrics_with(_readers(0.5))), "agent_reading")["ok"] is True


def test_the_agent_processes_are_counted_from_what_the_agents_said():
    results = agents()
    assert generator_metrics(results)["agent_processes"] == 8  # older results: one per host
    for i, h in enumerate(HOSTS8):
        results[h]["process"] = {"hosts": HOSTS8[i % 2 :: 2], "cpu_s": 1.0}
    gen = generator_metrics(results)
    assert gen["agent_processes"] == 2
    assert _generators_text(gen).startswith("Traffic generators (8 hosts in 2 processes): ")


def test_results_from_agents_that_did_not_measure_reading_leave_it_unjudged():
    c = check(assess(metrics_with(agents())), "agent_reading")
    assert c["ok"] is None and c["value"] is None


# --- reading results dicts --------------------------------------------


def test_results_without_trust_checks_are_not_believed():
    # Written before the checks existed: nothing judged them, whatever they say.
    old = {"passed": True, "trustworthy": True, "metrics": {"fidelity": {"links": {}, "min": 0.97}}}
    assert verdict(old) == "UNTRUSTWORTHY" and low_fidelity(old)
    assert reasons(old) == [verdicts.NO_CHECKS]
    judged = assess(metrics_with(agents()))
    good = {"passed": True, "trustworthy": judged["trustworthy"], "trust": judged}
    assert judged["trustworthy"] and verdict(good) == "PASSED" and not low_fidelity(good)


def test_new_results_say_which_measurement_failed():
    out = assess(metrics_with(agents(starved=("s1h2", 1))))
    results = {"passed": False, "trustworthy": out["trustworthy"], "trust": out}
    assert verdict(results) == "UNTRUSTWORTHY" and low_fidelity(results)
    [said] = reasons(results)
    assert said.startswith("generator_fidelity: the agent on s1h2, port s1h2-n0p1, kept")


# --- the runner's judging half on synthetic recordings ------------------------------


class Flows:
    """Stands in for the iperf3 processes: their receiver series."""

    def __init__(self, per_flow=None, info=None):
        self.per_flow, self.info = per_flow or {}, info or {}

    def series(self):
        return self.per_flow, self.info


def recorded(sc, **kw):
    base = dict(
        t0=100.0,
        ran_s=sc.duration_s,
        faults=[],
        problems=[],
        events=[],
        flows=Flows(),
        samples=[],
        cpu=[(i * 0.1, 0.5) for i in range(50)],
        agent_results=None,
        capture_files=[],
        datapath="netdev",
        bringup_s=0.8,
    )
    return measure.RunRecord(**{**base, **kw})


def ring_agents(sc, starved=None, gaps=0):
    """What the agents of allreduce-ring report from a good run: every rank
    received 2(N-1)/N x S per iteration, iterations 5% over the analytical time."""
    [job] = sc.jobs
    it = 1.05 * analytical.analytical_iteration_s(
        job, analytical.goodput_bps(sc.fabric), analytical.path_latency_s(sc.fabric, job)
    )
    results = agents(starved=starved)
    for rank, host in enumerate(job.hosts):
        iters = [
            {
                "iter": k,
                "start": k * it,
                "end": (k + 1) * it,
                "compute_s": 0.2,
                "comm_s": it - 0.2,
                "iter_s": it,
                "bytes_sent": 1_750_000,
                "bytes_received": 1_750_000,
            }
            for k in range(job.iterations)
        ]
        results[host]["jobs"] = [
            {
                "name": job.name,
                "rank": rank,
                "iterations_planned": job.iterations,
                "iterations": iters,
                "bytes_sent": 14_000_000,
                "bytes_received": 14_000_000,
                "packets_sent": 3400,
                "retransmitted": 0,
                "timeouts": 0,
                "naks_received": 0,
                "cnps_received": 0,
                "cnps_sent": 0,
                "ce_marks": 0,
                "gaps_seen": gaps if rank == 3 else 0,
                "gap_events": [],
                "bytes_per_iteration_planned": 1_750_000,
            }
        ]
    return results


@pytest.fixture(scope="module")
def ring():
    return load_scenario("scenarios/allreduce-ring.yaml")


def test_a_clean_ring_run_passes(ring):
    res = measure.results(ring, recorded(ring, agent_results=ring_agents(ring)), "now").to_dict()
    assert res["trustworthy"] is True and res["passed"] is True, res["trust"]
    assert res["metrics"]["jobs"]["ring8"]["bytes_per_rank_ratio"] == 1.0


def test_a_starved_host_spoils_the_ring_run(ring):
    res = measure.results(ring, recorded(ring, agent_results=ring_agents(ring, ("s1h2", 1))), "now").to_dict()
    assert res["passed"] is False and verdict(res) == "UNTRUSTWORTHY"
    assert res["trust"]["failed"] == ["generator_fidelity"]
    assert all(e["status"] == "untrustworthy" for e in res["expectations"])
    assert "s1h2-n0p1" in reasons(res)[0]


def test_emulator_loss_spoils_the_ring_run(ring):
    res = measure.results(ring, recorded(ring, agent_results=ring_agents(ring, gaps=2)), "now").to_dict()
    assert res["passed"] is False and res["trust"]["failed"] == ["emulator_loss"]
    assert "receivers saw 2 packet gaps (ring8: 2)" in reasons(res)[0]


def dual_tor_run(sc, lags=(0.005, 0.005), converge=(0.02, 0.02)):
    """dual-tor-link-failure as recorded: s0h0's 8 flows at 10 Mbit/s, 5 of
    them while the link is down; fault i applied lags[i] late, its routes
    acknowledged converge[i] after it."""
    t0, dt = 100.0, 0.1
    ends = [round((i + 1) * dt, 3) for i in range(int(sc.duration_s / dt))]
    per_flow, info = {}, {}
    for k, dst in enumerate(["s1h0", "s1h1", "s1h2", "s1h3"] * 2):
        fid = f"s0h0->{dst}#{k // 4 + 1}"
        info[fid] = {"src": "s0h0", "dst": dst}
        per_flow[fid] = [(t, 5.0 if 5 < t <= 15 else 10.0) for t in ends]
    applied = [
        {
            "at": f.at,
            "applied_at": f.at + lag,
            "action": f.action,
            "link": list(f.link),
            "index": 0,
            "link_name": "x",
        }
        for f, lag in zip(sc.faults, lags)
    ]
    events = [
        {
            "event": "routes",
            "t": t0 + f["applied_at"] + c,
            "version": i + 2,
            "down": link_switch_ports(sc.fabric, f) if f["action"] == "link-down" else [],
        }
        for i, (f, c) in enumerate(zip(applied, converge))
    ]
    # s0h0's ports had 100 kB waiting at every sample and sent 480 kB a
    # tenth of a second (40 Mbit/s less framing); port 0 idle while down.
    ports = sc.fabric.nics_of("s0h0")[0].ports
    samples, sent = [], {p: 0 for p in ports}
    for i in range(len(ends) + 1):
        t = round(i * dt, 3)
        down = ports[0] if 5 <= t < 15 else None
        samples.append((t, {p: (sent[p], 0 if p == down else 100_000, 0) for p in ports}))
        for p in ports:
            sent[p] += 0 if p == down else 480_000
    return recorded(sc, t0=t0, faults=applied, events=events, flows=Flows(per_flow, info), samples=samples)


def test_the_dual_tor_drill_passes_when_the_timeline_held():
    sc = load_scenario("scenarios/dual-tor-link-failure.yaml")
    res = measure.results(sc, dual_tor_run(sc), "now").to_dict()
    assert res["trustworthy"] is True and res["passed"] is True, res["trust"]
    assert [f["converged_s"] for f in res["faults"]] == [0.02, 0.02]
    host = res["metrics"]["hosts"]["s0h0"]
    assert host["recovered_throughput_ratio"] == pytest.approx(1.0)


def test_without_anything_busy_the_emulators_rate_is_unknown():
    sc = load_scenario("scenarios/dual-tor-link-failure.yaml")
    run = dual_tor_run(sc)
    run.samples = []
    res = measure.results(sc, run, "now").to_dict()
    assert res["trust"]["failed"] == ["link_fidelity"]
    assert "fidelity is unknown" in reasons(res)[0]
    for e in res["expectations"]:
        assert "would pass" in e["reason"], e


def test_the_slow_vm_dual_tor_run_is_untrustworthy():
    sc = load_scenario("scenarios/dual-tor-link-failure.yaml")
    res = measure.results(sc, dual_tor_run(sc, lags=(0.39, 0.005), converge=(1.17, 0.02)), "now").to_dict()
    assert {"fault_lag", "convergence"} <= set(res["trust"]["failed"])
    said = " ".join(reasons(res))
    assert "fault 1 (link-down s0h0-t0r0k0) applied 390 ms late" in said
    assert "routes converged 1170 ms after fault 1 (link-down s0h0-t0r0k0)" in said


def test_frames_open_vswitch_left_unread_are_a_delay_the_machine_added():
    from testbed.drill.cost import packet_socket_backlog
    from testbed.fabric.build import build_fabric

    text = (
        "sk               RefCnt Type Proto  Iface R Rmem   User   Inode\n"
        "0000000090ee3b04 2      3    0000   0     0 0      0      193088019\n"
        "0000000071b08ec9 3      3    0003   29245 1 250000 0      244414143\n"
        "000000005b0046a1 3      3    0003   29251 1 0      0      244414144\n"
    )
    assert packet_socket_backlog(text) == {0: 0, 29245: 250000, 29251: 0}
    # a capture's socket on the same port is not Open vSwitch's
    assert packet_socket_backlog(text, {244414144}) == {29251: 0}
    fabric = build_fabric({"kind": "hpn"})
    port = "t0r0k0-e1"  # 40 Mbit/s (scaled) towards a host
    hold = emulator.emulator_hold(fabric, {port: 300_000, "t0r0k0-e2": 0})
    # the peer's shaper may have sent its burst (2 frames) at one instant:
    # only the bytes beyond it arrived over time at the link's rate
    burst = 2 * (fabric.mtu + 14)
    assert hold["port"] == port and hold["worst_s"] == pytest.approx((300_000 - burst) * 8 / 40e6, abs=1e-4)
    assert emulator.emulator_hold(fabric, {port: burst})["ports"] == {}  # a burst just arrived: no wait
    check = trust._hold_check({"emulator_hold": hold})
    assert check["ok"] is False and port in check["reason"]
    assert trust._hold_check({"emulator_hold": emulator.emulator_hold(fabric, {port: 2_000})})["ok"] is True
    assert trust._hold_check({"emulator_hold": None})["ok"] is None  # the kernel datapath: not judged


def test_the_sockets_a_process_holds_are_found_by_inode():
    import socket

    from testbed.drill.cost import socket_inodes

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        inode = os.fstat(s.fileno()).st_ino
        assert inode in socket_inodes(os.getpid())
    assert inode not in socket_inodes(os.getpid())
    assert socket_inodes(2**22 + 7) == set()  # no such process


def test_gaps_right_after_a_class_change_are_the_modeled_reordering():
    crux = {
        "decisions": [
            {"at": 0.0, "why": "planned from the declared jobs", "levels": {"big": 0, "mid": 1}},
            {"at": 2.32, "why": "profiling mid alone at the top level", "levels": {"big": 1, "mid": 0}},
        ],
        "jobs": {},
    }
    assert emulator.class_changes(crux) == {"big": [2.32], "mid": [2.32]}
    soon = {"big": {"gaps_seen": 2, "gap_events": [{"t": 2.33}, {"t": 2.35}]}}
    assert emulator.unexplained_loss(soon, {}, [], 0, {}, crux) is None
    check = trust._loss_check({"jobs": soon, "crux": crux}, [])
    assert check["ok"] is True and "class changes" in check["note"]
    later = {"big": {"gaps_seen": 2, "gap_events": [{"t": 2.33}, {"t": 5.0}]}}
    assert emulator.unexplained_loss(later, {}, [], 0, {}, crux)["gaps_seen"] == {"big": 1}
    # a gap's time counts from its job's start
    late = {"mid": {"gaps_seen": 1, "window_s": [2.0, 9.0], "gap_events": [{"t": 0.35}]}}
    assert emulator.unexplained_loss(late, {}, [], 0, {}, crux) is None
    moved = {"mid": dict(late["mid"], window_s=[3.0, 9.0])}
    assert emulator.unexplained_loss(moved, {}, [], 0, {}, crux)["gaps_seen"] == {"mid": 1}
    assert emulator.unexplained_loss(soon, {}, [], 0, {}, None)["gaps_seen"] == {"big": 2}
