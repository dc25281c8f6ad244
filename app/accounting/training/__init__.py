"""Training memory: the bytes each model state takes per parameter in each precision (states.py),
the tensors a step saves for backward (activations.py), how tensor, pipeline and expert
parallelism split them (sharding.py), what one pipeline stage holds of them (stages.py), context
parallelism (context.py) and FP8 recipes (fp8.py), the live bytes at each phase of a step, whose
largest is the peak (phases.py), and one GPU's whole answer (memory.py). Each layer's share is its
blocks' (app/accounting/blocks/)."""
