#!/usr/bin/env python3
"""The real frameworks as engines, through the REST API (issue 16): GET /v1/engines says
what each engine is and supports, and its tables are what submit allows; every model of
common/model_table.c has the same parameter count in PyTorch and in Keras; pytorch,
tensorflow, horovod and deepspeed each train mnist-cnn at 1 and 2 ranks in one sweep beside
ddpbench's own engine, storing steps (phases an engine cannot observe null), epochs and the
framework configuration, and results group by engine; two ranks of each reach the accuracy
band of ddpbench's engine on Fashion-MNIST; a killed rank fails the run naming it; an
engine that cannot run is a 409 naming "engine" with the reason and the install command.

The frameworks come from deploy/install-deps.sh --engines (Debian's torch, the rest in
.venv); the daemon runs them with .venv/bin/python, found from the build like web/."""
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

from harness import Daemon, SharedDaemon, check, model_params, run_cases, wait_gone

SOURCE = os.environ.get("DDPB_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ENGINES_DIR = os.path.join(SOURCE, "engines")
sys.path.insert(0, ENGINES_DIR)
import ddpb_data  # noqa: E402  (numpy only)
import ddpb_report  # noqa: E402

VENV_PY = os.path.join(SOURCE, ".venv", "bin", "python")
FRAMEWORKS = ("pytorch", "tensorflow", "horovod", "deepspeed", "lightning")
STRATEGY = {"pytorch": "ddp", "tensorflow": "ddp", "horovod": "horovod",
            "deepspeed": "zero1", "ddpbench": "ddp", "lightning": "ddp"}
PHASES = ("data_ms", "forward_ms", "backward_ms", "comm_ms", "comm_exposed_ms",
          "optimizer_ms", "bytes_sent")
FMNIST = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "warmup_steps": 2,
          "dataset": {"name": "fashion-mnist", "samples": 512},
          "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}}
SMALL = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 4,
         "warmup_steps": 1, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}



# The daemon the training cases share (harness.SharedDaemon: one engine probe for them);
# the cases that check a fresh daemon's probe or run with other options have their own.
SHARED = SharedDaemon(lambda: Daemon(cpu_slots=2))


def engines_of(d, timeout=180):
    """GET /v1/engines once this node's probe has finished (it says "probing" until then)."""
    deadline = time.time() + timeout
    while True:
        body = d.get("/v1/engines")
        if not body["nodes"][0]["probing"] or time.time() > deadline:
            return body
        time.sleep(0.3)


def point(engine, **kw):
    return dict(FMNIST, engine=engine, strategy=STRATEGY[engine], **kw)


def c_report_fields():
    """{event type: (required field names, optional ones)} from common/report.c's tables."""
    text = open(os.path.join(SOURCE, "common", "report.c")).read()
    tables = {}
    for m in re.finditer(r"report_(\w+)_fields\[\] = \{(.*?)\n\};", text, re.S):
        req, opt = set(), set()
        for f in re.finditer(r'\{\.name = "(\w+)"[^}]*\}', m.group(2)):
            (opt if ".optional = true" in f.group(0) else req).add(f.group(1))
        if "PHASES(REPORT_PHASE_FIELD)" in m.group(2):  # optional, from common/columns.h
            opt |= {p["key"] for p in json.load(open(os.path.join(SOURCE, "schema", "columns.json")))["phases"]}
        tables[m.group(1)] = (req, opt)
    common = tables.pop("common")[0]
    return {k: (req | common, opt) for k, (req, opt) in tables.items()} | {"done": (common, set())}


def test_report_module_matches_the_c_protocol():
    """Every event engines/ddpb_report.py writes has exactly the fields common/report.c
    requires (optional ones allowed), so the daemon accepts a Python rank's lines; a phase
    not passed is left out (stored null), never sent as 0."""
    want = c_report_fields()
    out = io.StringIO()
    rep = ddpb_report.Reporter(1, 2, stream=out)
    rep.hello()
    rep.env({"torch": "1.13.1", "framework_config": {"bucket_cap_mb": 25}})
    rep.heartbeat("train", 3)
    rep.progress_event("load", 1, 2)
    rep.step(step=0, loss=2.3, samples=32, step_ms=12.5, forward_ms=4.0, backward_ms=6.0,
             grad_norm=3.5, loss_scale=65536.0, skipped=True)
    rep.epoch(0, 64, 1.5, test_loss=0.5, test_acc=0.8, test_acc_per_class=[0.5, None, 1])
    rep.error("rank 1 lost its peer", code="peer", peer=0)
    rep.memory(0, 1 << 20, params_bytes=400, grads_bytes=None, optimizer_bytes=200)
    rep.usage(0, 0, 4, 1.0, 0.5, 0.1, 3, 1, rss_bytes=None)
    rep.done()
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    check([x["type"] for x in lines] == ["hello", "env", "heartbeat", "progress", "step",
                                         "epoch", "error", "memory", "usage", "done"], lines)
    check("grads_bytes" not in lines[7] and lines[7]["optimizer_bytes"] == 200, lines[7])
    check("rss_bytes" not in lines[8] and "gpu_util_pct" not in lines[8], lines[8])
    for ev in lines:
        req, opt = want[ev["type"]]
        keys = set(ev)
        check(req <= keys and keys <= req | opt, (ev["type"], sorted(keys ^ req)))
        check(ev["rank"] == 1, ev)
    check(all(isinstance(v, (str, int, float)) for v in lines[1]["env"].values()), lines[1])
    check("data_ms" not in lines[4] and "bytes_sent" not in lines[4], lines[4])
    check(lines[4]["forward_ms"] == 4.0 and lines[4]["step_ms"] == 12.5, lines[4])
    check("train_loss" not in lines[5], "an epoch figure not measured must be omitted")
    check(lines[5]["test_acc_per_class"] == [0.5, None, 1.0], lines[5])  # issue 33
    check(lines[4]["grad_norm"] == 3.5 and lines[4]["skipped"] is True, lines[4])
    try:
        rep.step(step=1, loss=1.0, samples=32, step_ms=1.0, fwd_ms=1.0)
        check(False, "an unknown phase name was accepted")
    except ValueError as ex:
        check("fwd_ms" in str(ex), ex)


