"""Capacity planning, without root: the packets per second a scenario asks
of the hosts and the switches (demand), this machine's measured cost per
packet (calibration), the time dilation that keeps the one within the
other (budget), and the text `hpnlab plan` prints (report)."""
