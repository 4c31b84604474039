"""How Horovod ranks start: detected under horovodrun, or spawned by commbench on loopback.

`commbench sweep --backend horovod --nproc N` does what `horovodrun -np N --gloo` does on one
host, without its per-line output prefixes: it serves Horovod's Gloo rendezvous (an HTTP key-value
store) on 127.0.0.1, gives each rank the HOROVOD_* slot variables, and hands the ranks to
commbench's own spawner (which the launcher passes in: the horovod BackendInfo names this module's
spawn_horovod), so failures, timeouts and Ctrl-C behave as for the other backends.

Nothing here imports torch or horovod.torch; only the spawn path imports horovod's runner.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from commbench.errors import UserError

if TYPE_CHECKING:
    from commbench.backends import Spawn
    from commbench.run.config import SweepConfig


def spawn_horovod(cfg: SweepConfig, nproc: int, spawn: Spawn) -> int:
    """Serve the Gloo rendezvous on loopback and spawn nproc Horovod ranks with `spawn` (commbench's
    spawner, handed in by the launcher, so this module does not import it); returns the exit code."""
    try:
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer
    except ImportError as exc:
        raise UserError(
            f"the horovod backend needs Horovod ({exc}); install it with `bash scripts/install-horovod.sh`"
        ) from None
    slots = get_host_assignments(parse_hosts(f"localhost:{nproc}"), nproc)
    # Bound to 127.0.0.1 (horovodrun binds every interface): a local sweep opens nothing outside.
    server = RendezvousHTTPServer(("127.0.0.1", 0), RendezvousHandler, 0)
    server.init(slots)
    thread = threading.Thread(target=server.serve_forever, name="horovod-rendezvous", daemon=True)
    thread.start()
    common = {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.server_address[1]),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": "lo",
        # One intra-op thread unless the user chose: spinning OpenMP workers starve Horovod's
        # background thread (docs/horovod.md); the backend applies the same rule under horovodrun.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }

    def rank_env(rank: int) -> dict[str, str]:
        s = slots[rank]
        return {
            **common,
            "HOROVOD_HOSTNAME": s.hostname,
            "HOROVOD_RANK": str(s.rank),
            "HOROVOD_SIZE": str(s.size),
            "HOROVOD_LOCAL_RANK": str(s.local_rank),
            "HOROVOD_LOCAL_SIZE": str(s.local_size),
            "HOROVOD_CROSS_RANK": str(s.cross_rank),
            "HOROVOD_CROSS_SIZE": str(s.cross_size),
        }

    try:
        return spawn(cfg, nproc, rank_env=rank_env)
    finally:
        server.shutdown()
        thread.join(timeout=5)
