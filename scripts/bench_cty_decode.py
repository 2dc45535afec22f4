"""SetConfig's decoding: cty's own msgpack reader against the ``msgpack`` package.

A plugin reads every ``SetConfig`` with :func:`nomad_device.wire.cty.unmarshal`,
a reader written for go-cty's msgpack (types checked as it reads, offsets in
every error). The alternative measured here is ``msgpack.unpackb`` with an
``ext_hook`` for cty's unknown values, then one walk that checks the value
against the type and converts it as the reader does (both give equal values,
checked before timing). Configs: the three ready-made plugins' schemas with a
config an operator would write, and a large generic one (200 device blocks).
Best of five runs of N decodes each, CPU time per decode; plus the one-off cost
of importing msgpack, which a plugin that never encodes does not pay today.

Run (about a minute):

    .venv/bin/python scripts/bench_cty_decode.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable
from decimal import Decimal

import msgpack

from nomad_device.wire import cty
from nomad_device.wire.cty import BOOL, DYNAMIC, NUMBER, STRING, CtyDecodeError, CtyType


class _Ext:
    """cty's unknown value (a msgpack extension), kept to be refused where it is."""


def _ext(code: int, data: bytes) -> _Ext:
    return _Ext()


def unpack(data: bytes, ty: CtyType) -> object:
    """The same values as ``cty.unmarshal``, read by the msgpack package."""
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext, timestamp=0)
    except (ValueError, msgpack.exceptions.ExtraData) as exc:
        raise CtyDecodeError((), f"malformed msgpack: {exc}", malformed=True) from None
    return _walk(raw, ty, ())


