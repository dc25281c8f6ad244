"""The train_step probe's token mixers that are not attention (app/bench/mamba2.py, mamba1.py,
deltanet.py) compute what transformers' mixers compute, forward and backward (Bamba's,
Nemotron-H's, Falcon-H1's, Jamba's, Qwen3-Next's), and their recomputed scans
(app/bench/recompute.py, the blocked selective scan) give the gradients of the same code run
eagerly. Their memory and FLOPs against the calculators are in test_probe_moe.py (bamba,
nemotron-h, falcon-h1, jamba, qwen3-next)."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from app.accounting.models import TransformerConfig
from app.bench.deltanet import GatedDeltaNetMixer
from app.bench.mamba1 import Mamba1Mixer
from app.bench.mamba2 import Mamba2Mixer
from app.bench.recompute import GatedNorm

WIDTHS = {"ssm_heads": 8, "ssm_head_dim": 16, "ssm_groups": 2, "ssm_state_size": 16, "ssm_conv_kernel": 4,
          "ssm_chunk_size": 8}


def reference(family: str):
    """transformers' mixer at WIDTHS, float64, every weight drawn at random."""
    if family == "bamba":
        from transformers import BambaConfig
        from transformers.models.bamba.modeling_bamba import BambaMixer
        hf = BambaConfig(hidden_size=64, mamba_n_heads=8, mamba_d_head=16, mamba_expand=2,
                         mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_chunk_size=8,
                         vocab_size=100, num_hidden_layers=1, attn_layer_indices=[], rms_norm_eps=1e-6)
        mixer, ours = BambaMixer(hf, 0), {}
    elif family == "nemotron_h":
        from transformers import NemotronHConfig
        from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
        hf = NemotronHConfig(hidden_size=64, mamba_num_heads=8, mamba_head_dim=16, n_groups=2,
                             ssm_state_size=16, conv_kernel=4, chunk_size=8, use_bias=True, vocab_size=100,
                             layer_norm_epsilon=1e-6, hybrid_override_pattern="M")
        mixer, ours = NemotronHMamba2Mixer(hf, 0), {"ssm_proj_bias": True}
    else:
        from transformers import FalconH1Config
        from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1Mixer, compute_mup_vector
        hf = FalconH1Config(hidden_size=64, mamba_n_heads=8, mamba_d_head=16, mamba_d_ssm=128,
                            mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_chunk_size=8,
                            vocab_size=100, num_hidden_layers=1, projectors_bias=True)
        mixer, ours = FalconH1Mixer(hf, 0), {"ssm_norm": False, "ssm_out_bias": True}
        mixer.register_buffer("mup_vector", compute_mup_vector(hf))  # set by its model's init: ones here
    mixer = mixer.double()
    for p in mixer.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return mixer, ours


def assert_computes_the_same(ours, ref, seq: int, names: dict[str, str]):
    """ours, given ref's weights (`names` maps our parameter names to its), computes ref's output
    and input gradient on random (2, seq, 64) inputs; returns those inputs and the gradient used."""
    theirs = dict(ref.named_parameters())
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.values())
    with torch.no_grad():
        for name, p in ours.named_parameters():
            p.copy_(theirs[names.get(name, name)])
    x = torch.randn(2, seq, 64, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, seq, 64, dtype=torch.float64)
    expected, got = ref(x), ours(x)
    # Both scan in float32, as the kernels do, in different orders.
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    ours_grad, their_grad = (torch.autograd.grad(y, x, grad)[0] for y in (got, expected))
    torch.testing.assert_close(ours_grad, their_grad, rtol=1e-4, atol=1e-5)
    return x, grad


@pytest.mark.parametrize("family", ["bamba", "nemotron_h", "falcon_h1"])
@pytest.mark.parametrize("seq", [19, 16])  # a last chunk of 3 tokens, and two whole chunks
def test_the_mixer_is_transformers_mixer(family, seq):
    torch.manual_seed(seq)
    ref, fields = reference(family)
    cfg = TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100, layer_mixers=("mamba2",),
                            **WIDTHS | fields)
    assert_computes_the_same(Mamba2Mixer(cfg).double(), ref, seq, {"norm": "norm.weight"})


def test_the_recomputed_scan_has_the_eager_gradients():
    torch.manual_seed(0)
    cfg = TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100, layer_mixers=("mamba2",),
                            **WIDTHS)
    mixer = Mamba2Mixer(cfg).double()
    x = torch.randn(3, 21, 64, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 21, 64, dtype=torch.float64)
    inputs = [x, *mixer.parameters()]
    recomputed = torch.autograd.grad(mixer(x), inputs, grad)
    with sdpa_kernel(SDPBackend.MATH):  # the probe's counting mode runs the region eagerly
        eager = torch.autograd.grad(mixer(x), inputs, grad)
    for mine, theirs in zip(recomputed, eager, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7)


