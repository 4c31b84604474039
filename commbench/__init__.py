"""commbench: collective-communication benchmarks for PyTorch and Horovod."""

__version__ = "0.1.0"
