"""Fine-tuning accounting: which parameters train (LoRA adapters, frozen parts) and what
that changes in memory and FLOPs. Pure functions over TransformerConfig."""
