"""Frozen value classes that cost next to nothing to define.

``@dataclass(frozen=True)`` writes the source of up to six methods for every
class and ``exec``s it: about 0.7 ms a class, which for the thirty value
classes on a plugin's start-up path was a sixth of every launch. A class
decorated with :func:`frozen` is the same frozen dataclass, with its methods
made without ``exec``:

- ``__init__``: a class that only stores its arguments gets one made from its
  fields. It is a copy of plain code compiled into this module (one template
  per number of fields) with the field names put in, so it runs exactly as a
  hand-written one and costs a few microseconds per class. A class that
  converts or checks its arguments writes its own ``__init__`` and sets each
  field with :data:`set_field`;
- ``==`` between instances of the very same class over the fields that take
  part in comparisons, and ``hash()`` over those that take part in hashing,
  as a frozen dataclass has. A class that defines ``__eq__`` itself keeps it,
  and still gets the fields' hash unless it defines ``__hash__`` as well,
  again as a frozen dataclass does;
- the dataclass ``repr``, ``Name(field=value, ...)``, of the fields shown in it;
- :class:`dataclasses.FrozenInstanceError` on assigning or deleting a field.

``field(compare=False)``, ``field(hash=...)`` and ``field(repr=False)`` mean
what they mean to a dataclass. What a frozen dataclass would do but this does
not is refused with a TypeError when the class is defined, never ignored:
``field(init=False)``, keyword-only fields, ``__post_init__``, and a made
``__init__`` for a field with a ``default_factory`` or for more fields than
there are templates (write ``__init__`` for those).

The class is still a dataclass, registered without generated methods, so
``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work as
before. What differs: ``__dataclass_params__`` reads ``frozen=False``, so a
``@dataclass(frozen=True)`` subclass of one of these is refused by
``dataclasses`` (subclass with ``@frozen`` instead, or compose).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Final, TypeVar, dataclass_transform

__all__ = ["frozen", "set_field"]

T = TypeVar("T")

#: How a frozen class's ``__init__`` sets a field, past its ``__setattr__``, as a
#: frozen dataclass's does. (Not through ``self.__dict__``: touching it turns
#: the instance's compact attribute storage into a dict, which makes every
#: later attribute read three times slower and each instance 60 bytes bigger.)
set_field: Final = object.__setattr__
_set = set_field


# The templates of made __init__s: parameter aN stores into field "fN". Only
# their code is used, with the class's field names in place of both.
def _init1(self: Any, a0: Any) -> None:
    _set(self, "f0", a0)


def _init2(self: Any, a0: Any, a1: Any) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)


def _init3(self: Any, a0: Any, a1: Any, a2: Any) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)
    _set(self, "f2", a2)


def _init4(self: Any, a0: Any, a1: Any, a2: Any, a3: Any) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)
    _set(self, "f2", a2)
    _set(self, "f3", a3)


def _init5(self: Any, a0: Any, a1: Any, a2: Any, a3: Any, a4: Any) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)
    _set(self, "f2", a2)
    _set(self, "f3", a3)
    _set(self, "f4", a4)


def _init6(self: Any, a0: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)
    _set(self, "f2", a2)
    _set(self, "f3", a3)
    _set(self, "f4", a4)
    _set(self, "f5", a5)


def _init7(self: Any, a0: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, a6: Any) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)
    _set(self, "f2", a2)
    _set(self, "f3", a3)
    _set(self, "f4", a4)
    _set(self, "f5", a5)
    _set(self, "f6", a6)


def _init8(
    self: Any, a0: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, a6: Any, a7: Any
) -> None:
    _set(self, "f0", a0)
    _set(self, "f1", a1)
    _set(self, "f2", a2)
    _set(self, "f3", a3)
    _set(self, "f4", a4)
    _set(self, "f5", a5)
    _set(self, "f6", a6)
    _set(self, "f7", a7)


def _placeholders(code: types.CodeType) -> tuple[int | None, ...]:
    """For each constant of a template: the index of the field it names, or None."""
    return tuple(
        int(c[1:]) if type(c) is str and c[:1] == "f" and c[1:].isdigit() else None
        for c in code.co_consts
    )


#: Each template's code and the field index of each of its constants, by arity.
_TEMPLATES: Final = tuple(
    (t.__code__, _placeholders(t.__code__))
    for t in (_init1, _init2, _init3, _init4, _init5, _init6, _init7, _init8)
)


def _refuse(cls: type, problem: str) -> TypeError:
    return TypeError(f"@frozen class {cls.__qualname__}: {problem}")


def _made_init(cls: type, fields: Sequence[dataclasses.Field[Any]]) -> Callable[..., None]:
    """``__init__(self, <field>, ...)`` storing each argument in its field."""
    if not fields or len(fields) > len(_TEMPLATES):
        raise _refuse(cls, f"has {len(fields)} fields; write its __init__")
    defaults: list[object] = []
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            raise _refuse(cls, f"field {f.name!r} has a default_factory; write its __init__")
        if f.default is not dataclasses.MISSING:
            defaults.append(f.default)
        elif defaults:
            raise _refuse(cls, f"field {f.name!r} without a default follows one with a default")
    names = tuple(f.name for f in fields)
    template, placeholders = _TEMPLATES[len(names) - 1]
    qualname = f"{cls.__qualname__}.__init__"
    code = template.replace(
        co_varnames=("self", *names),
        co_consts=tuple(
            c if i is None else names[i]
            for c, i in zip(template.co_consts, placeholders, strict=True)
        ),
        co_name="__init__",
        co_qualname=qualname,
    )
    init = types.FunctionType(code, globals(), "__init__", tuple(defaults) or None)
    init.__qualname__ = qualname
    init.__module__ = cls.__module__
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    return init


def _key(names: tuple[str, ...]) -> Callable[[Any], Any]:
    """The tuple of these fields' values (attrgetter, but a tuple for one name too)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        (name,) = names
        return lambda self: (getattr(self, name),)
    return lambda self: ()


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass without generated code (see the module doc)."""
    own = cls.__dict__
    if "__post_init__" in own:
        raise _refuse(cls, "__post_init__ is not supported; convert in __init__")
    dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    compared: list[str] = []
    hashed: list[str] = []
    shown: list[str] = []
    for f in fields:
        if not f.init:
            raise _refuse(cls, f"field {f.name!r}: init=False is not supported")
        if f.kw_only is True:
            raise _refuse(cls, f"field {f.name!r}: keyword-only fields are not supported")
        if f.compare:
            compared.append(f.name)
        if f.compare if f.hash is None else f.hash:
            hashed.append(f.name)
        if f.repr:
            shown.append(f.name)
    field_set = frozenset(f.name for f in fields)
    eq_key = _key(tuple(compared))
    hash_key = eq_key if hashed == compared else _key(tuple(hashed))

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(eq_key(self) == eq_key(other))
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hash_key(self))

    def __repr__(self: Any) -> str:
        text = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({text})"

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is cls or name in field_set:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in field_set:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    methods: dict[str, Callable[..., Any]] = {
        "__repr__": __repr__,
        "__setattr__": __setattr__,
        "__delattr__": __delattr__,
    }
    if "__init__" not in own:
        methods["__init__"] = _made_init(cls, fields)
    if "__eq__" not in own:
        methods["__eq__"] = __eq__
    # A class body that defines __eq__ gets __hash__ = None from Python; a frozen
    # dataclass then hashes the fields all the same, and only a __hash__ the class
    # wrote itself is kept (an explicit None beside __eq__ cannot be told apart).
    if own.get("__hash__") is None and ("__eq__" in own or "__hash__" not in own):
        methods["__hash__"] = __hash__
    for name, method in methods.items():
        if name in own and name != "__hash__":
            continue
        if name != "__init__":
            method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    return cls
