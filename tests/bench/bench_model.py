#!/usr/bin/python3
"""How well the performance model (docs/model.md) predicts what ddpbench measures: every row
a user can produce (issues 18 and 35), in one command.

  tests/bench/bench_model.py --build build [--rounds 3 | --minutes M] [--parts P,...]
                             [--models mnist-cnn,resnet18] [--worlds 2,4] [--quick]
                             [--json F] [--md F]

Parts (--parts, default all; each is skipped with its reason when the daemon refuses it):
  grid         the Issue-18 grid: mnist-cnn and resnet18, strategies naive, ddp, horovod,
               zero1, zero2, each at 1 rank and at every --worlds size;
  engines      the pytorch (ddp) and horovod engines at the same sizes and models;
  pipelines    gpt2-tiny and resnet18 pipelines, schedules gpipe and 1f1b, P = every
               --worlds size (one replica: world size P, 4 micro-batches);
  netlab       2 emulated nodes (deploy/netlab.sh, root) under each --profiles profile:
               strategy ddp at 1 rank, 2 ranks on 2 nodes and 4 ranks on 2 nodes, with
               that profile's own collective fits;
  calibrate    the co-location calibration (workload "calibrate"), once per model before
               the rounds: its wall time is the calibration cost;
  extrapolate  no runs of its own: each results table again with ?pred_max_world=N/2 (the
               largest world size whose fits and base the prediction may use), so a
               4-rank row is predicted from 1- and 2-rank data only, against what was
               measured.

Every round (parts interleaved, strategies and engines rotated per round) runs first its
collective fits: ddpbench's allreduce, reduce_scatter and all_gather (plus sendrecv for
pipelines) at every --worlds size, 4 KiB to 64 MiB by factors of 2, 20 iterations, 2
repeats; allreduce and all_gather over gloo (engine pytorch) for the engines, by factors
of 4, 10 iterations. Then each configuration is ONE experiment whose sweep holds its
one-rank base and its multi-rank runs, in the order 1, largest, ..., smallest: the daemon has
as many CPU slots as the largest world size, so its strict FIFO queue never runs two of
them at once (each experiment's run times are checked for overlap). Its results (GET
/v1/experiments/{id}/results?fit=<this round's fits>) are the stored rows a user reads:
measured step (the slowest rank's, mean over timed steps), pred_step_ms, pred_step_err =
(predicted - measured) / measured, pred_verdict (hit / miss / within_noise: docs/model.md
"Noise and error"), pred_contention, pred_bubble, pred_extrapolated, pred_range,
pred_note.

Reported: per configuration the medians over rounds, the rounds' error range and
verdicts; the error distribution over configurations and over every row of every round
(median |err|, 80th / 90th percentile, worst, share within 15 %, count within noise, rows
with no prediction); the rows off by more than 30 % with the phase column that departs
most; the extrapolation table; the calibration cost. The goal (issue 35): >= 90 % of
rows within 15 %.

Conditions as bench_train.py: 1 thread a rank, the glibc settings that keep freed memory,
one run at a time; the daemon pins a run's ranks while they fit on CPUs of their own and
marks the rest oversubscribed. A benchmark: it prints figures, never pass/fail. Hold
/tmp/ddpb-bench.lock (flock(1)); the netlab part needs root.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import Daemon, refusal, write_json  # noqa: E402

MODELS = {"mnist-cnn": (32, [1, 28, 28], 40, 8), "resnet18": (8, [3, 32, 32], 12, 3)}
STRATEGIES = ["naive", "ddp", "horovod", "zero1", "zero2"]
ENGINES = [("pytorch", "ddp"), ("horovod", "horovod")]
PIPE_MODELS = {"gpt2-tiny": (8, None, 20, 3), "resnet18": (8, [3, 32, 32], 8, 2)}
SCHEDULES = ["gpipe", "1f1b"]
MICRO_BATCHES = 4
PARTS = ["calibrate", "grid", "engines", "pipelines", "netlab", "extrapolate"]
GOAL, FAR = 0.15, 0.30


class Failed(Exception):
    """An experiment the daemon refused or that did not succeed: the reason, as a line."""


class Api:
    """One daemon's REST API as get(path) and post(path, body): the local daemon
    (bench_train.Daemon) or an emulated cluster's leader (bench_netlab.Lab)."""

    def __init__(self, get, post):
        self.get, self.post = get, post

    def finish(self, spec):
        """The experiment of spec once it succeeded (with its wall time, seconds, as
        "wall_s"); raises Failed with the refusal or the runs' errors. Warns when two of
        its runs overlapped in time (they would have measured each other)."""
        t0 = time.monotonic()
        try:
            exp = self.post("/v1/experiments", spec)
        except urllib.error.HTTPError as err:
            raise Failed(f"refused: {refusal(err)}") from None
        except RuntimeError as err:  # bench_netlab.Lab: curl's failure, body included
            raise Failed(f"refused: {err}") from None
        while True:
            e = self.get(f"/v1/experiments/{exp['id']}")
            if e["status"] not in ("queued", "running"):
                break
            time.sleep(0.3)
        e["wall_s"] = time.monotonic() - t0
        if e["status"] != "succeeded":
            raise Failed(f"experiment {e['id']} {e['status']}: "
                         + "; ".join(str(r.get("error")) for r in e["runs"]))
        spans = sorted((r["started_at"], r["finished_at"]) for r in e["runs"])
        if any(b[0] < a[1] for a, b in zip(spans, spans[1:])):
            print(f"  warning: runs of experiment {e['id']} overlapped in time", flush=True)
        return e

    def results(self, exp_id, fits, extra=""):
        q = f"?fit={','.join(map(str, fits))}" if fits else "?"
        return self.get(f"/v1/experiments/{exp_id}/results{q}{extra}")


