"""Running one command per host side by side (testbed/emulation/hostrun.py),
with real processes in this namespace standing in for the hosts'."""

import time

from testbed.emulation.hostrun import first_failure, run_in_hosts


def here(host, argv):
    return list(argv)


def test_answers_come_back_in_the_order_given():
    ran = run_in_hosts(here, {"a": (["echo", "one"], None), "b": (["cat"], "two\n")}, timeout=10)
    assert list(ran) == ["a", "b"]
    assert (ran["a"].returncode, ran["a"].stdout) == (0, "one\n")
    assert ran["b"].stdout == "two\n"
    assert first_failure(ran, "echoing") is None


def test_a_command_past_the_deadline_is_ended_and_named_while_the_others_answer():
    started = time.monotonic()
    ran = run_in_hosts(
        here, {"slow": (["sleep", "30"], None), "quick": (["echo", "done"], None)}, timeout=0.5
    )
    assert time.monotonic() - started < 10  # ended, not waited for
    assert ran["slow"].returncode != 0
    assert ran["quick"].stdout == "done\n"
    assert first_failure(ran, "the probe") == "the probe in slow failed: still running after 0.5 s: ended"
