"""The conventions a config's counts rest on, said in words: every preset and import
answers them as `warnings`, so a figure never hides the choice behind it."""

from app.accounting.transformer import TransformerConfig


def conventions(cfg: TransformerConfig) -> list[str]:
    said = []
    if cfg.moe:
        said.append(
            f"mixture of experts: dropless routing, each token runs top_k={cfg.top_k} of n_experts="
            f"{cfg.n_experts} routed experts and tokens spread evenly over experts; `active` parameters "
            "are the dense parts, routers, shared experts and top_k routed experts")
        if cfg.router_score_correction:
            said.append("the router's score-correction bias (n_experts floats per MoE layer) is a buffer in "
                        "transformers, reported as `buffers` and left out of the parameter total")
    if cfg.mla:
        said.append("latent attention is counted as transformers trains it: keys and values expanded from "
                    "the latent per head (no absorbed up-projections)")
    if cfg.sliding_window is not None:
        said.append(f"sliding window of {cfg.sliding_window} tokens: no parameters; attention FLOPs shrink "
                    "only with causal='halved' (eager attention computes every score, masked or not)")
    if cfg.attention_chunk_size is not None:
        said.append(f"chunked attention in aligned {cfg.attention_chunk_size}-token chunks: no parameters; "
                    "attention FLOPs shrink only with causal='halved' (eager attention computes every score)")
    if cfg.attn_logit_softcapping is not None or cfg.final_logit_softcapping is not None:
        said.append("logit softcapping is elementwise: no parameters and no matmul FLOPs")
    if cfg.tied_embeddings:
        said.append("tied embeddings: the LM head shares the token embedding, counted once")
    return said
