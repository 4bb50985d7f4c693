#!/usr/bin/env python3
"""The GPT-2 models through the REST API on real workers (issue 19):
- gpt2-tiny on synthetic tokens under every strategy at 1 and 2 ranks: each run succeeds,
  its first loss is that of a uniform guess over the vocabulary (ln 256), a 2-rank step
  exchanges at least the model's gradients, and the results table has a row per
  configuration;
- a byte-level language model of a text file the test writes: the loss per epoch is reported
  for the train and the test split and falls from one epoch to the next, below ln 256;
- bad transformer specs are refused at submit naming the field, and a text file that does
  not exist fails the run naming it;
- buckets_of replays gpt2-small's gradient buckets in backward order: the first (capped at
  1 MiB, closed by the first tensor that passes it) holds ln_f and the last block's MLP
  projection, and the token embedding (tied to the head, 50257 x 768) lies in a bucket
  past any cap; rows are stored by size, so the blocks' equal buckets share one."""
import math
import sys

from harness import Daemon, check, corpus_daemon, model_params, run_cases

TINY = {"workload": "train", "model": "gpt2-tiny", "seq_len": 32, "batch_size": 4, "steps": 8,
        "warmup_steps": 2, "trace_steps": 0, "dataset": {"samples": 256},
        "optimizer": {"type": "adam", "lr": 0.001}}


def test_gpt2_every_strategy():
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(TINY, sweep={"world_size": [1, 2],
                                 "strategy": ["naive", "ddp", "horovod", "zero1", "zero2"]})
        exp = d.run_succeeds(spec, timeout=300)
        params = model_params("gpt2-tiny")
        for r in exp["runs"]:
            rows = d.step_rows(r["id"])
            ws = r["params"]["world_size"]
            check(len(rows) == ws * TINY["steps"], (r["params"], len(rows)))
            first = [row["loss"] for row in rows if row["step"] == 0]
            check(all(abs(l - math.log(256)) < 0.3 for l in first), (r["params"], first))
            for row in rows:
                check(math.isfinite(row["loss"]), row)
                if ws == 2:  # every step exchanges at least the gradients once
                    check(row["bytes_sent"] >= params * 4 // 2, (r["params"], row))
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        check(len(res["rows"]) == 10, len(res["rows"]))
    finally:
        d.close()


def test_text_language_model_loss_falls():
    # English text with structure to learn: a few sentences, repeated with variation
    words = ("the quick brown fox jumps over the lazy dog while a data parallel "
             "trainer exchanges gradients between ranks").split()
    lines = (" ".join(words[(i + k) % len(words)] for k in range(7)) + "." for i in range(3000))
    with corpus_daemon(1, lines) as (d, path):
        spec = dict(TINY, dataset={"name": "text", "path": path, "samples": 512}, seq_len=64,
                    batch_size=16, epochs=2, eval=True,
                    optimizer={"type": "adam", "lr": 0.003})
        del spec["steps"]
        exp = d.run_experiment(spec, timeout=300)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "succeeded", run["error"])
        ep = run["epochs"]
        check(len(ep) == 2 and ep[0]["samples"] == 512, ep)
        check(ep[1]["train_loss"] < ep[0]["train_loss"] < math.log(256), ep)
        check(ep[1]["test_loss"] < 0.7 * math.log(256), ep)
        check(0 < ep[1]["test_acc"] <= 1, ep)


def test_bad_transformer_specs():
    d = Daemon(cpu_slots=1)
    try:
        for bad, field in (({"dataset": {"name": "cifar10"}}, "dataset.name"),
                           ({"model": "mnist-cnn", "seq_len": 0,
                             "dataset": {"name": "text", "path": "/etc/hostname"}},
                            "dataset.name"),
                           ({"dataset": {"name": "text"}}, "dataset.path"),
                           ({"seq_len": 129}, "seq_len"),
                           ({"model": "mnist-cnn"}, "seq_len"),
                           ({"device": "cuda", "backend": "nccl"}, "model")):
            status, body, _ = d.request("POST", "/v1/experiments", dict(TINY, **bad))
            check(status == 400 and body["error"]["field"] == field, (bad, status, body))
        status, body, _ = d.request("POST", "/v1/experiments",
                                    dict(TINY, dataset={"name": "text",
                                                        "path": "/nonexistent/c.txt"}))
        check(status == 400 and body["error"]["field"] == "dataset.path"
              and "/nonexistent/c.txt" in body["error"]["message"], (status, body))
    finally:
        d.close()


def test_gpt2_small_bucket_replay():
    d = Daemon(cpu_slots=2)
    try:
        spec = {"workload": "collective", "world_size": 2, "op": "allreduce",
                "buckets_of": "gpt2-small", "bucket_mb": 25, "iters": 1, "warmup": 1}
        exp = d.run_experiment(spec, timeout=300)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "succeeded", run.get("error"))
        sizes = sorted(r["bytes"] for r in run["collectives"])
        check(model_params("gpt2-small") == 124439808, model_params("gpt2-small"))
        first = (768 + 768 + 768 + 3072 * 768) * 4  # ln_f weight, bias; c_proj bias, weight
        check(first in sizes, sizes)
        check(sizes[-1] >= (50257 + 1024) * 768 * 4, sizes)  # wte and wpe, past the cap
        check(sum(sizes) < 124439808 * 4 and len(sizes) >= 3, sizes)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_gpt2_every_strategy, test_text_language_model_loss_falls,
                        test_bad_transformer_specs, test_gpt2_small_bucket_replay]))
