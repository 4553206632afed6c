"""Running a scenario on a realized fabric: the runner, the fault timeline,
the counter sampler, the training jobs' plans and agent processes, and the
iperf3 flows."""
