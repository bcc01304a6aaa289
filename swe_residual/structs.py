"""The fast readers of the contract's files, derived from its pydantic models.

A report reads results lines, manifest.json and trajectories by the hundred thousand; a pydantic
object per value costs more than the analysis, so msgspec decodes them into plain structs. Those
structs are not written out by hand: `reader_struct` makes each from its model, with the model's
fields in its order, their types and defaults (a nested model becomes its own derived struct), so
a field added to a model is read too, and a value is accepted exactly where msgspec's strict
reading of the model's types accepts it. A file msgspec does not take as it is goes to the model
itself (its coercions, its errors): the readers say where.

Fields named in `raw` stay undecoded JSON (`msgspec.Raw`, default: the JSON of the model's
default): the results reader decodes and validates those once per distinct value
(report/columns.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import UnionType
from typing import Any, Literal, Union, cast, get_args, get_origin

import msgspec
from pydantic import BaseModel

_DERIVED: dict[tuple, type[msgspec.Struct]] = {}


def reader_struct(
    model: type[BaseModel],
    *,
    name: str | None = None,
    raw: tuple[str, ...] = (),
    namespace: dict[str, Any] | None = None,
) -> type[msgspec.Struct]:
    """The msgspec struct of `model` (kw_only, gc=False: values read hold no reference cycles);
    `name` defaults to the model's name + "View"; `namespace` adds methods and properties."""
    key = (model, name, raw)
    made = _DERIVED.get(key)
    if made is not None:
        return made
    fields: list[tuple[Any, ...]] = []
    for field_name, info in model.model_fields.items():
        if info.is_required():
            fields.append((field_name, _reader_type(info.annotation)))
            continue
        if field_name in raw:  # the JSON of the model's default
            empty = json.dumps(info.get_default(call_default_factory=True)).encode()
            fields.append((field_name, msgspec.Raw, msgspec.Raw(empty)))
            continue
        factory = cast(Callable[[], Any] | None, info.default_factory)
        default = info.default if factory is None else msgspec.field(default_factory=factory)
        fields.append((field_name, _reader_type(info.annotation), default))
    made = _DERIVED[key] = msgspec.defstruct(
        name or model.__name__ + "View",
        fields,
        kw_only=True,
        gc=False,
        module=model.__module__,
        namespace=namespace,
    )
    return made


def _reader_type(tp: Any) -> Any:
    """A model's field type with every nested model replaced by its derived struct."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return reader_struct(tp)
    origin = get_origin(tp)
    if origin is None or origin is Literal:
        return tp
    args = tuple(map(_reader_type, get_args(tp)))
    if origin in (Union, UnionType):
        return Union[args]  # noqa: UP007  (built from a tuple of types)
    return origin[args]
