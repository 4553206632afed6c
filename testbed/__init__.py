"""hpnlab testbed: topology model, validation, realization and drills."""
