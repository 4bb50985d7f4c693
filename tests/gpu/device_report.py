#!/usr/bin/env python3
"""device_report.py: the Python half of run-on-device.sh (copied into the bundle's bin/),
kept in a file so it runs here on a saved device run's artifacts as well as there.

  device_report.py spec NAME ENGINE MODEL PRECISION BATCH STEPS WARMUP [EXTRA_JSON]
      the train experiment's JSON (synthetic 3x224x224, 1000 classes, one GPU, ddp, SGD
      momentum 0.9, cudnn_benchmark on for the ddpbench engine), EXTRA_JSON merged in
  device_report.py nccl PLAIN_TXT RESULTS_JSON WORLD
      ddpbench's allreduce rows against nccl_allreduce_plain's, per size
  device_report.py train PREFIX TORCH_TXT PRECISION BATCH
      one ddpbench train run (PREFIX.{results,run}.json as api.py saved them) against the
      PyTorch peer's line of that precision and batch in TORCH_TXT: images/s and ratio,
      the phases, the device peak memory per rank against torch's max_memory_allocated,
      NVML utilisation and power as the daemon stored them, cuDNN's choices from the
      rank's log; last a "row:" line in RESULTS.md's table form.
  device_report.py engine PREFIX
      a framework engine's run (status, images/s, phases, error)

The keys are the REST API's: a results row holds the phase means under their own names
(forward_ms, not forward_ms_mean), memory under device_peak_bytes_mean, NVML under
gpu_util_pct_mean and gpu_power_w_mean; a run holds env as a list of {rank, env} and
memory and usage per rank. The first device run read forward_ms_mean and run.ranks[].env
and printed None and {} although the daemon had stored all of it."""
import json
import sys

PHASES = ("data_ms", "forward_ms", "backward_ms", "comm_ms", "comm_exposed_ms", "optimizer_ms")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as ex:
        print(f"   {path}: {ex}")
        return {}


def gib(b):
    return f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) else "?"


def num(v, fmt=".1f"):
    return format(v, fmt) if isinstance(v, (int, float)) else "?"


def cmd_spec(a):
    name, engine, model, precision, batch, steps, warmup = a[:7]
    spec = {"name": name, "workload": "train", "engine": engine, "device": "cuda",
            "backend": "nccl", "model": model, "precision": precision,
            "dataset": {"name": "synthetic", "shape": [3, 224, 224], "classes": 1000},
            "world_size": 1, "batch_size": int(batch), "steps": int(steps),
            "warmup_steps": int(warmup), "strategy": "ddp", "eval": False,
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "timeout_s": 240}
    if engine == "ddpbench":
        spec["cudnn_benchmark"] = True
    if len(a) > 7 and a[7]:
        spec.update(json.loads(a[7]))
    print(json.dumps(spec))


def cmd_nccl(a):
    plain = {}
    try:
        for line in open(a[0]):
            if line[:1].isdigit():
                f = line.split()
                plain[int(f[0])] = (float(f[1]), float(f[2]))
    except OSError as ex:
        print("   plain loop output missing:", ex)
    rows = load(a[1]).get("rows", [])
    w = int(a[2])
    print(f"   {'bytes':>10} {'ddpb_us':>9} {'plain_us':>9} {'ddpb_busbw':>10} "
          f"{'plain_busbw':>11} {'ratio':>6} wrong")
    for r in rows:
        b, us, bw = r["bytes"], r.get("time_us_median"), r.get("busbw_gbs_median")
        p = plain.get(b)
        ratio = p[1] / us if p and us else float("nan")
        print(f"   {b:>10} {us or 0:9.1f} {p[1] if p else float('nan'):9.1f} {bw or 0:10.2f} "
              f"{p[0] if p else float('nan'):11.2f} {ratio:6.3f} {r.get('wrong')}")
    if w == 1:
        print("   one GPU: one rank each, busbw is 0 by definition; the ratio (plain time / "
              "ddpbench time) is one-rank only and says nothing of the transport")


def torch_line(path, precision, batch):
    try:
        lines = [json.loads(line) for line in open(path) if line.startswith("{")]
    except (OSError, ValueError) as ex:
        print("   pytorch figure missing:", ex)
        return {}
    for d in lines:
        if d.get("precision", "bf16") == precision and d.get("batch") == batch:
            return d
    print(f"   pytorch figure missing: no {precision} batch {batch} line in {path}")
    return {}


def rank_env(run):
    for e in run.get("env") or []:
        env = e.get("env") or {}
        return json.loads(env) if isinstance(env, str) else env
    return {}