def test_python_tables_are_the_vocabulary():
    """What the Python side still keeps is tied to schema/vocabulary.json (common/vocab.h,
    which test_vocab ties to the C tables): probe.py's capability table names every engine
    and only the vocabulary's strategies and backends, the launcher's adapters are the
    vocabulary's and exist, the norms and model shapes ddpb_data uses are the C ones, the
    per-engine tables of probe.py name only framework engines, and the report types the
    C protocol checks are the vocabulary's."""
    import ddpb_launch
    import ddpb_vocab
    import probe
    vocab = json.load(open(os.path.join(SOURCE, "schema", "vocabulary.json")))
    names = {k: [r["name"] for r in vocab[k]] for k in vocab}
    check(list(ddpb_vocab.VOCABULARY) == list(vocab), "ddpb_vocab reads schema/vocabulary.json")
    check(sorted(probe.CAPS) == sorted(names["engines"]), sorted(probe.CAPS))
    for engine, caps in probe.CAPS.items():
        check(set(caps["strategies"]) <= set(names["strategies"]), (engine, caps))
        check(set(caps["backends"]) <= set(names["backends"]), (engine, caps))
    frameworks = [r["name"] for r in vocab["engines"] if r["framework"]]
    check(sorted(FRAMEWORKS) == sorted(frameworks), frameworks)
    adapters = {r["name"]: r["adapter"] for r in vocab["engines"] if r["adapter"]}
    check(ddpb_launch.ENGINES == adapters == probe.ADAPTERS, ddpb_launch.ENGINES)
    for adapter in adapters.values():
        check(os.path.exists(os.path.join(ENGINES_DIR, adapter)), adapter)
    check(set(probe.NOT_OBSERVED) <= set(frameworks), sorted(probe.NOT_OBSERVED))
    check(set(probe.MEMORY_NOT_OBSERVED) <= set(frameworks), sorted(probe.MEMORY_NOT_OBSERVED))
    check(set(STRATEGY) <= set(names["engines"]) and
          set(STRATEGY.values()) <= set(names["strategies"]), STRATEGY)
    for row in vocab["norms"]:
        if row["mean"]:
            check(ddpb_data.NORMS[row["name"]] == (row["mean"], row["std"]), row)
    for row in vocab["models"]:
        shape = (row["channels"], row["height"], row["width"], row["classes"])
        check(ddpb_data.MODEL_SHAPES.get(row["name"]) == (shape if shape[3] == 10 else None),
              row)
    check(set(c_report_fields()) == set(names["reports"]), sorted(c_report_fields()))


def test_data_order_is_the_c_workers():
    """ddpb_data's permutation is the C data_permutation (tests/unit/test_data_loader.c
    checks the C side against the same values), and its shards follow the C loader's
    LOADER_DROP rule: disjoint, floor(N / W) each, the same for every engine."""
    check(ddpb_data.permutation(42, 3, 10) == [2, 9, 7, 8, 3, 1, 6, 5, 4, 0],
          ddpb_data.permutation(42, 3, 10))
    check(ddpb_data.permutation(1, 0, 7) == [3, 0, 1, 4, 6, 2, 5], ddpb_data.permutation(1, 0, 7))
    shards = [ddpb_data.train_shard(5, 2, 103, 4, r) for r in range(4)]
    check(all(len(s) == 25 for s in shards), [len(s) for s in shards])
    flat = sum(shards, [])
    check(len(set(flat)) == 100, "shards overlap")
    order = ddpb_data.permutation(5, 2, 103)
    check(shards[1] == order[1:100:4], (shards[1][:5], order[:8]))
    check(ddpb_data.train_shard(5, 3, 103, 4, 0) != shards[0], "every epoch reshuffles")


