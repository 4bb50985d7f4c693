#!/usr/bin/env python3
"""ddpbench-fs (fs/, issue 34), the emulated storage profiles as a read-only FUSE mount,
driven as the daemon drives it (--ready-fd, signals), read from Python and from C
(tests/integration/storage_read.c: ddpbench's loader's own file reads):
- the pass-through: every file, folder and symlink of the source is there with the same
  bytes (listing order aside); the stats file is hidden from listings, reads as one JSON
  line and counts each open and each read request (a 4 MiB read is four 1 MiB requests:
  max_read) and the bytes, never its own reads;
- read-only: writing, creating, removing, renaming, chmod answer EROFS;
- the caps, as the in-process caps test measures them (tests/unit/test_data_storage.c,
  test_data_pipeline.py's test_storage_cap_and_cold): nfs and a custom 50 MB/s profile
  read from Python and from C with 1 and 4 readers measure within [90 %, 102 %] of the
  cap (the floor gets three attempts: one nfs reader's requests are synchronous, and
  their thread hand-offs plus 0.5 ms latency can outgrow a 1 MiB request's 5.2 ms on a
  loaded machine); a custom latency profile costs its latency per request (an open and a read per
  file), serialized by concurrency 1 and overlapped four at a time by concurrency 4;
- kill -9 of ddpbench-fs in the middle of a read: the reader gets ENOTCONN / ECONNABORTED
  / EIO within seconds (no hang), and the stale mount is detached;
- SIGTERM and SIGINT unmount and exit 0; --die-with-parent follows a killed parent;
- bad arguments exit 2 naming the option; a missing mount point or source, or no fuse
  device (a mount namespace with an empty /dev), exit 3 naming the cause.
Root with /dev/fuse (CI); without them the cases print SKIP with the reason."""
import ctypes
import errno
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import BUILD, Skip, check, run_cases

FS = os.path.join(BUILD, "fs", "ddpbench-fs")
READER = os.path.join(BUILD, "tests", "storage_read")
STATS = ".ddpbench-fs-stats"
MIB = 1 << 20
LOW, HIGH = 0.90, 1.02  # the goal for the measured rate / the cap
GONE = (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO)


def need_fuse():
    if not os.path.exists(FS):
        raise Skip(f"{FS} not built: libfuse3-dev is missing (deploy/install-deps.sh)")
    if not os.path.exists("/dev/fuse"):
        raise Skip("/dev/fuse is missing: no FUSE in this kernel or container")
    if os.geteuid() != 0:
        raise Skip("not root: the test mounts and detaches as root")


def mounted(mnt):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == mnt and line.split()[2] == "fuse.ddpbench-fs" for line in f)


