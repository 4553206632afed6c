"""Names the scenario format gives to what a drill measures per training
job: an expectation on one of these must name its job. The schema's enum
lists them with the flow metrics (a unit test keeps it in step with what
results/expectations.py can look up). Each is measured while the drill
runs; none is a number the schedule fixes before it does."""

JOB_METRICS = (
    "iteration_time_s",
    "iteration_time_p50_s",
    "iteration_time_p99_s",
    "job_completion_s",
    "gpu_utilization",
    "bytes_per_rank",
    "bytes_per_rank_ratio",
    "iteration_time_vs_analytical",
    "retransmissions",
    "retransmission_ratio",
    "gaps_seen",
    "dci_bytes",
    "stalled_iterations",
    "fault_iteration_slowdown",
    "iterations_completed",
    "cnps",
    "link_load_max_mean",
    # Crux as it ran (crux:): what the job's traffic showed over what it declared
    "crux_compute_ratio",
    "crux_bytes_ratio",
    "crux_intensity_ratio",
)

# Measured per priority class (testbed/results/queues.py), summed over every
# port: an expectation on one of these must name its class.
CLASS_METRICS = (
    "class_drops",
    "class_marks",
    "class_max_backlog_bytes",
    "class_p99_backlog_bytes",
    "class_sent_bytes",
    # lossless classes only (testbed/results/pauses.py)
    "class_pauses",
    "class_paused_s",
)

# Measured from the controller's own events when the scenario's
# controller_timeline restarts it (testbed/results/controller.py): the flow
# and group changes the restarted controller made (0: it adopted what the
# switches held), and how long after its start the routes stood again.
CONTROLLER_METRICS = ("controller_restart_changes", "controller_restart_s")
# Measured by probes, per named fault: the longest gap in delivery (ms).
PROBE_METRICS = ("gap_ms",)

# Metrics that are a ratio (1.0 is "the same"): a bound on one may be
# written as a percentage, as may any bound with `relative_to`.
RATIO_METRICS = (
    "fault_throughput_ratio",
    "recovered_throughput_ratio",
    "fidelity",
    "gpu_utilization",
    "bytes_per_rank_ratio",
    "iteration_time_vs_analytical",
    "retransmission_ratio",
    "fault_iteration_slowdown",
    "link_load_max_mean",
    "crux_compute_ratio",
    "crux_bytes_ratio",
    "crux_intensity_ratio",
)


def time_unit(metric: str) -> str | None:
    """'s' or 'ms' for a metric measured in time (its name says which), so a
    bound on it may be written as a duration; None for any other."""
    for unit in ("ms", "s"):
        if metric.endswith("_" + unit):
            return unit
    return None
