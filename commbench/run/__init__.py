"""Running a sweep: configuration, launching ranks, the harness's timed loop, and its safeguards."""
