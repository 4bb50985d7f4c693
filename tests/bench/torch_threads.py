"""torch_threads: the thread environment every PyTorch peer in tests/bench gets.

torch.set_num_threads governs torch's own OpenMP pool only. Debian's python3-torch does
its BLAS work (linear layers, convolutions lowered to GEMM) through Debian's OpenBLAS,
which sizes its own pool from OPENBLAS_NUM_THREADS (else OMP_NUM_THREADS, else every CPU)
when it is loaded, that is when torch is imported. So a peer told to use N threads gets
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set to N in its environment
before torch is imported, besides torch.set_num_threads(N): thread_env() for a child
process, set_before_import() for the running one. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE,
which this environment may set for old OpenBLAS builds, are left as they are: they are
part of Debian's OpenBLAS as installed here, and the peer is Debian's torch.
"""
import os
import sys

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def thread_env(threads, base=None):
    """A copy of base (default os.environ) with every thread variable set to threads."""
    env = dict(os.environ if base is None else base)
    env.update({v: str(int(threads)) for v in THREAD_VARS})
    return env


def set_before_import(threads):
    """Sets the thread variables in this process; torch must not be imported yet (OpenBLAS
    reads them once, at load), so a late call is an error rather than a silent no-op."""
    if "torch" in sys.modules:
        raise RuntimeError("torch_threads.set_before_import: torch is already imported")
    os.environ.update({v: str(int(threads)) for v in THREAD_VARS})


def describe():
    """One line for a report: the thread settings and OpenBLAS overrides in effect."""
    keys = THREAD_VARS + ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    return " ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ)
