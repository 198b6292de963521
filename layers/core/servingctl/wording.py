"""Validation errors in plain words, shared by the REST API and the CLI so both say the same thing.

pydantic's messages ("Input should be greater than or equal to 5", "Value error, ...") are
framework wording; people get "must be at least 5", "must be one of burst, sustained, rate".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "less_than_equal": ("le", "at most"),
    "greater_than": ("gt", "greater than"),
    "less_than": ("lt", "less than"),
}
_KINDS = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "list_type": "must be a list",
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "json_invalid": "is not valid JSON",
}


def words(choices: Iterable[Any]) -> str:
    """'a, b or c' (allowed values said as a person would)."""
    items = [str(c) for c in choices]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def plain(error: Mapping[str, Any]) -> str:
    """One pydantic error's message in plain words (without its location)."""
    kind, ctx = str(error.get("type", "")), error.get("ctx") or {}
    if kind in _BOUNDS:
        key, text = _BOUNDS[kind]
        bound = ctx.get(key)
        return f"must be {text} {bound:g}" if isinstance(bound, float) else f"must be {text} {bound}"
    if kind == "literal_error" and "expected" in ctx:
        return "must be one of " + str(ctx["expected"]).replace("'", "")
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} items"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    if kind in _KINDS:
        return _KINDS[kind]
    return str(error.get("msg", kind)).removeprefix("Value error, ").removeprefix("Assertion failed, ")


def problems(
    errors: Iterable[Mapping[str, Any]], skip: Sequence[str] = ("body", "query", "path", "header")
) -> list[tuple[str, str]]:
    """(field, message) per error; field is the dotted location without the leading `skip` parts
    ('' for a rule about the whole input)."""
    out = []
    for error in errors:
        loc = [str(p) for p in error.get("loc", ())]
        if loc and loc[0] in skip:
            loc = loc[1:]
        out.append((".".join(loc), plain(error)))
    return out


def for_flags(errors: Iterable[Mapping[str, Any]], flags: Mapping[str, str]) -> str:
    """Validation errors of a command's input, each named by the flag a person typed.

    flags maps model fields to flags. A rule over the whole input says its fields itself
    ("rate: required when mode is rate", "requests or duration_s: ..."): they are named too.
    """
    errors = list(errors)
    parts = []
    for error, (field, text) in zip(errors, problems(errors), strict=False):
        # Plain words read on from the flag ("--lease must be at least 5"); a rule's own text after a colon.
        sep = ": " if error.get("type") in ("value_error", "assertion_error") else " "
        if not field and ": " in text:
            field, text = text.split(": ", 1)
        names = [
            flags.get(name.strip().split(".")[0], name.strip()) for name in field.replace(" or ", ",").split(",") if name.strip()
        ]
        for name, flag in flags.items():
            if "_" in name:  # field names a person never typed, inside the text
                text = text.replace(name, flag)
        parts.append(f"{' or '.join(names)}{sep}{text}" if names else text)
    return "; ".join(parts)


def port_number(text: str) -> int:
    """A TCP port typed on a command line, 0 to 65535 (0: the OS picks a free one); argparse's type."""
    import argparse  # only the command lines use this

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: must be a whole number from 0 to 65535") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: must be from 0 to 65535 (0 picks a free one)")
    return value
