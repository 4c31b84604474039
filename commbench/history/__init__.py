"""The results history: every run's rows and hosts in one database (SQLite, or a team's PostgreSQL),
filed as a sweep goes (recorder.py), imported from CSVs (importer.py) and queried (query.py)."""