def local_api(d):
    return Api(d.call, d.call)


def lab_api(lab):
    return Api(lambda p: lab.call("GET", p), lambda p, b: lab.call("POST", p, b))


# ------------------------------------------------------------------------------ specs

class Sizes:
    """Run lengths: the benchmark's, or --quick's (a dry run of the driver)."""

    def __init__(self, quick):
        self.quick = quick

    def steps(self, steps, warmup):
        return (3, 1) if self.quick else (steps, warmup)

    def collective(self, spec):
        if self.quick:
            spec.update(max_bytes="256K", factor=8, iters=4, warmup=1, repeats=1)
        return spec


def world_order(worlds):
    """The sweep order that keeps a FIFO queue with max(worlds) slots to one run at a time:
    the one-rank base, then the largest, then down (two neighbours never fit together)."""
    return [1] + sorted(worlds, reverse=True)


def collective_spec(sz, worlds, ops, name="bench model: network", **extra):
    spec = {"name": name, "workload": "collective", "min_bytes": "4K", "max_bytes": "64M",
            "factor": 2, "iters": 20, "warmup": 5, "repeats": 2, "timeout_s": 1800,
            "sweep": {"op": ops, "world_size": sorted(worlds)}}
    spec.update(extra)
    return sz.collective(spec)


def train_spec(sz, model, table=MODELS, **extra):
    """A training experiment of model (its batch, shape and steps from table); extra sets
    the fields that make the configuration and its "sweep"."""
    batch, shape, steps, warmup = table[model]
    steps, warmup = sz.steps(steps, warmup)
    spec = {"name": f"bench model: {model}", "workload": "train", "model": model,
            "batch_size": batch, "threads": 1, "steps": steps + warmup,
            "warmup_steps": warmup, "trace_steps": 0,
            "dataset": {"name": "synthetic", "shape": shape} if shape else {"samples": 256},
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "timeout_s": 1800}
    if model.startswith("gpt2"):
        spec.update(seq_len=32, optimizer={"type": "adam", "lr": 0.001})
    spec.update(extra)
    return spec


def rotated(items, r):
    return items[r % len(items):] + items[:r % len(items)]


# ------------------------------------------------------------------------------ records

