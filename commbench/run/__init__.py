"""Running a sweep: configuration, launching ranks, the harness's timed loop, rank 0's sink of rows
(CSV, table, progress, history), and its safeguards."""
