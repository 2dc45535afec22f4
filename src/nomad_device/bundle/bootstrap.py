"""What runs first inside every bundle: pick the Python, settle the cache, run the plugin.

Three ways in, one file. A bundle for the node's Python starts as ``/bin/sh``:
its prelude reads this file's text (or this Python's code object) out of the
bundle and runs it with ``python3 -I -S -c``, the bundle path as the first
argument. A bundle that brings its interpreter starts as that interpreter (an
ELF file whose own ``main`` imports this module from the zip at the end of the
bundle and calls ``main(True)``); when it may use the node's Python, it runs
each candidate once on this module to prove that it can run the bundle (see
:func:`choose_python`) and ``exec``s the first that did. The builder replaces
the ``CONFIG`` line. Rules for this file, because it runs on a node's Python
before anything is known about it:

- standard library only, and only cheap modules on the path every launch takes
  (``os``, ``sys``, ``fcntl``); ``zipfile``, ``hashlib``, ``json`` and
  ``subprocess`` only when unpacking, proving an interpreter or failing;
- syntax that any Python 3 parses (no f-strings, no variable annotations), so
  that a wrong Python still gets as far as the version check and says so in
  hclog JSON instead of a raw traceback Nomad would hide.

Cache layout: ``<root>/<name>-<payload hash>/`` (a version) holds one
directory per part of the payload a Python needs (``site``, ``site-cpXY`` per
Python, ``stdlib`` for the bundled interpreter), each unpacked on its own the
first time a Python needs it, so that a node's Python and the bundle's own
share ``site`` and never evict each other. A part appears under its final
name only by an atomic rename after its contents are on disk; its ``.complete``
mark lists each of its directories with its modification time, so one whose
mark is missing or whose directories changed (a file aged out or lost) is
damaged, moved aside and unpacked again. The root is reached from ``/`` one
``O_NOFOLLOW`` step at a time, each directory on the way owned by root or
the user and writable by no one else (unless sticky); all later work is
relative to that descriptor, and the plugin imports through
``/proc/self/fd/N``, each part pinned by its own descriptor, so no rename
anywhere (another launch healing a part, a cleaner) can change what runs.
Every running plugin holds a shared ``flock`` on its version and on each of
its parts, so that cleaning never removes one in use.
"""

import os
import sys

CONFIG = {}  # type: dict[str, object]  # filled in by the builder

#: The variables an operator may set (also named in docs/deploy.md).
ENV_CACHE = "NOMAD_DEVICE_BUNDLE_CACHE"
ENV_PYTHON = "NOMAD_DEVICE_PYTHON"

#: go-plugin's AutoMTLS: the host's certificate, which the plugin must verify with ssl.
ENV_CLIENT_CERT = "PLUGIN_CLIENT_CERT"

#: First argument that makes a bundle with its own interpreter a plain Python
#: (``bundle --nomad-device-bundle-python -c CODE ...``): how the SDK starts
#: helper processes (nomad_device.interpreter). Nomad never passes arguments.
AS_PYTHON = "--nomad-device-bundle-python"

#: Argument after the bundle that makes a node's Python prove it can run it.
PROVE = "--nomad-device-bundle-prove"

#: What a proving Python prints first and last on stdout.
PROOF = "nomad-device-bundle-proof"

#: How long a candidate Python may take to prove itself (it may unpack its part); one
#: that takes longer is passed over for good (a launch must answer the host in time).
PROOF_SECONDS = 30

#: How many unpacked versions of one bundle name stay in the cache.
KEEP = 3

#: Leftovers of an unpack that died are removed after this many seconds.
STALE_SECONDS = 3600

MODULE = "nomad-device-bundle"

#: The file in each unpacked part that marks it complete (and lists its directories).
MARK = ".complete"

