"""``@frozen`` value classes behave as the ``@dataclass(frozen=True)`` classes they replaced.

Each class is checked against a real frozen dataclass with the same fields,
built here from ``dataclasses.fields``: the same repr, equality and hash, the
same refusal to assign or delete, and ``dataclasses.replace``/``asdict`` still
working. The classes that hold mappings were never hashable (their generated
``__hash__`` failed on the mapping) and must stay so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import pickle
import re
import textwrap
from collections.abc import Mapping
from dataclasses import field
from typing import Any

import pytest

from nomad_device.frozen import frozen, set_field
from nomad_device.goplugin.handshake import HandshakeConfig, HandshakeLine
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.goplugin.server import ServeConfig
from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceSpec,
    DeviceStats,
    Mount,
    PluginInfo,
    Reservation,
    StatObject,
    StatValue,
)
from nomad_device.plugins.example.plugin import Listing
from nomad_device.wire import hclspec

WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
ATTR = hclspec.Attr("dir", "string")
LIT = hclspec.Literal('"."')

# One instance of every replaced class; the second field of each is changed below.
SAMPLES: list[Any] = [
    Attribute(4, "GiB"),
    Device("d1", False, "broken", "0000:01:00.0"),
    Mount("/t", "/h", True),
    DeviceSpec("/dev/t", "/dev/h", "rwm"),
    StatValue(int_numerator=3, int_denominator=4, unit="B", desc="used"),
    DeviceStats(
        StatValue(float_numerator=1.5), StatObject({"a": StatValue(bool_value=True)}), WHEN
    ),
    PluginInfo("p", "1.0.0", ("v0.1.0",), 3),
    HandshakeConfig(2, "KEY", "value"),
    HandshakeLine(2, "unix", "/tmp/x.sock", "grpc", "", 1, True),
    ServeConfig(HandshakeConfig(2, "KEY", "value"), {}, "unix", 5, None, (("a", 1),)),
    HclogEntry("info", "hello", WHEN, "mod", {"k": 1}, False),
    Listing((("d1", True, ""),), "ok", "", ("p",)),
    hclspec.Array([ATTR, LIT]),
    ATTR,
    hclspec.Block("b", ATTR, True),
    hclspec.BlockAttrs("labels", "string", True),
    hclspec.BlockList("l", ATTR, 1, 2),
    hclspec.BlockSet("s", ATTR, 1, 2),
    hclspec.BlockMap("m", ("name",), ATTR),
    LIT,
    hclspec.Default(ATTR, LIT),
    hclspec.Object({"dir": hclspec.Default(ATTR, LIT)}),
]
UNHASHABLE: list[Any] = [
    DeviceGroup("v", "t", "n", (Device("d"),), {"a": Attribute(1)}),
    Reservation({"A": "1"}, (Mount("/t", "/h"),), (DeviceSpec("/d", "/d"),)),
    StatObject({"a": StatValue(int_numerator=1)}, {"n": StatObject()}),
    DeviceGroupStats("v", "t", "n", {"d": DeviceStats(timestamp=WHEN)}),
]


def _ids(values: list[Any]) -> list[str]:
    return [type(v).__name__ for v in values]


def _outcome(fn: Any, *args: Any) -> object:
    """What ``fn(*args)`` returns, or the type of what it raises."""
    try:
        return fn(*args)
    except Exception as exc:
        return type(exc)


def _reference(value: Any) -> Any:
    """A real frozen dataclass with ``value``'s fields, holding ``value``'s values.

    A class that defined its own ``__hash__`` (hclspec.Object) keeps it.
    """
    cls = type(value)
    own_hash = {"__hash__": cls.__hash__} if cls in (hclspec.Object,) else {}
    ref = dataclasses.make_dataclass(
        cls.__name__,
        [(f.name, f.type) for f in dataclasses.fields(cls)],
        frozen=True,
        namespace=own_hash,
    )
    ref.__qualname__ = cls.__qualname__
    return ref(**{f.name: getattr(value, f.name) for f in dataclasses.fields(cls)})


def _changed(value: Any) -> Any:
    """``value`` with its second field (or its only one) replaced by another value."""
    fields = dataclasses.fields(value)
    f = fields[1] if len(fields) > 1 else fields[0]
    old = getattr(value, f.name)
    new: object
    if isinstance(old, bool):
        new = not old
    elif isinstance(old, int):
        new = old + 1
    elif isinstance(old, str):
        new = old + "x"
    elif isinstance(old, Mapping):
        new = {**old, "other": next(iter(old.values()), None)}
    elif isinstance(old, tuple):
        new = (*old, old[-1])
    elif old is None:
        new = "x"
    else:
        new = hclspec.Literal('"other"')
    return dataclasses.replace(value, **{f.name: new})


@pytest.mark.parametrize("value", SAMPLES, ids=_ids(SAMPLES))
def test_behaves_as_the_frozen_dataclass_it_replaced(value: Any) -> None:
    ref = _reference(value)
    assert repr(value) == repr(ref)
    # The same hash, or the same TypeError when a field holds a mapping.
    assert _outcome(hash, value) == _outcome(hash, ref)
    # Equal to a copy, not to the reference (another class), unequal once changed.
    copy = dataclasses.replace(value)
    assert copy == value and copy is not value
    assert _outcome(hash, copy) == _outcome(hash, value)
    assert value.__eq__(ref) is NotImplemented
    assert value != ref
    changed = _changed(value)
    assert type(changed) is type(value)
    assert changed != value
    assert value != object()
    assert _outcome(dataclasses.asdict, value) == _outcome(dataclasses.asdict, ref)
    assert type(value).__match_args__ == type(ref).__match_args__


@pytest.mark.parametrize("value", SAMPLES + UNHASHABLE, ids=_ids(SAMPLES + UNHASHABLE))
def test_fields_can_be_neither_assigned_nor_deleted(value: Any) -> None:
    name = dataclasses.fields(value)[0].name
    before = getattr(value, name)
    with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
        setattr(value, name, before)
    with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
        delattr(value, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.not_a_field = 1
    assert getattr(value, name) is before


@pytest.mark.parametrize("value", UNHASHABLE, ids=_ids(UNHASHABLE))
def test_values_holding_mappings_compare_but_do_not_hash(value: Any) -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(value)
    assert dataclasses.replace(value) == value
    assert _changed(value) != value
    assert repr(value) == repr(_reference(value))


@pytest.mark.parametrize("value", SAMPLES + UNHASHABLE, ids=_ids(SAMPLES + UNHASHABLE))
def test_pickles_unless_it_holds_a_mappingproxy(value: Any) -> None:
    # As before: a mappingproxy (the model's frozen mappings) never pickled.
    if "mappingproxy" in repr(value):
        assert _outcome(pickle.dumps, value) is TypeError
    else:
        assert pickle.loads(pickle.dumps(value)) == value


def test_constructors_still_convert_and_check() -> None:
    group = DeviceGroup("v", "t", "n", [Device("d")], {"a": Attribute(1)})  # type: ignore[arg-type]
    assert group.devices == (Device("d"),)
    with pytest.raises(TypeError):
        group.attributes["b"] = Attribute(2)  # type: ignore[index]
    assert Reservation().envs == {} and Reservation().mounts == ()
    assert hclspec.Array([ATTR]).values == (ATTR,)
    assert hclspec.BlockMap("m", "name", ATTR).labels == ("name",)
    with pytest.raises(ValueError, match="at least one label"):
        hclspec.BlockMap("m", (), ATTR)
    with pytest.raises(ValueError, match="exceeds max_items"):
        hclspec.BlockList("l", ATTR, 3, 2)
    # The default timestamp is the moment of construction, in UTC.
    before = dt.datetime.now(dt.UTC)
    stamp = DeviceStats().timestamp
    assert stamp.tzinfo is dt.UTC and before <= stamp <= dt.datetime.now(dt.UTC)
    assert DeviceStats(timestamp=WHEN).timestamp is WHEN
    assert dataclasses.replace(DeviceStats(timestamp=WHEN)).timestamp is WHEN


def test_decorator_keeps_what_the_class_defines() -> None:
    @frozen
    class Point:
        x: int
        y: int = 0

        def __init__(self, x: int, y: int = 0) -> None:
            set_field(self, "x", x)
            set_field(self, "y", y)

        def __repr__(self) -> str:
            return f"<{self.x},{self.y}>"

    assert repr(Point(1)) == "<1,0>"
    assert Point(1) == Point(1, 0) != Point(1, 2)
    assert {Point(1), Point(1, 0)} == {Point(1)}
    assert dataclasses.is_dataclass(Point)
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y"]

    class Sub(Point):
        """A plain subclass may add attributes of its own, as with a frozen dataclass."""

    sub = Sub(1)
    sub.extra = 1
    assert sub.extra == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        sub.x = 2
    assert sub != Point(1)  # another class, as a dataclass compares


def _pair(body: str) -> tuple[Any, Any]:
    """The class ``body`` as @frozen and as @dataclass(frozen=True)."""
    made: list[Any] = []
    for decorate in (frozen, dataclasses.dataclass(frozen=True)):
        namespace: dict[str, Any] = {"field": dataclasses.field, "decorate": decorate}
        namespace["__name__"] = __name__  # string annotations resolve in this module
        exec(f"@decorate\nclass Sample:\n{textwrap.indent(body, '    ')}", namespace)
        made.append(namespace["Sample"])
    return made[0], made[1]


def test_a_made_init_is_a_dataclass_init() -> None:
    ours, ref = _pair('a: int\nb: str = "x"\nc: tuple[int, ...] = ()\n')
    assert inspect.signature(ours) == inspect.signature(ref)
    assert ours.__init__.__qualname__ == "Sample.__init__"
    for args, kwargs in (((1,), {}), ((1, "y"), {"c": (2,)}), ((), {"a": 1, "b": "z"})):
        assert repr(ours(*args, **kwargs)) == repr(ref(*args, **kwargs))
    for args, kwargs in (((), {}), ((1, "y", (), 4), {}), ((1,), {"d": 1}), ((1,), {"a": 2})):
        with pytest.raises(TypeError) as mine:
            ours(*args, **kwargs)
        with pytest.raises(TypeError) as theirs:
            ref(*args, **kwargs)
        assert str(mine.value) == str(theirs.value)
    # Stored past __setattr__, into the instance's compact storage, as before.
    assert ours(1).__dict__ == {"a": 1, "b": "x", "c": ()}


@pytest.mark.parametrize("value", SAMPLES + UNHASHABLE, ids=_ids(SAMPLES + UNHASHABLE))
def test_every_value_class_has_a_dataclass_signature(value: Any) -> None:
    # Made or written, __init__ takes the fields, in order, with their defaults.
    cls = type(value)
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params] == [f.name for f in dataclasses.fields(cls)]


def test_field_options_mean_what_they_mean_to_a_dataclass() -> None:
    body = (
        "a: int\n"
        "b: int = field(default=0, compare=False)\n"
        "c: int = field(default=0, hash=False)\n"
        "d: int = field(default=0, repr=False)\n"
    )
    ours, ref = _pair(body)
    for args in ((1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)):
        for other in ((1,), (1, 9), (1, 2, 9), (1, 2, 3, 9), (5, 2, 3, 4)):
            assert (ours(*args) == ours(*other)) == (ref(*args) == ref(*other)), (args, other)
        assert hash(ours(*args)) == hash(ref(*args))
        assert repr(ours(*args)) == repr(ref(*args))


def test_eq_without_hash_hashes_the_fields_as_a_frozen_dataclass_does() -> None:
    body = (
        "a: int\ndef __eq__(self, other): return type(other) is type(self) and self.a == other.a\n"
    )
    ours, ref = _pair(body)
    assert hash(ours(1)) == hash(ref(1)) == hash((1,))
    assert {ours(1), ours(1)} == {ours(1)}
    # A __hash__ written beside __eq__ is kept; an explicit None alone stays unhashable.
    ours, ref = _pair(body + "def __hash__(self): return 7\n")
    assert hash(ours(1)) == hash(ref(1)) == 7
    ours, ref = _pair("a: int\n__hash__ = None\n")
    with pytest.raises(TypeError, match="unhashable"):
        hash(ours(1))
    with pytest.raises(TypeError, match="unhashable"):
        hash(ref(1))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a: int = field(default=0, init=False)\n", "init=False is not supported"),
        ("a: int = field(default=0, kw_only=True)\n", "keyword-only fields"),
        ("_: dataclasses.KW_ONLY\na: int = 0\n", "keyword-only fields"),
        ("a: int = 0\ndef __post_init__(self): pass\n", "__post_init__ is not supported"),
        ("a: list[int] = field(default_factory=list)\n", "has a default_factory; write its"),
        ("a: int = 0\nb: int\n", "'b' without a default follows one with a default"),
        ("".join(f"f{i}: int\n" for i in range(9)), "has 9 fields; write its __init__"),
        ("pass\n", "has 0 fields; write its __init__"),
    ],
)
def test_what_it_does_not_support_is_refused_at_definition(body: str, message: str) -> None:
    namespace: dict[str, Any] = {"frozen": frozen, "field": dataclasses.field}
    namespace["__name__"] = __name__  # string annotations resolve in this module
    with pytest.raises(TypeError, match=re.escape(message)):
        exec(f"@frozen\nclass Bad:\n{textwrap.indent(body, '    ')}", namespace)


def test_a_written_init_may_hold_what_a_made_one_cannot() -> None:
    @frozen
    class Many:
        items: tuple[int, ...] = field(default_factory=tuple)

        def __init__(self, items: tuple[int, ...] | None = None) -> None:
            set_field(self, "items", tuple(items or ()))

    assert Many().items == () and Many([1]).items == (1,)  # type: ignore[arg-type]
