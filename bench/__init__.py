"""The benchmarks: scripts run as `python bench/<name>.py`; a package only so that lint-imports can hold them to commbench.benchkit."""
