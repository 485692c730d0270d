"""perfbench: our native kernels measured against ONNX Runtime, side by side, numerics first."""

__version__ = "0.1.0"

# Bumped whenever the measurement protocol changes what a number means (part of the
# comparability key: results from different protocol versions are never compared).
PROTOCOL_VERSION = 1

# Version of the stored/exported result schema (JSON output, database rows).
SCHEMA_VERSION = 1
