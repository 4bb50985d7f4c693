"""schemathesis hooks, loaded through tests/integration/schemathesis.toml: the one filter of
generated requests, for POST /v1/experiments (createExperiment).

The spec's JSON Schema (schema/spec.schema.json, generated from common/spec_table.c) states
every rule JSON Schema can express; its description lists, numbered, the ones the server
applies that it cannot (relations between two values, counts over the sweep's cross
product, the memory estimate; in C, the LE and FILLS rows of spec_rules[] in common/spec_table.c
and the rows of spec_checks[] in common/spec_checks.c). A schema-valid body that breaks
one of them is refused with 400, so positive_data_acceptance would count it against the
server. filter_case drops
exactly those bodies from the positive cases (negative ones are refused either way), each
rule restated here only as a filter, in the order of the schema's list, and the bodies the
whole spec schema refuses (test_schemathesis.py generates from a part of it: schemathesis'
generator cannot take all its rule clauses together):
  (1) min_bytes at most max_bytes, at the top and at every sweep point;
  (2) the sizes of "sizes" and the values of each sweep list distinct once units are read;
  (3) at most 1024 runs in the sweep's cross product;
  (4) one rank's memory estimate (common/spec_memory.c spec_memory_estimate) at most
      1 TiB at every point of a train spec, over the model facts of
      common/model_table.c;
  (5) nodes and ranks_per_node at most world_size, and their product world_size when
      both are non-zero, at every point;
  (6) a model family's data and engine (gpt2 on tokens, synthetic or text, device cpu,
      engine ddpbench, seq_len within its positions; the others on images, seq_len 0; text
      names its file), at every point;
  (7) pipelines (micro_batches and pipeline_split only with a pipeline, which divides
      world_size; micro-batches divide the batch; pipeline - 1 named cuts; accumulate 1;
      device cpu, engine ddpbench; no ZeRO on gpt2);
  (8) loader workers (dataset.workers above 1 only with prefetch at least 1; the
      dataset.read_* figures only with storage custom; storage other than local on an
      image set only with a format other than native; storage_layer other than auto
      only on an image set with a format other than native), at every point;
  (9) mpi_mca's keys (OpenMPI MCA names or MPIR_CVAR_* names; a run over MPI names only
      its own implementation's settings, and OpenMPI parameters the node's ompi_info
      lists, which this filter cannot know, so it drops every body over MPI with any).
  (10) transport shm keeps its ranks on one node: nodes at most 1 and ranks_per_node 0 or
      at least world_size, at every point.
  (11) each fault of "faults": one of at_step and at_s, one of rank and node, the members
      its kind takes (schema/vocabulary.json's fault_kinds) and no other, a rank below
      world_size, a node below the nodes the spec places its ranks on; no link fault (the
      daemon under test has no emulated network), at every point.
  (12) elastic: min_ranks at most world_size, max_ranks 0 or from min_ranks to world_size,
      pipeline 1, backend not mpi, engine ddpbench, pytorch or horovod, at every point.
  (13) sweep.zip: every point names the same fields, none of them also swept by its own
      list, and every rule holds at every point (the schema's two-field relations too,
      which it cannot judge inside a zip: a body with a zip is dropped).
  (14) precision knobs: loss_scale 0 and loss_scale_window 2000 unless precision fp16;
      clip_grad_norm 0 on device cuda with engine ddpbench; with a pipeline,
      clip_grad_norm 0 and precision not bf16, at every point.
  (15) a single-process strategy (mirrored, dp: the vocabulary's single_process) keeps its
      one process on one node under launcher ddpbench, not elastic, pipeline 1, at every
      point.
  (16) a collective on a framework engine: engine pytorch, backend tcp, device cpu, op
      allreduce, all_gather or broadcast, algorithm auto, dtype not bfloat16, buckets_of none, at every point.
Besides the numbered rules, dataset.path must resolve beneath one of the daemon's --data-dir
directories: a generated path never does, so a body naming one is dropped (rule "data").
Decision: defaults and the model table are read from the source tree (the generated schema,
the C table), not copied, so this file follows a change there; a restated limit that no
longer matches the schema's description fails loudly at load."""
import itertools
import json
import os
import re

import jsonschema_rs
import schemathesis
from schemathesis import GenerationMode

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
with open(os.path.join(SOURCE, "schema", "spec.schema.json"), encoding="utf-8") as _f:
    SCHEMA = json.load(_f)
