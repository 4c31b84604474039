"""Results: the CSV schema and its writer, the per-row sink, statistics, and reading runs back."""
