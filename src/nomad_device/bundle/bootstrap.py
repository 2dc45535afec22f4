"""What runs first inside every bundle: check the Python, find the cache, run the plugin.

The bundle's shell prelude reads this file's text out of the bundle and runs it
with ``python3 -I -S -c``, the bundle path as the first argument. The builder
replaces the ``CONFIG`` line. Rules for this file, because it runs on a node's
Python before anything is known about it:

- standard library only, and only cheap modules on the path every launch takes
  (``os``, ``sys``, ``fcntl``); ``zipfile``, ``shutil`` and ``json`` only when
  unpacking or failing;
- syntax that any Python 3 parses (no f-strings, no variable annotations), so
  that a wrong Python still gets as far as the version check and says so in
  hclog JSON instead of a raw traceback Nomad would hide.

Cache layout: ``<root>/<name>-<content hash>/site`` holds the unpacked tree.
A directory appears under its final name only by an atomic rename, so it is
complete whenever it exists; every running plugin holds a shared ``flock`` on
its directory so that cleaning old versions never removes one in use.
"""

import os
import sys

CONFIG = {}  # type: dict[str, object]  # filled in by the builder

#: The variables an operator may set (also named in docs/deploy.md).
ENV_CACHE = "NOMAD_DEVICE_BUNDLE_CACHE"
ENV_PYTHON = "NOMAD_DEVICE_PYTHON"

#: How many unpacked versions of one bundle name stay in the cache.
KEEP = 3

#: Leftovers of an unpack that died are removed after this many seconds.
STALE_SECONDS = 3600

MODULE = "nomad-device-bundle"