SPEC = jsonschema_rs.validator_for(SCHEMA)
MAX_RUNS = 1024
MAX_RANK_BYTES = 1 << 40
if (f"at most {MAX_RUNS} runs" not in SCHEMA["description"]
        or "at most 1 TiB" not in SCHEMA["description"]
        or "(5) nodes and ranks_per_node each at most world_size" not in SCHEMA["description"]
        or "(7) pipelines, at every point" not in SCHEMA["description"]
        or "(8) loader workers, at every point" not in SCHEMA["description"]
        or "(9) mpi_mca's keys" not in SCHEMA["description"]
        or "(10) transport shm, at every point" not in SCHEMA["description"]
        or "(11) faults, at every point" not in SCHEMA["description"]
        or "(12) elastic, at every point" not in SCHEMA["description"]
        or "(13) sweep.zip: every point names the same fields" not in SCHEMA["description"]
        or "(14) precision knobs, at every point" not in SCHEMA["description"]
        or "(15) a single-process strategy" not in SCHEMA["description"]
        or "beneath one of the daemon's --data-dir directories" not in SCHEMA["description"]):
    raise ImportError("schemathesis_hooks.py: the limits differ from the schema's description")
SIZE_FIELDS = ("min_bytes", "max_bytes", "step")
UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
MCA_KEY = re.compile(r"[a-z][a-z0-9_]{0,62}|MPIR_CVAR_[A-Z0-9_]{1,53}")
with open(os.path.join(SOURCE, "schema", "vocabulary.json"), encoding="utf-8") as _f:
    SINGLE_PROCESS = {s["name"] for s in json.load(_f)["strategies"] if s["single_process"]}
REAL_DATA = {"mnist": (1, 28, 28, 10), "fashion-mnist": (1, 28, 28, 10),
             "cifar10": (3, 32, 32, 10)}


def load_models():
    """common/model_table.c's rows: name, c, h, w, classes, params, (desc), in_params,
    flat_c, flat_stride, flat_border, flat_out, head_in, act_floats, act_floats_x16, embd,
    layers, heads, cpu_engine_only."""
    with open(os.path.join(SOURCE, "common", "model_table.c"), encoding="utf-8") as f:
        text = f.read()
    num = r"\s*(\d+),"
    row = re.compile(r'\{"([a-z0-9-]+)",' + num * 5 + r'(?:\s*"(?:[^"\\]|\\.)*")+,' + num * 11
                     + r"\s*(\d+)\}")
    models = {m.group(1): [int(x) for x in m.groups()[1:]] for m in row.finditer(text)}
    if sorted(models) != sorted(SCHEMA["properties"]["model"]["enum"]):
        raise ImportError("schemathesis_hooks.py: cannot read common/model_table.c's rows")
    return models


MODELS = load_models()


def default(name):
    group, _, key = name.rpartition(".")
    props = SCHEMA["properties"][group]["properties"] if group else SCHEMA["properties"]
    return props[key].get("default")


def size(v):
    """spec_parse_size: an integer, or digits with an optional unit and B / iB."""
    if isinstance(v, int):
        return v
    m = re.fullmatch(r"(\d+)([KkMmGgTt]?)(?:[Ii]?[Bb])?", v)
    return int(m.group(1)) << UNITS[m.group(2).upper()]


def points(body):
    """Every run's fields (name -> value; "dataset.name" for nested ones), as the
    server's expansion resolves them: given, else swept, else the default."""
    top = {}
    for key, value in body.items():
        if isinstance(value, dict) and key != "sweep":
            top.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            top[key] = value
    sweep = body.get("sweep", {})
    for combo in itertools.product(*sweep.values()):
        point = dict(top)
        for key, value in zip(sweep, combo):  # a zip point sets each of its fields
            point.update(value if key == "zip" else {key: value})
        yield lambda name, p=point: p[name] if name in p else default(name)


def zip_broken(sweep):
    """Rule (13): a zip's points name the same fields, none also swept, all distinct; and
    the relations the schema states between two fields hold at each zip point, which the
    schema cannot judge (its clauses read the top level and the swept lists), so a body
    with a zip is dropped whole from the positive cases (test_contract.py's edge specs and
    test_spec.c cover zip)."""
    return bool(sweep.get("zip"))