def test_data_paths_for_the_framework_loaders():
    """ddpb_data's issue-34 helpers: data_dir prefers the rank's mount; files_samples lists
    a files-* split in the C reader's order (the manifest's lines, else class folders sorted
    by name as ImageFolder sorts, non-images left out) and refuses a manifest path leaving
    the folder; tfrecord_shards sorts a split's shards with their .idx; rank_order is the
    LOADER_DROP shard; mount_stats reads the mount's stats file, None without a mount."""
    import tempfile
    saved = os.environ.pop("DDPB_STORAGE_MOUNT", None)
    try:
        with tempfile.TemporaryDirectory() as root:
            spec = {"dataset": {"name": "cifar10", "path": root}}
            check(ddpb_data.data_dir(spec) == root, ddpb_data.data_dir(spec))
            check(ddpb_data.data_dir({"dataset": {"name": "fashion-mnist"}}) ==
                  ddpb_data.FASHION_MNIST_DIR, "the default location")
            for cls, names in (("b", ["2.png", "1.png", "notes.txt"]), ("a", ["9.png"])):
                os.makedirs(os.path.join(root, "files-png", "train", cls))
                for n in names:
                    open(os.path.join(root, "files-png", "train", cls, n), "wb").close()
            got = [(os.path.relpath(p, root), y) for p, y in
                   ddpb_data.files_samples(root, "files-png", "train")]
            check(got == [("files-png/train/a/9.png", 0), ("files-png/train/b/1.png", 1),
                          ("files-png/train/b/2.png", 1)], got)
            with open(os.path.join(root, "files-png", "train.txt"), "w") as f:
                f.write("train/b/2.png 3\ntrain/a/9.png 0\n")
            got = [(os.path.relpath(p, root), y) for p, y in
                   ddpb_data.files_samples(root, "files-png", "train")]
            check(got == [("files-png/train/b/2.png", 3), ("files-png/train/a/9.png", 0)], got)
            with open(os.path.join(root, "files-png", "train.txt"), "w") as f:
                f.write("../../etc/passwd 1\n")
            try:
                ddpb_data.files_samples(root, "files-png", "train")
                check(False, "a manifest path outside the folder was taken")
            except ValueError as ex:
                check("line 1" in str(ex) and ".." in str(ex), ex)
            os.makedirs(os.path.join(root, "tfrecord"))
            for n in ("train-00001-of-00002.tfrecord", "train-00000-of-00002.tfrecord",
                      "test-00000-of-00001.tfrecord", "train-00000-of-00002.tfrecord.idx"):
                open(os.path.join(root, "tfrecord", n), "wb").close()
            got = [tuple(os.path.basename(p) for p in pair)
                   for pair in ddpb_data.tfrecord_shards(root, "train")]
            check(got == [("train-00000-of-00002.tfrecord", "train-00000-of-00002.tfrecord.idx"),
                          ("train-00001-of-00002.tfrecord", "train-00001-of-00002.tfrecord.idx")],
                  got)
            check(ddpb_data.mount_stats() is None, "no mount, no stats")
            with open(os.path.join(root, ".ddpbench-fs-stats"), "w") as f:
                f.write('{"requests":3,"bytes":4096,"wait_ns":5,"read_ns":6}\n')
            os.environ["DDPB_STORAGE_MOUNT"] = root
            check(ddpb_data.data_dir(spec) == root, "the mount")
            check(ddpb_data.mount_stats() == {"requests": 3, "bytes": 4096, "wait_ns": 5,
                                              "read_ns": 6}, ddpb_data.mount_stats())
            os.environ["DDPB_STORAGE_MOUNT"] = os.path.join(root, "files-png")
            check(ddpb_data.data_dir(spec).endswith("files-png"), "the mount wins")
            check(ddpb_data.mount_stats() is None, "a mount without the stats file")
    finally:
        os.environ.pop("DDPB_STORAGE_MOUNT", None)
        if saved is not None:
            os.environ["DDPB_STORAGE_MOUNT"] = saved
    check(ddpb_data.rank_order(5, 2, 103, 1, 4) == ddpb_data.train_shard(5, 2, 103, 4, 1),
          "rank_order is the LOADER_DROP shard")
    # worker/data/images.c data_augment_draw's (dy, dx, flip) for (seed, epoch, sample),
    # printed by the C function (pad 4, flip on): the same crop and flip in every loader
    draws = {(1, 0, 0): (5, 1, True), (1, 1, 2): (5, 5, False), (2, 1, 3): (5, 1, False),
             (3, 0, 1): (8, 6, True), (3, 1, 3): (5, 2, True)}
    got = {k: ddpb_data.augment_draw(*k) for k in draws}
    check(got == draws, got)
    check(ddpb_data.rank_order(5, 2, 103, 1, 4)[:3] == ddpb_data.permutation(5, 2, 103)[1:12:4],
          ddpb_data.rank_order(5, 2, 103, 1, 4)[:3])


def model_table():
    """{name: (c, h, w, classes, params)} from common/model_table.c, the CNNs: the gpt2
    transformers are ddpbench's own (a spec refuses them for the framework engines)."""
    text = open(os.path.join(SOURCE, "common", "model_table.c")).read()
    return {m.group(1): tuple(int(m.group(i)) for i in range(2, 7)) for m in re.finditer(
        r'\{"([\w-]+)", (\d+), (\d+), (\d+), (\d+), (\d+),', text)
        if not m.group(1).startswith("gpt2")}


