"""The one rule of every file a command writes (commbench/results/paths.py) and the results CSV's
writer (commbench/results/writer.py): never a device, a FIFO, a folder or a symbolic link, never an
input, an existing file only when asked and only commbench's own; whole files or none; one writer at
a time; a full disk said as such.

Run as root, as cluster users often are in containers. A FIFO and symbolic links in a temporary
folder stand for device nodes: no test touches /dev or a tracked file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.results import paths
from commbench.results.paths import check_target, output_path, refuse_busy, write_atomically
from commbench.results.writer import CsvAppender, DiskFull


def _refused(fragment: str, *args, **kwargs) -> str:
    with pytest.raises(UserError) as caught:
        check_target(*args, **kwargs)
    message = caught.value.format_message()
    assert fragment in message and "\n" not in message, message
    return message


def test_what_cannot_be_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "folder").mkdir()
    (tmp_path / "to-fifo.csv").symlink_to(fifo)
    (tmp_path / "to-folder.csv").symlink_to(tmp_path / "folder")
    (tmp_path / "dangling.csv").symlink_to(tmp_path / "nothing")
    for overwrite in (False, True):  # --overwrite changes none of these
        _refused("is a FIFO, not a regular file", fifo, overwrite)
        _refused("is a folder", tmp_path / "folder", overwrite)
        for link in ("to-fifo.csv", "to-folder.csv", "dangling.csv"):
            _refused("is a symbolic link: commbench writes through no link", tmp_path / link, overwrite)
        _refused("File name too long", tmp_path / ("x" * 300 + ".csv"), overwrite)
    assert fifo.is_fifo() and not (tmp_path / "nothing").exists()
    with pytest.raises(UserError, match="--output - is not supported"):
        output_path("-", lambda folder: tmp_path / "default.csv")


def test_an_existing_file_only_with_overwrite_only_commbenchs_and_never_an_input(tmp_path: Path) -> None:
    run = tmp_path / "run.csv"
    run.write_text("schema_version,run_id,timestamp\n2,abc,now\n")
    _refused("already exists; choose another --output or pass --overwrite", run, False)
    assert check_target(run, True) == run
    _refused("is one of this command's inputs", run, True, inputs=[run])
    precious = tmp_path / "notes.csv"
    precious.write_text("precious\n")
    _refused("was not written by commbench, and --overwrite replaces only commbench's own", precious, True)
    assert check_target(tmp_path / "new" / "a.csv", False) == tmp_path / "new" / "a.csv"
    assert not (tmp_path / "new" / "a.csv").exists()  # checked by creating it, then removed
    assert precious.read_text() == "precious\n"


def test_a_whole_file_or_none_and_a_link_replaced_never_written_through(tmp_path: Path, monkeypatch) -> None:
    good = tmp_path / "chart.png"
    good.write_bytes(b"old chart")
    link = tmp_path / "latest.png"
    link.symlink_to(good)
    write_atomically(link, b"new chart")  # a link put at a checked name since: the name is written
    assert not link.is_symlink() and link.read_bytes() == b"new chart" and good.read_bytes() == b"old chart"
    link.unlink()
    write_atomically(good, b"new chart")

    real_write = os.write

    def full_after_a_little(fd: int, data) -> int:
        if len(data) > 4:
            real_write(fd, bytes(data[:4]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(paths.os, "write", full_after_a_little)
    with pytest.raises(UserError, match=r"No space left on device \(.*chart.png is left as it was\)"):
        write_atomically(good, b"a chart the disk has no room for")
    assert good.read_bytes() == b"new chart"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.png"]  # no temporary left


def test_a_results_file_has_one_writer_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    first = CsvAppender(out, ("a", "b"), overwrite=False)
    first.write({"a": 1, "b": 2})
    with pytest.raises(UserError, match="being written by another commbench run"):
        refuse_busy(out)  # the launcher's check, before any rank starts
    with pytest.raises(UserError, match="being written by another commbench run"):
        CsvAppender(out, ("a", "b"), overwrite=True)  # rank 0's, should two start at once
    first.write({"a": 3, "b": 4})
    assert out.read_text() == "a,b\n1,2\n3,4\n"  # the second writer truncated nothing
    first.close()
    refuse_busy(out)
    second = CsvAppender(out, ("a", "b"), overwrite=True)
    second.close()
    assert out.read_text() == "a,b\n"


def test_a_full_disk_keeps_the_rows_written_and_says_so(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run.csv"
    writer = CsvAppender(out, ("a", "b"), overwrite=False)
    writer.write({"a": 1, "b": 2})
    real_write = os.write

    def full(fd: int, data) -> int:
        real_write(fd, bytes(data[:3]))  # part of the row, then no room
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("commbench.results.writer.os.write", full)
    with pytest.raises(DiskFull) as caught:
        writer.write({"a": 333333, "b": 444444})
    assert "the disk is full; it keeps the 1 row written before" in caught.value.format_message()
    writer.close()
    assert out.read_text() == "a,b\n1,2\n"  # whole lines only: the cut row is taken back


def test_ranks_checking_one_target_at_once_do_not_refuse_each_other(tmp_path: Path, monkeypatch) -> None:
    """The ranks of one job check the same targets at once, each creating and removing the name to be
    sure it can: a name seen as a file that is gone by the next look, or made by a peer between the
    look and the probe, is no reason to refuse (it was: "permission denied", and the job stopped)."""
    target = tmp_path / "verdict.json"
    real_kind = paths.target_kind
    seen = lambda path, flag, **kw: "file" if Path(path) == target else real_kind(path, flag, **kw)  # noqa: E731
    monkeypatch.setattr(paths, "target_kind", seen)  # a peer's probe of the name, seen, then gone
    assert check_target(target, overwrite=True, flag="--json") == target and not target.exists()
    monkeypatch.setattr(paths, "target_kind", real_kind)
    real_open = os.open

    def peer_made_it(path, flags, mode=0o777):
        if Path(path) == target:
            raise FileExistsError(errno.EEXIST, "File exists")
        return real_open(path, flags, mode)

    monkeypatch.setattr(paths.os, "open", peer_made_it)
    assert check_target(target, overwrite=True, flag="--json") == target
    assert "already exists" in _refused("already exists", target, overwrite=False, flag="--json")