def memory(get):
    """spec_memory_estimate's total for one point, in bytes."""
    (c0, h0, w0, classes0, params0, in_params, flat_c, flat_stride, flat_border, flat_out,
     head_in, act0, act16, embd, layers, heads, _) = MODELS[get("model")]
    c, h, w, classes = REAL_DATA.get(get("dataset.name"), (c0, h0, w0, get("dataset.classes")))
    if get("dataset.name") not in REAL_DATA and len(get("dataset.shape")) == 3:
        c, h, w = get("dataset.shape")
    if embd:  # a transformer: tokens, bytes or the model's vocabulary; the attention matrices
        c, h, w = 1, 1, get("seq_len") or w0
        classes = 256 if get("dataset.name") == "text" else classes0
        p = params0 + embd * (classes - classes0)
        act = act0 - w0 + (act16 - act0 - 255 * w0) / (255 * w0) * (w - w0) + w
        act += layers * heads * w * w
        return memory_bytes(get, p, act, c * h * w)

    def varying(hh, ww, cls):
        flat = flat_c
        if flat_stride:
            flat = flat_c * max(hh // flat_stride - flat_border, 1) * max(
                ww // flat_stride - flat_border, 1)
        if flat_out == 0:
            return flat * cls + cls
        return flat * flat_out + flat_out + head_in * cls + cls

    p = params0 + in_params * (c - c0) + varying(h, w, classes) - varying(h0, w0, classes0)
    area, area0 = h * w, h0 * w0
    layers0, layers16 = act0 - c0 * area0, act16 - c0 * 256 * area0
    act = max(layers0 + (layers16 - layers0) / (255 * area0) * (area - area0), 0) + c * area
    return memory_bytes(get, p, act, c * h * w)


def memory_bytes(get, p, act, sample):
    """spec_memory_estimate's sum for p parameters, act activation floats and sample input
    floats per sample."""
    strategy, world, batch = get("strategy"), get("world_size"), get("batch_size")
    zero = strategy.startswith("zero")
    opt = 8 if get("optimizer.type") != "sgd" else (4 if get("optimizer.momentum") > 0 else 0)
    comm = (4 if strategy == "horovod" or zero else 0) + (2 if get("compression") != "none"
                                                          else 0)
    return (8 * p + opt * p / (world if zero and world > 1 else 1) + comm * p
            + 8 * batch * act + (ring_ahead(get) + 1) * batch * 4 * sample)


def ring_ahead(get):
    """Batches the loader fills ahead: max(prefetch, dataset.workers), 0 with prefetch 0."""
    prefetch = get("prefetch")
    return max(prefetch, get("dataset.workers")) if prefetch > 0 else 0


def family_broken(get):
    """Rule (6): the data and engine a model family trains on."""
    embd, positions = MODELS[get("model")][13], MODELS[get("model")][3]
    if MODELS[get("model")][16] and get("device") != "cpu" and get("engine") == "ddpbench":
        return True  # cpu_engine_only (inception-v3: the GPU runner has no concat)
    data, seq = get("dataset.name"), get("seq_len")
    if (embd == 0 and data == "text") or (embd and data not in ("synthetic", "text")):
        return True
    if data == "text" and not get("dataset.path"):
        return True
    if embd == 0:
        return seq != 0
    return seq > positions or get("device") != "cpu" or get("engine") != "ddpbench"


def pipeline_broken(get):
    """Rule (7): a pipeline's stages, micro-batches, named cuts and where it runs."""
    p, m, split = get("pipeline"), get("micro_batches"), get("pipeline_split")
    names = split.count(",") + 1 if split else 0
    if p <= 1:
        return m > 1 or names > 0
    return (get("batch_size") % m != 0 or get("world_size") % p != 0 or get("accumulate") != 1
            or (names and names != p - 1)
            or get("device") != "cpu" or get("engine") != "ddpbench"
            or (MODELS[get("model")][13] > 0 and get("strategy").startswith("zero")))


with open(os.path.join(SOURCE, "schema", "vocabulary.json"), encoding="utf-8") as _f:
    FAULT_KINDS = {k["name"]: k for k in json.load(_f)["fault_kinds"]}


def faults_broken(get):
    """Rule (11): each fault's members, and the rank and node it targets."""
    world, nodes, rpn = get("world_size"), get("nodes"), get("ranks_per_node")
    placed = nodes if nodes else (-(-world // rpn) if rpn else 0)
    for f in get("faults"):
        kind = FAULT_KINDS[f["kind"]]
        if kind["network"] or ("at_step" in f) == ("at_s" in f) or ("rank" in f) == ("node" in f):
            return True
        if any((m in f) != kind[flag] for m, flag in
               (("duration_s", "duration"), ("fraction", "fraction"), ("rate", "rate"))):
            return True
        if f.get("rank", -1) >= world or (placed and f.get("node", -1) >= placed):
            return True
    return False


def broken_rule(body):
    """The number of the schema's inexpressible rule body breaks, or None."""
    sweep = body.get("sweep", {})
    sizes = [size(v) for v in body.get("sizes", [])]
    if len(set(sizes)) != len(sizes) or any(
            len({size(v) for v in sweep[f]}) != len(sweep[f]) for f in SIZE_FIELDS if f in sweep):
        return 2
    mca = body.get("mpi_mca", {})
    if not all(MCA_KEY.fullmatch(k) for k in mca):
        return 9
    if zip_broken(sweep):
        return 13
    runs = 1
    for values in sweep.values():
        runs *= len(values)
    if runs > MAX_RUNS:
        return 3
    for get in points(body):
        if body["workload"] == "collective" and size(get("min_bytes")) > size(get("max_bytes")):
            return 1
        if body["workload"] == "train" and memory(get) > MAX_RANK_BYTES:
            return 4
        world, nodes, rpn = get("world_size"), get("nodes"), get("ranks_per_node")
        if nodes > world or rpn > world or (nodes and rpn and nodes * rpn != world):
            return 5
        if body["workload"] == "train" and family_broken(get):
            return 6
        if body["workload"] == "train" and pipeline_broken(get):
            return 7
        if body["workload"] == "train" and loader_broken(get):
            return 8
        if get("transport") == "shm" and (nodes > 1 or 0 < rpn < world):
            return 10
        if faults_broken(get):
            return 11
        if body["workload"] == "train" and elastic_broken(body, sweep, get):
            return 12
        if body["workload"] == "train" and precision_broken(get):
            return 14
        if body["workload"] == "train" and single_process_broken(body, sweep, get):
            return 15
        if body["workload"] == "collective" and collective_engine_broken(get):
            return 16
        if get("dataset.path"):
            return "data"
        over_mpi = get("backend") == "mpi" or get("launcher") == "mpirun"
        if over_mpi and mca:  # the implementation's own names, and ompi_info's list
            return 9
    return None


def elastic_broken(body, sweep, get):
    """Rule (12): an elastic run's bounds, and what cannot be elastic."""
    varied = set(sweep) | set((sweep.get("zip") or [{}])[0])
    if "elastic" not in body and not any(k.startswith("elastic.") for k in varied):
        return False
    lo, hi, world = get("elastic.min_ranks"), get("elastic.max_ranks"), get("world_size")
    return (lo > world or (hi != 0 and not lo <= hi <= world) or get("pipeline") > 1
            or get("backend") == "mpi"
            or get("engine") not in ("ddpbench", "pytorch", "horovod"))


def precision_broken(get):
    """Rule (14): loss scaling is fp16's; ddpbench's CUDA engine and pipelines do not clip;
    pipelines train fp32."""
    fp16 = get("precision") == "fp16"
    if not fp16 and (get("loss_scale") != 0 or get("loss_scale_window") != 2000):
        return True
    if (get("clip_grad_norm") > 0 and get("device") == "cuda"
            and get("engine") == "ddpbench"):
        return True
    return get("pipeline") > 1 and (get("clip_grad_norm") > 0 or get("precision") == "bf16")
def single_process_broken(body, sweep, get):
    """Rule (15): a single-process strategy's replicas share one process the daemon forks."""
    if get("strategy") not in SINGLE_PROCESS:
        return False
    nodes, rpn, world = get("nodes"), get("ranks_per_node"), get("world_size")
    return (nodes > 1 or 0 < rpn < world or get("launcher") != "ddpbench"
            or "elastic" in body or any(k.startswith("elastic.") for k in sweep)
            or get("pipeline") > 1)


def collective_engine_broken(get):
    """Rule (16): a framework engine's collective is torch.distributed's gloo."""
    if get("engine") == "ddpbench":
        return False
    return (get("engine") != "pytorch" or get("backend") != "tcp" or get("device") != "cpu"
            or get("op") in ("sendrecv", "reduce_scatter") or get("algorithm") != "auto"
            or get("dtype") == "bfloat16" or get("buckets_of") != "none")


def loader_broken(get):
    """Rule (8): loader workers fill batches ahead, so more than one needs prefetch; the
    read_* figures are custom storage's; a storage profile caps the reads of the
    file-backed formats only, and a storage_layer other than auto sits under them only."""
    if get("dataset.workers") > 1 and get("prefetch") < 1:
        return True
    reads = ("dataset.read_mbps", "dataset.read_latency_ms", "dataset.read_concurrency")
    if get("dataset.storage") != "custom" and any(get(r) != 0 for r in reads):
        return True
    if get("dataset.storage_layer") != "auto" and (get("dataset.name") not in REAL_DATA
                                                    or get("dataset.format") == "native"):
        return True
    return (get("dataset.name") in REAL_DATA and get("dataset.storage") != "local"
            and get("dataset.format") == "native")


@schemathesis.hook("filter_case").apply_to(operation_id="createExperiment")
def filter_case(context, case):
    """Keeps every negative case, and a positive one that the whole spec schema takes
    (test_schemathesis.py generates from a part of it) unless it breaks a rule the schema
    cannot state (above)."""
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return True
    return SPEC.is_valid(case.body) and broken_rule(case.body) is None