def test_models_have_the_c_zoos_parameter_counts():
    """Every row of common/model_table.c, built by the torch engines' definitions and by the
    tensorflow engine's Keras ones, has the row's parameter count."""
    rows = model_table()
    check(len(rows) >= 17 and rows["mnist-cnn"][4] == 21840, rows)
    check(rows["deepspeed-cifar-net"][4] == 62006, rows)  # the tutorial's stated count
    code = ("import json, sys; sys.path.insert(0, %r); import %s as z; rows = json.loads(%r); "
            "print(json.dumps({n: z.count_params(z.build(n, *r[:4])) for n, r in rows.items()}))")
    # both zoos at once, one a core: each builds every row with its weights (~10 s and ~25 s)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    procs = {m: subprocess.Popen([VENV_PY, "-c", code % (ENGINES_DIR, m, json.dumps(rows))],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for m in ("ddpb_torch_models", "ddpb_keras_models")}
    try:
        for module, p in procs.items():
            out, err = p.communicate(timeout=600)
            check(p.returncode == 0, f"{module}: {err[-2000:]}")
            got = json.loads(out.strip().splitlines()[-1])
            for name, row in rows.items():
                check(got[name] == row[4], (module, name, got[name], row[4]))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


# keras.applications' own forms of the rows it defines, and how they differ from the rows
# (torchvision's networks): its ResNets put a bias on every convolution, its InceptionV3
# has batch norms without a scale (gamma). The row's count is Keras' trainable count minus
# those convolution biases plus those batch-norm channels, exactly.
KERAS_APPLICATIONS = {"resnet50": "ResNet50", "resnet101": "ResNet101",
                      "resnet152": "ResNet152", "inception-v3": "InceptionV3"}
KERAS_DIFFERENCE = """
import json, sys
import tensorflow as tf
rows = json.loads(sys.argv[1])
out = {}
for name, (cls, c, h, w, classes) in rows.items():
    m = getattr(tf.keras.applications, cls)(weights=None, include_top=True, classes=classes,
                                            input_shape=(h, w, c))
    out[name] = {
        "trainable": sum(int(tf.size(v)) for v in m.trainable_variables),
        "conv_biases": sum(int(tf.size(l.bias)) for l in m.layers
                           if isinstance(l, tf.keras.layers.Conv2D) and l.use_bias),
        "bn_without_gamma": sum(int(l.moving_mean.shape[0]) for l in m.layers
                                if isinstance(l, tf.keras.layers.BatchNormalization)
                                and not l.scale)}
print(json.dumps(out))
"""


