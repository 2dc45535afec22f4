"""What runs first inside every bundle: pick the Python, settle the cache, run the plugin.

Three ways in, one file. A bundle for the node's Python starts as ``/bin/sh``:
its prelude reads this file's text (or this Python's code object) out of the
bundle and runs it with ``python3 -I -S -c``, the bundle path as the first
argument. A bundle that brings its interpreter starts as that interpreter (an
ELF file whose own ``main`` imports this module from the zip at the end of the
bundle and calls ``main(True)``); when it may use the node's Python and one
fits, it ``exec``s that Python on this same module. The builder replaces the
``CONFIG`` line. Rules for this file, because it runs on a node's Python
before anything is known about it:

- standard library only, and only cheap modules on the path every launch takes
  (``os``, ``sys``, ``fcntl``); ``zipfile``, ``hashlib`` and ``json`` only when
  unpacking or failing;
- syntax that any Python 3 parses (no f-strings, no variable annotations), so
  that a wrong Python still gets as far as the version check and says so in
  hclog JSON instead of a raw traceback Nomad would hide.

Cache layout: ``<root>/<name>-<payload hash>/`` holds the unpacked payload
(``site`` and, per Python, ``site-cpXY``; ``stdlib`` for the bundled
interpreter) and ``complete``, written last, which lists every directory with
its modification time. A directory appears under its final name only by an
atomic rename after its contents are on disk; one whose ``complete`` is
missing or whose directories changed (a file aged out or lost) is damaged,
moved aside and unpacked again. The root is reached from ``/`` one
``O_NOFOLLOW`` step at a time, each directory on the way owned by root or
the user and writable by no one else (unless sticky); all later work is
relative to that descriptor, and the plugin imports through
``/proc/self/fd/N``, the version's directory pinned by descriptor, so no
rename anywhere can change what runs. Every running plugin holds a shared
``flock`` on its version, so that cleaning never removes one in use.
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

#: The file that marks a complete unpack (and lists its directories).
MARK = "complete"

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


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


def _libc() -> "tuple[str, tuple[int, ...] | None]":
    """The C library as the node reports it, and its version if it is glibc."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    parts = libc.split()
    if len(parts) == 2 and parts[0] == "glibc":
        try:
            return libc, tuple(int(p) for p in parts[1].split(".")[:2])
        except ValueError:
            pass
    return libc or "a C library other than glibc", None


def _pythons() -> "list[list[int]]":
    return CONFIG.get("pythons") or []  # type: ignore[return-value]


def _fits_python() -> bool:
    impl = getattr(getattr(sys, "implementation", None), "name", "unknown")
    return impl == "cpython" and list(sys.version_info[:2]) in _pythons()


def _wanted_pythons() -> str:
    names = ["%d.%d" % tuple(v) for v in _pythons()]
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


def check_node(bundle: str, runtime: bool) -> None:
    """Refuse, in one clear line, a Python, CPU or C library the bundled code cannot run on."""
    glibc = CONFIG.get("glibc")  # type: list[int] | None  # type: ignore[assignment]
    machine = str(CONFIG["machine"])
    found = []  # type: list[str]
    if not runtime and not _fits_python():
        impl = getattr(getattr(sys, "implementation", None), "name", "unknown")
        found.append("%s %d.%d" % (impl, sys.version_info[0], sys.version_info[1]))
    if os.uname()[4] != machine:
        found.append("machine %s" % os.uname()[4])
    if glibc:
        libc, have = _libc()
        if have is None or have < tuple(glibc):
            found.append(libc)
    if not found:
        return
    if runtime:
        wanted = "Linux %s" % machine
        who = "this node"
        advice = ""
    else:
        wanted = "CPython %s on Linux %s" % (_wanted_pythons(), machine)
        who = sys.executable
        advice = "; install Python %s or set %s to its path" % (_wanted_pythons(), ENV_PYTHON)
    if glibc:
        wanted += " with glibc %d.%d or newer" % (glibc[0], glibc[1])
    fail(
        "cannot start plugin bundle %s: it needs %s, but %s is %s%s"
        % (bundle, wanted, who, ", ".join(found), advice),
        {"bundle": bundle, "python": sys.executable, "needs": wanted, "found": ", ".join(found)},
    )


# -- the node's Python, for a bundle that may use it -------------------------------------