class Bench:
    """What a whole benchmark run collects: the rows (one per results row of a multi-rank
    run per round), the extrapolated rows, the calibrations, the parts' failures, the
    wall time of each part."""

    def __init__(self, a):
        self.a = a
        self.sz = Sizes(a.quick)
        self.rows, self.extrap, self.calib = [], [], []
        self.failed = {}  # (part, what) -> reason
        self.wall = {}    # part -> seconds over all rounds
        self.phases = None  # the results reply's phase keys (schema/columns.json)

    def fail(self, part, what, why):
        self.failed.setdefault((part, what), str(why))
        print(f"  {part} {what}: NOT MEASURED: {why}", flush=True)

    def collect(self, api, part, r, config, exp, fits):
        """Records the multi-rank rows of exp's results over fits; with extrapolate on,
        the same table predicted from data of at most half its largest world size."""
        res = api.results(exp["id"], fits)
        # the phases that add up to a step (the results reply's stacked ones)
        self.phases = self.phases or [p["key"] for p in res.get("phases", []) if p["stacked"]]
        for row in res["rows"]:
            if (row.get("world_size") or 1) > 1:
                rec = self.record(part, r, config, row)
                self.rows.append(rec)
                print(f"  {describe(rec)}", flush=True)
        if "extrapolate" not in self.a.parts or ("extrapolate", "all") in self.failed:
            return
        top = max(row.get("world_size") or 1 for row in res["rows"])
        try:
            ext = api.results(exp["id"], fits, f"&pred_max_world={top // 2}")
        except (urllib.error.HTTPError, RuntimeError) as err:
            why = refusal(err) if isinstance(err, urllib.error.HTTPError) else err
            # a daemon without the argument refuses it for every table: said once
            self.fail("extrapolate", "all" if "unknown query" in str(why) else config,
                      f"?pred_max_world refused: {why}")
            return
        for row in ext["rows"]:
            if (row.get("world_size") or 1) > top // 2:
                self.extrap.append(self.record(part, r, config, row))

    def record(self, part, r, config, row):
        rec = {"part": part, "round": r, "config": config, "world": row.get("world_size"),
               "nodes": row.get("nodes") or 1, "step_ms": row.get("step_ms_mean"),
               "ci95": row.get("step_ms_ci95")}
        for k in ("pred_step_ms", "pred_step_err", "pred_verdict", "pred_contention",
                  "pred_calibration", "pred_bubble", "pred_extrapolated", "pred_range",
                  "pred_note", "bubble_fraction", "bubble_theory", "straggler_ms",
                  "oversubscribed"):
            rec[k] = row.get(k)
        rec["verdict_from"] = "row" if "pred_verdict" in row else "bench"
        if rec["verdict_from"] == "bench":  # before issue 35's column: the same rule here
            rec["pred_verdict"] = verdict(rec["pred_step_err"], rec["ci95"], rec["step_ms"])
        rec["phases"] = {k: (row.get(k), row.get("pred_" + k)) for k in self.phases or []}
        if rec["bubble_fraction"] is not None and rec["step_ms"]:
            pred = (rec["pred_bubble"] * rec["pred_step_ms"]
                    if rec["pred_bubble"] is not None and rec["pred_step_ms"] else None)
            rec["phases"]["bubble"] = (rec["bubble_fraction"] * rec["step_ms"], pred)
        return rec


def verdict(err, ci95, step):
    """docs/model.md "Noise and error", for rows without pred_verdict (older daemons)."""
    if err is None:
        return None
    rel = ci95 / step if ci95 is not None and step else 0.0
    return "within_noise" if rel >= abs(err) else "hit" if abs(err) <= GOAL else "miss"


def placement(rec):
    return f"{rec['world']}" + (f" on {rec['nodes']} nodes" if rec["nodes"] > 1 else "")


def describe(rec):
    if rec["pred_step_err"] is None:
        return (f"{rec['config']} x{placement(rec)}: measured {rec['step_ms']:.2f} ms, no "
                f"prediction: {rec['pred_note']}")
    return (f"{rec['config']} x{placement(rec)}: measured {rec['step_ms']:.2f} ms, predicted "
            f"{rec['pred_step_ms']:.2f} ms ({rec['pred_step_err'] * 100:+.1f} %, "
            f"{rec['pred_verdict']})")


# ------------------------------------------------------------------------------ parts

