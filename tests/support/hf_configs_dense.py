"""Real config.json files of the dense families (from the model cards; auto_map dropped where it
names remote code). The two published totals the issue names for them are checked against
these very dicts, so a mistyped shape would fail there first. SMALL: tiny bodies of each family,
typed for transformers to build on the CPU or the meta device."""

# Qwen/Qwen3-8B config.json (published total 8,190,735,360).
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
            "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
            "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936}
# microsoft/Phi-3-mini-4k-instruct config.json (published total 3,821,079,552): fused qkv_proj
# and gate_up_proj, a 2047-token window on every layer.
PHI3_MINI = {"architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
             "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
             "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
             "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
             "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
             "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True,
             "vocab_size": 32064}
# google/gemma-7b config.json: head_dim 256 with 16 heads of a 3072 model (q is 4096 wide).
GEMMA_7B = {"architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu",
            "hidden_activation": None, "hidden_size": 3072, "initializer_range": 0.02,
            "intermediate_size": 24576, "max_position_embeddings": 8192, "model_type": "gemma",
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16,
            "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
            "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": True,
            "vocab_size": 256000}
# google/gemma-3-1b-pt config.json (the text-only Gemma 3).
GEMMA3_1B = {"architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
             "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
             "eos_token_id": 1, "final_logit_softcapping": None, "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
             "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
             "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
             "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
             "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
             "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True,
             "vocab_size": 262144}
# google/gemma-3-27b-pt config.json: the multimodal wrapper, its text model in text_config.
GEMMA3_27B = {"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
              "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
              "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
              "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
                              "model_type": "gemma3_text", "num_attention_heads": 32, "num_hidden_layers": 62,
                              "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
                              "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
                              "sliding_window_pattern": 6},
              "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
              "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                                "model_type": "siglip_vision_model", "num_attention_heads": 16,
                                "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}}
# allenai/OLMo-7B-hf config.json: LayerNorm without weights.
OLMO_7B = {"architectures": ["OlmoForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
           "bos_token_id": None, "clip_qkv": None, "eos_token_id": 50279, "hidden_act": "silu",
           "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
           "max_position_embeddings": 2048, "model_type": "olmo", "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 1, "pretraining_tp": 1,
           "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "float32", "transformers_version": "4.40.0.dev0", "use_cache": True,
           "vocab_size": 50304}
# allenai/OLMo-2-1124-7B config.json: norms after each sublayer, q/k norms over the projection.
OLMO2_7B = {"architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
            "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "olmo2",
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "pad_token_id": 100277, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000,
            "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.47.0.dev0",
            "use_cache": True, "vocab_size": 100352}
# tiiuae/falcon-7b config.json: multi-query, one shared norm per parallel block. Its num_kv_heads
# (71) is not read: multi_query without new_decoder_architecture builds one key/value head.
FALCON_7B = {"alibi": False, "apply_residual_connection_post_layernorm": False,
             "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0, "bias": False,
             "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0, "hidden_size": 4544,
             "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
             "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": 71,
             "num_hidden_layers": 32, "num_kv_heads": 71, "parallel_attn": True, "torch_dtype": "bfloat16",
             "transformers_version": "4.28.1", "use_cache": True, "vocab_size": 65024}
# tiiuae/falcon-40b config.json: grouped queries (8 kv heads), two norms per parallel block.
FALCON_40B = {"alibi": False, "apply_residual_connection_post_layernorm": False,
              "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0, "bias": False,
              "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0, "hidden_size": 8192,
              "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
              "new_decoder_architecture": True, "num_attention_heads": 128, "num_hidden_layers": 60,
              "num_kv_heads": 8, "parallel_attn": True, "torch_dtype": "bfloat16",
              "transformers_version": "4.27.4", "use_cache": True, "vocab_size": 65024}
# tiiuae/falcon-rw-1b config.json (architecture keys): ALiBi, sequential norms, biases, MHA.
FALCON_RW_1B = {"alibi": True, "architectures": ["FalconForCausalLM"], "bias": True, "hidden_size": 2048,
                "layer_norm_epsilon": 1e-05, "model_type": "falcon", "multi_query": False,
                "new_decoder_architecture": False, "num_attention_heads": 32, "num_hidden_layers": 24,
                "parallel_attn": False, "vocab_size": 50304}
# bigcode/starcoder2-7b config.json: GQA, LayerNorm with biases, gelu MLP with biases.
STARCODER2_7B = {"architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1,
                 "residual_dropout": 0.1, "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0,
                 "hidden_act": "gelu_pytorch_tanh", "hidden_size": 4608, "initializer_range": 0.018042,
                 "intermediate_size": 18432, "max_position_embeddings": 16384, "mlp_type": "default",
                 "model_type": "starcoder2", "norm_epsilon": 1e-05, "num_attention_heads": 36,
                 "num_hidden_layers": 32, "num_key_value_heads": 4, "rope_theta": 1000000,
                 "sliding_window": 4096, "torch_dtype": "bfloat16", "transformers_version": "4.37.0.dev0",
                 "use_bias": True, "use_cache": True, "vocab_size": 49152}


# Small config.json bodies typed here, for the oracles to build: what every family shares, then
# each family, and each Falcon block layout.
SMALL_BASE = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "num_hidden_layers": 2,
              "vocab_size": 100}
