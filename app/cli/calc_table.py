"""Every calculator of `tally calc`, read from the API's route table: written by
`python -m app.cli.calc`, checked by tests/api/test_cli_table.py. Do not edit."""

# Calculator's group, action, method, path, summary, description, path_params, query_params, body,
# takes_body, body_help, module, group_help
CALCULATORS = [
    ('campaigns', 'cancel', 'POST', '/api/v1/campaigns/{campaign_id}/cancel',
     'Its queued jobs are cancelled at once, its running ones stopped within a moment; 409 when it has '
     'ended already.',
     'Its queued jobs are cancelled at once, its running ones stopped within a moment; 409 when it\n'
     'has ended already.',
     ['campaign_id'], [], None, False, '', 'app.api.routes.fleet',
     'Its queued jobs are cancelled at once, its running ones stopped within a moment; 409 when it has '
     'ended already.'),
    ('campaigns', 'get', 'GET', '/api/v1/campaigns/{campaign_id}',
     "Its jobs, and for a burn-in every device beside its model's fleet median, the ones more than "
     "outlier_fraction below it flagged with NVML's reason, and the models against the catalogue.",
     "Its jobs, and for a burn-in every device beside its model's fleet median, the ones more than\n"
     "outlier_fraction below it flagged with NVML's reason, and the models against the catalogue.",
     ['campaign_id'], [], None, False, '', 'app.api.routes.fleet',
     "Its jobs, and for a burn-in every device beside its model's fleet median, the ones more than "
     "outlier_fraction below it flagged with NVML's reason, and the models against the catalogue."),
    ('campaigns', 'list', 'GET', '/api/v1/campaigns', 'The newest 20 campaigns first.',
     'The newest 20 campaigns first.', [], [], None, False, '', 'app.api.routes.fleet',
     'The newest 20 campaigns first.'),
    ('campaigns', 'post', 'POST', '/api/v1/campaigns',
     'One job of the probe on every live device (the GPUs; on a fleet of none, its CPUs), each sized '
     'against its device. 202 with the campaign; follow it at /campaigns/{id}.',
     'One job of the probe on every live device (the GPUs; on a fleet of none, its CPUs), each\n'
     'sized against its device. 202 with the campaign; follow it at /campaigns/{id}.',
     [], [], None, True, '', 'app.api.routes.fleet',
     'One job of the probe on every live device (the GPUs; on a fleet of none, its CPUs), each sized '
     'against its device. 202 with the campaign; follow it at /campaigns/{id}.'),
    ('checkpoint', '', 'POST', '/api/v1/checkpoint',
     'Checkpoint bytes, seconds to write and read one, and the share of a run spent saving them.',
     'Checkpoint bytes, seconds to write and read one, and the share of a run spent saving them.', [], [],
     'app.api.services.checkpoint:CheckpointRequest', True, '', 'app.api.routes.checkpoint',
     'Checkpoints: size, write and read time, and the share of a run spent saving them.'),
    ('comm', 'collective', 'POST', '/api/v1/comm/collective',
     'Time, algbw and busbw of one collective over ring algorithms, inside a node and across nodes; with '
     '`calibration`, over the link a profile fitted to its collectives runs.',
     'Time, algbw and busbw of one collective over ring algorithms, inside a node and across nodes;\n'
     'with `calibration`, over the link a profile fitted to its collectives runs.',
     [], [], 'app.api.services.comm:CollectiveRequest', True, '', 'app.api.routes.comm',
     'Communication between GPUs: collectives, as nccl-tests reports them.'),
    ('data', 'dataset', 'POST', '/api/v1/data/dataset',
     "Bytes of a memmapped array of token ids, its shards, the read bandwidth a run needs, and the loaders' "
     'headroom.',
     'Bytes of a memmapped array of token ids, its shards, the read bandwidth a run needs, and\n'
     "the loaders' headroom.",
     [], [], 'app.api.services.data:DatasetRequest', True, '', 'app.api.routes.data',
     "Training data on disk: a tokenized dataset's bytes, shards and loader bandwidth."),
    ('dtypes', 'encode', 'POST', '/api/v1/dtypes/encode',
     'Store a value in a format: rounded to nearest even, with its bits and errors.',
     'Store a value in a format: rounded to nearest even, with its bits and errors.', [], [],
     'app.api.services.dtypes:EncodeRequest', True, '', 'app.api.routes.dtypes',
     'Number formats: their layouts and limits, and exact encoding of a value.'),
    ('dtypes', 'get', 'GET', '/api/v1/dtypes/{name}', 'One number format, by name or alias.',
     'One number format, by name or alias.', ['name'], [], None, False, '', 'app.api.routes.dtypes',
     'Number formats: their layouts and limits, and exact encoding of a value.'),
    ('dtypes', 'list', 'GET', '/api/v1/dtypes', 'Every number format, with bits, range and precision.',
     'Every number format, with bits, range and precision.', [], [], None, False, '',
     'app.api.routes.dtypes', 'Number formats: their layouts and limits, and exact encoding of a value.'),
    ('energy', '', 'POST', '/api/v1/energy',
     'kWh and CO2e of some GPU-hours: power x PUE x grid intensity, each input stated.',
     'kWh and CO2e of some GPU-hours: power x PUE x grid intensity, each input stated.', [], [],
     'app.api.services.energy:EnergyRequest', True, '', 'app.api.routes.energy',
     'Energy and carbon of GPU work.'),
    ('finetune', '', 'POST', '/api/v1/finetune',
     'Trainable and frozen parameters, bytes per GPU item by item (frozen base in its format, trainable '
     "states, activations autograd keeps), the step's FLOPs and its time at an MFU; with `calibration`, its "
     "time from the device's profile too.",
     'Trainable and frozen parameters, bytes per GPU item by item (frozen base in its format,\n'
     "trainable states, activations autograd keeps), the step's FLOPs and its time at an MFU; with\n"
     "`calibration`, its time from the device's profile too.",
     [], [], 'app.api.services.finetune:FineTuneRequest', True, '', 'app.api.routes.finetune',
     'Fine-tuning: LoRA, QLoRA, frozen parts and full fine-tuning of one step.'),
    ('fit', '', 'POST', '/api/v1/fit',
     'Serving in the weight formats that make sense on this GPU, LoRA, QLoRA and full fine-tuning: whether '
     'each fits, its bytes by kind, the largest batch and context, its time, and when it does not fit, the '
     'smallest change that makes it fit.',
     'Serving in the weight formats that make sense on this GPU, LoRA, QLoRA and full fine-tuning:\n'
     'whether each fits, its bytes by kind, the largest batch and context, its time, and when it\n'
     'does not fit, the smallest change that makes it fit.',
     [], [], 'app.api.services.fit:FitRequest', True, '', 'app.api.routes.fit',
     'Will it run on my GPU: serving and fine-tuning options side by side.'),
    ('fleet', 'devices-history', 'GET', '/api/v1/fleet/devices/{device}/history',
     'A device\'s burn-ins, oldest first, by its UUID (or "<box>:cpu").',
     'A device\'s burn-ins, oldest first, by its UUID (or "<box>:cpu").', ['device'], [], None, False, '',
     'app.api.routes.fleet',
     "The fleet's routes: its devices, campaigns over every live device, and a device's history."),
    ('fleet', 'list', 'GET', '/api/v1/fleet',
     'Every device a worker has registered: its host, what NVML says of it, and its state.',
     'Every device a worker has registered: its host, what NVML says of it, and its state.', [], [], None,
     False, '', 'app.api.routes.fleet',
     "The fleet's routes: its devices, campaigns over every live device, and a device's history."),
    ('flops', 'matmul', 'POST', '/api/v1/flops/matmul',
     'FLOPs (2 per MAC), MACs, and the count without fused multiply-add.',
     'FLOPs (2 per MAC), MACs, and the count without fused multiply-add.', [], [],
     'app.api.services.flops:MatmulRequest', True, '', 'app.api.routes.flops',
     "FLOP counts: a matmul, the course's linear stack, a transformer step."),
    ('flops', 'mlp', 'POST', '/api/v1/flops/mlp',
     'Forward and backward FLOPs per layer, beside 2/4/6 x tokens x params.',
     'Forward and backward FLOPs per layer, beside 2/4/6 x tokens x params.', [], [],
     'app.api.services.flops:MlpRequest', True, '', 'app.api.routes.flops',
     "FLOP counts: a matmul, the course's linear stack, a transformer step."),
    ('flops', 'transformer', 'POST', '/api/v1/flops/transformer',
     'Exact matmul FLOPs of a training step by component, beside 6ND.',
     'Exact matmul FLOPs of a training step by component, beside 6ND.', [], [],
     'app.api.services.flops:TransformerRequest', True, '', 'app.api.routes.flops',
     "FLOP counts: a matmul, the course's linear stack, a transformer step."),
    ('hardware', 'get', 'GET', '/api/v1/hardware/{gpu_id}',
     'One accelerator by id, or by a name people write ("H100 80GB", "4090") that points at one part.',
     'One accelerator by id, or by a name people write ("H100 80GB", "4090") that points at one part.',
     ['gpu_id'], [], None, False, '', 'app.api.routes.hardware', 'The accelerator catalogue.'),
    ('hardware', 'list', 'GET', '/api/v1/hardware',
     'Every accelerator with dense peaks per dtype, memory and bandwidth.',
     'Every accelerator with dense peaks per dtype, memory and bandwidth.', [], [], None, False, '',
     'app.api.routes.hardware', 'The accelerator catalogue.'),
    ('inference', 'capacity', 'POST', '/api/v1/inference/capacity',
     'The most sequences at a context, and the longest context at a concurrency, that fit.',
     'The most sequences at a context, and the longest context at a concurrency, that fit.', [], [],
     'app.api.services.inference:InferenceMemoryRequest', True, '', 'app.api.routes.inference',
     'Serving: memory per GPU, capacity, prefill and decode time; the weight formats.'),
    ('inference', 'memory', 'POST', '/api/v1/inference/memory',
     "Bytes per GPU of weights, KV cache, workspace and overhead, against the GPU's memory.",
     "Bytes per GPU of weights, KV cache, workspace and overhead, against the GPU's memory.", [], [],
     'app.api.services.inference:InferenceMemoryRequest', True, '', 'app.api.routes.inference',
     'Serving: memory per GPU, capacity, prefill and decode time; the weight formats.'),
    ('inference', 'search', 'POST', '/api/v1/inference/search',
     'The cheapest deployment (GPU, count, tensor parallel, weight format, aggregated or disaggregated) '
     'that meets the SLOs at the rate, each candidate simulated; with the frontier of cost against latency.',
     'The cheapest deployment (GPU, count, tensor parallel, weight format, aggregated or disaggregated)\n'
     'that meets the SLOs at the rate, each candidate simulated; with the frontier of cost against latency.',
     [], [], 'app.api.services.deploy:DeploySearchRequest', True, '', 'app.api.routes.inference',
     'Serving: memory per GPU, capacity, prefill and decode time; the weight formats.'),
    ('inference', 'simulate', 'POST', '/api/v1/inference/simulate',
     'A traffic of requests served step by step as vLLM V1 schedules them: TTFT, TPOT and end-to-end '
     'percentiles, throughput, goodput under SLOs, the queue and KV cache over time, preemptions.',
     'A traffic of requests served step by step as vLLM V1 schedules them: TTFT, TPOT and end-to-end\n'
     'percentiles, throughput, goodput under SLOs, the queue and KV cache over time, preemptions.',
     [], [], 'app.api.services.simulate:SimulateRequest', True, '', 'app.api.routes.inference',
     'Serving: memory per GPU, capacity, prefill and decode time; the weight formats.'),
    ('inference', 'time', 'POST', '/api/v1/inference/time',
     'Time to first token, inter-token latency, tokens/s, requests/s and cost: a pass kernel by kernel '
     '(launches, waves, the batching mix), with the roofline beside it.',
     'Time to first token, inter-token latency, tokens/s, requests/s and cost: a pass kernel by kernel\n'
     '(launches, waves, the batching mix), with the roofline beside it.',
     [], [], 'app.api.services.inference:InferenceTimeRequest', True, '', 'app.api.routes.inference',
     'Serving: memory per GPU, capacity, prefill and decode time; the weight formats.'),
    ('memory', 'max-model', 'POST', '/api/v1/memory/max-model',
     'The largest parameter count whose training state fits on num_gpus GPUs.',
     'The largest parameter count whose training state fits on num_gpus GPUs.', [], [],
     'app.api.services.memory:MaxModelRequest', True, '', 'app.api.routes.memory',
     'Training memory per GPU, and the largest model that fits.'),
    ('memory', 'training', 'POST', '/api/v1/memory/training',
     'Per-GPU bytes of parameters, gradients, optimizer state, master weights and activations.',
     'Per-GPU bytes of parameters, gradients, optimizer state, master weights and activations.', [], [],
     'app.api.services.memory:TrainingMemoryRequest', True, '', 'app.api.routes.memory',
     'Training memory per GPU, and the largest model that fits.'),
    ('models', 'get', 'GET', '/api/v1/models/{name}',
     'One preset by name, with its total and active parameters.',
     'One preset by name, with its total and active parameters.\n'
     '\n'
     'As each entry of the listing: family, config, parameters by component and warnings.',
     ['name'], [], None, False, '', 'app.api.routes.models',
     'Model presets, and Hugging Face config.json import.'),
    ('models', 'import', 'POST', '/api/v1/models/import',
     'Read a Hugging Face config.json into a TransformerConfig, with its parameters.',
     'Read a Hugging Face config.json into a TransformerConfig, with its parameters.', [], [], None, True,
     'A Hugging Face config.json (model_type llama, mistral, qwen2, qwen3, phi3, olmo, olmo2, gpt2, '
     'gpt_neox, falcon, starcoder2, gemma, gemma2, gemma3_text, gemma3, mixtral, qwen2_moe, qwen3_moe, '
     'deepseek_v2, gpt_oss, glm4_moe, deepseek_v3, llama4_text, llama4, qwen3_next, jamba, bamba, '
     'nemotron_h, falcon_h1). Nothing is fetched. A key that changes the count but that model_type does not '
     'read is refused; unknown keys are listed in warnings.',
     'app.api.routes.models', 'Model presets, and Hugging Face config.json import.'),
    ('models', 'list', 'GET', '/api/v1/models',
     'Every preset with its family and its total and active parameters.',
     'Every preset with its family and its total and active parameters.\n'
     '\n'
     "`params.total` counts all of a model's parameters; `params.active` those one token's\n"
     'forward pass reads: the dense parts, the routers, the shared experts and top_k of the\n'
     'routed experts (equal to total for a dense model). Each preset also gives its parameters\n'
     'by component, its resolved config, and `warnings`: the conventions the counts rest on.',
     [], [], None, False, '', 'app.api.routes.models',
     'Model presets, and Hugging Face config.json import.'),
    ('plan', 'training', 'POST', '/api/v1/plan/training',
     'Every valid data x tensor x pipeline x expert layout, ZeRO stage, micro-batch, interleaving and '
     'recompute for the GPUs: timed (compute, exposed communication, bubble) and sized by the memory '
     'engine; the fastest that fit, and the counts evaluated, fitting and refused by reason.',
     'Every valid data x tensor x pipeline x expert layout, ZeRO stage, micro-batch, interleaving and\n'
     'recompute for the GPUs: timed (compute, exposed communication, bubble) and sized by the memory '
     'engine;\n'
     'the fastest that fit, and the counts evaluated, fitting and refused by reason.',
     [], [], 'app.api.services.plan:TrainingPlanRequest', True, '', 'app.api.routes.plan',
     'Planning runs over many GPUs: the layout search.'),
    ('quantization', 'list', 'GET', '/api/v1/quantization',
     'Every weight format: bits per weight, block layout, what stays unquantized, a source.',
     'Every weight format: bits per weight, block layout, what stays unquantized, a source.', [], [], None,
     False, '', 'app.api.routes.inference',
     'Every weight format: bits per weight, block layout, what stays unquantized, a source.'),
    ('tensors', 'layout', 'POST', '/api/v1/tensors/layout',
     'Contiguity, the storage index of an element, and whether a view needs a copy.',
     'Contiguity, the storage index of an element, and whether a view needs a copy.', [], [],
     'app.api.services.tensors:LayoutRequest', True, '', 'app.api.routes.tensors',
     'Tensor memory, strides, contiguity and views.'),
    ('tensors', 'memory', 'POST', '/api/v1/tensors/memory', 'Bytes of a contiguous tensor, in GB and GiB.',
     'Bytes of a contiguous tensor, in GB and GiB.', [], [], 'app.api.services.tensors:MemoryRequest', True,
     '', 'app.api.routes.tensors', 'Tensor memory, strides, contiguity and views.'),
    ('time', 'mfu', 'POST', '/api/v1/time/mfu', 'Achieved FLOP/s over the dense peak.',
     'Achieved FLOP/s over the dense peak.', [], [], 'app.api.services.time:MfuRequest', True, '',
     'app.api.routes.time', 'Training time and MFU.'),
    ('time', 'step', 'POST', '/api/v1/time/step',
     'One training step on one device: the datasheet answer (FLOPs over the dense peak x 0.5) and, with '
     "`calibration`, the device's own: GEMMs on its measured matmul surface, per-op, activation and "
     'optimizer terms fitted over its train_step runs, each naming the jobs it came from.',
     'One training step on one device: the datasheet answer (FLOPs over the dense peak x 0.5) and,\n'
     "with `calibration`, the device's own: GEMMs on its measured matmul surface, per-op, activation\n"
     'and optimizer terms fitted over its train_step runs, each naming the jobs it came from.',
     [], [], 'app.api.services.step:StepTimeRequest', True, '', 'app.api.routes.time',
     'Training time and MFU.'),
    ('time', 'training', 'POST', '/api/v1/time/training',
     "Days, GPU-hours and cost of a run at a given MFU, or with `calibration` at the MFU a device's profile "
     "gives the model's step.",
     "Days, GPU-hours and cost of a run at a given MFU, or with `calibration` at the MFU a device's\n"
     "profile gives the model's step.",
     [], [], 'app.api.services.time:TrainingTimeRequest', True, '', 'app.api.routes.time',
     'Training time and MFU.'),
]
