"""datamask/options.py's list kinds, shown defaults and name rules, on small option classes: a
tuple field's flag takes one or more values, or zero or more where its default is empty; an
empty default shows as its `default_text` or none; a `Range` bounds a number and states itself in
the refusal; `named_rules=False` leaves a field's value to its owner's check."""

import argparse
import dataclasses
from pathlib import Path

import pytest

from datamask.errors import UserError
from datamask.options import REQUIRED, Range, add_flags, given, option, validate


@dataclasses.dataclass(kw_only=True)
class Lists:
    inputs: tuple[Path, ...] = option(REQUIRED, "files, one or more")
    names: tuple[str, ...] = option((), "names, none or more")
    sizes: tuple[int, ...] = option((1, 2), "sizes, one or more", within=Range(1))
    prefix: str = option("", "text before each name")
    label: str = option("", "the label", default_text="the file's name")

    def __post_init__(self):
        validate(self)


def parser_of(cls) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_flags(parser, cls)
    return parser


def parsed(cls, argv: list[str]):
    return cls(**given(parser_of(cls).parse_args(argv), cls))


def test_a_list_with_an_empty_default_takes_zero_or_more_values_and_others_one_or_more():
    actions = {a.dest: a for a in parser_of(Lists)._actions}
    assert (actions["inputs"].nargs, actions["names"].nargs, actions["sizes"].nargs) == \
        ("+", "*", "+")
    assert parsed(Lists, ["--inputs", "a"]).names == ()
    assert parsed(Lists, ["--inputs", "a", "--names"]).names == ()
    assert parsed(Lists, ["--inputs", "a", "--names", "x", "y"]).names == ("x", "y")
    assert parsed(Lists, ["--inputs", "a", "b"]).inputs == (Path("a"), Path("b"))
    for argv in (["--inputs"], ["--inputs", "a", "--sizes"]):
        with pytest.raises(argparse.ArgumentError, match="expected at least one argument"):
            parser_of(Lists).parse_args(argv)


def test_an_empty_default_is_shown_as_its_text_or_none():
    text = parser_of(Lists).format_help()
    assert "none or more (default: none)" in text
    assert "text before each name (default: none)" in text
    assert "the label (default: the file's name)" in text
    assert "one or more (default: 1 2)" in text


def test_a_list_value_out_of_range_is_refused_naming_the_flag():
    with pytest.raises(UserError, match=r"--sizes values must be at least 1, got \[0, 2\]"):
        Lists(inputs=["a"], sizes=[0, 2])
    with pytest.raises(UserError, match="--names must be a list of texts"):
        Lists(inputs=["a"], names="x")


@pytest.mark.parametrize("bounds,text", [
    (Range(1), "at least 1"), (Range(0.0, open_low=True), "greater than 0"),
    (Range(high=1.0), "at most 1"), (Range(high=1.0, open_high=True), "less than 1"),
    (Range(0.0, 1.0), "in [0, 1]"), (Range(0.0, 1.0, open_high=True), "in [0, 1)"),
    (Range(0.0, 1.0, open_low=True), "in (0, 1]"),
    (Range(0.0, 1.0, open_low=True, open_high=True), "strictly between 0 and 1")])
def test_a_range_holds_its_ends_unless_open_and_states_itself(bounds, text):
    assert str(bounds) == text
    for end, is_open in ((bounds.low, bounds.open_low), (bounds.high, bounds.open_high)):
        if end is not None:
            assert bounds.holds(end) is not is_open
    outside = bounds.high + 1 if bounds.high is not None else bounds.low - 1
    assert not bounds.holds(outside)


@dataclasses.dataclass(kw_only=True)
class Share:
    share: float = option(0.5, "a share", within=Range(0.0, 1.0, open_high=True))

    def __post_init__(self):
        validate(self)


def test_a_value_out_of_its_range_is_refused_naming_the_flag_and_the_range():
    with pytest.raises(UserError, match=r"^--share must lie in \[0, 1\), got 1.0$"):
        Share(share=1.0)
    assert Share(share=0.0).share == 0.0


@dataclasses.dataclass(kw_only=True)
class Devices:
    device: str = option("cpu", "checked by its name")

    def __post_init__(self):
        validate(self)


@dataclasses.dataclass(kw_only=True)
class OwnDevice:
    device: str = option("cpu", "checked by its owner", named_rules=False)

    def __post_init__(self):
        validate(self)


def test_named_rules_false_leaves_the_value_to_its_owner():
    with pytest.raises(UserError, match="--device must be auto, cpu, cuda or cuda:N, got 'mps'"):
        Devices(device="mps")
    assert OwnDevice(device="mps").device == "mps"
    with pytest.raises(UserError, match="--device must be text"):
        OwnDevice(device=0)  # its type is still checked
