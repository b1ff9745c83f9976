"""The pure core that decides: from the spec, what a pass found and what the replicas say, the
objects to write (render), the facts and conditions and status (facts, conditions, status,
problems, events), and when the loop comes back (schedule). Nothing here does I/O: the clock and
every answer are inputs (tests/unit/test_loop.py checks the imports)."""
