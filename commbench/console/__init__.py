"""What a sweep prints to the terminal: the table of rows as they are measured (table.py), and the
progress line or bar with its relay from a spawned rank 0 to the launcher (display.py).

It formats what it is given and reads no results, so the sweep's code (commbench/run) draws through
it and the results package below stays free of terminal code.
"""
