"""ddpb_torch_compat: what Debian's torch (1.13.1, python3-torch) needs to import its
torch.distributed._shard package under Python 3.11, which PyTorch Lightning imports (its
FSDP strategy and precision plugin are imported by `import pytorch_lightning`).

torch 1.13's sharded_tensor/metadata.py declares a dataclass field
`field(default=TensorProperties())`, an instance of an unhashable dataclass; Python 3.11's
dataclasses refuse such a default as mutable (ValueError "mutable default ... use
default_factory"), so the import fails. PyTorch 2.0 changed the field to
`field(default_factory=TensorProperties)`; shard_import() applies that change while the
package is imported, to that module's classes only, and nothing else.

Decision: fix the import in the one adapter that needs it rather than carry a patched
torch: Debian's torch stays the engines' torch (deploy/install-deps.sh), and a torch that
imports cleanly leaves this a no-op."""
import copy
import dataclasses

SHARD_MODULE = "torch.distributed._shard.sharded_tensor.metadata"


def shard_import():
    """Imports torch.distributed._shard with the dataclass default fixed (no-op when it
    imports as it is); returns True when the fix was needed."""
    try:
        import torch.distributed._shard  # noqa: F401
        return False
    except ValueError as ex:
        if "mutable default" not in str(ex):
            raise
    real = dataclasses._get_field

    def lenient(cls, a_name, a_type, *rest):
        f = cls.__dict__.get(a_name)
        if cls.__module__ == SHARD_MODULE and isinstance(f, dataclasses.Field) and \
                f.default is not dataclasses.MISSING and \
                type(f.default).__hash__ is None:
            proto = f.default
            f.default = dataclasses.MISSING
            f.default_factory = lambda: copy.deepcopy(proto)
        return real(cls, a_name, a_type, *rest)

    dataclasses._get_field = lenient
    try:
        import sys
        for name in [m for m in sys.modules if m.startswith("torch.distributed._shard")]:
            del sys.modules[name]  # the half-imported package, imported again
        import torch.distributed._shard  # noqa: F401,F811
    finally:
        dataclasses._get_field = real
    return True