def round_fits(b, api, r, worlds):
    """This round's collective experiments on the local daemon: ddpbench's TCP ops (and
    sendrecv for the pipelines), gloo's for the engines. Returns their ids."""
    ops = ["allreduce", "reduce_scatter", "all_gather"]
    if "pipelines" in b.a.parts:
        ops.append("sendrecv")
    ids = [api.finish(collective_spec(b.sz, worlds, ops))["id"]]
    if "engines" in b.a.parts:
        try:
            # torch 1.13's gloo has no reduce_scatter (the engines' ZeRO is not run here)
            spec = collective_spec(b.sz, worlds, ["allreduce", "all_gather"],
                                   "bench model: gloo", engine="pytorch", factor=4, iters=10)
            ids.append(api.finish(spec)["id"])
        except Failed as err:
            b.fail("engines", "gloo fits", err)
    print(f"round {r}: fits from experiments {ids}", flush=True)
    return ids


def calibration_specs(b, worlds, pipes):
    """One calibration (spec calibrate true, docs/model.md "Co-location and contention") per
    key the runs have (model, batch, dataset; pipes: the pipelines' too): k = 1 and worlds,
    placed as those runs are."""
    specs = {}
    for model, table in [(m, MODELS) for m in b.models] + [(m, PIPE_MODELS) for m in
                                                             PIPE_MODELS if pipes]:
        spec = train_spec(b.sz, model, table, calibrate=True, strategy="ddp",
                          sweep={"world_size": world_order(worlds)})
        spec["name"] = f"bench model: calibrate {model}"
        key = (model, spec["batch_size"], json.dumps(spec["dataset"], sort_keys=True))
        specs.setdefault(key, spec)
    return list(specs.values())


def part_calibrate(b, api, worlds, where="local"):
    """Each calibration once, before the rounds: its wall time is its cost; the stored
    calibration (GET /v1/calibrations) is what the rows' pred_calibration names."""
    for spec in calibration_specs(b, worlds, where == "local" and "pipelines" in b.a.parts):
        try:
            e = api.finish(spec)
        except Failed as err:
            b.fail("calibrate", f"{spec['model']} ({where})", err)
            continue
        try:
            got = [c for c in api.get("/v1/calibrations")["calibrations"]
                   if c["experiment"] == e["id"]]
        except (urllib.error.HTTPError, RuntimeError) as err:
            got = []
            b.fail("calibrate", f"{spec['model']} ({where})", f"GET /v1/calibrations: {err}")
        cal = got[0] if got else {}
        b.calib.append({"model": spec["model"], "where": where, "experiment": e["id"],
                        "wall_s": e["wall_s"], "runs": len(e["runs"]), "id": cal.get("id"),
                        "switch_us": cal.get("switch_us"), "curve": cal.get("curve", [])})
        curve = ", ".join(f"k={p['k']} fwd x{p['forward']:.2f} bwd x{p['backward']:.2f}"
                          for p in cal.get("curve", []) if p.get("forward") is not None
                          and p.get("backward") is not None)
        print(f"  calibrate {spec['model']} ({where}): {e['wall_s']:.1f} s, calibration "
              f"{cal.get('id')}: {curve}", flush=True)


def part_grid(b, api, r, fits):
    order = world_order(b.worlds)
    for model in b.models:
        for s in rotated(STRATEGIES, r):
            spec = train_spec(b.sz, model, strategy=s, sweep={"world_size": order})
            run_config(b, api, "grid", r, f"{model} {s}", spec, fits)


def part_engines(b, api, r, fits):
    order = world_order(b.worlds)
    for model in b.models:
        for engine, s in rotated(ENGINES, r):
            spec = train_spec(b.sz, model, engine=engine, strategy=s,
                              sweep={"world_size": order})
            run_config(b, api, "engines", r, f"{model} {engine}", spec, fits)


def part_pipelines(b, api, r, fits):
    points = [{"world_size": w, "pipeline": w, "micro_batches": MICRO_BATCHES if w > 1 else 1}
              for w in world_order(b.worlds)]
    for model in PIPE_MODELS:
        for sched in rotated(SCHEDULES, r):
            spec = train_spec(b.sz, model, PIPE_MODELS, schedule=sched, sweep={"zip": points})
            run_config(b, api, "pipelines", r, f"{model} {sched}", spec, fits)


def run_config(b, api, part, r, config, spec, fits):
    try:
        exp = api.finish(spec)
    except Failed as err:
        b.fail(part, config, err)
        return
    b.collect(api, part, r, config, exp, fits)