def detach(mnt):
    """umount2(MNT_DETACH): what the daemon does to a stale mount."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(mnt.encode(), 2) != 0:
        return ctypes.get_errno()
    return 0


class Mount:
    """ddpbench-fs of src at a fresh mount point, started as the daemon starts it (a
    ready pipe), stopped with SIGTERM (exit 0, unmounted) unless the case killed it."""

    def __init__(self, src, storage="local", *args):
        self.src = src
        self.mnt = tempfile.mkdtemp(prefix="ddpb-fs-mnt-")
        r, w = os.pipe()
        self.proc = subprocess.Popen([FS, "--source", src, "--mount", self.mnt, "--storage", storage,
                                      "--ready-fd", str(w), *args],
                                     pass_fds=(w,), stderr=subprocess.PIPE, text=True)
        os.close(w)
        ready = b""
        deadline = time.monotonic() + 20
        while not ready.endswith(b"\n") and time.monotonic() < deadline:
            chunk = os.read(r, 16)
            if not chunk:
                break
            ready += chunk
        os.close(r)
        if ready != b"ready\n":
            self.proc.kill()
            err = self.proc.communicate(timeout=10)[1]
            raise AssertionError(f"ddpbench-fs not ready ({ready!r}): {err}")
        check(mounted(self.mnt), f"{self.mnt} is not a fuse.ddpbench-fs mount")

    def path(self, *names):
        return os.path.join(self.mnt, *names)

    def stats(self):
        with open(self.path(STATS)) as f:
            text = f.read()
        check(text.endswith("\n") and text.count("\n") == 1, text)
        return json.loads(text)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=20)
        finally:
            if mounted(self.mnt):
                detach(self.mnt)
            os.rmdir(self.mnt)
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None:
            check(rc == 0, f"ddpbench-fs exited {rc}: {self.proc.stderr.read()}")


def make_tree(root):
    """Files of several sizes (empty, one byte, across 1 MiB boundaries), nested folders,
    a symlink, and a real file named like the stats file deeper down (only the root's is
    virtual)."""
    rnd = os.urandom
    files = {"empty": b"", "one": b"x", "a/small.bin": rnd(1000), "a/b/mid.bin": rnd(MIB + 17),
             "a/b/c/big.bin": rnd(4 * MIB), "z/" + STATS: b"a real file"}
    for rel, data in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    os.makedirs(os.path.join(root, "emptydir"))
    os.symlink("a/small.bin", os.path.join(root, "link"))
    return files


def walk(root):
    """{relative path: ("d", None) | ("l", target) | ("f", bytes)}"""
    out = {}
    for d, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d", None)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", f.read())
    return out


def test_passthrough_and_stats():
    need_fuse()
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        files = make_tree(src)
        with Mount(src) as m:
            want, got = walk(src), walk(m.mnt)
            check(set(got) == set(want), (sorted(set(got) ^ set(want))))
            for rel in want:
                check(got[rel] == want[rel], f"{rel} differs through the mount")
            check(sorted(os.listdir(m.path("a"))) == sorted(os.listdir(os.path.join(src, "a"))))
            check(os.path.getsize(m.path("a/b/mid.bin")) == MIB + 17)
            with open(m.path("link"), "rb") as f:
                check(f.read() == files["a/small.bin"], "the symlink resolves through the mount")
            # the stats file: at the root only, hidden, one JSON line, never counting itself
            check(STATS not in os.listdir(m.mnt), os.listdir(m.mnt))
            check(os.path.isfile(m.path(STATS)))
            s0 = m.stats()
            check(set(s0) == {"requests", "bytes", "wait_ns", "read_ns"}, s0)
            check(m.stats()["requests"] == s0["requests"], "reading the stats file counted")
            # one open + four reads of 1 MiB (max_read) from a page-aligned 4 MiB buffer
            buf = mmap.mmap(-1, 4 * MIB)
            fd = os.open(m.path("a/b/c/big.bin"), os.O_RDONLY)
            n = os.preadv(fd, [buf], 0)
            os.close(fd)
            check(n == 4 * MIB and bytes(buf) == files["a/b/c/big.bin"])
            s1 = m.stats()
            check(s1["requests"] - s0["requests"] == 5, (s0, s1))
            check(s1["bytes"] - s0["bytes"] == 4 * MIB, (s0, s1))
            check(s1["read_ns"] > s0["read_ns"], (s0, s1))


def test_read_only():
    need_fuse()
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        make_tree(src)
        before = walk(src)
        with Mount(src) as m:
            attempts = {
                "create": lambda: open(m.path("new"), "wb"),
                "write": lambda: open(m.path("one"), "r+b"),
                "append": lambda: open(m.path("one"), "ab"),
                "truncate": lambda: os.truncate(m.path("one"), 0),
                "unlink": lambda: os.unlink(m.path("one")),
                "mkdir": lambda: os.mkdir(m.path("d")),
                "rmdir": lambda: os.rmdir(m.path("emptydir")),
                "rename": lambda: os.rename(m.path("one"), m.path("two")),
                "symlink": lambda: os.symlink("one", m.path("l2")),
                "chmod": lambda: os.chmod(m.path("one"), 0o600),
                "stats": lambda: open(m.path(STATS), "wb"),
            }
            for what, fn in attempts.items():
                try:
                    fn()
                    check(False, f"{what} succeeded on the read-only mount")
                except OSError as e:
                    check(e.errno == errno.EROFS, f"{what}: {e}")
        check(walk(src) == before, "the source changed")


def write_set(root, count, size):
    """count fresh files of size random bytes; their paths."""
    paths = []
    for i in range(count):
        p = os.path.join(root, f"f{i:03d}.bin")
        with open(p, "wb") as f:
            f.write(os.urandom(size))
        paths.append(p)
    return paths


def threaded(paths, readers, read_one):
    """read_one(path) -> bytes read, from `readers` threads taking the files in turn:
    (bytes, seconds); an OSError in any thread fails the check."""
    it = iter(paths)
    lock = threading.Lock()
    total = [0]
    errors = []

    def work():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            try:
                n = read_one(p)
            except OSError as e:
                errors.append(e)
                return
            with lock:
                total[0] += n

    t0 = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, errors)
    return total[0], time.monotonic() - t0


def read_whole(path):
    """A file whole, as a loader reads a sample file (open, read to the end)."""
    with open(path, "rb", buffering=0) as f:
        return len(f.read())


def pread_exact(path):
    """An open and one pread of the file's size: two requests, as the C loader makes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return len(os.pread(fd, os.fstat(fd).st_size, 0))
    finally:
        os.close(fd)


