"""torch.compile's figures for W1, W2 and W3 (issues 30, 32), beside `w1_bench`, `w2_bench` and
`w3_bench` (Burn eager, Compiled) in the same lease.

W1: the reference transformer encoder (d_model 512, 8 heads, 6 layers, d_ff 2048, ReLU, no
dropout; batch 32 x 128) as `../shared/bench/torch_anchor.py` builds it: inference and a
training step (mean(out^2), backward, Adam lr 1e-4). Here for its kernel time per step
(`PROFILE=1`), which torch_anchor.py does not report.

W2: a training step of GPT-2 small, `GPT2LMHeadModel(GPT2Config())` with its dropouts at 0 (as
`w2_bench`'s model), batch 8 x 1024 random tokens, next-token cross-entropy (the model's own
`labels` loss), AdamW (lr 1e-4).
W3: ResNet-50 (`torchvision.models.resnet50()`), batch 64 x 3 x 224 x 224 random images and
labels: inference (no_grad, eval mode) and a training step (cross-entropy, SGD with momentum
0.9, lr 0.1).

Usage on the GPU machine:
    WORKLOADS=W1,W2,W3 DTYPES=f32,bf16 python3 torch_workloads.py [eager default reduce-overhead]
Prints one JSON line per figure (workload, dtype, phase, system "torch", mode, ms per step,
first call in s); with PROFILE=1 also `kernel_ms` and `launches`: the CUDA kernels of one
steady step under torch.profiler (their summed device time and their count); with KINDS=1 as
well, that step's launches and time by kernel name on stderr.
"""
import json
import os
import sys
import time

import torch


def timeit(step, iters):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / iters


def kernel_time(step):
    """Summed device time (ms) and count of the CUDA kernels of one call of `step`."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if os.environ.get("KINDS"):
        # Launches and time by kernel name, largest first (stderr: the JSON lines stay clean).
        kinds = {}
        for e in kernels:
            n, t = kinds.get(e.name[:70], (0, 0.0))
            kinds[e.name[:70]] = (n + 1, t + e.device_time)
        for name, (n, t) in sorted(kinds.items(), key=lambda k: -k[1][1])[:25]:
            print(f"  {n:4d} x {t:9.1f} us  {name}", file=sys.stderr)
    return sum(e.device_time for e in kernels) / 1e3, len(kernels)


def w2(dtype, phase):
    from transformers import GPT2Config, GPT2LMHeadModel

    if phase != "train":
        return None
    config = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).cuda().to(dtype).train()
    tokens = torch.randint(0, config.vocab_size, (8, 1024), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, lambda f: (lambda: train_w2(f, opt, tokens))


def train_w2(f, opt, tokens):
    opt.zero_grad(set_to_none=True)
    loss = f(input_ids=tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    return loss


def w3(dtype, phase):
    import torchvision

    model = torchvision.models.resnet50().cuda().to(dtype)
    images = torch.randn(64, 3, 224, 224, device="cuda", dtype=dtype)
    labels = torch.randint(0, 1000, (64,), device="cuda")
    if phase == "infer":
        model.eval()

        def infer(f):
            def step():
                with torch.no_grad():
                    return f(images)

            return step

        return model, infer
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train(f):
        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(f(images), labels)
            loss.backward()
            opt.step()
            return loss

        return step

    return model, train


def w1(dtype, phase):
    import torch.nn as nn

    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).cuda().to(dtype)
    x = torch.randn(32, 128, 512, device="cuda", dtype=dtype)
    if phase == "infer":
        model.eval()

        def infer(f):
            def step():
                with torch.no_grad():
                    return f(x)

            return step

        return model, infer
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def train(f):
        def step():
            opt.zero_grad(set_to_none=True)
            loss = f(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        return step

    return model, train


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3}


def run(workload, mode, dtype_name, phase):
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    made = WORKLOADS[workload](dtype, phase)
    if made is None:
        return
    model, make_step = made
    f = model if mode == "eager" else torch.compile(model, mode=None if mode == "default" else mode)
    step = make_step(f)
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    for _ in range(5):
        step()
    ms = timeit(step, int(os.environ.get("ITERS", "20")))
    line = {
        "workload": workload,
        "dtype": dtype_name,
        "phase": phase,
        "system": "torch",
        "mode": mode,
        "ms": round(ms, 4),
        "first_call_s": round(first, 3),
        "gpu": os.environ.get("BENCH_GPU", "unknown"),
        "date": os.environ.get("BENCH_DATE", "unknown"),
    }
    if os.environ.get("PROFILE"):
        line["metric"] = "kernel_ms"
        line["kernel_ms"], line["launches"] = kernel_time(step)
    print(json.dumps(line), flush=True)


modes = sys.argv[1:] or ["eager", "default", "reduce-overhead"]
for workload in os.environ.get("WORKLOADS", "W1,W2,W3").split(","):
    for dtype_name in os.environ.get("DTYPES", "bf16").split(","):
        for phase in ("infer", "train"):
            for mode in modes:
                try:
                    run(workload, mode, dtype_name, phase)
                except Exception as e:  # a failed mode is reported, the others still run
                    print(json.dumps({"workload": workload, "phase": phase, "system": "torch",
                                      "mode": mode, "failed": f"{type(e).__name__}: {str(e)[:200]}"}),
                          flush=True)