def test_keras_applications_differ_as_stated():
    """keras.applications' ResNet-50/101/152 and InceptionV3 at the rows' shapes: their
    trainable counts differ from the rows' (torchvision's) by exactly their convolution
    biases (the ResNets) and their scale-less batch-norm channels (InceptionV3), which the
    Keras zoo therefore does not use; nothing else differs."""
    rows = model_table()
    want = {n: [cls, *rows[n][:4]] for n, cls in KERAS_APPLICATIONS.items()}
    p = subprocess.run([VENV_PY, "-c", KERAS_DIFFERENCE, json.dumps(want)], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    check(p.returncode == 0, p.stderr[-2000:])
    got = json.loads(p.stdout.strip().splitlines()[-1])
    for name, g in got.items():
        check(g["trainable"] - g["conv_biases"] + g["bn_without_gamma"] == rows[name][4],
              (name, g, rows[name][4]))
        check((g["conv_biases"] > 0) == name.startswith("resnet") and
              (g["bn_without_gamma"] > 0) == (name == "inception-v3"), (name, g))


# torchvision's own models, with the arguments the rows stand for (Inception V3 without its
# auxiliary head, as it is trained here), against the rows
TORCHVISION_ROWS = """
import json, sys
import torchvision.models as tv
rows = json.loads(sys.argv[1])
made = {"resnet101": tv.resnet101, "resnet152": tv.resnet152, "vgg11": tv.vgg11,
        "inception-v3": lambda num_classes: tv.inception_v3(
            weights=None, aux_logits=False, init_weights=False, num_classes=num_classes)}
print(json.dumps({n: sum(p.numel() for p in made[n](num_classes=r[3]).parameters())
                  for n, r in rows.items()}))
"""


def test_torchvision_counts_of_the_new_rows():
    """resnet101, resnet152, vgg11 and inception-v3 (aux_logits=False) as torchvision
    defines them have the rows' parameter counts (the CIFAR forms are kuangliu's, which
    torchvision lacks: test_models_have_the_c_zoos_parameter_counts ties them)."""
    rows = model_table()
    want = {n: rows[n][:4] for n in ("resnet101", "resnet152", "vgg11", "inception-v3")}
    p = subprocess.run([VENV_PY, "-c", TORCHVISION_ROWS, json.dumps(want)], capture_output=True,
                       text=True, timeout=600)
    check(p.returncode == 0, p.stderr[-2000:])
    got = json.loads(p.stdout.strip().splitlines()[-1])
    for name in want:
        check(got[name] == rows[name][4], (name, got[name], rows[name][4]))


def allowed_by_submit(d, engine, field, values):
    """The values of field a submit accepts for engine (400 naming field: refused). The
    spec asks for more ranks than the daemon has slots, so an accepted one is refused
    after validation (409 naming world_size) and nothing runs."""
    ok = []
    for v in values:
        spec = dict(SMALL, engine=engine, strategy=STRATEGY[engine], world_size=64)
        spec[field] = v
        if v == "cuda" or v == "nccl":
            spec["device"], spec["backend"] = "cuda", "nccl"  # each needs the other
        if v == "mpi":
            spec["launcher"] = "mpirun"  # what backend mpi needs in any engine
        status, body, _ = d.request("POST", "/v1/experiments", spec)
        if status == 400:
            # device cuda may be refused first by what the device offers (a strategy
            # ddpbench's GPU path lacks) or the engine (its devices): refused all the same
            fields = (field, "strategy") if field == "device" else \
                (field, "device", "strategy") if v == "nccl" else (field,)
            check(body["error"]["field"] in fields, (engine, field, v, body))
        else:
            check(status == 409 and body["error"]["field"] == "world_size", (engine, v, body))
            ok.append(v)
    return ok


def test_engines_endpoint_matches_submit():
    """GET /v1/engines: every engine of the spec, each framework installed here (this suite
    runs after deploy/install-deps.sh --engines) with its version, launched; its strategies,
    compressions, devices and backends are exactly what submit accepts for it (this node's
    Horovod is built with MPI: deploy/setup-venv.sh), against OpenMPI, so MPICH is refused
    for its backend mpi; pytorch says why it has no mpi."""
    d = Daemon(cpu_slots=2)
    try:
        first = d.get("/v1/engines")  # answers at once, while the probe runs
        check(first["nodes"][0]["probing"] in (True, False), first)
        body = engines_of(d)
        nodes = body["nodes"]
        check(len(nodes) == 1 and nodes[0]["python"] and not nodes[0]["probing"], body)
        engines = {e["name"]: e for e in nodes[0]["engines"]}
        schema = json.load(open(os.path.join(SOURCE, "schema", "spec.schema.json")))
        check(set(schema["properties"]["engine"]["enum"]) == set(engines), sorted(engines))
        for name in FRAMEWORKS:
            e = engines[name]
            check(e["installed"] and e["launched"] and e["version"],
                  f"{name} is not usable here ({e['reason']}): run deploy/install-deps.sh "
                  f"--engines")
            enum = schema["properties"]
            # dp needs device cuda, which submit refuses on a CPU naming strategy
            check(allowed_by_submit(d, name, "strategy", enum["strategy"]["enum"])
                  == [s for s in e["strategies"] if s != "dp"], (name, e["strategies"]))
            check(allowed_by_submit(d, name, "framework", enum["framework"]["enum"])
                  == e["frameworks"], (name, e["frameworks"]))
            check(allowed_by_submit(d, name, "compression", enum["compression"]["enum"])
                  == e["compressions"], (name, e["compressions"]))
            check(allowed_by_submit(d, name, "device", enum["device"]["enum"])
                  == e["devices"], (name, e["devices"]))
            check(allowed_by_submit(d, name, "backend", enum["backend"]["enum"])
                  == e["backends"], (name, e["backends"], e["backends_not_available"]))
            check(set(e["not_observed"]) <= set(PHASES), e["not_observed"])
        check(engines["horovod"]["backends"] == ["tcp", "mpi"]
              and engines["horovod"]["mpis"] == ["openmpi"], engines["horovod"])
        # Horovod links OpenMPI (deploy/setup-venv.sh): its MPI controller under MPICH's
        # launcher would be a world of one per rank, so submit refuses it naming mpi
        status, body, _ = d.request("POST", "/v1/experiments", dict(
            SMALL, engine="horovod", strategy="horovod", world_size=2, backend="mpi",
            launcher="mpirun", mpi="mpich"))
        check(status == 409 and body["error"]["field"] == "mpi" and "engine horovod cannot "
              "run backend mpi over mpi mpich" in body["error"]["message"], (status, body))
        check(engines["pytorch"]["backends_not_available"] == {"mpi": (
            "torch.distributed.is_mpi_available() is false: neither Debian's python3-torch "
            "nor PyPI's wheels are built with MPI")}, engines["pytorch"])
    finally:
        d.close()


def test_engine_refusals():
    """400 for what an engine does not offer; 409 naming "engine" for an engine this node
    cannot run (here: a daemon whose --python does not exist, so the probe fails and says
    so, with the install command); nothing of a refused experiment is stored."""
    d = Daemon(cpu_slots=2, extra_args=["--python", "/nonexistent/python3"])
    try:
        before = d.get("/v1/experiments")
        cases = (
            (dict(SMALL, engine="pytorch", strategy="horovod"), 400, "strategy", '"zero1"'),
            (dict(SMALL, engine="tensorflow", compression="fp16"), 400, "compression",
             '"none"'),
            (dict(SMALL, engine="deepspeed"), 400, "strategy", '"zero1", "zero2"'),
            (dict(SMALL, engine="jax"), 400, "engine", "deepspeed"),
            (dict(SMALL, engine="pytorch"), 409, "engine",
             "install with deploy/install-deps.sh --engines"),
            (dict(SMALL, engine="horovod", strategy="horovod"), 409, "engine",
             "the engine probe failed: cannot start /nonexistent/python3"),
            (dict(SMALL, sweep={"engine": ["ddpbench", "tensorflow"]}), 409, "engine",
             "engine tensorflow cannot run on node"),
        )
        for spec, status_want, field, part in cases:
            status, body, _ = d.request("POST", "/v1/experiments", spec)
            check(status == status_want and body["error"]["field"] == field
                  and part in body["error"]["message"], (spec.get("engine"), status, body))
        check(d.get("/v1/experiments") == before, "a refused experiment was stored")
        exp = d.run_experiment(dict(SMALL), timeout=120)  # ddpbench needs no probe
        check(exp["status"] == "succeeded", exp)
        check(d.get(f"/v1/runs/{exp['runs'][0]['id']}")["spec"]["engine"] == "ddpbench", exp)
    finally:
        d.close()


def test_backend_the_nodes_build_lacks_is_refused():
    """A node whose Horovod is built without MPI (its probe's answer, served by a stand-in
    python that prints this node's real probe with horovod's mpi taken out, as a Gloo-only
    build's probe says it): GET /v1/engines lists horovod's backends without mpi and why;
    horovod with backend mpi, alone or in a sweep, is 409 naming "backend" with that
    reason; backend tcp is accepted; nothing refused is stored."""
    import tempfile
    p = subprocess.run([VENV_PY, os.path.join(ENGINES_DIR, "probe.py")], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, p.stderr[-2000:])
    probe = json.loads(p.stdout)
    why = "built without MPI for this test"
    for row in probe["engines"]:
        if row["name"] == "horovod":
            row["backends"] = ["tcp"]
            row["backends_not_available"] = {"mpi": why}
    tmp = tempfile.mkdtemp(prefix="ddpb-probe-")
    with open(os.path.join(tmp, "probe.json"), "w") as f:
        json.dump(probe, f)
    fake = os.path.join(tmp, "python")
    with open(fake, "w") as f:
        f.write(f"#!/bin/sh\nexec cat {os.path.join(tmp, 'probe.json')}\n")
    os.chmod(fake, 0o755)
    d = Daemon(cpu_slots=2, extra_args=["--python", fake])
    try:
        row = [e for e in engines_of(d)["nodes"][0]["engines"] if e["name"] == "horovod"][0]
        check(row["backends"] == ["tcp"] and row["backends_not_available"] == {"mpi": why},
              row)
        before = d.get("/v1/experiments")
        mpi = dict(SMALL, engine="horovod", strategy="horovod", world_size=2,
                   launcher="mpirun")
        for spec in (dict(mpi, backend="mpi"), dict(mpi, sweep={"backend": ["tcp", "mpi"]})):
            status, body, _ = d.request("POST", "/v1/experiments", spec)
            check(status == 409 and body["error"]["field"] == "backend"
                  and "engine horovod cannot run backend mpi" in body["error"]["message"]
                  and why in body["error"]["message"], (status, body))
        check(d.get("/v1/experiments") == before, "a refused experiment was stored")
        # tcp passes: accepted (then cancelled: this node's stand-in python runs no rank)
        status, body, _ = d.request("POST", "/v1/experiments", dict(mpi, backend="tcp"))
        check(status == 201, (status, body))
        d.request("POST", f"/v1/experiments/{body['id']}/cancel")
        d.wait_experiment(body["id"], timeout=120)
    finally:
        d.close()


def test_every_engine_trains_in_one_sweep():
    """One sweep over engine x world_size {1, 2}: every run succeeds, stores a step per rank
    and step with the phases each engine observes (null exactly where GET /v1/engines says
    it cannot), epochs with test accuracy, the framework's versions and configuration; the
    results table groups by engine with a speed-up against each engine's own 1 rank."""
    d = SHARED.get()
    engines = {e["name"]: e for e in engines_of(d)["nodes"][0]["engines"]}
    names = ["ddpbench", *FRAMEWORKS]
    runs = []
    for name in names:  # strategies differ per engine, so one experiment per engine
        exp = d.submit(dict(point(name, steps=20), sweep={"world_size": [1, 2]}))
        runs.append((name, exp["id"]))
    for name, exp_id in runs:
        exp = d.wait_experiment(exp_id, timeout=600)
        check(exp["status"] == "succeeded",
              (name, [(r["status"], r["error"]) for r in exp["runs"]]))
        for r in exp["runs"]:
            run = d.get(f"/v1/runs/{r['id']}")
            ws = run["spec"]["world_size"]
            steps = d.get(f"/v1/runs/{r['id']}/steps?warmup=true")
            cols = steps["columns"]
            check(len(steps["rows"]) == 20 * ws, (name, ws, len(steps["rows"])))
            unobserved = set(engines[name]["not_observed"])
            for row in steps["rows"]:
                v = dict(zip(cols, row))
                check(v["step_ms"] > 0 and v["loss"] > 0, (name, v))
                for p in PHASES:
                    check((v[p] is None) == (p in unobserved), (name, p, v))
            # 512 samples: 16 steps an epoch at 1 rank, 8 at 2; only whole epochs count
            check(len(run["epochs"]) == (1 if ws == 1 else 2)
                  and run["epochs"][-1]["test_acc"] is not None, (name, run["epochs"]))
            if name == "ddpbench":
                continue
            env = run["env"][0]["env"]
            check(env["engine"] == name and "framework_config" in env, (name, env))
            check(set(json.loads(env["phases_not_observed"])) == unobserved, (name, env))
            # memory: the framework's own tensors (mnist-cnn's parameters in fp32),
            # null exactly where GET /v1/engines says the engine cannot tell; usage
            # windows of every rank
            n = model_params("mnist-cnn")
            cannot = set(engines[name]["memory_not_observed"])
            check(sorted(m["rank"] for m in run["memory"]) == list(range(ws)), run["memory"])
            for m in run["memory"]:
                check(m["params_bytes"] == 4 * n and m["peak_rss_bytes"] > 4 * n, (name, m))
                for k in ("comm_bytes", "activations_bytes"):
                    check(m[k] is None and k in cannot, (name, k, m))
                if name in ("pytorch", "horovod"):  # DDP's and Horovod's .grad tensors
                    check(m["grads_bytes"] == 4 * n, (name, m))
                elif m["grads_bytes"] is None:
                    check("grads_bytes" in cannot, (name, m))
                if name != "deepspeed":  # a shard of it at 2 ranks
                    check(m["optimizer_bytes"] >= 4 * n, (name, m))  # momentum
            check(sorted({u["rank"] for u in run["usage"]}) == list(range(ws)), run["usage"])
            check(all(u["cpu_util"] > 0 for u in run["usage"]), run["usage"])
            # a trace exactly where GET /v1/engines does not say it sends none
            trace = d.get(f"/v1/runs/{r['id']}/trace")
            check(any(e["ph"] == "X" for e in trace["traceEvents"]) == ("trace" not in cannot),
                  (name, trace["otherData"]))
            config = json.loads(env["framework_config"])
            if name == "deepspeed":
                check(config["ds_config"]["zero_optimization"]["stage"] == 1, config)
            if name == "pytorch":
                check(config["DistributedDataParallel"]["bucket_cap_mb"] == 25, config)
        res = d.get(f"/v1/experiments/{exp_id}/results?group_by=engine,world_size")
        rows = {r["world_size"]: r for r in res["rows"]}
        check(set(rows) == {1, 2} and all(r["engine"] == name for r in rows.values()),
              (name, res["rows"]))
        check(rows[1]["speedup"] == 1.0 and rows[2]["speedup"] > 0, (name, rows))


def test_two_ranks_reach_ddpbenchs_accuracy_band():
    """Two ranks of every engine train one epoch on 20,000 Fashion-MNIST samples (same
    files, shards, seed, optimizer and schedule); each one's test accuracy lies within 5
    points of ddpbench's own engine, and above 70 %."""
    d = SHARED.get()
    acc = {}
    for name in ("ddpbench", *FRAMEWORKS):
        spec = point(name, world_size=2, epochs=1, steps=0,
                     dataset={"name": "fashion-mnist", "samples": 20000})
        exp = d.run_experiment(spec, timeout=900)
        check(exp["status"] == "succeeded",
              (name, [(r["status"], r["error"]) for r in exp["runs"]]))
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        acc[name] = run["epochs"][-1]["test_acc"]
    print(f"  test accuracy after one epoch: {acc}")
    for name in FRAMEWORKS:
        check(acc[name] > 0.70 and abs(acc[name] - acc["ddpbench"]) <= 0.05, acc)


USER_SCRIPT = """
import time, torch, torch.distributed as dist
import ddpb_report, ddpb_train
rep = ddpb_report.start({"torch": torch.__version__})   # the two lines a user adds
spec = ddpb_train.spec_load()
dist.init_process_group("gloo", init_method="env://")
w = torch.zeros(1000)
for step in range(spec["steps"]):
    t0 = time.perf_counter()
    g = torch.ones(1000) * (dist.get_rank() + 1)
    dist.all_reduce(g)
    w -= 0.01 * g
    rep.step(step=step, loss=float(w.abs().mean()), samples=spec["batch_size"],
             step_ms=(time.perf_counter() - t0) * 1000, warmup=step < spec["warmup_steps"])
dist.destroy_process_group()  # as a torch.distributed program ends (docs/design.md)
rep.done()
"""


def test_script_engine_runs_only_what_the_operator_allowed():
    """engine "script": a user's program under --scripts-dir runs on every rank with the
    framework environment and reports through ddpb_report (steps stored per rank, phases it
    did not time null); a script outside the directory, missing, or with the engine off is
    refused naming the field; GET /v1/engines says whether the engine is on."""
    import tempfile
    allowed = tempfile.mkdtemp(prefix="ddpb-scripts-")
    with open(os.path.join(allowed, "train.py"), "w") as f:
        f.write(USER_SCRIPT)
    with open(os.path.join(os.path.dirname(allowed), "outside.py"), "w") as f:
        f.write("print('must not run')\n")
    d = Daemon(cpu_slots=2, extra_args=["--scripts-dir", allowed])
    try:
        row = [e for e in engines_of(d)["nodes"][0]["engines"] if e["name"] == "script"]
        check(row and row[0]["launched"] and row[0]["scripts_dir"] == os.path.realpath(allowed),
              row)
        exp = d.run_experiment(dict(SMALL, engine="script", script="train.py", world_size=2,
                                    steps=6), timeout=300)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(exp["status"] == "succeeded", (run["status"], run["error"]))
        steps = d.get(f"/v1/runs/{run['id']}/steps?warmup=true")
        check(len(steps["rows"]) == 12, steps["rows"])
        v = dict(zip(steps["columns"], steps["rows"][-1]))
        check(v["forward_ms"] is None and v["step_ms"] > 0, v)
        for script, status, field in (("../outside.py", 400, "script"), ("", 400, "script"),
                                      ("/etc/passwd", 400, "script"),
                                      ("nothere.py", 400, "script")):
            st, body, _ = d.request("POST", "/v1/experiments",
                                    dict(SMALL, engine="script", script=script))
            check(st == status and body["error"]["field"] == field, (script, st, body))
    finally:
        d.close()
    d = Daemon(cpu_slots=2)
    try:
        st, body, _ = d.request("POST", "/v1/experiments",
                                dict(SMALL, engine="script", script="train.py"))
        check(st == 409 and body["error"]["field"] == "engine"
              and "--scripts-dir" in body["error"]["message"], body)
    finally:
        d.close()


def test_killed_rank_fails_the_run_naming_it():
    """For each framework: rank 1 killed mid-training fails the run naming rank 1 and
    signal 9, and no rank of it is left running."""
    d = SHARED.get()
    for name in FRAMEWORKS:
        exp = d.submit(point(name, world_size=2, steps=100000, timeout_s=600))
        run_id = exp["runs"][0]["id"]
        d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == 2
                   and all(k["pid"] for k in r["ranks"]), timeout=120, what="running")
        deadline = time.time() + 120
        while time.time() < deadline and not d.get(f"/v1/runs/{run_id}/steps")["rows"]:
            time.sleep(0.2)  # training, not still importing the framework
        run = d.get(f"/v1/runs/{run_id}")
        pids = [k["pid"] for k in run["ranks"]]
        os.kill(pids[1], signal.SIGKILL)
        exp = d.wait_experiment(exp["id"], timeout=120)
        run = d.get(f"/v1/runs/{run_id}")
        check(run["status"] == "failed" and run["error_rank"] == 1, (name, run["error"]))
        check("rank 1" in run["error"] and "signal 9" in run["error"], (name, run["error"]))
        wait_gone(pids)
        d.wait_slots_free(2)


