"""A command's outputs planned together (commbench/results/outputs.py): no two at one path, none an
input, never the history, --overwrite only over commbench's own files, and the files this process
writes itself claimed against a second run; which files are commbench's (results/ownership.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.results.outputs import OutputPlan, RunOutputs
from commbench.results.ownership import HTML_GENERATOR, written_by_commbench
from commbench.results.schema import COLUMNS, RAW_COLUMNS


def _refusal(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as caught:
        call(*args, **kwargs)
    message = caught.value.format_message()
    assert "\n" not in message, message
    return message


def _default(tmp_path: Path):
    return lambda folder: (folder or tmp_path) / "run.csv"


def test_two_outputs_of_one_run_at_one_path_are_refused(tmp_path: Path) -> None:
    _, plan = RunOutputs(str(tmp_path / "a.csv"), False, raw=True, side_files=(".replay.csv",)).plan(_default(tmp_path))
    for same in ("a.csv", "a.env.json", "a.raw.csv", "a.replay.csv", "sub/../a.csv"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        message = _refusal(plan.add, tmp_path / same, "--json")
        assert "is also where the" in message and "one run writes each file once" in message
    assert plan.add(tmp_path / "a.json", "--json") == tmp_path / "a.json"
    assert not any(tmp_path.glob("a*"))  # planning writes nothing


def test_an_input_or_the_history_is_never_an_output_even_under_overwrite(tmp_path: Path) -> None:
    trace = tmp_path / "in.json"
    trace.write_text('{"written_by": "commbench 0.1.0"}')  # even a file commbench wrote
    history = tmp_path / "history.sqlite"
    outputs = RunOutputs(str(tmp_path / "x.csv"), True, inputs=(str(trace),), history=str(history))
    _, plan = outputs.plan(_default(tmp_path))
    assert "is one of this command's inputs" in _refusal(plan.add, trace, "--json")
    assert "is the results history" in _refusal(plan.add, history, "--json")
    assert "is one of this command's inputs" in _refusal(
        RunOutputs(str(trace), True, inputs=(str(trace),)).plan, _default(tmp_path)
    )
    assert trace.read_text() == '{"written_by": "commbench 0.1.0"}'


def test_a_link_is_never_followed_and_its_target_is_untouched(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# tracked\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "readme_link.csv").symlink_to(readme)
    message = _refusal(RunOutputs(str(tmp_path / "out" / "readme_link.csv"), True).plan, _default(tmp_path))
    assert "is a symbolic link" in message
    assert readme.read_text() == "# tracked\n" and not (tmp_path / "README.env.json").exists()


def test_a_claimed_file_refuses_a_second_run_and_an_unwritten_claim_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "replay.json"
    first = OutputPlan(overwrite=False)
    first.claim(first.add(target, "--json"))
    assert target.exists() and target.stat().st_size == 0
    assert "already exists" in _refusal(OutputPlan(overwrite=False).add, target, "--json")
    assert "being written by another commbench run" in _refusal(OutputPlan(overwrite=True).add, target, "--json")
    first.release()
    assert not target.exists()  # never written: the empty claim is gone

    written = OutputPlan(overwrite=False)
    with written.held():
        written.claim(written.add(target, "--json"))
        written.write(target, '{"written_by": "commbench 0.1.0"}\n')
    assert target.read_text() == '{"written_by": "commbench 0.1.0"}\n'


def test_what_commbench_wrote_is_told_from_the_first_bytes(tmp_path: Path) -> None:
    own = {
        "run.csv": ",".join(COLUMNS) + "\n",
        "run.raw.csv": ",".join(RAW_COLUMNS) + "\n1,2\n",
        "run.env.json": '{\n  "written_by": "commbench 0.1.0",\n  "format": 1}',
        "old.env.json": '{\n  "format": 1,\n  "run_id": "abc"}',  # written before the mark existed
        "report.html": f"<!doctype html><html><head><meta charset='utf-8'>{HTML_GENERATOR}<title>",
        "chart.png": b"\x89PNG\r\n\x1a\n....tEXtSoftware\x00commbench 0.1.0",
        "claim.json": "",
    }
    theirs = {
        "notes.csv": "op,size\nall_gather,8\n",
        "data.json": '{"format": "mine"}',
        "page.html": "<html>commbench</html>",
        "photo.png": b"\x89PNG\r\n\x1a\n....tEXtSoftware\x00Matplotlib",
        "README.md": "# commbench\n",
    }
    for files, expected in ((own, True), (theirs, False)):
        for name, content in files.items():
            path = tmp_path / name
            (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
            assert written_by_commbench(path) is expected, name
