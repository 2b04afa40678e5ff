"""Typed options: each setting is declared once, as a dataclass field made by `option`.

A selector's `Options` dataclass (the learner's is `LearnerConfig`) gives every setting its type,
default, help, choices and range; the command-line flags, their help with the default, and the
checks that refuse a bad value (a UserError naming the flag) are all generated from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import os
import types
import typing
from pathlib import Path

from .errors import UserError


# the default of a setting that has none: its flag is required, its field a keyword to give
REQUIRED = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Range:
    """The numbers a setting may take: from `low` to `high` (None: no bound on that side), each
    end included unless it is open."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False

    def holds(self, value) -> bool:
        low, high = self.low, self.high
        return ((low is None or (value > low if self.open_low else value >= low))
                and (high is None or (value < high if self.open_high else value <= high)))

    def __str__(self) -> str:
        """The range as a refusal states it: "at least 1", "in [0, 1)", ..."""
        low, high = self.low, self.high
        if high is None:
            return f"greater than {low:g}" if self.open_low else f"at least {low:g}"
        if low is None:
            return f"less than {high:g}" if self.open_high else f"at most {high:g}"
        if self.open_low and self.open_high:
            return f"strictly between {low:g} and {high:g}"
        opening, closing = "(" if self.open_low else "[", ")" if self.open_high else "]"
        return f"in {opening}{low:g}, {high:g}{closing}"


def option(default, help: str, *, choices: tuple | None = None, within: Range | None = None,
           default_text: str | None = None, metavar: str | None = None, flag: bool = True,
           named_rules: bool = True):
    """A dataclass field with what the CLI and the checks need: `within` bounds the value,
    `default_text` describes a None or empty default, `flag=False` keeps the field off the
    command line, `named_rules=False` exempts it from the rules of its name (`_check_named`)
    where its owner checks it its own way; a REQUIRED default makes the flag required. A tuple
    field's flag takes one or more values, or zero or more where its default is the empty
    tuple."""
    return dataclasses.field(default=default, metadata={
        "help": help, "choices": choices, "within": within, "default_text": default_text,
        "metavar": metavar, "flag": flag, "named_rules": named_rules})


def _kind(annotation) -> tuple[type, bool, bool]:
    """(scalar type, is a tuple of it, may be None) of a field's annotation."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        scalar, many, _ = _kind(inner[0])
        return scalar, many, True
    if typing.get_origin(annotation) is tuple:
        return args[0], True, False
    return annotation, False, False


def fields_of(cls) -> list[tuple[dataclasses.Field, tuple[type, bool, bool]]]:
    """The fields of `cls` made by `option` (a plain field, such as a stage's cluster settings,
    is its owner's to check), each with its kind."""
    hints = typing.get_type_hints(cls)
    return [(f, _kind(hints[f.name])) for f in dataclasses.fields(cls) if "help" in f.metadata]


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "text", bool: "true or false",
               Path: "a path"}


def _converted(value, scalar: type, flag: str):
    """The value as the field's type, or a UserError saying what the flag takes."""
    ok = {int: isinstance(value, numbers.Integral) and not isinstance(value, bool),
          float: isinstance(value, numbers.Real) and not isinstance(value, bool),
          str: isinstance(value, str), bool: isinstance(value, bool),
          Path: isinstance(value, (str, os.PathLike))}[scalar]
    if not ok:
        raise UserError(f"{flag} must be {_TYPE_WORDS[scalar]}, got {value!r}")
    return scalar(value)


# The largest seed numpy's and torch's generators both take (they refuse negatives, or wrap).
SEED_MAX = 2**63 - 1


def _check_named(name: str, value) -> None:
    """Rules that follow from a field's name, wherever it is declared (the learner, each
    baseline, a user's plugin): a `seed` seeds numpy and torch, a `device` is one torch has, a
    `term_scale` is a `TermScale`'s four numbers (means and spreads of quality and diversity)."""
    if name == "seed" and not 0 <= value <= SEED_MAX:
        raise UserError(f"--seed must be a whole number from 0 to 2^63 - 1, got {value}")
    if name == "term_scale" and not (len(value) == 4 and all(map(math.isfinite, value))
                                     and value[1] > 0 and value[3] > 0):
        raise UserError(f"term_scale must be 4 finite numbers, quality's mean and spread then "
                        f"diversity's, both spreads positive; got {list(value)}")
    if name == "device":
        from .shared import check_device  # torch, only where a device is declared

        check_device(value)