def part_netlab(b, r):
    """Each profile: 2 emulated nodes, its collective fits (2 and 4 ranks on 2 nodes, 2
    ranks on one), then strategy ddp of each model at 1, 4 and 2 ranks."""
    if os.geteuid() != 0:
        b.fail("netlab", "all", "needs root (deploy/netlab.sh makes namespaces)")
        return
    import bench_netlab
    places = [{"world_size": 1, "nodes": 1}, {"world_size": 4, "nodes": 2},
              {"world_size": 2, "nodes": 2}]
    for prof in rotated(b.profiles, r):
        try:
            lab = bench_netlab.Lab(b.a.build, 2, prof)
        except RuntimeError as err:
            b.fail("netlab", prof, err)
            continue
        api = lab_api(lab)
        try:
            if "calibrate" in b.a.parts:  # a lab's nodes are new each round: calibrated anew
                # 4 ranks on 2 nodes: 2 a node
                part_calibrate(b, api, [2], f"netlab {prof} round {r}")
            coll = collective_spec(b.sz, [2], ["allreduce", "reduce_scatter", "all_gather"],
                                   f"bench model: {prof}", max_bytes="16M", factor=4,
                                   iters=10, warmup=2)
            del coll["sweep"]["world_size"]
            coll["sweep"]["zip"] = [{"world_size": 2, "nodes": 2}, {"world_size": 4, "nodes": 2},
                                    {"world_size": 2, "nodes": 1}]
            fits = [api.finish(b.sz.collective(coll))["id"]]
            for model in b.models:
                spec = train_spec(b.sz, model, strategy="ddp", sweep={"zip": places})
                run_config(b, api, "netlab", r, f"{model} ddp {prof}", spec, fits)
        except Failed as err:
            b.fail("netlab", prof, err)
        finally:
            lab.close()


def one_round(b, d, r):
    api = local_api(d)
    t = time.monotonic()
    fits = []
    try:
        if {"grid", "engines", "pipelines"} & set(b.a.parts):
            fits = round_fits(b, api, r, b.worlds)
    except Failed as err:
        b.fail("fits", f"round {r}", err)
        return
    b.wall["fits"] = b.wall.get("fits", 0) + time.monotonic() - t
    runs = {"grid": lambda: part_grid(b, api, r, fits),
            "engines": lambda: part_engines(b, api, r, fits),
            "pipelines": lambda: part_pipelines(b, api, r, fits),
            "netlab": lambda: part_netlab(b, r)}
    for part in rotated([p for p in runs if p in b.a.parts], r):
        t = time.monotonic()
        try:
            runs[part]()
        except Exception as err:  # noqa: BLE001  one broken part leaves the others measured
            b.fail(part, f"round {r}", f"{type(err).__name__}: {err}")
        b.wall[part] = b.wall.get(part, 0) + time.monotonic() - t


# ------------------------------------------------------------------------------ report

def pct(x):
    return "-" if x is None else f"{x * 100:+.1f} %"


def quantile(xs, q):
    """The q-quantile of xs by linear interpolation between order statistics."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    i = q * (len(s) - 1)
    lo = int(i)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (i - lo)


def groups(recs):
    """recs grouped by configuration and placement: configurations in the order first
    seen, placements by world size and nodes."""
    out = {}
    for x in recs:
        out.setdefault((x["part"], x["config"]), {}).setdefault((x["world"], x["nodes"]),
                                                                 []).append(x)
    return {k + p: rs for k, by in out.items() for p, rs in sorted(by.items())}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def departs_most(rs):
    """The phase whose medians over rounds differ most, in ms: (name, measured, pred)."""
    best = None
    for k in rs[0]["phases"]:
        m = med([x["phases"][k][0] for x in rs])
        p = med([x["phases"][k][1] for x in rs])
        if m is None or p is None:
            continue
        if best is None or abs(p - m) > abs(best[2] - best[1]):
            best = (k, m, p)
    return best


def summarize(rs):
    """One configuration's figures over rounds."""
    errs = [x["pred_step_err"] for x in rs if x["pred_step_err"] is not None]
    verdicts = [x["pred_verdict"] for x in rs if x["pred_verdict"]]
    return {"n": len(rs), "step": med([x["step_ms"] for x in rs]),
            "pred": med([x["pred_step_ms"] for x in rs]), "err": med(errs), "errs": errs,
            "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
            "contention": med([x["pred_contention"] for x in rs]),
            "bubble": med([x["bubble_fraction"] for x in rs]),
            "pred_bubble": med([x["pred_bubble"] for x in rs]),
            "notes": sorted({x["pred_note"] for x in rs if x["pred_note"]}),
            "noise": med([x["ci95"] / x["step_ms"] for x in rs
                          if x["ci95"] is not None and x["step_ms"]])}


