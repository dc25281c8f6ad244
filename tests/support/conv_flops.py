"""FlopCounterMode's count of a depthwise conv1d's weight gradient, and what it adds over the
depthwise work that Tally counts (the state-space mixers' convolutions)."""

from collections.abc import Iterable

from app.accounting.blocks import GatedDeltaNet, Mamba1, Mamba2, ParallelMixers
from app.accounting.blocks import layers as model_layers
from app.accounting.models import TransformerConfig


def depthwise_excess(cfg: TransformerConfig, batch: int, seq: int,
                     layers: Iterable[int] | None = None) -> int:
    """What FlopCounterMode adds to each depthwise conv1d's weight gradient: it counts channels^2 x K
    multiply-adds per output position (padding K - 1 gives seq + K - 1 of them) for channels x K.
    `layers`: the layers whose convolutions train (all by default)."""
    excess = 0
    every = model_layers(cfg)
    for layer in (every[i] for i in (range(len(every)) if layers is None else layers)):
        mixer = layer.attention
        if isinstance(mixer, ParallelMixers):  # Falcon-H1: the Mamba-2 beside the attention
            mixer = mixer.ssm
        if isinstance(mixer, Mamba1 | Mamba2 | GatedDeltaNet):
            k = cfg.linear_conv_kernel if isinstance(mixer, GatedDeltaNet) else cfg.ssm_conv_kernel
            c = mixer.conv_channels
            excess += 2 * batch * c * k * (seq + k - 1) * (c - 1)
    return excess