def test_heartbeat_thread_says_why_it_stops():
    """A rank's heartbeat thread that cannot write (the daemon gone: a broken pipe) stops,
    and says so on stderr, the rank's log: a rank the daemon takes for frozen then says why
    its heartbeats stopped."""
    import contextlib
    import ddpb_report

    class Gone(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    rep = ddpb_report.Reporter(3, 4, stream=Gone())
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rep.start_heartbeat(every_s=0.01)
        rep._beat.join(timeout=10)
    check(not rep._beat.is_alive(), "the heartbeat thread still runs")
    check("rank 3: the heartbeat thread stops: BrokenPipeError" in err.getvalue(),
          err.getvalue())


def test_stopped_rank_leaves_its_stacks():
    """A framework rank the daemon stops (here: the experiment cancelled mid-training)
    writes every thread's stack to its log before it dies (engines/ddpb_train.py run_main:
    faulthandler on SIGTERM), so a rank that hung says where; none is left running."""
    d = SHARED.get()
    exp = d.submit(point("pytorch", world_size=2, steps=100000, timeout_s=600))
    run_id = exp["runs"][0]["id"]
    d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == 2
               and all(k["pid"] for k in r["ranks"]), timeout=120, what="running")
    deadline = time.time() + 120
    while time.time() < deadline and not d.get(f"/v1/runs/{run_id}/steps")["rows"]:
        time.sleep(0.2)  # training, past the framework's import
    pids = [k["pid"] for k in d.get(f"/v1/runs/{run_id}")["ranks"]]
    status, body, _ = d.request("POST", f"/v1/experiments/{exp['id']}/cancel")
    check(status in (200, 202), (status, body))
    exp = d.wait_experiment(exp["id"], timeout=120)
    check(exp["runs"][0]["status"] == "cancelled", exp["runs"][0])
    wait_gone(pids)
    for rank in (0, 1):
        with open(os.path.join(d.state_dir, "runs", str(run_id), f"rank{rank}.log"),
                  errors="replace") as f:
            log = f.read()
        # faulthandler's header of each thread, and the adapter's own frame among them
        check("(most recent call first)" in log and "engine_pytorch.py" in log,
              (rank, log[-3000:]))
    d.wait_slots_free(2)


if __name__ == "__main__":
    try:
        rc = run_cases([test_report_module_matches_the_c_protocol,
                        test_python_tables_are_the_vocabulary,
                        test_data_order_is_the_c_workers,
                        test_data_paths_for_the_framework_loaders,
                        test_models_have_the_c_zoos_parameter_counts,
                        test_keras_applications_differ_as_stated,
                        test_torchvision_counts_of_the_new_rows,
                        test_engines_endpoint_matches_submit, test_engine_refusals,
                        test_backend_the_nodes_build_lacks_is_refused,
                        test_every_engine_trains_in_one_sweep,
                        test_two_ranks_reach_ddpbenchs_accuracy_band,
                        test_script_engine_runs_only_what_the_operator_allowed,
                        test_killed_rank_fails_the_run_naming_it,
                        test_heartbeat_thread_says_why_it_stops,
                        test_stopped_rank_leaves_its_stacks])
    finally:
        SHARED.close()
    sys.exit(rc)
