"""Real config.json files (from the model cards) for the relabelling tests and the model pages,
and Mixtral-8x7B typed as the API's inline config."""

# google/gemma-2-9b config.json.
GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
             "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
             "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
             "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
             "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 14336,
             "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
             "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
             "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
             "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32",
             "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 256000}
# deepseek-ai/DeepSeek-V3 config.json (auto_map dropped: it names remote code).
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
               "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
               "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
               "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
               "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
               "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
               "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
               "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
               "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "rms_norm_eps": 1e-06,
               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                "type": "yarn"},
               "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
               "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
               "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": True,
               "v_head_dim": 128, "vocab_size": 129280}


# meta-llama/Llama-2-7b-hf config.json.
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
             "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
             "max_position_embeddings": 4096, "model_type": "llama", "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
             "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16",
             "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000}


# mistralai/Mixtral-8x7B-v0.1 (tests/support/hf_configs_moe.py) typed as the API's inline TransformerConfig.
MIXTRAL_INLINE = {"n_layers": 32, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336,
                  "vocab_size": 32000, "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
                  "tied_embeddings": False, "position": "rope", "max_seq_len": 32768, "n_experts": 8,
                  "top_k": 2}