_FALCON = {k: v for k, v in SMALL_BASE.items() if k != "intermediate_size"}  # Falcon: ffn_hidden_size
SMALL_GEMMA3_TEXT = {**SMALL_BASE, "model_type": "gemma3_text", "num_key_value_heads": 2, "head_dim": 24,
                     "num_hidden_layers": 7, "sliding_window_pattern": 3, "sliding_window": 16,
                     "tie_word_embeddings": False}
SMALL = {
    "qwen3": {**SMALL_BASE, "model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 24,
              "attention_bias": True},
    "qwen3-window": {**SMALL_BASE, "model_type": "qwen3", "num_key_value_heads": 1, "head_dim": 16,
                     "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 0,
                     "tie_word_embeddings": True},
    "gemma": {**SMALL_BASE, "model_type": "gemma", "num_key_value_heads": 2, "head_dim": 24},
    "gemma2": {**SMALL_BASE, "model_type": "gemma2", "num_key_value_heads": 2, "head_dim": 24,
               "num_hidden_layers": 3, "sliding_window": 16},
    "gemma3_text": SMALL_GEMMA3_TEXT,
    "gemma3": {"model_type": "gemma3", "tie_word_embeddings": False, "text_config": SMALL_GEMMA3_TEXT,
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
                                 "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                                 "image_size": 28, "patch_size": 14}, "mm_tokens_per_image": 4},
    "phi3": {**SMALL_BASE, "model_type": "phi3", "num_key_value_heads": 2, "sliding_window": 16,
             "pad_token_id": 0},
    "olmo": {**SMALL_BASE, "model_type": "olmo", "num_key_value_heads": 2, "attention_bias": True},
    "olmo2": {**SMALL_BASE, "model_type": "olmo2", "num_key_value_heads": 2, "head_dim": 8},
    "falcon-mq": {**_FALCON, "model_type": "falcon"},  # Falcon-7B's block: multi-query, one shared norm
    "falcon-gqa": {**_FALCON, "model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 2,
                   "bias": True, "ffn_hidden_size": 72, "tie_word_embeddings": False},
    "falcon-gqa-shared": {**_FALCON, "model_type": "falcon", "new_decoder_architecture": True,
                          "num_kv_heads": 1, "num_ln_in_parallel_attn": 1},
    "falcon-n-embed": {**{k: v for k, v in _FALCON.items() if k != "hidden_size"}, "model_type": "falcon",
                       "n_embed": 32},  # FalconConfig's old spelling of hidden_size
    "falcon-rw": {**_FALCON, "model_type": "falcon", "alibi": True, "multi_query": False,
                  "parallel_attn": False, "bias": True, "ffn_hidden_size": 40},
    "starcoder2": {**SMALL_BASE, "model_type": "starcoder2", "num_key_value_heads": 2, "head_dim": 24,
                   "sliding_window": 16, "bos_token_id": 0, "eos_token_id": 0},
    "starcoder2-no-bias": {**SMALL_BASE, "model_type": "starcoder2", "num_key_value_heads": 1,
                           "use_bias": False, "tie_word_embeddings": False, "bos_token_id": 0,
                           "eos_token_id": 0},
}
