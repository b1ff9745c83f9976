"""The pure core that decides: from the spec, what a pass found and what the replicas say, the
objects to write (the render package, a module per kind of object), the facts and conditions and
status (facts, conditions, status, problems, events), and when the loop comes back (schedule).
Nothing here does I/O or reads a file: the clock, every answer and the pods' code are inputs
(tests/unit/test_loop.py checks the imports)."""
