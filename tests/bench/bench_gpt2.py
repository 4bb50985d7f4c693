#!/usr/bin/python3
"""GPT-2 small training step on the CPU, 1 rank: ddpbench against PyTorch and llm.c.

  tests/bench/bench_gpt2.py --build build [--rounds 3] [--steps 10] [--warmup 3]
                            [--threads 2] [--batch 4] [--seq-len 64]
                            [--llmc /path/to/llm.c] [--json F]

Three implementations train GPT-2 small (124M parameters, vocabulary 50257, 1024
positions, 12 pre-norm blocks, GELU tanh, tied output projection, no dropout) in fp32 on
batch 4 x 64 tokens of random token ids with Adam lr 1e-4 (no weight decay), at the same
thread count:

ddpbench   the real worker run by a real ddpbenchd (started here with more CPU slots than
           CPUs, so it pins nothing): one experiment per round, world_size 1,
           model gpt2-small, dataset synthetic (one fixed batch), steps = warmup + steps;
           its figure is the median of the stored per-step step_ms
           (GET /v1/runs/ID/steps, warm-up steps excluded), with forward / backward /
           optimizer medians from the same rows.
PyTorch    tests/bench/gpt2_torch.py under Debian's /usr/bin/python3 (python3-torch 1.13):
           the same architecture written as a plain module, torch.optim.Adam, one fixed
           batch; median of its timed steps (forward+loss, backward, optimizer).
llm.c      Karpathy's CPU reference trainer train_gpt2.c, from a checkout or a bare git
           directory of github.com/karpathy/llm.c (--llmc; HEAD is read with git show).
           train_gpt2.c and the llmc/*.h it includes are copied into a fresh directory
           under /tmp (never into this tree) and built there with its Makefile's CPU flags
           (gcc -Ofast -march=native -fopenmp -DOMP ... -lm). Its main() has no options, so
           the copy's constants are patched: B and T, the step count (warm-up + timed), and
           its untimed extras switched off (the validation loss every 10 steps, the sampling
           every 20). It reads gpt2_124M.bin (written here: the 256-int32 header, magic
           20240326, version 3, maxT 1024, V 50257, L 12, NH 12, C 768, Vp 50304, then the
           float32 parameters in its order and sizes, N(0, 0.02) weights, LayerNorm 1 / 0,
           biases 0, the padded vocabulary rows 0) and token shards in its data format
           (256-int32 header, magic 20240520, version 1, token count, then uint16 tokens
           drawn uniformly from the vocabulary) at the paths its main() looks for; without
           gpt2_tokenizer.bin it warns and goes on (the tokenizer only serves sampling). Its
           step is dataloader_next_batch, forward, zero_grad, backward and its AdamW
           (weight decay 0 = Adam, lr 1e-4) as it prints it ("took X ms"); its figure is the
           median of the steps after the warm-up. llm.c pads the vocabulary to 50304 (a
           multiple of 128), so its lm head computes 47 columns (0.09 %) more; its data
           loader draws a fresh batch each step (the others reuse one; the work is the
           same).

Every peer runs with the glibc settings that keep freed memory (MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=4294967296), --threads threads (ddpbench's "threads"; PyTorch's
torch.set_num_threads and OMP/OPENBLAS/MKL_NUM_THREADS via tests/bench/torch_threads.py;
llm.c's OMP_NUM_THREADS), one at a time, interleaved round by round (ddpbench, PyTorch,
llm.c in round 0, the order rotated each round). Headline: per peer the median over
rounds of its per-round median step ms, and peer ms / ddpbench ms (>= 1.0: ddpbench is as
fast or faster). The best round follows as a second view. A benchmark: it prints figures
and ratios, never pass/fail. Takes /tmp/ddpb-bench.lock itself (flock) from the llm.c
build to the end, so do not run it under flock(1) on the same file: it would wait for its
own parent.
"""
import fcntl, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_threads  # noqa: E402
from bench_train import Daemon, bench_args, write_json  # noqa: E402