def py_read(paths, readers):
    return threaded(paths, readers, read_whole)


def c_read(paths, readers):
    r = subprocess.run([READER, str(readers), *paths], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, (r.returncode, r.stderr))
    out = json.loads(r.stdout)
    return out["bytes"], out["seconds"]


def measure(src_paths, storage, args, fn, readers):
    """One reading of every file through a fresh mount (a new storage banks nothing):
    MB/s, with the mount's byte count checked against what the reader got."""
    with Mount(os.path.dirname(src_paths[0]), storage, *args) as m:
        paths = [m.path(os.path.basename(p)) for p in src_paths]
        n, secs = fn(paths, readers)
        st = m.stats()
    check(n == len(paths) * os.path.getsize(src_paths[0]), n)
    check(st["bytes"] == n, (st, n))
    return n / secs / 1e6


def rate_checks(src_paths, storage, args, cap):
    """The caps from Python and from C, 1 and 4 readers. The cap is a hard ceiling on
    every attempt; the floor is a goal a loaded machine can miss (a sleeping server thread
    wakes late: at load 9 on 2 cores one nfs reader measured 88-91 %), so it gets up to
    three attempts."""
    for lang, fn in (("python", py_read), ("c", c_read)):
        for readers in (1, 4):
            for attempt in range(3):
                mbps = measure(src_paths, storage, args, fn, readers)
                print(f"  {storage} {' '.join(args)}: {lang}, {readers} reader(s): {mbps:.1f} MB/s "
                      f"= {mbps / cap:.1%} of {cap:g}", flush=True)
                check(mbps <= HIGH * cap, f"{storage} {lang} x{readers}: {mbps:.1f} MB/s over {cap}")
                if mbps >= LOW * cap:
                    break
            check(mbps >= LOW * cap, f"{storage} {lang} x{readers}: {mbps:.1f} MB/s under {LOW:.0%} of {cap}")


def test_caps_nfs():
    need_fuse()
    check(os.path.exists(READER), f"{READER} not built")
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        # 134 MB: 0.67 s at nfs's 200 MB/s, in files large enough that an open's round
        # trips (its latency, lookup, release: ~2 ms under load) stay a small share
        paths = write_set(src, 8, 16 * MIB)
        rate_checks(paths, "nfs", [], 200.0)


def test_caps_custom():
    need_fuse()
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        paths = write_set(src, 4, 16 * MIB)  # 67 MB: 1.3 s at 50 MB/s
        rate_checks(paths, "custom", ["--read-mbps", "50"], 50.0)


