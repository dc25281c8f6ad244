"""Byte and time units. GB is 10^9 bytes, GiB is 2^30 bytes; both are reported."""

GB = 10**9
GIB = 2**30
MIB = 2**20
SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86_400

# The largest byte count a tensor or buffer can have: storage sizes are int64 in
# PyTorch and CUDA, and JSON consumers lose integer precision beyond this anyway.
MAX_BYTES = 2**63 - 1
