"""The SyncBN table: the mean per phase and strategy, and each strategy's speedup over Horovod's."""

from __future__ import annotations


def test_speedup_table_divides_horovod_time_by_each_strategy_time():
    import pandas as pd

    from commbench.analysis.syncbn_table import format_table

    rows = [
        ("forward", 32, "horovod", 200.0),
        ("forward", 32, "torch", 100.0),
        ("forward", 32, "apex", 400.0),
        ("backward", 32, "horovod", 90.0),
        ("backward", 32, "torch", 30.0),
        ("backward", 32, "apex", 45.0),
    ]
    frame = pd.DataFrame(
        [
            {
                "op": "sync_bn",
                "status": "ok",
                "phase": p,
                "count": c,
                "variant": v,
                "time_us_mean": t,
                "time_us_p50": t * 0.9,  # beside the headline, as every measured row has it
                "run": "r",
                "backend": "gloo",
                "world_size": 2,
                "dtype": "float32",
                "mode": "blocking",
            }
            for p, c, v, t in rows
        ]
    )
    lines = format_table(frame).splitlines()
    assert lines[0].startswith("# sync_bn on 2 gloo ranks") and lines[1] == "# mean time per phase (µs)"
    assert lines[2].split()[1:] == ["phase", "C", "torch", "apex", "horovod"]  # strategy order, not alphabetical
    assert lines[3].split() == ["forward", "32", "100", "400", "200"]
    assert lines[4].split() == ["backward", "32", "30", "45", "90"]
    assert "speedup over horovod" in lines[5]
    # No rounds and no interval in these rows: the ratio alone, and no verdict can be called.
    assert lines[7].split() == ["forward", "32", "2x", "0.5x"]
    assert lines[8].split() == ["backward", "32", "3x", "2x"]
    assert "no interval" in lines[10]