#: The file in a version's directory that keeps each node Python's verdict.
VERDICTS = ".pythons"

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _timestamp() -> str:
    import time

    now = time.time()
    micros = int((now % 1) * 1000000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % micros


#: Running as a plain Python (see run_python): only warnings and errors are said.
_quiet = False


def log(level: str, message: str, fields: "dict[str, object] | None" = None) -> None:
    """One hclog JSON line on stderr, as the SDK's plugins write them."""
    if _quiet and level in ("debug", "info"):
        return
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


def log_line(line: str) -> None:
    """An hclog line another process wrote, passed on as it is."""
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


#: The node Pythons tried before the bundle's own, each with why it was passed over.
_tried = []  # type: list[str]


def fail(message: str, fields: "dict[str, object] | None" = None) -> None:
    """One hclog error line (naming the interpreters tried, if any), then exit 1."""
    if _tried:
        message += "; interpreters tried first: " + "; ".join(_tried)
        fields = dict(fields or {})
        fields["tried"] = list(_tried)
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


def refuse_mtls_without_ssl(bundle: str) -> None:
    """The bundle's own interpreter has no ``ssl``: say so in one line if the host needs it.

    go-plugin's AutoMTLS (a host that sets ``PLUGIN_CLIENT_CERT``; Nomad never
    does) needs Python's ssl module, which the bundled CPython is built
    without (no OpenSSL to carry, and to keep current, on every node).
    """
    if not os.environ.get(ENV_CLIENT_CERT) or "_ssl" in sys.builtin_module_names:
        return
    version = "%d.%d.%d" % sys.version_info[:3]
    if _pythons():
        advice = (
            "set %s to a node's CPython %s that has ssl (an auto bundle also takes one from "
            "PATH when it proves itself)" % (ENV_PYTHON, _wanted_pythons())
        )
    else:
        advice = "build the bundle with --interpreter auto or node to run it on a node's CPython"
    fail(
        "cannot start plugin bundle %s: the host asked for go-plugin's AutoMTLS (%s is set), "
        "which needs Python's ssl module, and the bundle's own CPython %s is built without it; "
        "%s, or run it under a host that does not ask for AutoMTLS (a Nomad agent never does)"
        % (bundle, ENV_CLIENT_CERT, version, advice),
        {"bundle": bundle, "python": "bundled"},
    )


# -- the node's Python, for a bundle that may use it -------------------------------------


def _candidates() -> "list[tuple[str, list[int] | None]]":
    """The node Pythons to try, best first, each with the version its name claims.

    ``$NOMAD_DEVICE_PYTHON`` alone when set (its version is whatever it proves);
    else every ``pythonX.Y`` on PATH that this bundle carries code for, newest
    version first, in PATH order (absolute entries only: never the working
    directory).
    """
    override = os.environ.get(ENV_PYTHON, "")
    if override:
        return [(override, None)]
    found = []  # type: list[tuple[str, list[int] | None]]
    for version in sorted(_pythons(), reverse=True):
        name = "python%d.%d" % tuple(version)
        for directory in os.environ.get("PATH", "").split(":"):
            if not directory.startswith("/"):
                continue
            path = os.path.join(directory, name)
            if (path, version) in found or not os.path.isfile(path):
                continue
            if os.access(path, os.X_OK):
                found.append((path, list(version)))
    return found


def _stamp(path: str) -> "str | None":
    """What tells one interpreter file from another at a path (an upgrade or a touch changes it)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return "%d:%d:%d:%d" % (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _clean(text: str, limit: int = 300) -> str:
    """``text`` on one line, without control characters (it ends up in hclog and a file)."""
    out = "".join(c if c.isprintable() and c != "\t" else " " for c in text)
    out = " ".join(out.split())
    return out if len(out) <= limit else out[: limit - 1] + "\u2026"


def read_verdicts(vfd: int) -> "dict[str, list[str]]":
    """Each node Python's verdict for this version: path -> [stamp, "ok" or "no", detail,
    the interpreter that runs for it, that one's stamp]."""
    try:
        fd = os.open(VERDICTS, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=vfd)
    except OSError:
        return {}
    try:
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    found = {}  # type: dict[str, list[str]]
    for line in data.decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 6 and parts[2] in ("ok", "no"):
            found[parts[0]] = parts[1:]
    return found


def _write_verdicts(vfd: int, verdicts: "dict[str, list[str]]") -> None:
    """Replace the verdicts file in one rename; losing a race only means proving again."""
    body = "".join("\t".join([path, *entry]) + "\n" for path, entry in sorted(verdicts.items()))
    tmp = "%s-%s" % (VERDICTS, os.urandom(8).hex())
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=vfd)
        try:
            view = memoryview(body.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(tmp, VERDICTS, src_dir_fd=vfd, dst_dir_fd=vfd)
    except OSError as exc:
        log("debug", "could not keep the interpreters' verdicts: %s" % exc)
        try:
            os.unlink(tmp, dir_fd=vfd)
        except OSError:
            pass


#: What a candidate runs: it says what it is (and which file runs: a pyenv shim
#: execs another), then, if that is a version this bundle carries code for, runs
#: this module from the zip at the bundle's end in proving mode. Any Python 3
#: parses it.
_PROVER = (
    "import sys\n"
    "v=sys.version_info\n"
    "n=getattr(getattr(sys,'implementation',None),'name','unknown')\n"
    "sys.stdout.write('" + PROOF + " '+n+' '+'.'.join(map(str,v[:3]))+' '+sys.executable+'\\n')\n"
    "sys.stdout.flush()\n"
    "if n=='cpython' and '%d.%d'%v[:2] in sys.argv[3].split(','):\n"
    " sys.path.append(sys.argv[1])\n"
    " __import__('_nomad_bundle_boot_%d%d'%v[:2]).main()\n"
)


def _collect(child: "object", seconds: float) -> "tuple[bytes, bytes, bool]":
    """The child's stdout and stderr (the first 64 KiB of each) and whether it ended in time."""
    import select
    import subprocess
    import time

    assert isinstance(child, subprocess.Popen)
    deadline = time.monotonic() + seconds
    kept = {child.stdout.fileno(): b"", child.stderr.fileno(): b""}  # type: ignore[union-attr]
    reading = list(kept)
    while reading:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd in select.select(reading, [], [], left)[0]:
            data = os.read(fd, 65536)
            if not data:
                reading.remove(fd)
            elif len(kept[fd]) < 65536:
                kept[fd] += data
    ended = not reading
    if ended:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            ended = False
    if not ended:
        import signal

        try:
            os.killpg(child.pid, signal.SIGKILL)  # what it started too (a shim's shell)
        except OSError:
            pass
        child.wait()
    out, err = (kept[f.fileno()] for f in (child.stdout, child.stderr))  # type: ignore[union-attr]
    child.stdout.close()  # type: ignore[union-attr]
    child.stderr.close()  # type: ignore[union-attr]
    return out, err, ended


def _exit_reason(code: int, stderr: bytes) -> str:
    """How a candidate ended: its status and its own words (our hclog line, or its first line)."""
    status = "killed by signal %d" % -code if code < 0 else "exited with status %d" % code
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    said = ""
    for line in lines:
        if line.startswith('{"@level"'):
            import json

            try:
                said = str(json.loads(line).get("@message", ""))
            except ValueError:
                pass
    if not said and lines:
        # A traceback ends with its error; anything else starts with what it has to say.
        said = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return status + (": " + _clean(said, 200) if said else "")


def prove(python: str, claim: "list[int] | None", bundle: str) -> "tuple[bool, str, bool, str]":
    """Whether ``python`` runs this bundle: (yes, its version or why not, a lasting verdict,
    the file that ran: ``sys.executable``, another than ``python`` behind a shim).

    It must start, be a CPython of the version its name claims (or, unnamed,
    one this bundle carries code for), and import every native module the
    bundle carries for it, from its unpacked part (which this unpacks, as its
    first launch would). Lasting verdicts are about the interpreter (one that
    hangs included); a failure of the node's (a full cache) is tried again
    next time.
    """
    import subprocess

    wanted = [claim] if claim else _pythons()
    versions = ",".join("%d.%d" % tuple(v) for v in wanted)
    try:
        child = subprocess.Popen(
            [python, "-I", "-S", "-c", _PROVER, bundle, PROVE, versions],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            start_new_session=True,
        )
    except OSError as exc:
        return False, "cannot be run: %s" % (exc.strerror or exc), True, python
    out, err, ended = _collect(child, PROOF_SECONDS)
    if not ended:
        return False, "did not answer within %d s" % PROOF_SECONDS, True, python
    said = [
        line[len(PROOF) + 1 :]
        for line in out.decode("utf-8", "replace").splitlines()
        if line.startswith(PROOF + " ")
    ]
    if not said:
        return False, _exit_reason(child.returncode, err), True, python
    impl, version, ran = [*said[0].split(" ", 2), "", ""][:3]
    ran = ran if ran.startswith("/") else python
    if impl != "cpython" or version.split(".")[:2] not in [[str(n) for n in v] for v in wanted]:
        what = "is %s %s" % (
            "CPython" if impl == "cpython" else impl,
            ".".join(version.split(".")[:2]),
        )
        if claim:
            what += ", not %d.%d as its name says" % tuple(claim)
        return False, _clean(what), True, ran
    last = said[-1].split(" ", 1)
    if last[0] == "ok" and child.returncode == 0:
        # Its own lines (it may have unpacked its part) belong to this launch's log.
        for line in err.decode("utf-8", "replace").splitlines():
            if line.startswith('{"@level"') and not line.startswith('{"@level": "debug"'):
                log_line(line)
        return True, _clean(version, 40), True, ran
    if last[0] == "no" and len(last) == 2:
        return False, _clean(last[1]), True, ran
    return False, _exit_reason(child.returncode, err), False, ran


def choose_python(bundle: str, vfd: int) -> "str | None":
    """The node's Python to run on, proven by :func:`prove`; None for the bundle's own.

    Verdicts are kept in the version's directory per interpreter path and file
    (:func:`_stamp`), so that a later launch runs nothing to decide. A
    candidate that fails is passed over for the next, then for the bundle's
    own interpreter, in one line naming each and why; ``$NOMAD_DEVICE_PYTHON``
    set to a path is the operator's choice: it runs, or the bundle refuses.
    """
    override = os.environ.get(ENV_PYTHON, "")
    if override == "bundled":
        return None
    if override and not override.startswith("/"):
        fail("cannot start plugin bundle: %s=%s is not an absolute path" % (ENV_PYTHON, override))
    candidates = _candidates()
    if not candidates:
        return None
    verdicts = read_verdicts(vfd)
    changed = fresh = False
    chosen = None
    for path, claim in candidates:
        stamp = _stamp(path)
        known = verdicts.get(path)
        if stamp is not None and known and known[0] == stamp and _stamp(known[3]) == known[4]:
            ok, detail, runs = known[1] == "ok", known[2], known[3]
        else:
            ok, detail, lasting, runs = prove(path, claim, bundle)
            fresh = True
            # A shim (pyenv's) picks its Python anew on every run: run the file it picked,
            # once that file has proven itself too, so that a later change behind the shim
            # (another version made global, this one uninstalled) cannot stop the plugin.
            # A wrapper whose file cannot run alone (it sets up an environment) is kept.
            if not ok or override or (runs != path and not prove(runs, claim, bundle)[0]):
                runs = path
            if (
                lasting
                and stamp is not None
                and "\t" not in path + runs
                and "\n" not in path + runs
            ):
                verdicts[path] = [stamp, "ok" if ok else "no", detail, runs, _stamp(runs) or ""]
                changed = True
        if ok:
            chosen = runs
            break
        if override:
            if changed:
                _write_verdicts(vfd, verdicts)
            fail(
                "cannot start plugin bundle: %s=%s %s; this bundle runs on CPython %s, or on "
                "its own interpreter with %s=bundled"
                % (
                    ENV_PYTHON,
                    override,
                    detail if detail.startswith("is ") else "cannot run it: " + detail,
                    _wanted_pythons(),
                    ENV_PYTHON,
                ),
                {"python": override},
            )
        _tried.append("%s (%s)" % (path, detail))
    if changed:
        _write_verdicts(vfd, verdicts)
    if _tried:
        # Said once the plugin is about to run: should the bundle's own fail first,
        # its one error line names them instead.
        runs = chosen or "its own CPython %d.%d.%d" % sys.version_info[:3]
        line = (
            "warn" if fresh else "info",
            "plugin bundle passes over node Pythons that cannot run it: %s; it runs on %s"
            % ("; ".join(_tried), runs),
            {"tried": list(_tried), "python": runs},
        )  # type: tuple[str, str, dict[str, object]]
        if chosen:
            log(*line)
        else:
            _passed_over.append(line)
    return chosen


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
            "cannot start plugin bundle %s: %s cannot run (%s)" % (bundle, python, exc.strerror),
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


#: The cache root the process that started this one uses (run as a plain Python).
_given_root = ""


def candidates() -> "list[str]":
    """Cache roots to try, best first. Each must be ours alone (see _walk)."""
    override = _given_root or os.environ.get(ENV_CACHE)
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


def cache_root() -> "tuple[int, str]":
    global _root
    refused = []  # type: list[str]
    override = _given_root or os.environ.get(ENV_CACHE)
    if override and not override.startswith("/"):
        fail(
            "plugin bundle refuses %s=%s: not an absolute path" % (ENV_CACHE, override),
            {"cache": override},
        )
    for root in candidates():
        fd, problem = _walk(root, create=True)
        if fd is not None:
            _root = root
            return fd, root
        refused.append("%s: %s" % (root, problem))
    fail(
        "plugin bundle has no safe cache directory to unpack into (%s); set %s to a "
        "directory owned by uid %d with mode 0700, below directories only root or that "
        "user can write" % ("; ".join(refused), ENV_CACHE, os.geteuid()),
        {"refused": refused},
    )
    raise AssertionError("unreachable")


# -- one version's directory and its parts: find, check, unpack, heal --------------------


def open_locked(dir_fd: int, name: str) -> "int | None":
    """A shared-locked descriptor of directory ``name``; None if it is not (or no longer) there."""
    import fcntl

    try:
        fd = os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a cleaner removes this very directory
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    held = os.fstat(fd)
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        return None
    return fd


#: Whether this process has checked the payload against its key (once is enough).
_verified = False

#: The parts this process unpacked (its copy won), each with the milliseconds it took.
_unpacked = []  # type: list[tuple[str, int]]


def open_version(bundle: str, bundle_fd: int, root_fd: int, root: str) -> int:
    """The locked directory of this version, made (empty) if need be, for a payload that hashed
    right: a directory under the key exists only for the payload the key names."""
    global _cache, _verified
    key = str(CONFIG["key"])
    _cache = os.path.join(root, key)
    for _ in range(4):
        fd = open_locked(root_fd, key)
        if fd is not None:
            return fd
        if not _verified:
            verify_payload(bundle, bundle_fd, _cache)
            _verified = True
        try:
            os.mkdir(key, 0o700, dir_fd=root_fd)
        except FileExistsError:
            pass
        except OSError as exc:
            fail(
                "plugin bundle cannot make its cache directory %s: %s; set %s"
                % (_cache, exc.strerror, ENV_CACHE),
                {"cache": _cache},
            )
    fail("plugin bundle could not settle its cache directory %s" % _cache, {"cache": _cache})
    raise AssertionError("unreachable")


def damaged(fd: int, part: str) -> "str | None":
    """None if the part's tree is as it was unpacked, else what changed.

    The mark lists every directory of the part (``.`` too) with its
    modification time: removing, adding or renaming a file changes its
    directory's, so one ``stat`` per directory tells a tree that lost a file.
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
    if not lines or lines[0] != "%s %s %s" % (MODULE, CONFIG["key"], part):
        return "its %s mark is not this bundle's" % MARK
    for line in lines[1:]:
        stamp, _, rel = line.partition(" ")
        try:
            if str(os.stat(rel, dir_fd=fd, follow_symlinks=False).st_mtime_ns) != stamp:
                return "%s changed" % rel
        except OSError:
            return "%s is missing" % rel
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


def _extract(archive: "object", top: int, part: str) -> "tuple[list[str], list[str]]":
    """The members under ``part/`` into ``top``, relative to descriptors; what was made.

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
        if parts[0] != part or len(parts) < 2:
            continue  # another part (another Python's code)
        if parts[1:] == [MARK]:
            raise ValueError("payload member %r would hide the cache's mark" % info.filename)
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
    skip = len(part) + 1
    if len(groups) == 1:
        _extract_some(archive, top, groups[0], skip, made, files)
        return made, files
    import threading

    def work(group: "list[object]") -> None:
        try:
            _extract_some(archive, top, group, skip, made, files)
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
    archive: "object",
    top: int,
    infos: "list[object]",
    skip: int,
    made: "list[str]",
    files: "list[str]",
) -> None:
    """``infos`` into ``top`` (their names less ``skip`` characters), in name order,
    keeping the chain of parent directories open."""
    import zipfile

    assert isinstance(archive, zipfile.ZipFile)
    chain = [("", top)]  # the open directories from top down to the last parent
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        for info in sorted(infos, key=lambda i: i.filename):  # type: ignore[attr-defined]
            assert isinstance(info, zipfile.ZipInfo)
            name = info.filename[skip:]
            parts = name.split("/")
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
            files.append(name)
    finally:
        for _, fd in chain[1:]:
            os.close(fd)