def check_value(field: dataclasses.Field, kind, value):
    """The value converted to the field's type, once its type, choices, range and the rules of
    its name (`_check_named`) are checked."""
    scalar, many, optional = kind
    flag, meta = f"--{field.name}", field.metadata
    if value is None and optional:
        return None
    if many:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise UserError(f"{flag} must be a list of {_TYPE_WORDS[scalar]}s, got {value!r}")
        values = tuple(_converted(v, scalar, flag) for v in value)
    else:
        values = (_converted(value, scalar, flag),)
    for v in values:
        if meta.get("choices") and v not in meta["choices"]:
            raise UserError(f"{flag} must be one of {', '.join(map(str, meta['choices']))}, "
                            f"got {v!r}")
        within = meta.get("within")
        if within is not None and not within.holds(v):
            what = f"{flag} values" if many else flag
            verb = "be" if str(within).startswith(("at", "greater", "less")) else "lie"
            raise UserError(f"{what} must {verb} {within}, got {list(value) if many else v}")
    value = values if many else values[0]
    if meta.get("named_rules", True):
        _check_named(field.name, value)
    return value


def check_field(cls, name: str, value):
    """One value checked by the rules of the field `name` of options class `cls`."""
    field, kind = next((f, k) for f, k in fields_of(cls) if f.name == name)
    return check_value(field, kind, value)


def validate(options) -> None:
    """Check every field of an options dataclass in place (types converted), then the rules
    between fields that the class states in `check_together`, if any."""
    for field, kind in fields_of(type(options)):
        setattr(options, field.name, check_value(field, kind, getattr(options, field.name)))
    together = getattr(options, "check_together", None)
    if together:
        together()


def build(cls, params: dict, owner: str):
    """An instance of options class `cls` from keyword values, validated; an unknown key is a
    UserError that names `owner` (the selector) and the options it takes."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - known)
    if unknown:
        takes = ", ".join(f"--{name}" for name in sorted(known)) or "no options"
        raise UserError(f"{owner} takes no {', '.join('--' + k for k in unknown)} "
                        f"(it takes {takes})")
    options = cls(**params)
    validate(options)
    return options


def shown_default(field: dataclasses.Field, value=dataclasses.MISSING) -> str:
    """The field's default as its help shows it (`value` where a command has its own)."""
    default = field.default if value is dataclasses.MISSING else value
    if default is None or (isinstance(default, (str, tuple)) and not default):
        return field.metadata.get("default_text") or "none"
    if isinstance(default, tuple):
        return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def flag_arguments(field: dataclasses.Field, kind) -> dict:
    """argparse keywords of one field's flag, default left out (SUPPRESS): a flag not given is
    absent from the parsed namespace, so the options class's own default applies."""
    scalar, many, _ = kind
    kwargs: dict = {"default": argparse.SUPPRESS}
    if scalar is bool:
        kwargs["action"] = "store_true"
    else:
        kwargs["type"] = scalar
        if many:
            kwargs["nargs"] = "*" if field.default == () else "+"
            kwargs["metavar"] = field.name.upper()
        if field.metadata.get("metavar"):
            kwargs["metavar"] = field.metadata["metavar"]
        if field.metadata.get("choices"):
            kwargs["choices"] = list(field.metadata["choices"])
    return kwargs


def add_flags(group, cls, skip: tuple = (), defaults: dict | None = None,
              only: tuple | None = None) -> None:
    """One flag per field of `cls` (those not in `skip`; with `only`, only those named, so that
    one class's flags can be spread over argument groups), help ending in the default.
    `defaults` replaces some: those flags count as given with that value, and their help shows
    it."""
    defaults = defaults or {}
    for field, kind in fields_of(cls):
        meta = field.metadata
        if not meta.get("flag", True) or field.name in skip:
            continue
        if only is not None and field.name not in only:
            continue
        arguments = flag_arguments(field, kind)
        if field.default is REQUIRED and field.default_factory is dataclasses.MISSING:
            arguments["required"] = True
            help_text = meta["help"].replace("%", "%%")
        else:
            shown = shown_default(field, defaults.get(field.name, dataclasses.MISSING))
            help_text = f"{meta['help']} (default: {shown})".replace("%", "%%")
        if field.name in defaults:
            arguments["default"] = defaults[field.name]
        group.add_argument(f"--{field.name}", help=help_text, **arguments)


def given(args: argparse.Namespace, cls, skip: tuple = ()) -> dict:
    """The values of the flags of `cls` that were given on the command line."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if f.name not in skip and hasattr(args, f.name)}
