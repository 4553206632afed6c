"""hpnlab testbed. Data flows one way through its subpackages:
fabric (pure model and file checks) -> emulation (realize it on this
machine) -> drill (run a scenario on it) -> results (measure, trust, judge,
report); cli holds the `hpnlab` commands."""