EXPOSED = "comm_exposed_ms"


def split(rs):
    """Compute (every stacked phase but exposed communication and the bubble) and exposed
    communication, measured / predicted, medians over rounds: "c / c | e / e"."""
    def total(x, i, keys):
        v = [x["phases"][k][i] for k in keys]
        return None if any(y is None for y in v) else sum(v)
    keys = [k for k in rs[0]["phases"] if k not in (EXPOSED, "bubble")]
    c = [med([total(x, i, keys) for x in rs]) for i in (0, 1)]
    e = [med([x["phases"].get(EXPOSED, (None, None))[i] for x in rs]) for i in (0, 1)]
    return f"{fmt(c[0])} / {fmt(c[1])} | {fmt(e[0])} / {fmt(e[1])}"


def report_rows(out, recs):
    out.append("| part | configuration | ranks | measured step ms | predicted ms | error: median "
               "(rounds' range) | verdicts | measured CI95 | compute meas / pred ms | exposed "
               "comm meas / pred ms | contention | bubble meas / pred | note |")
    out.append("|---|---|---|---:|---:|---|---|---|---|---|---|---|---|")
    for (part, config, _, _), rs in groups(recs).items():
        s = summarize(rs)
        rng = f" ({min(s['errs']) * 100:+.1f} to {max(s['errs']) * 100:+.1f})" if s["errs"] else ""
        bub = (f"{s['bubble']:.3f} / {s['pred_bubble']:.3f}"
               if s["bubble"] is not None and s["pred_bubble"] is not None
               else f"{s['bubble']:.3f} / -" if s["bubble"] is not None else "")
        noise = "-" if s["noise"] is None else f"{s['noise'] * 100:.1f} %"
        verdicts = ", ".join(f"{k} {v}" for k, v in s["verdicts"].items())
        out.append(
            f"| {part} | {config} | {placement(rs[0])} | {fmt(s['step'])} | {fmt(s['pred'])} | "
            f"{pct(s['err'])}{rng} | {verdicts} | {noise} | {split(rs)} | "
            f"{fmt(s['contention'])} | {bub} | {'; '.join(s['notes'])} |")


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