def test_latency_per_request():
    """20 files of 1000 bytes, each an open and one read (os.pread of its size; C reads
    open + pread too): 40 requests at 10 ms, >= 400 ms serialized by concurrency 1, four
    at a time with 4 (>= 100 ms, well under the serial 400 ms)."""
    need_fuse()
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        paths = write_set(src, 20, 1000)

        def py_small(mpaths, readers):
            return threaded(mpaths, readers, pread_exact)

        for lang, fn in (("python", py_small), ("c", c_read)):
            for conc, readers, lo, hi in ((1, 4, 0.400, 0.700), (4, 4, 0.100, 0.300)):
                with Mount(src, "custom", "--read-latency-ms", "10", "--read-concurrency", str(conc)) as m:
                    n, secs = fn([m.path(os.path.basename(p)) for p in paths], readers)
                    st = m.stats()
                print(f"  40 requests at 10 ms, concurrency {conc}, {lang}: {secs * 1e3:.0f} ms, "
                      f"{st['requests']} requests", flush=True)
                check(n == 20000, n)
                check(st["requests"] == 40, st)
                check(st["wait_ns"] >= 40 * 10_000_000, st)
                check(lo <= secs <= hi, f"{lang} concurrency {conc}: {secs:.3f} s not in [{lo}, {hi}]")


