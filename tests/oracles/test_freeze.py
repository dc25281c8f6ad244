"""Frozen parts, counted as torch counts them: transformers' model for each config.json on the meta
device, requires_grad turned off on the embedding, the head and the first k decoder layers, and
the parameters left trainable summed (tied weights once, as parameters() yields them)."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.errors import InvalidInput
from app.accounting.finetune.freeze import freeze_params
from app.accounting.hf.read import import_config
from tests.support.lora import FAMILIES

CASES = [(False, False, 1), (True, True, 0), (True, True, 2), (False, False, 0), (True, False, 1),
         (False, True, 2)]


def torch_trainable(config: dict, embeddings: bool, head: bool, layers: int) -> int:
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    frozen = list(model.model.layers[:layers])
    if embeddings:
        frozen.append(model.model.embed_tokens)
    if head:
        frozen.append(model.lm_head)
    for module in frozen:
        module.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize(("embeddings", "head", "layers"), CASES)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_trainable_parameters_equal_torch(name, embeddings, head, layers):
    cfg = import_config(FAMILIES[name]).config
    if cfg.tied_embeddings and embeddings != head:
        with pytest.raises(InvalidInput) as refused:
            freeze_params(cfg, freeze_embeddings=embeddings, freeze_head=head, freeze_layers=layers)
        assert refused.value.field == ("freeze_head" if embeddings else "freeze_embeddings")
        return
    ours = freeze_params(cfg, freeze_embeddings=embeddings, freeze_head=head, freeze_layers=layers)
    assert ours.trainable_params == torch_trainable(FAMILIES[name], embeddings, head, layers)
    assert ours.trainable_params + ours.frozen_params == ours.total_params


def test_freezing_more_layers_than_the_model_has_names_the_field():
    cfg = import_config(FAMILIES["llama"]).config
    with pytest.raises(InvalidInput) as refused:
        freeze_params(cfg, freeze_layers=3)
    assert refused.value.field == "freeze_layers"