def _write_mark(top: int, part: str, made: "list[str]") -> None:
    """The mark, written last; the part's own modification time is set back to what it lists."""
    lines = ["%s %s %s" % (MODULE, CONFIG["key"], part)]
    for rel in made:
        lines.append("%d %s" % (os.stat(rel, dir_fd=top, follow_symlinks=False).st_mtime_ns, rel))
    before = os.fstat(top)
    lines.append("%d ." % before.st_mtime_ns)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(MARK, flags, 0o644, dir_fd=top)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    # Adding the mark changed the part's own time; a file removed from it later will again.
    os.utime(top, ns=(before.st_atime_ns, before.st_mtime_ns))


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


def _remove(dir_fd: int, name: str) -> None:
    import shutil

    try:
        shutil.rmtree(name, dir_fd=dir_fd)
    except (OSError, TypeError):
        pass


def unpack(bundle: str, bundle_fd: int, vfd: int, part: str) -> bool:
    """Unpack one part of the payload into a private directory, then rename it into place.

    Several first launches may race: each unpacks on its own, one rename wins,
    the others throw their copy away and use the winner's. True if ours won.
    Only what was written is made durable (the files, their directories, then
    the rename), never the node's other file systems.
    """
    import errno
    import time
    import zipfile

    global _verified
    start = time.time()
    target = os.path.join(_cache, part)
    if not _verified:
        verify_payload(bundle, bundle_fd, _cache)
        _verified = True
    tmp = ".unpack-" + os.urandom(8).hex()
    try:
        os.mkdir(tmp, 0o755, dir_fd=vfd)
    except OSError as exc:
        fail(
            "plugin bundle cannot unpack into cache directory %s: %s; set %s"
            % (_cache, exc.strerror, ENV_CACHE),
            {"cache": _cache},
        )
    try:
        top = os.open(tmp, _DIR_FLAGS | _NOFOLLOW, dir_fd=vfd)
        try:
            with zipfile.ZipFile(_payload(bundle_fd)) as archive:
                made, files = _extract(archive, top, part)
            _make_durable(top, made, files)
            # Written last: the mark says every file above is on disk.
            _write_mark(top, part, made)
            os.fsync(top)
        finally:
            os.close(top)
        try:
            os.rename(tmp, part, src_dir_fd=vfd, dst_dir_fd=vfd)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            _remove(vfd, tmp)
            log("debug", "another launch unpacked this part first", {"cache": target})
            return False
        os.fsync(vfd)
    except BaseException:
        _remove(vfd, tmp)
        raise
    ms = int((time.time() - start) * 1000)
    _unpacked.append((part, ms))
    log("debug", "unpacked a part of the plugin bundle", {"cache": target, "ms": ms})
    return True