LOCK = "/tmp/ddpb-bench.lock"
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
LR = 1e-4
# GPT-2 small as llm.c's checkpoint header describes it
MAXT, V, VP, L, NH, C = 1024, 50257, 50304, 12, 12, 768
PEERS = ["ddpbench", "torch", "llmc"]
NAMES = {"ddpbench": "ddpbench", "torch": "PyTorch 1.13", "llmc": "llm.c train_gpt2.c"}
# the llm.c Makefile's CPU flags (CFLAGS, CFLAGS_COND, the OpenMP check, LDLIBS)
LLMC_CFLAGS = ["-Ofast", "-Wno-unused-result", "-Wno-ignored-pragmas", "-Wno-unknown-attributes",
               "-march=native", "-fopenmp", "-DOMP"]
# (what, the text in train_gpt2.c's main(), its replacement): each must occur exactly once
LLMC_PATCHES = [
    ("batch size", "int B = 4;", "int B = LLMC_B;"),
    ("sequence length", "int T = 64;", "int T = LLMC_T;"),
    ("step count", "step <= 40;", "step <= LLMC_LAST_STEP;"),
    ("validation loss", "if (step % 10 == 0) {", "if (LLMC_VAL && step % 10 == 0) {"),
    ("sampling", "if (step > 0 && step % 20 == 0) {",
     "if (LLMC_SAMPLE && step > 0 && step % 20 == 0) {"),
]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def peer_env(threads):
    env = torch_threads.thread_env(threads)
    env.update(MALLOC_ENV)
    return env


# ---------------------------------------------------------------------------- llm.c

def llmc_show(src, path):
    """A file of llm.c: from a directory holding it, else git show HEAD:path of src."""
    if os.path.isfile(os.path.join(src, path)):
        with open(os.path.join(src, path)) as f:
            return f.read()
    return subprocess.run(["git", "--git-dir", src if os.path.isfile(os.path.join(src, "HEAD"))
                           else os.path.join(src, ".git"), "show", f"HEAD:{path}"],
                          check=True, capture_output=True, text=True).stdout


def llmc_commit(src):
    if os.path.isfile(os.path.join(src, "HEAD")) or os.path.isdir(os.path.join(src, ".git")):
        gd = src if os.path.isfile(os.path.join(src, "HEAD")) else os.path.join(src, ".git")
        r = subprocess.run(["git", "--git-dir", gd, "log", "-1", "--format=%H %cs"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.strip()
    return "unknown"


def llmc_write_checkpoint(path):
    """gpt2_124M.bin in llm.c's format (gpt2_build_from_checkpoint), random weights."""
    import numpy as np
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, 3, MAXT, V, L, NH, C, VP]
    rng = np.random.default_rng(1)

    def normal(n):
        return (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02))

    wte = normal(VP * C).reshape(VP, C)
    wte[V:] = 0  # llm.c's export pads the vocabulary with zero rows
    # fill_in_parameter_sizes: wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w,
    # ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb
    tensors = [wte.ravel(), normal(MAXT * C), np.ones(L * C, np.float32),
               np.zeros(L * C, np.float32), normal(L * 3 * C * C),
               np.zeros(L * 3 * C, np.float32), normal(L * C * C), np.zeros(L * C, np.float32),
               np.ones(L * C, np.float32), np.zeros(L * C, np.float32), normal(L * 4 * C * C),
               np.zeros(L * 4 * C, np.float32), normal(L * C * 4 * C),
               np.zeros(L * C, np.float32), np.ones(C, np.float32), np.zeros(C, np.float32)]
    with open(path, "wb") as f:
        header.tofile(f)
        for t in tensors:
            t.tofile(f)
    return sum(t.size for t in tensors)


def llmc_write_tokens(path, ntok, seed):
    """A token shard in llm.c's data format (dataloader.h)."""
    import numpy as np
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, ntok]
    toks = np.random.default_rng(seed).integers(0, V, ntok, dtype=np.uint16)
    with open(path, "wb") as f:
        header.tofile(f)
        toks.tofile(f)


