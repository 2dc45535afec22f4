"""Frozen value classes that cost next to nothing to define.

``@dataclass(frozen=True)`` writes the source of up to six methods for every
class and ``exec``s it: about 0.7 ms a class, which for the thirty value
classes on a plugin's start-up path was a sixth of every launch. A class
decorated with :func:`frozen` writes its own ``__init__`` (plain code, compiled
into the module's bytecode once, setting fields with :data:`set_field`) and
gets the rest from closures here:

- ``==`` between instances of the very same class, over the fields in order,
  and ``hash()`` over the same tuple, as a frozen dataclass has (a class that
  defines ``__eq__`` or ``__hash__`` itself keeps its own);
- the dataclass ``repr``, ``Name(field=value, ...)``;
- :class:`dataclasses.FrozenInstanceError` on assigning or deleting a field.

The class is still a dataclass, registered without generated methods, so
``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work as
before. What differs: ``__dataclass_params__`` reads ``frozen=False``, so a
``@dataclass(frozen=True)`` subclass of one of these is refused by
``dataclasses`` (subclass with ``@frozen`` instead, or compose).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Final, TypeVar, dataclass_transform

__all__ = ["frozen", "set_field"]

T = TypeVar("T")

#: How a frozen class's ``__init__`` sets a field, past its ``__setattr__``, as a
#: frozen dataclass's does. (Not through ``self.__dict__``: touching it turns
#: the instance's compact attribute storage into a dict, which makes every
#: later attribute read three times slower and each instance 60 bytes bigger.)
set_field: Final = object.__setattr__


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls``, which defines ``__init__``, a frozen dataclass without generated code."""
    if "__init__" not in cls.__dict__:
        raise TypeError(f"@frozen class {cls.__qualname__} must define __init__")
    dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    field_set = frozenset(names)

    def values(self: Any) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in names)

    # The tuple of field values, which a dataclass compares and hashes (attrgetter
    # builds it faster, but gives a bare value for a single name).
    key: Callable[[Any], Any] = attrgetter(*names) if len(names) > 1 else values

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(key(self) == key(other))
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(key(self))

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is cls or name in field_set:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in field_set:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    own = cls.__dict__
    if "__eq__" not in own:
        cls.__eq__ = __eq__  # type: ignore[method-assign]
    # Defining __eq__ in the class body sets __hash__ to None there: unhashable, as meant.
    if "__hash__" not in own:
        cls.__hash__ = __hash__  # type: ignore[method-assign]
    methods: tuple[Callable[..., Any], ...] = (
        __eq__,
        __hash__,
        __repr__,
        __setattr__,
        __delattr__,
    )
    for method in methods:
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    for method in methods[2:]:
        if method.__name__ not in own:
            setattr(cls, method.__name__, method)
    return cls