def _version_of(path: str) -> "list[int] | None":
    """The X.Y of a ``pythonX.Y`` executable, by its resolved file name (nothing is run)."""
    name = os.path.basename(os.path.realpath(path))
    if not name.startswith("python3."):
        return None
    try:
        return [3, int(name[len("python3.") :])]
    except ValueError:
        return None


def node_python() -> "str | None":
    """A node CPython this bundle carries code for: ``$NOMAD_DEVICE_PYTHON`` or one on PATH."""
    wanted = _pythons()
    override = os.environ.get(ENV_PYTHON, "")
    if override == "bundled":
        return None
    if override:
        if not override.startswith("/"):
            fail(
                "cannot start plugin bundle: %s=%s is not an absolute path" % (ENV_PYTHON, override)
            )
        found = _version_of(override)
        if found not in wanted:
            what = (
                "CPython %d.%d" % tuple(found) if found else "of a version its name does not tell"
            )
            fail(
                "cannot start plugin bundle: %s=%s is %s; this bundle runs on CPython %s, "
                "or on its own interpreter with %s=bundled"
                % (ENV_PYTHON, override, what, _wanted_pythons(), ENV_PYTHON),
                {"python": override},
            )
        return override
    for version in sorted(wanted, reverse=True):
        name = "python%d.%d" % tuple(version)
        for directory in os.environ.get("PATH", "").split(":"):
            if not directory.startswith("/"):
                continue  # never the working directory, or a path relative to it
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK) and _version_of(path) == version:
                return path
    return None


def exec_node_python(python: str, bundle: str, args: "list[str]") -> None:
    """Run this module again on the node's Python, from the zip at the bundle's end."""
    # Last on sys.path: the node's own library comes first, only this module from the zip.
    loader = (
        "import sys;sys.path.append(sys.argv[1]);"
        "m=__import__('_nomad_bundle_boot_%d%d'%sys.version_info[:2]);m.main()"
    )
    try:
        os.execv(python, [python, "-I", "-S", "-c", loader, bundle, *args])
    except OSError as exc:
        fail(
            "cannot start plugin bundle %s: %s=%s cannot run (%s)"
            % (bundle, ENV_PYTHON, python, exc.strerror),
            {"bundle": bundle, "python": python},
        )


# -- the cache root, reached safely ------------------------------------------------------