def discard(root_fd: int, dir_fd: int, name: str, held: int) -> None:
    """Move a damaged part aside (once, however many launches found it damaged).

    A plugin already running from it keeps its files: it holds the directory
    itself, and its shared lock keeps the cleaner from removing it.
    """
    import fcntl

    fcntl.flock(root_fd, fcntl.LOCK_EX)
    try:
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        mine = os.fstat(held)
        if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            trash = ".trash-" + os.urandom(8).hex()
            os.rename(name, trash, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        fcntl.flock(root_fd, fcntl.LOCK_UN)


def settle_part(bundle: str, bundle_fd: int, root_fd: int, vfd: int, part: str) -> int:
    """The locked, checked directory of one part, unpacking or healing it first if need be."""
    target = os.path.join(_cache, part)
    unpacked = healed = False
    for _ in range(4):
        fd = open_locked(vfd, part)
        if fd is None:
            unpacked = unpack(bundle, bundle_fd, vfd, part) or unpacked
            continue
        problem = damaged(fd, part)
        if problem is None:
            return fd
        if healed or unpacked:
            os.close(fd)
            fail(
                "plugin bundle cache directory %s is still damaged after unpacking it "
                "again (%s)" % (target, problem),
                {"cache": target},
            )
        log(
            "warn",
            "plugin bundle cache directory %s is damaged (%s); unpacking it again"
            % (target, problem),
            {"cache": target},
        )
        discard(root_fd, vfd, part, fd)
        os.close(fd)
        healed = True
    fail("plugin bundle could not settle its cache directory %s" % target, {"cache": target})
    raise AssertionError("unreachable")


def _stale(dir_fd: int, entry: str) -> bool:
    import time

    try:
        st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return time.time() - st.st_mtime > STALE_SECONDS


def _drop_unused(dir_fd: int, entry: str) -> None:
    """Remove a directory no process holds (an exclusive lock, not waited for); else leave it."""
    import fcntl

    try:
        fd = os.open(entry, _DIR_FLAGS | _NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)  # in use
        return
    trash = entry if entry.startswith(".trash-") else ".trash-" + os.urandom(8).hex()
    try:
        if trash != entry:
            os.rename(entry, trash, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        os.close(fd)
        return
    os.close(fd)
    _remove(dir_fd, trash)


def clean(root_fd: int, vfd: int, name: str, current: str) -> None:
    """Bound the cache: keep the newest versions of ``name``; drop dead unpacks and trash.

    A version or part some process still runs holds a shared lock and is left alone.
    """
    for entry in os.listdir(vfd):
        if entry.startswith(".trash-"):
            _drop_unused(vfd, entry)
        elif entry.startswith((".unpack-", VERDICTS + "-")) and _stale(vfd, entry):
            _remove(vfd, entry)
            try:
                os.unlink(entry, dir_fd=vfd)
            except OSError:
                pass
    versions = []  # type: list[tuple[float, str]]
    for entry in os.listdir(root_fd):
        if entry.startswith(".unpack-"):
            if _stale(root_fd, entry):
                _remove(root_fd, entry)
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
        _drop_unused(root_fd, entry)


# -- running the plugin ------------------------------------------------------------------


def _pinned(fd: int, fallback: str) -> str:
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
    return fallback


def site_dirs(runtime: bool) -> "list[str]":
    """The payload's parts the running Python imports, most specific first."""
    tag = "site-cp%d%d" % sys.version_info[:2]
    listed = CONFIG.get("site_dirs") or ["site"]  # type: list[str]  # type: ignore[assignment]
    dirs = [d for d in listed if d in (tag, "site")]
    if runtime:
        dirs = ["stdlib", *dirs]
    return dirs


def _set_path(bundle: str, paths: "list[str]", runtime: bool) -> None:
    sys.dont_write_bytecode = True  # the cache is immutable: nothing may add files to it
    if runtime:
        sys.path[:] = paths  # the interpreter's own library, then the plugin's
    else:
        sys.path[:] = [p for p in sys.path if p != bundle] + paths


def run(bundle: str, args: "list[str]", runtime: bool) -> None:
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


def prove_imports() -> None:
    """Proving mode's end: import every native module carried for this Python, say the verdict."""
    native = CONFIG.get("native") or {}  # type: dict[str, list[str]]  # type: ignore[assignment]
    for part in site_dirs(False):
        for name in native.get(part, []):
            try:
                __import__(name)
            except Exception as exc:
                os.write(
                    1,
                    (
                        "%s no cannot import %s (%s)\n"
                        % (PROOF, name, _clean("%s: %s" % (type(exc).__name__, exc), 240))
                    ).encode("utf-8", "replace"),
                )
                sys.exit(3)
    os.write(1, ("%s ok\n" % PROOF).encode())
    sys.exit(0)


# -- the bundle as a plain Python, for the SDK's helper processes ------------------------

#: Options a plain ``python`` takes that the bundled interpreter always has in effect.
_ALWAYS = set("IBSEsP")


def python_command() -> "list[str]":
    """How to start this bundle's own interpreter as a plain Python (isolated, no site):
    ``BUNDLE --nomad-device-bundle-python [--cache DIR] [-I] [-S] (-c CODE | -m MODULE | FILE)``.

    The bundle's file while it is still the one running, else the running file
    itself (``/proc/self/exe`` in the child is the parent's, which an upgrade
    that replaced the file by name does not change).
    """
    exe = _bundle
    try:
        here = os.stat("/proc/self/exe")
        there = os.stat(exe)
        if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
            exe = "/proc/self/exe"
    except OSError:
        exe = "/proc/self/exe"
    # The same cache as this process (whose variables a helper may not get), so
    # that the child finds this very version unpacked.
    return [exe, AS_PYTHON, "--cache", _root]


def _python_usage(problem: str) -> None:
    os.write(
        2,
        (
            "%s %s: %s (usage: BUNDLE %s [--cache DIR] [-I] [-S] (-c CODE | -m MODULE | FILE) "
            "[ARG...])\n" % (MODULE, AS_PYTHON, problem, AS_PYTHON)
        ).encode("utf-8", "replace"),
    )
    sys.exit(2)


def run_python(args: "list[str]") -> None:
    """``python -c CODE``, ``-m MODULE`` or ``FILE``, with the bundle's library and packages.

    Always isolated, without site and without writing bytecode (the flags
    that say so are accepted); errors are Python's own (a traceback, exit 1),
    as for any Python.
    """
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] not in ("-c", "-m", "-"):
        flags = rest[0][1:]
        if not flags or not set(flags) <= _ALWAYS:
            _python_usage("option %s is not offered" % rest[0])
        rest.pop(0)
    if not rest or rest[0] == "-":
        _python_usage("no program given")
    import types

    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main_module
    try:
        _run_program(rest, main_module)
    except SystemExit:
        raise
    except BaseException as exc:
        # The program's traceback, as python prints it: without this module's frames,
        # and with the lines of its own -c code (not the launcher's, also "<string>").
        import linecache
        import traceback

        if rest[0] == "-c" and len(rest) > 1:
            lines = rest[1].splitlines(True)
            linecache.cache["<string>"] = (len(rest[1]), None, lines, "<string>")

        tb = exc.__traceback__
        ours = ("__main__", __name__)  # the launcher's command, then this module
        while (
            tb is not None
            and tb.tb_frame.f_globals is not main_module.__dict__
            and tb.tb_frame.f_globals.get("__name__") in ours
        ):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        sys.exit(1)


def _run_program(rest: "list[str]", main_module: "object") -> None:
    if rest[0] == "-c":
        if len(rest) < 2:
            _python_usage("-c needs an argument")
        sys.argv = ["-c", *rest[2:]]
        exec(compile(rest[1], "<string>", "exec"), main_module.__dict__)
        return
    import runpy

    if rest[0] == "-m":
        if len(rest) < 2:
            _python_usage("-m needs an argument")
        sys.argv = [rest[1], *rest[2:]]
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = list(rest)
    runpy.run_path(rest[0], run_name="__main__")


# Kept open (and so locked) for the life of the plugin; see open_locked.
_held = []  # type: list[int]

#: The version's cache directory once known, for every later error message.
_cache = ""

#: The bundle's path as it was started, and the cache root it uses.
_bundle = ""
_root = ""

#: Running a program as a plain Python (see run_python): its errors are its own.
_python_mode = False

#: The line that says which node Pythons were passed over, once the bundle's own runs.
_passed_over = []  # type: list[tuple[str, str, dict[str, object]]]


def _start(runtime: bool) -> None:
    global _bundle, _python_mode, _given_root, _quiet
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
    _bundle = bundle
    mode = "plugin"
    if runtime and args[:1] == [AS_PYTHON]:
        mode, args, _quiet = "python", args[1:], True
        if args[:1] == ["--cache"]:
            if len(args) < 2 or not args[1].startswith("/"):
                _python_usage("--cache needs an absolute path")
            _given_root, args = args[1], args[2:]
    elif not runtime and args[:1] == [PROVE]:
        mode, args = "prove", args[1:]
    bundle_fd = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    if runtime and mode == "plugin" and _pythons():
        check_node(bundle, True)  # the CPU and C library: the same for every Python here
        root_fd, root = cache_root()
        vfd = open_version(bundle, bundle_fd, root_fd, root)
        python = choose_python(bundle, vfd)
        if python is not None:
            exec_node_python(python, bundle, args)
    else:
        check_node(bundle, runtime)
        root_fd, root = cache_root()
        vfd = open_version(bundle, bundle_fd, root_fd, root)
    if runtime and mode == "plugin":
        refuse_mtls_without_ssl(bundle)
    _held.append(vfd)
    paths = []
    for part in site_dirs(runtime):
        fd = settle_part(bundle, bundle_fd, root_fd, vfd, part)
        _held.append(fd)
        paths.append(_pinned(fd, os.path.join(_cache, part)))
    os.close(bundle_fd)
    if _unpacked:
        log(
            "info",
            "unpacked plugin bundle",
            {
                "cache": _cache,
                "parts": [part for part, _ in _unpacked],
                "ms": sum(ms for _, ms in _unpacked),
            },
        )
        try:
            clean(root_fd, vfd, str(CONFIG["name"]), str(CONFIG["key"]))
        except OSError as exc:
            log("warn", "could not clean old bundle versions: %s" % exc, {"cache": root})
    os.close(root_fd)
    for level, message, fields in _passed_over:
        log(level, message, fields)
    _set_path(bundle, paths, runtime)
    if mode == "prove":
        prove_imports()
    elif mode == "python":
        _python_mode = True
        run_python(args)
    else:
        run(bundle, args, runtime)


def main(runtime: bool = False) -> None:
    try:
        _start(runtime)
    except Exception as exc:
        if _python_mode:
            raise  # a plain Python's own error: its traceback, as python prints it
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
