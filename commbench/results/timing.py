"""The values of a row's `timer` column: which clock timed its samples.

They are CSV vocabulary, read back by the reader and the analyses, so they live here with the
schema; the timers that produce them are commbench/run/timers.py.
"""

from __future__ import annotations

PERF_COUNTER, CUDA_EVENT = "perf_counter", "cuda_event"
TIMERS = (PERF_COUNTER, CUDA_EVENT)
