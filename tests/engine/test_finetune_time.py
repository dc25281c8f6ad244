"""A fine-tuning step's time counts its recompute and a quantized base's dequantization (issue 28,
point 7: 426 ms with none, selective or full recompute, and QLoRA as fast as LoRA).

Independent figures: full recompute reruns each decoder layer's forward once more in backward
(Korthikanti et al. 2022: four passes where three were; HF's gradient checkpointing checkpoints
each decoder layer, not the LM head); bitsandbytes' NF4 with double quantization stores
4 + 0.127 bits a weight (Dettmers et al. 2023, QLoRA, section 3) and dequantizes to bf16 for each
matmul: the forward, the input's gradient, and a recomputed forward."""

import pytest

from app.accounting import hardware, models
from app.accounting.finetune.spec import FineTune
from app.accounting.finetune.step import finetune_step
from app.accounting.flops import transformer_forward

CFG = models.preset("llama3-8b")
GPU = hardware.gpu("rtx-4090")
LORA = FineTune("lora", rank=16)
QLORA = FineTune("qlora", rank=16, base_format="nf4_double_quant")


def _time(spec, recompute, **kw):
    return finetune_step(CFG, spec, precision="bf16_mixed", optimizer="adamw", batch_size=1, seq_len=2048,
                         recompute=recompute, gpu=GPU, mfu=0.5, **kw).time


def test_recompute_costs_its_forward_again():
    rate = GPU.peak_flop_per_sec["bfloat16"] * 0.5
    fwd = transformer_forward(CFG, 1, 2048)
    none, selective, full = (_time(LORA, r) for r in ("none", "selective", "full"))
    assert none.seconds < selective.seconds < full.seconds
    assert selective.seconds - none.seconds == pytest.approx(
        (fwd.attention_scores + fwd.attention_values) / rate, rel=1e-12)
    step = finetune_step(CFG, LORA, precision="bf16_mixed", optimizer="adamw", batch_size=1, seq_len=2048,
                         recompute="full", gpu=GPU)
    assert full.seconds - none.seconds == pytest.approx(
        (fwd.total - fwd.lm_head + step.flops.adapters_forward) / rate, rel=1e-12)


def test_full_fine_tuning_with_full_recompute_is_four_passes_where_three_were():
    none, full = (finetune_step(CFG, FineTune("full"), precision="bf16_mixed", optimizer="adamw", batch_size=1,
                                seq_len=2048, recompute=r, gpu=GPU).time for r in ("none", "full"))
    head = transformer_forward(CFG, 1, 2048).lm_head / transformer_forward(CFG, 1, 2048).total
    assert full.seconds / none.seconds == pytest.approx(4 / 3 - head / 3, rel=1e-9)


def test_qlora_dequantizes_its_base_for_each_matmul():
    lora, qlora = _time(LORA, "none"), _time(QLORA, "none")
    assert lora.dequantize_seconds == 0 and qlora.dequantize_seconds > 0
    assert qlora.seconds == pytest.approx(lora.seconds + qlora.dequantize_seconds, rel=1e-12)
    # The quantized matrices: every decoder-layer weight (the embeddings, norms and head stay bf16).
    quantized = models.count_params(CFG).total - 2 * CFG.vocab_size * CFG.d_model - models.count_params(CFG).norms
    per_use = quantized * (4.127 / 8 + 2)  # read NF4-DQ, write bf16
    assert qlora.dequantize_bytes == pytest.approx(2 * per_use, rel=1e-3)  # forward and backward
    assert qlora.dequantize_seconds == pytest.approx(qlora.dequantize_bytes / GPU.memory_bandwidth_bytes_per_sec)
    full = _time(QLORA, "full")
    assert full.dequantize_bytes == pytest.approx(1.5 * qlora.dequantize_bytes, rel=1e-12)  # recomputed forward
