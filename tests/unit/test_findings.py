"""The sentences a report opens with, from measured values only."""

from testbed.results.findings import findings


def test_a_failure_drill_says_what_the_host_kept_and_how_fast_it_came_back():
    results = {
        "metrics": {
            "hosts": {
                "s0h0": {
                    "before_mbit": 39.4,
                    "during_mbit": 0.0,
                    "fault_throughput_ratio": 0.0,
                    "max_silence_s": 19.2,
                    "recovery_s": 9.3,
                }
            }
        },
        "faults": [{"converged_s": 0.012}, {"converged_s": 0.017}],
    }
    assert findings(results) == [
        "s0h0 was cut off while the link was down (0 of 39.4 Mbit/s); its longest silence was 19.2 s; "
        "it was back to 90% of its rate 9.3 s after the link came back.",
        "The controller's routes converged 12-17 ms after each fault (2 of 2 timed).",
    ]
    alike = {**results, "faults": [{"converged_s": 0.0435}, {"converged_s": 0.04351}]}
    assert findings(alike)[1] == "The controller's routes converged 43.5 ms after each fault (2 of 2 timed)."
    results["metrics"]["controller"] = {"host_routes_at_end": {}}
    none_held = "When the traffic ended, the controller held no host off any of its ports."
    assert findings(results)[-1] == none_held
    held = {f"s1h{i}": {"10.0.0.1": [f"s1h{i}-n0p1"]} for i in range(4)}
    held["s1h0"]["10.0.0.2"] = ["s1h0-n0p1"]
    results["metrics"]["controller"] = {"host_routes_at_end": held}
    assert findings(results)[-1] == (
        "When the traffic ended, the controller held 4 hosts off some of their ports: "
        "s1h0 (to 10.0.0.1 only by s1h0-n0p1, and to 1 more destination), "
        "s1h1 (to 10.0.0.1 only by s1h1-n0p1), "
        "s1h2 (to 10.0.0.1 only by s1h2-n0p1), and 1 more."
    )
    results["faults"] = []  # nothing moved a route: nothing to say about them
    assert not any("held" in line for line in findings(results))
    host = results["metrics"]["hosts"]["s0h0"]
    host.update(during_mbit=20.0, fault_throughput_ratio=0.508, recovery_s=None)
    assert findings(results)[0].startswith("s0h0 kept 51% of its throughput while the link was down (20 of")


def test_jobs_say_their_pace_and_what_went_wrong_only_when_measured():
    job = {
        "iterations_completed": 6,
        "iterations_planned": 8,
        "iteration_time_s": 0.9,
        "iteration_time_vs_analytical": 1.12,
        "gpu_utilization": 0.4,
        "retransmissions": 0,
        "stalled_iterations": 2,
    }
    text = findings({"metrics": {"jobs": {"ring": job}, "gpu_utilization": 0.4}})
    assert text == [
        "Job ring ran 6 of 8 iterations, 0.9 s each (1.12x its analytical time); "
        "its GPUs were busy 40% of the time; 2 stalled iterations."
    ]
    assert findings({"metrics": {"hosts": {"s0h0": {"before_mbit": 40}}}}) == []  # no fault: nothing said


def test_a_degraded_link_is_named_as_such_and_its_rate_change_is_not_counted_as_untimed():
    results = {
        "metrics": {
            "hosts": {"d0s0h0": {"before_mbit": 40.0, "during_mbit": 10.2, "fault_throughput_ratio": 0.255}},
            "jobs": {"ring": {"iterations_completed": 4, "fault_iteration_slowdown": 2.6}},
            "outages": [{"kind": "degraded"}, {"kind": "degraded"}],
        },
        "faults": [{"action": "link-degrade", "rate": 0.25}, {"action": "link-restore", "rate": 1.0}],
    }
    assert findings(results) == [
        "d0s0h0 kept 26% of its throughput while the link was degraded (10.2 of 40 Mbit/s).",
        "Job ring ran 4 iterations; an iteration took 2.6x as long while the link was degraded.",
    ]
    results["metrics"]["outages"].append({"kind": "down"})
    assert "during the faults" in findings(results)[0]
