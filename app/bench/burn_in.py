"""burn_in: the matmul, bandwidth and train_step probes one after the other in this child, each
sustained (app/probes/burn_in.py says which sizes and why)."""

from app.bench import bandwidth, env, matmul, nvml, train_step
from app.probes.burn_in import BurnInParams, parts


def run(raw: dict, progress) -> dict:
    p = BurnInParams.model_validate(raw)
    device = env.pick_device(p.device)
    plan = parts(p, device.type)
    steps = (("matmul", matmul.run, plan.matmul), ("bandwidth", bandwidth.run, plan.bandwidth),
             ("train_step", train_step.run, plan.train_step))
    results = {}
    for i, (name, probe, params) in enumerate(steps):
        progress(i, len(steps), name)
        results[name] = probe(params.model_dump(mode="json"), lambda *_: None)
    progress(len(steps), len(steps), "done")
    uuid = nvml.torch_uuid(device.index or 0) if device.type == "cuda" else None
    return {"probe": "burn_in", "environment": results["matmul"]["environment"], "gpu_uuid": uuid, **results}
