"""datamask/options.py's list kinds, shown defaults and name rules, on small option classes: a
tuple field's flag takes one or more values, or zero or more where its default is empty; an
empty default shows as its `default_text` or none; `named_rules=False` leaves a field's value to
its owner's check."""

import argparse
import dataclasses
from pathlib import Path

import pytest

from datamask.errors import UserError
from datamask.options import REQUIRED, add_flags, given, option, validate


@dataclasses.dataclass(kw_only=True)
class Lists:
    inputs: tuple[Path, ...] = option(REQUIRED, "files, one or more")
    names: tuple[str, ...] = option((), "names, none or more")
    sizes: tuple[int, ...] = option((1, 2), "sizes, one or more", low=1)
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
