"""Results: the CSV schema and its writer, the timer vocabulary, statistics, and reading runs back.

The bottom layer: it imports only commbench.units and commbench.errors (pyproject.toml's import
contracts hold it there), so anything may read results without pulling in the sweep or a terminal.
"""
