"""Training memory: model states under ZeRO (memory.py), the tensors a step saves for backward
(activations.py), how tensor, pipeline and expert parallelism split them (sharding.py), and the
live bytes at each phase of a step, whose largest is the peak (phases.py)."""
