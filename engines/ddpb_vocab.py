"""ddpb_vocab: ddpbench's vocabulary for the Python engines, read from
schema/vocabulary.json (common/vocab.h as JSON, written by `test_spec --write-vocabulary`
and checked against the C tables by test_vocab; GET /v1/vocabulary serves the same).

Decision: the engines read the names and tables the C code owns (the engines and their
adapters, the strategies, the datasets' published normalization, the model table's input
shapes) from that one file instead of keeping copies, so a name added in C reaches them
without an edit here. The daemon runs the engines from the source tree (engines_dir), and
the GPU bundle carries schema/ beside engines/, so the file is always at ../schema/."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, os.pardir, "schema", "vocabulary.json")

try:
    with open(PATH, encoding="utf-8") as _f:
        VOCABULARY = json.load(_f)
except (OSError, ValueError) as _e:
    raise SystemExit(f"ddpb_vocab: cannot read {os.path.normpath(PATH)} ({_e}); the engines "
                     "need the schema/ folder of the tree or bundle they came with") from None


def names(key):
    """The names of one list ("strategies", "engines", "formats", ...), in the C order."""
    return [row["name"] for row in VOCABULARY[key]]


# name: row, for every engine (module: what to import for its version; adapter: the file
# each rank runs; both null for ddpbench's own worker and a user's script)
ENGINES = {row["name"]: row for row in VOCABULARY["engines"]}
# engine: adapter file, for the engines the daemon launches through Python
ADAPTERS = {name: row["adapter"] for name, row in ENGINES.items() if row["adapter"]}
STRATEGIES = names("strategies")
# dataset: (mean per channel, std per channel), the datasets with published constants
NORMS = {row["name"]: (row["mean"], row["std"]) for row in VOCABULARY["norms"] if row["mean"]}
# model: (channels, height, width, classes), the model table's usual input and head
MODELS = {row["name"]: (row["channels"], row["height"], row["width"], row["classes"])
          for row in VOCABULARY["models"]}