def _timestamp() -> str:
    import time

    now = time.time()
    micros = int((now % 1) * 1000000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % micros


def log(level: str, message: str, fields: "dict[str, object] | None" = None) -> None:
    """One hclog JSON line on stderr, as the SDK's plugins write them."""
    import json

    entry = {
        "@level": level,
        "@message": message,
        "@module": MODULE,
        "@timestamp": _timestamp(),
    }  # type: dict[str, object]
    entry.update(fields or {})
    try:
        os.write(2, (json.dumps(entry) + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def fail(message: str, fields: "dict[str, object] | None" = None) -> None:
    log("error", message, fields)
    sys.exit(1)


def check_python(bundle: str) -> None:
    """Refuse, in one clear line, a Python the bundled native code cannot load on."""
    need = CONFIG["python"]  # type: list[int]  # type: ignore[assignment]
    glibc = CONFIG.get("glibc")  # type: list[int] | None  # type: ignore[assignment]
    machine = str(CONFIG["machine"])
    found = []  # type: list[str]
    impl = getattr(getattr(sys, "implementation", None), "name", "unknown")
    if impl != "cpython" or tuple(sys.version_info[:2]) != tuple(need):
        found.append("%s %d.%d" % (impl, sys.version_info[0], sys.version_info[1]))
    if os.uname()[4] != machine:
        found.append("machine %s" % os.uname()[4])
    if glibc:
        try:
            libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
        except (ValueError, OSError):
            libc = ""
        parts = libc.split()
        have = None  # type: tuple[int, ...] | None
        if len(parts) == 2 and parts[0] == "glibc":
            try:
                have = tuple(int(p) for p in parts[1].split(".")[:2])
            except ValueError:
                have = None
        if have is None or have < tuple(glibc):
            found.append(libc or "a C library other than glibc")
    if not found:
        return
    wanted = "CPython %d.%d on Linux %s" % (need[0], need[1], machine)
    if glibc:
        wanted += " with glibc %d.%d or newer" % (glibc[0], glibc[1])
    fail(
        "cannot start plugin bundle %s: it needs %s, but %s is %s; install Python %d.%d "
        "or set %s to its path"
        % (
            bundle,
            wanted,
            sys.executable,
            ", ".join(found),
            need[0],
            need[1],
            ENV_PYTHON,
        ),
        {"bundle": bundle, "python": sys.executable, "needs": wanted},
    )


def _safe(path: str) -> "str | None":
    """None if ``path`` is a directory only we can touch, else why not."""
    import stat

    try:
        st = os.lstat(path)
    except OSError as exc:
        return str(exc)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory (or a symlink)"
    if st.st_uid != os.geteuid():
        return "owned by uid %d, not %d" % (st.st_uid, os.geteuid())
    if st.st_mode & 0o077:
        return "mode %04o lets others in (needs 0700)" % (st.st_mode & 0o7777)
    return None


def _make(path: str) -> None:
    """Create ``path`` (mode 0700) and missing parents (0700 too), tolerating races."""
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        try:
            os.makedirs(parent, 0o700)
        except FileExistsError:
            pass
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def candidates() -> "list[str]":
    """Cache roots to try, best first. Each must be ours alone (see _safe)."""
    override = os.environ.get(ENV_CACHE)
    if override:
        return [override]
    uid = os.geteuid()
    if uid == 0:
        # Kept across reboots, so a node unpacks each version once; /run is the
        # fallback for a read-only /var.
        return ["/var/cache/" + MODULE, "/run/" + MODULE]
    roots = []  # type: list[str]
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        roots.append(os.path.join(xdg, MODULE))
    home = os.environ.get("HOME", "")
    if not home.startswith("/"):
        try:
            import pwd

            home = pwd.getpwuid(uid).pw_dir
        except (ImportError, KeyError):
            home = ""
    if home.startswith("/") and home != "/":
        roots.append(os.path.join(home, ".cache", MODULE))
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        roots.append(os.path.join(runtime, MODULE))
    # Predictable, in a world-writable directory: used only if _safe() proves
    # that we made it (another user creating it first gets it refused).
    tmp = os.environ.get("TMPDIR", "")
    roots.append("%s/%s-%d" % (tmp if tmp.startswith("/") else "/tmp", MODULE, uid))
    return roots


def cache_root() -> str:
    refused = []  # type: list[str]
    for root in candidates():
        problem = _safe(root)
        if problem is not None and not os.path.lexists(root):
            try:
                _make(root)
            except OSError as exc:
                refused.append("%s: %s" % (root, exc))
                continue
            problem = _safe(root)
        if problem is None:
            return root
        refused.append("%s: %s" % (root, problem))
    fail(
        "plugin bundle has no safe cache directory to unpack into (%s); set %s to a "
        "directory owned by uid %d with mode 0700" % ("; ".join(refused), ENV_CACHE, os.geteuid()),
        {"refused": refused},
    )
    raise AssertionError("unreachable")


def open_locked(target: str) -> "int | None":
    """A shared-locked descriptor of ``target``, or None if it is not (or no longer) there."""
    import fcntl

    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a cleaner removes this very version
    try:
        now = os.stat(target)
    except FileNotFoundError:
        now = None
    held = os.fstat(fd)
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        return None
    return fd


def _remove(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def unpack(bundle: str, root: str, target: str) -> bool:
    """Unpack the bundle's zip into a private directory, then rename it into place.

    Several first launches may race: each unpacks on its own, one rename wins,
    the others throw their copy away and use the winner's. True if ours won.
    """
    import errno
    import time
    import zipfile

    start = time.time()

    if not os.access(root, os.W_OK):
        fail(
            "plugin bundle cannot unpack: cache directory %s is not writable; set %s"
            % (root, ENV_CACHE),
            {"cache": root},
        )
    tmp = os.path.join(root, ".unpack-" + os.urandom(8).hex())
    os.mkdir(tmp, 0o700)
    try:
        with zipfile.ZipFile(bundle) as archive:
            archive.extractall(os.path.join(tmp, "site"))
        # The rename publishes the directory as complete: its files must be on
        # disk first, or a power cut could leave a "complete" half-written tree.
        os.sync()
        try:
            os.rename(tmp, target)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            _remove(tmp)
            log("debug", "another launch unpacked this bundle first", {"cache": target})
            return False
    except BaseException:
        _remove(tmp)
        raise
    log(
        "info",
        "unpacked plugin bundle",
        {"cache": target, "ms": int((time.time() - start) * 1000)},
    )
    return True


def clean(root: str, name: str, current: str) -> None:
    """Bound the cache: keep the newest versions of ``name``; drop dead unpacks.

    A version some process still runs holds a shared lock and is left alone.
    """
    import fcntl
    import time

    versions = []  # type: list[tuple[float, str]]
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if entry.startswith((".unpack-", ".trash-")):
            try:
                if time.time() - os.lstat(path).st_mtime > STALE_SECONDS:
                    _remove(path)
            except OSError:
                pass
            continue
        base, _, digest = entry.rpartition("-")
        if base != name or len(digest) != 16 or path == current:
            continue
        try:
            versions.append((os.lstat(path).st_mtime, path))
        except OSError:
            continue
    versions.sort(reverse=True)
    for _, path in versions[KEEP - 1 :]:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # in use
            continue
        trash = os.path.join(root, ".trash-" + os.urandom(8).hex())
        try:
            os.rename(path, trash)
        except OSError:
            os.close(fd)
            continue
        os.close(fd)
        _remove(trash)


def run(bundle: str, site: str, args: "list[str]") -> None:
    sys.path.append(site)
    sys.argv = [bundle, *args]
    kind = CONFIG["kind"]
    entry = str(CONFIG["entry"])
    if kind == "script":
        # The author's file runs as __main__ (its ``if __name__ == "__main__"``
        # block serves), from the bytecode compiled at build time.
        import importlib.util

        spec = importlib.util.find_spec(entry)
        if spec is None or spec.loader is None:
            fail("bundle entry module %s is missing" % entry)
            return
        code = spec.loader.get_code(entry)  # type: ignore[attr-defined]
        main_module = importlib.util.module_from_spec(spec)
        main_module.__name__ = "__main__"
        sys.modules["__main__"] = main_module
        exec(code, main_module.__dict__)
        return
    module, _, attr = entry.partition(":")
    obj = __import__(module, fromlist=["_"])  # type: object
    for part in attr.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type):
        serve = __import__("nomad_device.plugin.serve", fromlist=["serve"]).serve
        serve(obj)
    elif callable(obj):
        sys.exit(obj())
    else:
        fail("bundle entry point %s is not callable" % entry)


# Kept open (and so locked) for the life of the plugin; see open_locked.
_held = None  # type: int | None


def main() -> None:
    global _held
    bundle = os.path.abspath(sys.argv[1])
    check_python(bundle)
    root = cache_root()
    target = os.path.join(root, str(CONFIG["key"]))
    fd = open_locked(target)
    unpacked = False
    attempts = 0
    while fd is None:
        attempts += 1
        if attempts > 3:
            fail("plugin bundle could not settle its cache directory %s" % target)
        unpacked = unpack(bundle, root, target) or unpacked
        fd = open_locked(target)
    _held = fd
    if unpacked:
        try:
            clean(root, str(CONFIG["name"]), target)
        except OSError as exc:
            log("warn", "could not clean old bundle versions: %s" % exc, {"cache": root})
    run(bundle, os.path.join(target, "site"), sys.argv[2:])


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:
        # A full disk while unpacking, or the plugin's module failing to import
        # before the SDK's own hooks are in place: still one hclog line.
        import traceback

        fail(
            "plugin bundle failed: %s: %s" % (type(exc).__name__, exc),
            {"traceback": traceback.format_exc()},
        )