def _number(v: object, path: cty.Path) -> object:
    if isinstance(v, bool):
        raise CtyDecodeError(path, "expected number")
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            raise CtyDecodeError(path, "NaN is not a number cty can hold")
        return v if math.isinf(v) or not v.is_integer() else int(v)
    text = v.decode() if isinstance(v, bytes) else str(v)
    if not re.match(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z", text):
        raise CtyDecodeError(path, "expected number")
    return cty.normalize_number(Decimal(text))


def _walk(v: object, ty: CtyType, path: cty.Path) -> object:
    if isinstance(v, _Ext):
        raise CtyDecodeError(path, "unknown values (msgpack extensions) are not supported")
    if ty is DYNAMIC:
        if isinstance(v, list) and len(v) == 2 and isinstance(v[0], bytes):
            return _walk(v[1], cty.type_from_json(v[0]), path)
        return _plain(v, path)
    if v is None:
        return None
    if ty is STRING:
        if isinstance(v, bytes):
            v = v.decode()
        if not isinstance(v, str):
            raise CtyDecodeError(path, "expected string")
        return unicodedata.normalize("NFC", v)
    if ty is NUMBER:
        return _number(v, path)
    if ty is BOOL:
        if not isinstance(v, bool):
            raise CtyDecodeError(path, "expected bool")
        return v
    if isinstance(ty, cty.List | cty.Set):
        if not isinstance(v, list):
            raise CtyDecodeError(path, "expected a list")
        return [_walk(x, ty.elem, (*path, i)) for i, x in enumerate(v)]
    if isinstance(ty, cty.Tuple):
        if not isinstance(v, list) or len(v) != len(ty.elems):
            raise CtyDecodeError(path, "expected a tuple")
        return [_walk(x, t, (*path, i)) for i, (x, t) in enumerate(zip(v, ty.elems, strict=True))]
    if not isinstance(v, dict):
        raise CtyDecodeError(path, "expected a map")
    out: dict[str, object] = {}
    for key, x in v.items():
        name = unicodedata.normalize("NFC", key.decode() if isinstance(key, bytes) else key)
        if isinstance(ty, cty.Map):
            out[name] = _walk(x, ty.elem, (*path, name))
        elif name in ty.attrs:  # type: ignore[attr-defined]
            out[name] = _walk(x, ty.attrs[name], (*path, name))  # type: ignore[attr-defined]
        else:
            raise CtyDecodeError((*path, name), "unexpected attribute")
    if isinstance(ty, cty.Object):
        return {name: out.get(name) for name in ty.attrs}
    return out


def _plain(v: object, path: cty.Path) -> object:
    if isinstance(v, _Ext):
        raise CtyDecodeError(path, "unknown values (msgpack extensions) are not supported")
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return _number(v, path)
    if isinstance(v, str):
        return unicodedata.normalize("NFC", v)
    if isinstance(v, list):
        return [_plain(x, (*path, i)) for i, x in enumerate(v)]
    if isinstance(v, dict):
        return {unicodedata.normalize("NFC", str(k)): _plain(x, (*path, k)) for k, x in v.items()}
    raise CtyDecodeError(path, "expected a value")


def _cases() -> list[tuple[str, bytes, CtyType]]:
    from nomad_device.agentconfig import setconfig
    from nomad_device.plugins.example.plugin import FsDevicePlugin
    from nomad_device.plugins.generic.plugin import GenericDevicePlugin
    from nomad_device.plugins.nvidia.plugin import NvidiaPlugin
    from nomad_device.wire import hclspec

    out = []
    for name, plugin, body in [
        ("example", FsDevicePlugin(), {"dir": "/srv/devices"}),
        (
            "generic, 2 devices",
            GenericDevicePlugin(),
            {
                "device": {
                    "kvm": [{"paths": ["/dev/kvm"], "share": 4}],
                    "serial": [{"usb": [{"vendor_id": "1a86", "product_id": "7523"}]}],
                }
            },
        ),
        (
            "generic, 200 devices",
            GenericDevicePlugin(),
            {
                "device": {
                    f"d{i}": [
                        {
                            "paths": [f"/dev/x{i}", f"/dev/y{i}"],
                            "share": 2,
                            "env": [{"A": "1", "B": "two"}],
                        }
                    ]
                    for i in range(200)
                }
            },
        ),
        ("nvidia", NvidiaPlugin(), {"ignored_gpu_ids": ["GPU-1", "GPU-2"]}),
    ]:
        spec = plugin.config_schema()
        data = setconfig.config_from_json(spec, body)
        out.append((name, data, hclspec.implied_type(spec)))
    return out


def _best(fn: Callable[[], object], runs: int) -> float:
    best = math.inf
    for _ in range(5):
        start = time.process_time()
        for _ in range(runs):
            fn()
        best = min(best, time.process_time() - start)
    return best / runs


_FIRST = """
import sys, time
sys.path.insert(0, {here!r})
from nomad_device.wire import cty
data, ty = bytes.fromhex({data!r}), cty.type_from_json({ty!r})
if {package}:
    s = time.perf_counter(); import msgpack; took = time.perf_counter() - s
    from bench_cty_decode import unpack
    s = time.perf_counter(); unpack(data, ty); took += time.perf_counter() - s
else:
    s = time.perf_counter(); cty.unmarshal(data, ty); took = time.perf_counter() - s
print(took)
"""


def _first_decode(data: bytes, ty: CtyType, package: bool) -> float:
    """A plugin's first SetConfig in a fresh process: the decode, and for the package
    its import too (a plugin that never encodes does not load msgpack today)."""
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    code = _FIRST.format(here=here, data=data.hex(), ty=cty.type_to_json(ty), package=package)
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        for _ in range(9)
    ]
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'config':22} {'bytes':>7} {'cty reader':>12} {'msgpack+walk':>13}")
    for name, data, ty in _cases():
        assert unpack(data, ty) == cty.unmarshal(data, ty), name
        runs = max(10, args.runs // (50 if len(data) > 2000 else 1))
        ours = _best(lambda d=data, t=ty: cty.unmarshal(d, t), runs)
        theirs = _best(lambda d=data, t=ty: unpack(d, t), runs)
        print(f"{name:22} {len(data):>7} {ours * 1e6:>10.1f}us {theirs * 1e6:>11.1f}us")
    name, data, ty = _cases()[1]
    ours, theirs = _first_decode(data, ty, False), _first_decode(data, ty, True)
    print(
        f"first SetConfig in a fresh plugin ({name}; median of 9): cty reader "
        f"{ours * 1e3:.2f} ms, msgpack import and decode {theirs * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