def cudnn_lines(state_dir, run_id):
    try:
        with open(f"{state_dir}/runs/{run_id}/rank0.log") as f:
            return [line.split(" ", 4)[-1].strip() for line in f if "cuda " in line and "conv" in line]
    except OSError:
        return []


def cmd_train(a):
    prefix, torch_txt, precision, batch = a[0], a[1], a[2], int(a[3])
    run = load(prefix + ".run.json")
    rows = load(prefix + ".results.json").get("rows", [])
    r = rows[0] if rows else {}
    if run.get("status") != "succeeded":
        print("   ddpbench run", run.get("status"), run.get("error"))
    peer = torch_line(torch_txt, precision, batch)
    ours, theirs = r.get("throughput_mean"), peer.get("images_per_s")
    if peer.get("error"):
        print("   pytorch:", peer["error"])
    ratio = ours / theirs if ours and theirs else None
    print(f"   images/s: ddpbench {num(ours)}, {peer.get('peer', 'pytorch')} {num(theirs)}, "
          f"ratio {num(ratio, '.3f')}")
    print("   phases (ms, mean over measured steps): step " + num(r.get("step_ms_mean"), ".2f")
          + ", " + ", ".join(f"{k[:-3]} {num(r.get(k), '.2f')}" for k in PHASES)
          + f"; pytorch step {num(peer.get('step_ms'), '.2f')}")
    mem = run.get("memory") or []
    for m in mem:
        print(f"   memory rank {m.get('rank')}: device peak {gib(m.get('device_peak_bytes'))} "
              f"(params {gib(m.get('params_bytes'))}, grads {gib(m.get('grads_bytes'))}, "
              f"optimizer {gib(m.get('optimizer_bytes'))}, activations "
              f"{gib(m.get('activations_bytes'))}); pytorch max_memory_allocated "
              f"{gib(peer.get('max_memory_allocated'))}, max_memory_reserved "
              f"{gib(peer.get('max_memory_reserved'))}")
    env = rank_env(run)
    print(f"   nvml (daemon, mean over the run): util {num(r.get('gpu_util_pct_mean'))} %, "
          f"power {num(r.get('gpu_power_w_mean'))} W; rank 0 at start: "
          + ", ".join(f"{k[9:]} {v}" for k, v in env.items() if k.startswith("nvml_gpu_")
                      and k not in ("nvml_gpu_index", "nvml_gpu_name")))
    for u in run.get("usage") or []:
        print(f"   usage rank {u.get('rank')}: gpu util {u.get('gpu_util_pct')} %, gpu mem util "
              f"{u.get('gpu_mem_util_pct')} %, power {u.get('gpu_power_w')} W, cpu util "
              f"{u.get('cpu_util')}")
    print("   env:", {k: v for k, v in env.items()
                       if k in ("gpu", "nccl", "cudnn", "gpu_fp32_math", "gpu_peak_mem_bytes")})
    if len(sys.argv) > 6:  # the state dir: the rank log's cuDNN summary line
        for line in cudnn_lines(sys.argv[6], run.get("id")):
            print("   rank 0:", line)
    peak = (mem[0].get("device_peak_bytes") if mem else None)
    print(f"   row: | {(run.get('spec') or {}).get('model', '?')} | {precision} | {batch} | "
          f"{num(ours)} | {num(theirs)} | "
          f"{num(ratio, '.2f')}x | {num(r.get('forward_ms'))} / {num(r.get('backward_ms'))} / "
          f"{num(r.get('comm_exposed_ms'), '.2f')} / {num(r.get('optimizer_ms'), '.2f')} | "
          f"{gib(peak)} | {gib(peer.get('max_memory_allocated'))} | "
          f"{num(r.get('gpu_util_pct_mean'), '.0f')} % / {num(r.get('gpu_power_w_mean'), '.0f')} W |")


def cmd_engine(a):
    run = load(a[0] + ".run.json")
    rows = load(a[0] + ".results.json").get("rows", [])
    r = rows[0] if rows else {}
    print(f"   status {run.get('status')}, error {run.get('error')}, images/s "
          f"{num(r.get('throughput_mean'))}, step {num(r.get('step_ms_mean'), '.2f')} ms, "
          + ", ".join(f"{k[:-3]} {num(r.get(k), '.2f')}" for k in PHASES)
          + f", nvml util {num(r.get('gpu_util_pct_mean'))} %, power "
          f"{num(r.get('gpu_power_w_mean'))} W, device peak "
          f"{gib(r.get('device_peak_bytes_mean'))}")
    env = rank_env(run)
    print("   env:", {k: v for k, v in env.items() if "torch" in k or "cuda" in k or k == "gpu"})


def main():
    cmds = {"spec": cmd_spec, "nccl": cmd_nccl, "train": cmd_train, "engine": cmd_engine}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
