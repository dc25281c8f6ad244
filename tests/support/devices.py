"""Device memory as devices report it, from the sources the catalogue cites, for tests to expect."""

H100_REPORTED_BYTES = 85_057_317_582
"""An H100 80GB's CUDA total: vLLM's log "total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) =
71.29GiB" (vllm-project/vllm#12126) holds it between 79.2150 and 79.2167 GiB; 79.2158 GiB."""
RTX_4090_REPORTED_BYTES = 24_564 * 2**20
"""nvidia-smi's total on an RTX 4090: 24,564 MiB (vllm-project/vllm#7553)."""
COURSE_H100_BYTES = 80e9
"""The course reads the datasheet's "80GB" as 80e9 bytes (CS336 lecture 2)."""
A100_80GB_REPORTED_BYTES = 81_920 * 2**20
"""nvidia-smi's total on an A100 80GB: 81,920 MiB (modal-labs/modal-client#2797)."""
