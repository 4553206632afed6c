"""What touches the machine to realize a fabric: Mininet hosts, Open vSwitch
bridges and tc shaping (realize, plans), what the kernel can do
(capabilities), the record of everything created (ledger), child processes,
the controller process, reachability probes and packet captures."""
