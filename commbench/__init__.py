"""commbench: collective-communication benchmarks for PyTorch and Horovod."""

import time

__version__ = "0.1.0"
# When this process began commbench's work (the `# time:` line's wall time starts here).
STARTED = time.time()
