"""perfbench: our native kernels measured against ONNX Runtime, side by side, numerics first."""

import os as _os

__version__ = "0.1.0"

# numpy's BLAS (OpenBLAS) keeps worker threads spinning after any BLAS call; on a 2-core host
# they steal a core from the kernel being timed (measured: a 1-thread attention decode ran 3x
# slower beside them). perfbench's own numpy work (inputs, float64 oracles) is single-threaded
# by design, so BLAS is pinned to one thread before numpy is first imported -- in the CLI and
# in every spawned worker, which imports this package first. An explicit setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

# Bumped whenever the measurement protocol changes what a number means (part of the
# comparability key: results from different protocol versions are never compared).
PROTOCOL_VERSION = 5  # 2: replicates over worker processes, Williams order, ours = median of sub-loops; 3: ORT cold floors with the cell graph's inputs and outputs; 4: ORT's block warms up with one K/1 pair in its order, so every timed run follows the other graph; 5: ORT's K/1 order flips every second round of the cell's clock, crossed with its position in the rotation

# Version of the stored/exported result schema (JSON output, database rows).
SCHEMA_VERSION = 1