def test_kill9_mid_read():
    """A reader in the middle of a 64 MiB file at 4 MB/s when ddpbench-fs is killed: it
    gets an error within seconds (the kernel aborts the connection), never hangs; the
    stale mount answers ENOTCONN until it is detached."""
    need_fuse()
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        write_set(src, 1, 64 * MIB)
        m = Mount(src, "custom", "--read-mbps", "4")
        code = ("import os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                "off = 0\n"
                "try:\n"
                "    while True:\n"
                "        b = os.pread(fd, 1 << 20, off)\n"
                "        if not b: break\n"
                "        off += len(b)\n"
                "        print('read', off, flush=True)\n"
                "except OSError as e:\n"
                "    print('errno', e.errno, off, flush=True); sys.exit(0)\n"
                "print('eof', off, flush=True)\n")
        reader = subprocess.Popen([sys.executable, "-c", code, m.path("f000.bin")],
                                  stdout=subprocess.PIPE, text=True)
        first = reader.stdout.readline()
        check(first.startswith("read "), first)
        os.kill(m.proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        try:
            out, _ = reader.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.communicate()
            check(False, "the reader hung after ddpbench-fs was killed")
        took = time.monotonic() - t0
        last = out.strip().splitlines()[-1] if out.strip() else ""
        print(f"  reader after kill -9: {last!r} in {took:.2f} s", flush=True)
        check(last.startswith("errno "), out)
        check(int(last.split()[1]) in GONE, last)
        check(took < 10, took)
        check(m.proc.wait(timeout=10) == -signal.SIGKILL)
        check(mounted(m.mnt), "the killed server's mount should still be listed")
        try:  # an open always reaches the server (attributes may be cached)
            os.close(os.open(m.path("f000.bin"), os.O_RDONLY))
            check(False, "open on the dead mount succeeded")
        except OSError as e:
            check(e.errno in GONE, e)
        if shutil.which("fusermount3"):
            r = subprocess.run(["fusermount3", "-uz", m.mnt], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, r.stderr)
        else:
            check(detach(m.mnt) == 0)
        check(not mounted(m.mnt), "the stale mount is still there")
        os.rmdir(m.mnt)


def test_signals_and_parent():
    need_fuse()
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-src-") as src:
        make_tree(src)
        for sig in (signal.SIGTERM, signal.SIGINT):
            m = Mount(src, "nfs")
            mnt = m.mnt
            rc = m.proc.poll()
            check(rc is None, rc)
            m.proc.send_signal(sig)
            rc = m.proc.wait(timeout=20)
            check(rc == 0, (sig, rc, m.proc.stderr.read()))
            check(not mounted(mnt), f"{mnt} still mounted after {sig.name}")
            os.rmdir(mnt)
        # --die-with-parent: the parent (a shell that waits) killed, ddpbench-fs unmounts
        mnt = tempfile.mkdtemp(prefix="ddpb-fs-mnt-")
        parent = subprocess.Popen(["sh", "-c", f'"{FS}" --source "{src}" --mount "{mnt}" --storage local '
                                   f'--die-with-parent & echo $!; wait'], stdout=subprocess.PIPE, text=True)
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 20
        while not mounted(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(mounted(mnt), "not mounted")
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 20
        while (mounted(mnt) or os.path.exists(f"/proc/{child}")) and time.monotonic() < deadline:
            time.sleep(0.05)
        gone = not mounted(mnt)
        if not gone:
            detach(mnt)
        check(gone, "ddpbench-fs outlived its parent's death with the mount")
        os.rmdir(mnt)


def run_fs(*args, prefix=()):
    return subprocess.run([*prefix, FS, *args], capture_output=True, text=True, timeout=60)


def test_bad_arguments_and_mount_failures():
    if not os.path.exists(FS):
        raise Skip(f"{FS} not built: libfuse3-dev is missing (deploy/install-deps.sh)")
    with tempfile.TemporaryDirectory(prefix="ddpb-fs-") as d:
        src, mnt = os.path.join(d, "src"), os.path.join(d, "mnt")
        os.makedirs(src)
        os.makedirs(mnt)
        base = ["--source", src, "--mount", mnt]
        for args, needle in (([], "--source"),
                             (["--source", src, "--storage", "nfs"], "--mount"),
                             (base, "--storage"),
                             (base + ["--storage", "tape"], "tape"),
                             (base + ["--storage", "custom", "--read-mbps", "fast"], "--read-mbps"),
                             (base + ["--storage", "custom", "--read-mbps", "-5"], "--read-mbps"),
                             (base + ["--storage", "custom", "--read-latency-ms", "nan"], "--read-latency-ms"),
                             (base + ["--storage", "custom", "--read-concurrency", "5000"], "--read-concurrency"),
                             (base + ["--storage", "nfs", "--ready-fd", "987"], "--ready-fd"),
                             (base + ["--storage", "nfs", "--frobnicate"], "--frobnicate"),
                             (base + ["--storage", "nfs", "extra"], "extra")):
            r = run_fs(*args)
            check(r.returncode == 2, (args, r.returncode, r.stderr))
            check(needle in r.stderr, (args, r.stderr))
        check(not mounted(mnt))
        r = run_fs("--help")
        check(r.returncode == 0 and "--source" in r.stdout, r)
        # the mount fails: exit 3 naming the cause
        r = run_fs("--source", src, "--mount", os.path.join(d, "nowhere"), "--storage", "nfs")
        check(r.returncode == 3 and "nowhere" in r.stderr and "No such file" in r.stderr, r)
        r = run_fs("--source", os.path.join(d, "nosrc"), "--mount", mnt, "--storage", "nfs")
        check(r.returncode == 3 and "nosrc" in r.stderr, r)
        if os.geteuid() != 0 or not shutil.which("unshare"):
            raise Skip("the no-device case needs root and unshare (util-linux) for a private /dev")
        # no fuse device: a private mount namespace whose /dev is an empty tmpfs
        r = run_fs("--source", src, "--mount", mnt, "--storage", "nfs",
                   prefix=("unshare", "--mount", "--propagation", "private", "sh", "-c",
                           'mount -t tmpfs none /dev && exec "$0" "$@"'))
        check(r.returncode == 3 and "/dev/fuse" in r.stderr, r)
        check(not mounted(mnt))


if __name__ == "__main__":
    sys.exit(run_cases([test_passthrough_and_stats, test_read_only, test_caps_nfs, test_caps_custom,
                        test_latency_per_request, test_kill9_mid_read, test_signals_and_parent,
                        test_bad_arguments_and_mount_failures]))
