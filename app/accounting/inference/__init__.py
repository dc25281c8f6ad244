"""Serving accounting: weight bytes by quantized format, the KV cache, serving capacity and
prefill/decode time on the roofline. Pure functions over TransformerConfig, as the training
calculators are."""
