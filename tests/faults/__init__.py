"""The fault checker: a Jepsen-style property test of reach's at-most-once promise.

Real reach processes (two workers on one database) send webhooks to real receivers while
the receivers and a nemesis inject faults at random, reproducibly from a seed. At the end
the checker compares what the receivers' own logs say happened with what the API says,
and reports every action that took effect twice, ended ``failed`` after it may have taken
effect, lost a receipt, or never finished. ``checker.run`` is the entry point, shared by
``test_fault_checker.py`` (the short CI run) and ``python -m tests.faults.checker`` (the
long run behind ``make faults``).
"""
