"""--tensors, --bucket-cap-mb, --message-size and --variant: parsing, and one-line errors through the CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.errors import UserError
from commbench.ops.bucketed_reduce_scatter import BUCKET_CAP_MB
from commbench.units import format_count, parse_count, parse_tensors
from tests.support.errors import assert_sweep_refuses


def test_tensors_expand_in_order():
    assert parse_tensors("2x4K,1M,3") == (4096, 4096, 1 << 20, 3)
    assert parse_tensors("1,256,256") == (1, 256, 256)
    assert parse_tensors(" 2 X 3 , 1e3 ") == (3, 3, 1000)


@pytest.mark.parametrize("text", ["", "4K,", "x4K", "64x", "4Q", "-1", "1.5K", "2x-3", "0", "0x4K", "4K,0"])
def test_bad_tensors_are_refused(text):
    with pytest.raises(UserError):
        parse_tensors(text)


@pytest.mark.parametrize("n", [1, 300, 4096, 3 << 20, 10**7, 25 * 10**6, 1000, 1 << 30])
def test_counts_round_trip(n):
    assert parse_count(format_count(n), "x") == n


def test_caps():
    assert BUCKET_CAP_MB.parse("1,5,25,0.5,0,5") == (1.0, 5.0, 25.0, 0.5, 0.0)
    for bad in ("lots", "1,,x", "-1", "nan", "inf", ""):
        with pytest.raises(UserError):
            BUCKET_CAP_MB.parse(bad)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--op", "bucketed_reduce_scatter", "--tensors", "64x4K,8x"], ["malformed", "--tensors", "64x4K"]),
        (["--op", "grouped_all_gather", "--tensors", "1,abc"], ["malformed", "'abc'"]),
        (["--tensors", "0x4K"], ["'0x4K'", "must be positive"]),  # every op: checked before spawning
        (["--op", "bucketed_all_reduce", "--tensors", "4K,-2"], ["malformed --tensors entry '-2'"]),
        (["--op", "bucketed_all_reduce", "--tensors", "0"], ["'0'", "must be positive"]),
        (
            ["--op", "grouped_all_gather", "--variant", "concat,bogus"],
            ["unknown variant 'bogus'", "separate", "concat"],
        ),
        (["--variant", "bucketed_7MB"], ["unknown variant 'bucketed_7MB'", "bucketed_25MB"]),
        (["--op", "bucketed_reduce_scatter", "--bucket-cap-mb", "25,big"], ["'big' is not a number"]),
        (["--op", "bucketed_reduce_scatter", "--bucket-cap-mb", "-5"], [">= 0"]),
        (["--op", "bucketed_all_reduce", "--message-size", "1e7,0"], ["--message-size", "must be positive"]),
        (["--op", "bucketed_all_reduce", "--message-size", "many"], ["malformed --message-size"]),
    ],
)
def test_bad_op_options_are_one_line_errors(args, fragments):
    assert_sweep_refuses(args, *fragments)


def test_list_states_s_for_every_new_op():
    out = CliRunner().invoke(main, ["list"]).output
    for name in ("grouped_all_gather", "bucketed_reduce_scatter", "all_reduce", "bucketed_all_reduce"):
        assert f"  {name} " in out
    assert "S = total gathered bytes over the K tensors" in out


def test_each_option_is_typed_and_its_default_shown_once_by_click():
    """The help text states no default itself: click shows the option's own, which parses back to it."""
    from commbench.ops import op_options

    help_text = " ".join(CliRunner().invoke(main, ["sweep", "--help"]).output.split())
    for option in op_options():
        assert "default" not in option.help.replace("(default:", ""), option.flag  # per-op defaults only
        if option.default is not None:
            assert option.parse(option.default_text) == option.default
            assert help_text.count(f"[default: {option.default_text}]") >= 1, option.flag
            # As a rank receives it: JSON turned the tuple into a list.
            assert option.value(list(option.default) if isinstance(option.default, tuple) else option.default) == (
                option.default
            )