def _walk(path: str, create: bool) -> "tuple[int | None, str | None]":
    """The root's descriptor, reached from ``/`` without following links, or why not.

    Each directory above the root must be owned by root or by us and writable
    by no one else, unless sticky (like /tmp, where others cannot rename our
    entries); the root itself must be ours alone, mode 0700. Missing parts are
    created, mode 0700, relative to their checked parent.
    """
    import stat

    if not path.startswith("/"):
        return None, "not an absolute path"
    me = os.geteuid()
    parts = [p for p in path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        return None, "not a plain absolute path"
    fd = os.open("/", _DIR_FLAGS)
    where = "/"
    try:
        for i, part in enumerate(parts):
            st = os.fstat(fd)
            if st.st_uid not in (0, me):
                return None, "%s is owned by uid %d (neither root nor %d)" % (
                    where,
                    st.st_uid,
                    me,
                )
            if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                return None, "%s is writable by others (mode %04o)" % (
                    where,
                    st.st_mode & 0o7777,
                )
            try:
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None, "No such file or directory"
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    return None, str(exc)
                try:
                    child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    return None, str(exc)
            except OSError as exc:
                import errno

                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    return None, "%s: %s" % (os.path.join(where, part), exc.strerror)
                if i == len(parts) - 1:
                    return None, "not a directory (or a symlink)"
                try:
                    lst = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    what = "a symlink" if stat.S_ISLNK(lst.st_mode) else "not a directory"
                except OSError as again:
                    what = str(again)
                return None, "%s is %s" % (os.path.join(where, part), what)
            os.close(fd)
            fd = child
            where = os.path.join(where, part)
        st = os.fstat(fd)
        if st.st_uid != me:
            return None, "owned by uid %d, not %d" % (st.st_uid, me)
        if st.st_mode & 0o077:
            return None, "mode %04o lets others in (needs 0700)" % (st.st_mode & 0o7777)
        found, fd = fd, -1
        return found, None
    finally:
        if fd >= 0:
            os.close(fd)


def candidates() -> "list[str]":
    """Cache roots to try, best first. Each must be ours alone (see _walk)."""
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
    # Predictable, in a world-writable directory: used only if _walk() proves
    # that we made it (another user creating it first gets it refused).
    tmp = os.environ.get("TMPDIR", "")
    roots.append("%s/%s-%d" % (tmp if tmp.startswith("/") else "/tmp", MODULE, uid))
    return roots


#: The version's cache directory once known, for every later error message.
_cache = ""


def cache_root() -> "tuple[int, str]":
    refused = []  # type: list[str]
    override = os.environ.get(ENV_CACHE)
    if override and not override.startswith("/"):
        fail(
            "plugin bundle refuses %s=%s: not an absolute path" % (ENV_CACHE, override),
            {"cache": override},
        )
    for root in candidates():
        fd, problem = _walk(root, create=True)
        if fd is not None:
            return fd, root
        refused.append("%s: %s" % (root, problem))
    fail(
        "plugin bundle has no safe cache directory to unpack into (%s); set %s to a "
        "directory owned by uid %d with mode 0700, below directories only root or that "
        "user can write" % ("; ".join(refused), ENV_CACHE, os.geteuid()),
        {"refused": refused},
    )
    raise AssertionError("unreachable")


# -- one version's directory: find, check, unpack, heal ----------------------------------


def open_locked(root_fd: int, key: str) -> "int | None":
    """A shared-locked descriptor of version ``key``; None if it is not (or no longer) there."""
    import fcntl

    try:
        fd = os.open(key, _DIR_FLAGS | _NOFOLLOW, dir_fd=root_fd)
    except FileNotFoundError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a cleaner removes this very version
    try:
        now = os.stat(key, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    held = os.fstat(fd)
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        return None
    return fd


#: Why a sound version must be unpacked again: it was unpacked for another Python.
_ANOTHER = "is not unpacked: another Python unpacked this version"


def damaged(fd: int, wanted: "list[str]") -> "str | None":
    """None if the version's tree is as it was unpacked, else what changed.

    The mark lists every directory below the version with its modification
    time: removing, adding or renaming a file changes its directory's, so one
    ``stat`` per directory tells a tree that lost a file.
    """
    try:
        mark_fd = os.open(MARK, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | _NOFOLLOW, dir_fd=fd)
    except OSError:
        return "no %s mark: the unpack never finished" % MARK
    try:
        chunks = []
        while True:
            chunk = os.read(mark_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(mark_fd)
    lines = b"".join(chunks).decode("utf-8", "replace").splitlines()
    if not lines or lines[0] != "%s %s" % (MODULE, CONFIG["key"]):
        return "its %s mark is not this bundle's" % MARK
    listed = set()
    for line in lines[1:]:
        stamp, _, rel = line.partition(" ")
        listed.add(rel)
        try:
            if str(os.stat(rel, dir_fd=fd, follow_symlinks=False).st_mtime_ns) != stamp:
                return "%s changed" % rel
        except OSError:
            return "%s is missing" % rel
    for name in wanted:
        if name not in listed:
            return "%s %s" % (name, _ANOTHER)
    return None


class _Window(object):
    """A read-only window of a file, for zipfile: the payload inside the bundle."""

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self.fd, self.offset, self.size, self.pos = fd, offset, size, 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, min(self.size, base + pos))
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or self.pos + n > self.size:
            n = self.size - self.pos
        data = os.pread(self.fd, n, self.offset + self.pos)
        self.pos += len(data)
        return data

    def close(self) -> None:
        pass


def _payload(bundle_fd: int) -> _Window:
    spec = CONFIG["payload"]  # type: dict[str, int]  # type: ignore[assignment]
    return _Window(bundle_fd, int(spec["offset"]), int(spec["size"]))


def verify_payload(bundle: str, bundle_fd: int, cache: str) -> None:
    """The payload must be the one the key names: a bundle is never trusted by name."""
    import hashlib

    spec = CONFIG["payload"]  # type: dict[str, object]  # type: ignore[assignment]
    window = _payload(bundle_fd)
    digest = hashlib.sha256(("%s %s\n" % (MODULE, CONFIG["format"])).encode())
    while True:
        chunk = window.read(1 << 20)
        if not chunk:
            break
        digest.update(chunk)
    found = digest.hexdigest()
    key = str(CONFIG["key"])
    if found != spec["sha256"] or not key.endswith("-" + found[:16]):
        fail(
            "plugin bundle %s is damaged: its payload hashes to %s, not %s as its key %s "
            "says; nothing was unpacked into %s" % (bundle, found[:16], key[-16:], key, cache),
            {"bundle": bundle, "cache": cache},
        )


def _sync(fd: int) -> bool:
    """``syncfs`` on the cache's file system (only that one); False where unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syncfs(fd)) == 0
    except (ImportError, OSError, AttributeError):
        return False


def _extract(archive: "object", top: int, wanted: "list[str]") -> "tuple[list[str], list[str]]":
    """The members under ``wanted`` into ``top``, relative to descriptors; what was made.

    Two threads where the node lends two CPUs: inflating and writing release
    the GIL, and a first launch is mostly that.
    """
    import zipfile

    assert isinstance(archive, zipfile.ZipFile)
    members = []
    for info in archive.infolist():
        parts = info.filename.split("/")
        if info.filename.endswith("/"):
            continue
        if any(p in ("", ".", "..") for p in parts) or info.filename.startswith("/"):
            raise ValueError("payload member %r is not a plain relative path" % info.filename)
        if parts[0] in wanted:  # else another Python's code
            members.append(info)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = 1
    groups = [[], []] if cpus > 1 else [[]]  # type: list[list[object]]
    loads = [0] * len(groups)
    for info in sorted(members, key=lambda i: -i.file_size):
        lightest = loads.index(min(loads))
        groups[lightest].append(info)
        loads[lightest] += info.file_size
    made = []  # type: list[str]
    files = []  # type: list[str]
    errors = []  # type: list[BaseException]
    if len(groups) == 1:
        _extract_some(archive, top, groups[0], made, files)
        return made, files
    import threading

    def work(group: "list[object]") -> None:
        try:
            _extract_some(archive, top, group, made, files)
        except BaseException as exc:  # re-raised by the caller below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return made, files


def _extract_some(
    archive: "object", top: int, infos: "list[object]", made: "list[str]", files: "list[str]"
) -> None:
    """``infos`` into ``top``, in name order, keeping the chain of parent directories open."""
    import zipfile

    assert isinstance(archive, zipfile.ZipFile)
    chain = [("", top)]  # the open directories from top down to the last parent
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        for info in sorted(infos, key=lambda i: i.filename):  # type: ignore[attr-defined]
            assert isinstance(info, zipfile.ZipInfo)
            parts = info.filename.split("/")
            parent = "/".join(parts[:-1])
            while chain[-1][0] and not (parent + "/").startswith(chain[-1][0] + "/"):
                os.close(chain.pop()[1])
            for depth in range(len(chain[-1][0].split("/")) if chain[-1][0] else 0, len(parts) - 1):
                rel = "/".join(parts[: depth + 1])
                try:
                    os.mkdir(parts[depth], 0o755, dir_fd=chain[-1][1])
                    made.append(rel)
                except FileExistsError:
                    pass
                chain.append(
                    (rel, os.open(parts[depth], _DIR_FLAGS | _NOFOLLOW, dir_fd=chain[-1][1]))
                )
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            out = os.open(parts[-1], flags, mode, dir_fd=chain[-1][1])
            try:
                with archive.open(info) as src:  # checks the member's CRC at its end
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(out, view) :]
            finally:
                os.close(out)
            files.append(info.filename)
    finally:
        for _, fd in chain[1:]:
            os.close(fd)


def _write_mark(top: int, made: "list[str]") -> None:
    lines = ["%s %s" % (MODULE, CONFIG["key"])]
    for rel in made:
        lines.append("%d %s" % (os.stat(rel, dir_fd=top, follow_symlinks=False).st_mtime_ns, rel))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(MARK, flags, 0o644, dir_fd=top)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_durable(top: int, made: "list[str]", files: "list[str]") -> None:
    """What was written, on disk: one ``syncfs``, else an ``fsync`` of each file and directory."""
    if _sync(top):
        return
    for rel in files:
        fd = os.open(rel, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=top)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for rel in [*made, "."]:
        fd = os.open(rel, _DIR_FLAGS | _NOFOLLOW, dir_fd=top)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(root_fd: int, name: str) -> None:
    import shutil

    try:
        shutil.rmtree(name, dir_fd=root_fd)
    except (OSError, TypeError):
        pass


def unpack(
    bundle: str, bundle_fd: int, root_fd: int, root: str, key: str, wanted: "list[str]"
) -> bool:
    """Unpack the payload into a private directory, then rename it into place.

    Several first launches may race: each unpacks on its own, one rename wins,
    the others throw their copy away and use the winner's. True if ours won.
    Only what was written is made durable (the files, their directories, then
    the rename), never the node's other file systems.
    """
    import errno
    import time
    import zipfile

    start = time.time()
    target = os.path.join(root, key)
    verify_payload(bundle, bundle_fd, target)
    tmp = ".unpack-" + os.urandom(8).hex()
    try:
        os.mkdir(tmp, 0o700, dir_fd=root_fd)
    except OSError as exc:
        fail(
            "plugin bundle cannot unpack into cache directory %s: %s; set %s"
            % (root, exc.strerror, ENV_CACHE),
            {"cache": root},
        )
    try:
        top = os.open(tmp, _DIR_FLAGS | _NOFOLLOW, dir_fd=root_fd)
        try:
            with zipfile.ZipFile(_payload(bundle_fd)) as archive:
                made, files = _extract(archive, top, wanted)
            _make_durable(top, made, files)
            # Written last: the mark says every file above is on disk.
            _write_mark(top, made)
            os.fsync(top)
        finally:
            os.close(top)
        try:
            os.rename(tmp, key, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            _remove(root_fd, tmp)
            log("debug", "another launch unpacked this bundle first", {"cache": target})
            return False
        os.fsync(root_fd)
    except BaseException:
        _remove(root_fd, tmp)
        raise
    log(
        "info",
        "unpacked plugin bundle",
        {"cache": target, "ms": int((time.time() - start) * 1000)},
    )
    return True


def discard(root_fd: int, key: str, held: int) -> None:
    """Move a damaged version aside (once, however many launches found it damaged)."""
    import fcntl

    fcntl.flock(root_fd, fcntl.LOCK_EX)
    try:
        try:
            now = os.stat(key, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        mine = os.fstat(held)
        if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            trash = ".trash-" + os.urandom(8).hex()
            os.rename(key, trash, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    finally:
        fcntl.flock(root_fd, fcntl.LOCK_UN)


def settle(
    bundle: str, bundle_fd: int, root_fd: int, root: str, wanted: "list[str]"
) -> "tuple[int, bool]":
    """The locked, checked directory of this version, unpacking or healing it first if need be."""
    global _cache
    key = str(CONFIG["key"])
    target = _cache = os.path.join(root, key)
    unpacked = healed = False
    for _ in range(4):
        fd = open_locked(root_fd, key)
        if fd is None:
            unpacked = unpack(bundle, bundle_fd, root_fd, root, key, wanted) or unpacked
            continue
        problem = damaged(fd, wanted)
        if problem is None:
            return fd, unpacked
        if healed or unpacked:
            os.close(fd)
            fail(
                "plugin bundle cache directory %s is still damaged after unpacking it "
                "again (%s)" % (target, problem),
                {"cache": target},
            )
        if problem.endswith(_ANOTHER):
            log(
                "info",
                "plugin bundle unpacks again for this Python (%s)" % problem,
                {"cache": target},
            )
        else:
            log(
                "warn",
                "plugin bundle cache directory %s is damaged (%s); unpacking it again"
                % (target, problem),
                {"cache": target},
            )
        discard(root_fd, key, fd)
        os.close(fd)
        healed = True
    fail("plugin bundle could not settle its cache directory %s" % target, {"cache": target})
    raise AssertionError("unreachable")


def clean(root_fd: int, name: str, current: str) -> None:
    """Bound the cache: keep the newest versions of ``name``; drop dead unpacks and trash.

    A version some process still runs holds a shared lock and is left alone.
    """
    import fcntl
    import time

    versions = []  # type: list[tuple[float, str]]
    for entry in os.listdir(root_fd):
        if entry.startswith(".unpack-"):
            try:
                if (
                    time.time() - os.stat(entry, dir_fd=root_fd, follow_symlinks=False).st_mtime
                    > STALE_SECONDS
                ):
                    _remove(root_fd, entry)
            except OSError:
                pass
            continue
        base, _, digest = entry.rpartition("-")
        if entry.startswith(".trash-") or (base == name and len(digest) == 16 and entry != current):
            try:
                versions.append(
                    (os.stat(entry, dir_fd=root_fd, follow_symlinks=False).st_mtime, entry)
                )
            except OSError:
                continue
    versions.sort(reverse=True)
    kept = 0
    for _, entry in versions:
        if not entry.startswith(".trash-"):
            kept += 1
            if kept < KEEP:
                continue
        try:
            fd = os.open(entry, _DIR_FLAGS | _NOFOLLOW, dir_fd=root_fd)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # in use
            continue
        trash = entry if entry.startswith(".trash-") else ".trash-" + os.urandom(8).hex()
        try:
            if trash != entry:
                os.rename(entry, trash, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        except OSError:
            os.close(fd)
            continue
        os.close(fd)
        _remove(root_fd, trash)


# -- running the plugin ------------------------------------------------------------------


def _pinned(fd: int, root: str, key: str) -> str:
    """A path that reaches the locked directory through its descriptor, whatever is renamed."""
    path = "/proc/self/fd/%d" % fd
    try:
        held = os.fstat(fd)
        st = os.stat(path)
        if (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
            return path
    except OSError:
        pass
    # No /proc: the root was reached safely, and only root or we can rename below it.
    return os.path.join(root, key)


def site_dirs(runtime: bool) -> "list[str]":
    """The payload's import directories for the running Python, most specific first."""
    tag = "site-cp%d%d" % sys.version_info[:2]
    listed = CONFIG.get("site_dirs") or ["site"]  # type: list[str]  # type: ignore[assignment]
    dirs = [d for d in listed if d in (tag, "site")]
    if runtime:
        dirs = ["stdlib", *dirs]
    return dirs


def run(bundle: str, base: str, args: "list[str]", runtime: bool) -> None:
    sys.dont_write_bytecode = True  # the cache is immutable: nothing may add files to it
    paths = [base + "/" + d for d in site_dirs(runtime)]
    if runtime:
        sys.path[:] = paths  # the interpreter's own library, then the plugin's
    else:
        sys.path[:] = [p for p in sys.path if p != bundle] + paths
    sys.argv = [bundle, *args]
    log(
        "debug",
        "plugin bundle starts",
        {
            "interpreter": "bundled" if runtime else "node",
            "python": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "cache": _cache,
        },
    )
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


def _start(runtime: bool) -> None:
    global _held
    if runtime:
        # The bundle is this very executable; its name as Nomad ran it, for messages.
        argv = list(getattr(sys, "orig_argv", sys.argv))
        bundle = argv[0] if argv[0].startswith("/") else os.path.realpath("/proc/self/exe")
        args = argv[1:]
        source = "/proc/self/exe"
    else:
        bundle = os.path.abspath(sys.argv[1])
        args = sys.argv[2:]
        source = bundle
    if runtime and _pythons():
        python = node_python()
        if python is not None:
            exec_node_python(python, bundle, args)
    check_node(bundle, runtime)
    bundle_fd = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    root_fd, root = cache_root()
    fd, unpacked = settle(bundle, bundle_fd, root_fd, root, site_dirs(runtime))
    os.close(bundle_fd)
    _held = fd
    key = str(CONFIG["key"])
    if unpacked:
        try:
            clean(root_fd, str(CONFIG["name"]), key)
        except OSError as exc:
            log("warn", "could not clean old bundle versions: %s" % exc, {"cache": root})
    os.close(root_fd)
    run(bundle, _pinned(fd, root, key), args, runtime)


def main(runtime: bool = False) -> None:
    try:
        _start(runtime)
    except Exception as exc:
        # A full disk while unpacking, or the plugin's module failing to import
        # before the SDK's own hooks are in place: still one hclog line.
        import traceback

        where = " (cache directory %s)" % _cache if _cache else ""
        fail(
            "plugin bundle failed: %s: %s%s" % (type(exc).__name__, exc, where),
            {"traceback": traceback.format_exc(), "cache": _cache},
        )


if __name__ == "__main__":
    main()