DIST_HEAD = ("| rows | n | predicted | median abs err | 80th pct | 90th pct | worst | "
             "within 15 % | within noise | hit / miss | beyond 30 % |\n"
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|")


def distribution(out, title, pairs):
    """A line of the distribution table: pairs are (signed error or None, verdict or None),
    one per row of the set titled; the share within 15 % counts every row, predicted or
    not."""
    n = len(pairs)
    a = [abs(e) for e, _ in pairs if e is not None]
    vs = [v for _, v in pairs if v]
    if not a:
        out.append(f"| {title} | {n} | 0 | - | - | - | - | - | - | - | - |")
        return
    within = sum(x <= GOAL for x in a)
    out.append(
        f"| {title} | {n} | {len(a)} | {statistics.median(a) * 100:.1f} % | "
        f"{quantile(a, 0.8) * 100:.1f} % | {quantile(a, 0.9) * 100:.1f} % | "
        f"{max(a) * 100:.1f} % | {within} ({within / n * 100:.0f} %) | "
        f"{vs.count('within_noise')} | {vs.count('hit')} / {vs.count('miss')} | "
        f"{sum(x > FAR for x in a)} |")


def majority(verdicts):
    """A configuration's verdict: its rounds' most frequent, ties to the worse."""
    rank = {"miss": 0, "hit": 1, "within_noise": 2}
    if not verdicts:
        return None
    return max(verdicts.items(), key=lambda kv: (kv[1], -rank.get(kv[0], 0)))[0]


def report_distribution(out, recs):
    sums = {k: summarize(rs) for k, rs in groups(recs).items()}
    out.append(DIST_HEAD)
    distribution(out, "configurations (median over rounds)",
                 [(s["err"], majority(s["verdicts"])) for s in sums.values()])
    distribution(out, "every row of every round",
                 [(x["pred_step_err"], x["pred_verdict"]) for x in recs])
    for part in dict.fromkeys(x["part"] for x in recs):
        distribution(out, f"{part} (configurations)",
                     [(s["err"], majority(s["verdicts"])) for k, s in sums.items()
                      if k[0] == part])
    from_bench = sum(x["verdict_from"] == "bench" for x in recs)
    if from_bench:
        out.append(f"\n({from_bench} rows had no pred_verdict column: their verdict is the "
                   "bench's, by the same rule.)")


def report_far(out, recs):
    far = []
    for (part, config, _, _), rs in groups(recs).items():
        s = summarize(rs)
        if s["err"] is not None and abs(s["err"]) > FAR:
            far.append((part, config, rs, s))
    out.append(f"\nRows off by more than 30 % (median over rounds): {len(far)}.")
    if not far:
        return
    out.append("\n| part | configuration | ranks | error | phase that departs most: "
               "measured / predicted ms | straggler ms | oversubscribed |")
    out.append("|---|---|---|---|---|---|---|")
    for part, config, rs, s in far:
        d = departs_most(rs)
        ph = f"{d[0]}: {d[1]:.2f} / {d[2]:.2f}" if d else "-"
        out.append(f"| {part} | {config} | {placement(rs[0])} | {pct(s['err'])} | {ph} | "
                   f"{fmt(med([x['straggler_ms'] for x in rs]))} | "
                   f"{rs[0]['oversubscribed']} |")


def report_extrap(out, rows, extrap):
    out.append("\n## Extrapolation: each row predicted from data of at most half its world "
               "size (?pred_max_world)\n")
    if not extrap:
        out.append("(none measured)")
        return
    full = groups(rows)
    out.append("| part | configuration | ranks | measured ms | predicted (all data) | error | "
               "predicted (<= N/2) | error | pred_extrapolated | pred_range |")
    out.append("|---|---|---|---:|---:|---|---:|---|---|---|")
    errs = []
    for key, rs in groups(extrap).items():
        s, f = summarize(rs), summarize(full.get(key, rs))
        errs.append(s["err"])
        flags = sorted({str(x["pred_extrapolated"]) for x in rs})
        rng = sorted({x["pred_range"] for x in rs if x["pred_range"]})
        out.append(f"| {key[0]} | {key[1]} | {placement(rs[0])} | {fmt(s['step'])} | "
                   f"{fmt(f['pred'])} | {pct(f['err'])} | {fmt(s['pred'])} | {pct(s['err'])} | "
                   f"{'/'.join(flags)} | {'; '.join(rng) or '; '.join(s['notes'])} |")
    out += ["", DIST_HEAD]
    distribution(out, "extrapolated configurations",
                 [(e, None) for e in errs])


def report(b):
    out = ["", f"Run: {b.header}; {b.nrounds} rounds.", "", "## Rows: median over rounds", ""]
    report_rows(out, b.rows)
    out += ["", "## Error distribution (|predicted - measured| / measured step)", ""]
    report_distribution(out, b.rows)
    report_far(out, b.rows)
    report_extrap(out, b.rows, b.extrap)
    out += ["", "## Calibration", ""]
    for c in b.calib:
        curve = "; ".join(f"k={p['k']}: forward x{fmt(p.get('forward'))}, backward "
                          f"x{fmt(p.get('backward'))}, optimizer x{fmt(p.get('optimizer'))}"
                          for p in c["curve"])
        out.append(f"- {c['model']} ({c['where']}): {c['wall_s']:.1f} s wall, experiment "
                   f"{c['experiment']} ({c['runs']} runs), stored as calibration {c['id']}; "
                   f"context switch {fmt(c['switch_us'])} us; {curve}")
    for part in dict.fromkeys(x["part"] for x in b.rows):  # ids are each daemon's own
        rs = [x for x in b.rows if x["part"] == part]
        used = sorted({x["pred_calibration"] for x in rs if x["pred_calibration"] is not None})
        out.append(f"- {part}: {sum(x['pred_calibration'] is not None for x in rs)} of "
                   f"{len(rs)} rows applied a calibration (pred_calibration {used or 'none'}).")
    out += ["", "## Wall time and what could not be measured", ""]
    out.append("- " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in b.wall.items()))
    for (part, what), why in b.failed.items():
        out.append(f"- NOT MEASURED: {part} {what}: {why}")
    text = "\n".join(out)
    print(text)
    if b.a.md:
        with open(b.a.md, "w") as f:
            f.write(text + "\n")