def llmc_prepare(src, a):
    """Builds the patched copy of train_gpt2.c in a new directory under /tmp with its inputs;
    returns (directory, description)."""
    d = tempfile.mkdtemp(prefix="ddpb-llmc-", dir="/tmp")
    code = llmc_show(src, "train_gpt2.c")
    for what, old, new in LLMC_PATCHES:
        if code.count(old) != 1:
            raise SystemExit(f"llm.c: train_gpt2.c has {code.count(old)} x '{old}' ({what}), "
                             "expected 1: this script knows another version of it")
        code = code.replace(old, new)
    with open(os.path.join(d, "train_gpt2.c"), "w") as f:
        f.write(code)
    # the project headers it includes, and theirs
    todo = [("", code)]
    seen = set()
    while todo:
        base, text = todo.pop()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            p = os.path.normpath(os.path.join(base, inc))
            if p in seen:
                continue
            seen.add(p)
            body = llmc_show(src, p)
            os.makedirs(os.path.join(d, os.path.dirname(p)), exist_ok=True)
            with open(os.path.join(d, p), "w") as f:
                f.write(body)
            todo.append((os.path.dirname(p), body))
    defs = [f"-DLLMC_B={a.batch}", f"-DLLMC_T={a.seq_len}",
            f"-DLLMC_LAST_STEP={a.warmup + a.steps - 1}", "-DLLMC_VAL=0", "-DLLMC_SAMPLE=0"]
    cmd = ["gcc"] + LLMC_CFLAGS + defs + ["train_gpt2.c", "-lm", "-o", "train_gpt2"]
    subprocess.run(cmd, cwd=d, check=True)
    n = llmc_write_checkpoint(os.path.join(d, "gpt2_124M.bin"))
    os.makedirs(os.path.join(d, "dev/data/tinyshakespeare"))
    ntok = max(1 << 20, 2 * (a.warmup + a.steps + 1) * a.batch * a.seq_len)
    llmc_write_tokens(os.path.join(d, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin"),
                      ntok, 2)
    llmc_write_tokens(os.path.join(d, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin"),
                      1 << 16, 3)
    desc = {"dir": d, "commit": llmc_commit(src), "headers": sorted(seen), "build": " ".join(cmd),
            "params_in_checkpoint": n, "gcc": subprocess.run(["gcc", "--version"],
                                                             capture_output=True,
                                                             text=True).stdout.splitlines()[0]}
    log(f"llm.c {desc['commit']} built in {d} ({n} parameters in its checkpoint, Vp {VP})")
    return d, desc


def llmc_run(d, a):
    out = subprocess.run(["./train_gpt2"], cwd=d, env=peer_env(a.threads), check=True,
                         capture_output=True, text=True).stdout
    steps = [(int(s), float(ms)) for s, ms in
             re.findall(r"^step (\d+): train loss \S+ \(took ([0-9.]+) ms\)", out, re.M)]
    if len(steps) != a.warmup + a.steps:
        raise SystemExit(f"llm.c printed {len(steps)} steps, expected {a.warmup + a.steps}:\n"
                         + out[-2000:])
    ms = [m for s, m in steps if s >= a.warmup]
    return {"step_ms": ms, "step_ms_median": statistics.median(ms)}


# ---------------------------------------------------------------------------- peers

def torch_run(a):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "gpt2_torch.py"), "--batch", str(a.batch),
           "--seq-len", str(a.seq_len), "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--threads", str(a.threads), "--lr", str(LR)]
    out = subprocess.run(cmd, env=peer_env(a.threads), check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ddpbench_spec(a):
    return {"name": "bench gpt2-small", "workload": "train", "model": "gpt2-small",
            "seq_len": a.seq_len, "batch_size": a.batch, "steps": a.warmup + a.steps,
            "warmup_steps": a.warmup, "threads": a.threads,
            "optimizer": {"type": "adam", "lr": LR}, "dataset": {"name": "synthetic"},
            "timeout_s": 3600}


def ddpbench_run(d, a):
    e = d.finish(ddpbench_spec(a))
    run = e["runs"][0]["id"]
    st = d.call(f"/v1/runs/{run}/steps")
    cols = st["columns"]
    rows = [dict(zip(cols, r)) for r in st["rows"] if not r[cols.index("warmup")]]
    if len(rows) != a.steps:
        raise SystemExit(f"ddpbench run {run}: {len(rows)} timed steps, expected {a.steps}")
    med = statistics.median
    res = {"experiment": e["id"], "run": run, "step_ms": [r["step_ms"] for r in rows]}
    for k in ("step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms"):
        res[k + "_median"] = med([r[k] for r in rows])
    res["last_loss"] = rows[-1]["loss"]
    return res


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ---------------------------------------------------------------------------- report

def report(res, agg, view):
    rounds = res["rounds"]
    fig = {p: agg([r[p]["step_ms_median"] for r in rounds]) for p in PEERS}
    print(f"\n### GPT-2 small training step, 1 rank, batch {res['batch']} x {res['seq_len']} "
          f"tokens, {res['threads']} threads (ms per step, {view})\n")
    print("| implementation | step ms | per round | peer ms / ddpbench ms |")
    print("|---|---:|---|---:|")
    for p in PEERS:
        per = ", ".join(f"{r[p]['step_ms_median']:.0f}" for r in rounds)
        ratio = "-" if p == "ddpbench" else f"{fig[p] / fig['ddpbench']:.2f}"
        print(f"| {NAMES[p]} | {fig[p]:.0f} | {per} | {ratio} |")


def report_phases(res):
    med = statistics.median
    rounds = res["rounds"]
    print("\n### Where a step goes (ms, median of rounds of the per-step medians)\n")
    print("| implementation | forward (+loss) | backward | optimizer | step |")
    print("|---|---:|---:|---:|---:|")
    for p in ("ddpbench", "torch"):
        f = {k: med([r[p][k + "_median"] for r in rounds])
             for k in ("forward_ms", "backward_ms", "optimizer_ms", "step_ms")}
        print(f"| {NAMES[p]} | {f['forward_ms']:.0f} | {f['backward_ms']:.0f} | "
              f"{f['optimizer_ms']:.0f} | {f['step_ms']:.0f} |")
    print(f"| {NAMES['llmc']} | - | - | - | "
          f"{med([r['llmc']['step_ms_median'] for r in rounds]):.0f} |")


def main():
    ap = bench_args(3, description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps per peer and round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--llmc", default=os.environ.get("LLMC", "/work/.mirror/karpathy+llm.c/repo"),
                    help="llm.c checkout or bare git directory (default $LLMC or the mirror)")
    ap.add_argument("--keep-llmc", action="store_true", help="keep the /tmp llm.c directory")
    a = ap.parse_args()
    os.environ.update(MALLOC_ENV)
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "batch": a.batch, "seq_len": a.seq_len,
           "threads": a.threads, "steps": a.steps, "warmup": a.warmup, "lr": LR,
           "cpus": os.cpu_count(), "spec": ddpbench_spec(a), "rounds": []}
    with open(LOCK, "w") as lock:
        log(f"waiting for {LOCK}")
        fcntl.flock(lock, fcntl.LOCK_EX)
        d = None
        ldir, res["llmc"] = llmc_prepare(a.llmc, a)
        try:
            d = Daemon(a.build, 4 * os.cpu_count())
            for r in range(a.rounds):
                rnd = {"order": PEERS[r % 3:] + PEERS[:r % 3], "load_before": loadavg()}
                for p in rnd["order"]:
                    t0 = time.monotonic()
                    rnd[p] = (ddpbench_run(d, a) if p == "ddpbench" else torch_run(a)
                              if p == "torch" else llmc_run(ldir, a))
                    rnd[p]["wall_s"] = time.monotonic() - t0
                rnd["load_after"] = loadavg()
                res["rounds"].append(rnd)
                log(f"round {r}: " + ", ".join(f"{p} {rnd[p]['step_ms_median']:.0f} ms"
                                               for p in PEERS)
                    + f" (load {rnd['load_before']:.2f} -> {rnd['load_after']:.2f})")
        finally:
            if d:
                d.close()
            if not a.keep_llmc:
                shutil.rmtree(ldir, ignore_errors=True)
    if res["rounds"]:
        report(res, statistics.median, "median of rounds")
        report(res, min, "best round, second view")
        report_phases(res)
    write_json(a.json, res)


if __name__ == "__main__":
    main()
