"""A finished run (`Observed`) as JSON and back, so that it can be judged again later without training again.

`diagnose(observed, thresholds)` reads only an `Observed` (doctor/observed.py), so a run kept this way gives the
report the run itself would give under any thresholds. docs/examples/*.observed.json are such runs: `make docs`
renders the report texts shown in docs/doctor.md from them with the committed thresholds (doctor/doc_examples.py).

What round-trips exactly: every field of `Observed`, read back by its annotation (a mapping, a dataclass such as
the non-finite `Origin`, a tuple such as `val_start`); inside them the values a record column holds: numbers (NaN
and inf included: written as JSON's NaN and Infinity, which Python's json reads back), strings, booleans, None,
lists of them, with a tuple kept as a tuple. A value JSON cannot hold exactly is refused when writing
(`TypeError` naming where it is), never approximated.

Reading tolerates other versions of `Observed`, because a kept run outlives the code that wrote it: a field the
file holds that `Observed` (or a dataclass inside it) no longer has is ignored, and a field added since takes its
default. A field without a default (`measurements`, `steps`) that the file lacks is refused, naming it.
"""

import dataclasses
import numbers
import types
import typing
from collections.abc import Mapping
from types import MappingProxyType

from doctor.observed import Observed

TUPLE = "__tuple__"  # {"__tuple__": [...]}: JSON has lists only, and a tuple must come back a tuple


def _plain(value, where: str, field_level: bool = False):
    """`value` as JSON-ready values; a dataclass only where a field of one is (its annotation rebuilds it)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):  # numpy's integers too (not bool: taken above)
        return int(value)
    if isinstance(value, numbers.Real):  # float, and numpy's floats
        return float(value)
    if field_level and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), f"{where}.{f.name}", True) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return {TUPLE: [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]}
    if isinstance(value, list):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        if TUPLE in value:
            raise TypeError(f"{where}: the key {TUPLE!r} is this format's mark for a tuple; a mapping cannot hold it")
        return {key: _plain(item, f"{where}.{key}") for key, item in value.items()}
    raise TypeError(
        f"{where}: a {type(value).__name__} cannot be kept as JSON exactly; doctor/observed_io.py keeps numbers,"
        " strings, booleans, None, and lists, tuples and string-keyed mappings of them"
    )


def to_plain(observed: Observed) -> dict:
    """Every field of `observed` as JSON-ready values (json.dumps writes them; from_plain reads them back)."""
    return _plain(observed, "Observed", field_level=True)


def _values(plain):
    """Plain JSON values back to Python's: tuples where they were tuples, the rest as they are."""
    if isinstance(plain, list):
        return [_values(item) for item in plain]
    if isinstance(plain, dict):
        if set(plain) == {TUPLE}:
            return tuple(_values(item) for item in plain[TUPLE])
        return {key: _values(item) for key, item in plain.items()}
    return plain


def _typed(plain, annotation):
    """A plain value as the field annotated `annotation` holds it: a dataclass rebuilt, a mapping read-only."""
    if plain is None:
        return None
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = kinds[0] if len(kinds) == 1 else typing.Any  # `X | None`: an X; a wider union: as it is
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return _dataclass(annotation, plain)
    origin = typing.get_origin(annotation) or annotation
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return MappingProxyType(_values(plain))  # Observed's measurements: read-only, as Doctor.finish() makes them
    return _values(plain)


def _dataclass(kind: type, plain: Mapping):
    """An instance of the dataclass `kind` from its plain fields: unknown ones ignored, missing ones defaulted."""
    if not isinstance(plain, Mapping):
        raise ValueError(f"a {kind.__name__} is kept as a JSON object of its fields, not {type(plain).__name__}")
    hints = typing.get_type_hints(kind)
    known = [f for f in dataclasses.fields(kind) if f.init]
    required = [
        f.name
        for f in known
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in plain
    ]
    if required:
        raise ValueError(f"a kept {kind.__name__} lacks {', '.join(required)}, which it cannot do without")
    return kind(**{f.name: _typed(plain[f.name], hints[f.name]) for f in known if f.name in plain})


def from_plain(plain: Mapping) -> Observed:
    """The `Observed` that to_plain() wrote (by an older or newer doctor too: see the module's docstring)."""
    return _dataclass(Observed, plain)