def machine():
    """This machine as RESULTS.md names one: lscpu's model, CPUs, ISA and vector units."""
    try:
        info = dict(line.split(":", 1) for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in line)
    except OSError:
        return f"{os.cpu_count()} CPUs"
    flags = set(info.get("Flags", "").split())
    vec = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
           if f in flags]
    return (f"{info.get('Model name', '?').strip()}, {info.get('CPU(s)', '?').strip()} CPUs, "
            f"{info.get('Architecture', '?').strip()} ({' '.join(vec) or 'no AVX'})"
            + (f", {info['Hypervisor vendor'].strip()} guest" if "Hypervisor vendor" in info
               else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, help="rounds (default 3; with --minutes the most)")
    ap.add_argument("--minutes", type=float, help="run rounds while a next one fits in this "
                    "many minutes, at least 2")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"of {','.join(PARTS)}")
    ap.add_argument("--models", default="mnist-cnn,resnet18")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--profiles", default="1gbe,10gbe")
    ap.add_argument("--quick", action="store_true", help="tiny runs: a dry run of the driver")
    ap.add_argument("--json")
    ap.add_argument("--md", help="also write the report's tables to this file")
    ap.add_argument("--report", metavar="JSON", help="no runs: the report of an earlier "
                    "run's --json file")
    a = ap.parse_args()
    a.parts = a.parts.split(",")
    a.rounds = a.rounds or (100 if a.minutes else 3)
    bad = [p for p in a.parts if p not in PARTS]
    if bad:
        ap.error(f"--parts: unknown {bad}; known {PARTS}")
    b = Bench(a)
    b.models, b.profiles = a.models.split(","), a.profiles.split(",")
    b.worlds = [int(w) for w in a.worlds.split(",")]
    if a.report:
        with open(a.report) as f:
            saved = json.load(f)
        b.rows, b.extrap, b.calib, b.wall = (saved["rows"], saved["extrapolated"],
                                             saved["calibration"], saved["wall_s"])
        b.failed = {(p, w): why for p, w, why in saved["failed"]}
        b.header, b.nrounds = saved.get("header", "?"), saved["rounds"]
        report(b)
        return
    os.environ.setdefault("MALLOC_MMAP_MAX_", "0")
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", "4294967296")
    b.header = (f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {machine()}; command: "
                + " ".join(sys.argv))
    print(f"# {b.header}", flush=True)
    d = Daemon(a.build, max(b.worlds))
    start, r = time.monotonic(), 0
    try:
        if "calibrate" in a.parts:
            t = time.monotonic()
            part_calibrate(b, local_api(d), b.worlds)
            b.wall["calibrate"] = time.monotonic() - t
        while r < a.rounds:
            t = time.monotonic()
            one_round(b, d, r)
            r += 1
            took, used = time.monotonic() - t, time.monotonic() - start
            if a.minutes and r >= 2 and used + took > a.minutes * 60:
                break
    except KeyboardInterrupt:  # the rounds so far are reported
        print(f"\ninterrupted in round {r}", flush=True)
    finally:
        d.close()
    print(f"\n{r} rounds in {(time.monotonic() - start) / 60:.1f} min", flush=True)
    b.nrounds = r
    report(b)
    write_json(a.json, {"rows": b.rows, "extrapolated": b.extrap, "calibration": b.calib,
                        "failed": [list(k) + [v] for k, v in b.failed.items()],
                        "wall_s": b.wall, "rounds": r, "header": b.header})


if __name__ == "__main__":
    main()