def test_the_recomputed_scan_keeps_its_input_only():
    """The layer keeps the projection's output (the scan recomputed from it), the gated norm's
    input y and its float32 rstd; z is a view of the projection's output."""
    cfg = TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100, layer_mixers=("mamba2",),
                            **WIDTHS)
    mixer = Mamba2Mixer(cfg)
    params = {p.untyped_storage().data_ptr() for p in mixer.parameters()}
    kept: dict = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mixer(torch.randn(2, 40, 64))
    tokens, inner = 2 * 40, 8 * 16
    projection = inner + (inner + 2 * 2 * 16) + 8
    # x (in_proj's input), the projection, y, rstd per group, the norm's output (out_proj's input)
    assert sum(kept.values()) == 4 * tokens * (64 + projection + inner + 2 + inner)


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("gate_first", [True, False])
def test_the_gated_norm_has_autograds_gradients(groups, gate_first):
    torch.manual_seed(groups)
    y, z = (torch.randn(3, 5, 32, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.randn(32, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 5, 32, dtype=torch.float64)
    silu = torch.nn.functional.silu

    def eager(y, z, w):
        h = (y * silu(z) if gate_first else y).unflatten(-1, (groups, -1))
        normed = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).flatten(-2)
        return normed if gate_first else normed * silu(z)

    for weight in (w, None) if gate_first else (w,):
        inputs = [y, z] + ([w] if weight is not None else [])
        ours = torch.autograd.grad(GatedNorm.apply(y, z, weight, groups, 1e-6, gate_first), inputs, grad)
        expected = eager(y, z, w) if weight is not None else y * silu(z)
        for mine, theirs in zip(ours, torch.autograd.grad(expected, inputs, grad), strict=True):
            torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("seq", [13, 37])  # within one of the scan's blocks of 16 tokens, and across three
def test_the_mamba1_mixer_is_jambas(seq):
    """Mamba-1 as Jamba builds it, with its RMSNorms on dt, B and C; the probe's scan keeps a state
    every 16 tokens and recomputes each block in backward."""
    from transformers import JambaConfig
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer
    torch.manual_seed(seq)
    hf = JambaConfig(hidden_size=64, mamba_expand=2, mamba_d_state=8, mamba_d_conv=4, mamba_dt_rank=4,
                     vocab_size=100, num_hidden_layers=1, rms_norm_eps=1e-6)
    ref = JambaMambaMixer(hf, 0).double()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.2)
    cfg = TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100, layer_mixers=("mamba",),
                            ssm_inner=128, ssm_state_size=8, ssm_dt_rank=4, ssm_dt_bc_norms=True)
    ours = Mamba1Mixer(cfg).double()
    names = {"dt_norm": "dt_layernorm.weight", "b_norm": "b_layernorm.weight", "c_norm": "c_layernorm.weight"}
    x, grad = assert_computes_the_same(ours, ref, seq, names)
    inputs = [x, *ours.parameters()]
    blocked = torch.autograd.grad(ours(x), inputs, grad)
    with sdpa_kernel(SDPBackend.MATH):  # the whole loop under autograd, as FLOPs are counted
        eager = torch.autograd.grad(ours(x), inputs, grad)
    for mine, theirs_ in zip(blocked, eager, strict=True):
        torch.testing.assert_close(mine, theirs_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("seq", [37, 70])  # a last chunk of 37 tokens, and a second chunk of 6
def test_the_gated_deltanet_mixer_is_qwen3_nexts(seq):
    """Qwen3-Next's per-key-head projection order, grouped value heads, norm-before-gate; the chunked
    rule recomputed a sequence at a time in backward."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    torch.manual_seed(seq)
    hf = Qwen3NextConfig(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4,
                         linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                         vocab_size=100, num_hidden_layers=1, rms_norm_eps=1e-6,
                         layer_types=["linear_attention"])
    ref = Qwen3NextGatedDeltaNet(hf, 0).double()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.2)
    cfg = TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100,
                            layer_mixers=("gated_delta_net",), linear_key_heads=2, linear_value_heads=4,
                            linear_key_head_dim=16, linear_value_head_dim=16)
    ours = GatedDeltaNetMixer(cfg).double()
    x, grad = assert_computes_the_same(ours, ref, seq, {"norm": "norm.weight"})
    inputs = [x, *ours.parameters()]
    recomputed = torch.autograd.grad(ours(x), inputs, grad)
    with sdpa_kernel(SDPBackend.MATH):
        eager = torch.autograd.grad(ours(x), inputs, grad)
    for mine, theirs in zip(recomputed, eager, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7)
