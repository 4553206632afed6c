"""Course labs: each a folder of data under `labs/` (a handout, a starter,
a solution, the checks) and the checker that judges a student's files by
what their runs measured."""
