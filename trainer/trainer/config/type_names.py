"""Type annotations as a person reads them, for error messages and the key reference."""

import types
import typing
from typing import Any, Literal, Union


def type_name(annotation: Any) -> str:
    """``Optional[list[int]]`` -> ``list[int] or null``, ``Literal["a", "b"]`` -> ``a|b``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "|".join(map(str, args))
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]" if args else origin.__name__
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
