#!/usr/bin/env python3
"""One transformer block eager and under torch.compile, bf16 and float8 linears: time, kernels, memory.

torchtitan compiles each transformer block on its own (torch.compile(block), default mode):
Inductor fuses the memory-bound work between the GEMMs and the attention kernel (norms,
rotary, SwiGLU, residual adds, dtype and float8 casts) into generated Triton kernels and
chooses which activations to save. dtsim prices that work by the bytes its kernels move;
this script gives the kernel-level facts a compiled-block model is fitted to: per variant,
the forward and forward+backward time, the GPU time by kernel kind from one profiled
forward+backward (GEMM, attention, generated Triton kernels, eager elementwise, other),
the number of kernels, the bytes kept from the forward for the backward, the backward's
peak, and the first call's wall time (the compilation).

Float8 linears are a replica of torchao's tensorwise dynamic scaling as torchao 0.8+ runs it
(matmul_with_hp_or_float8_args): the bf16 input and weight are saved; the forward casts both
to e4m3 with a scale from their amax and multiplies with torch._scaled_mm (fast accumulation);
the backward casts the output gradient to e5m2, the weight and the input again to e4m3 in
the layouts _scaled_mm needs, and runs the two gradient products. torchao is not needed.

    python3 dtsim_compile.py --out compile.json [--budget-s 300] [--only NAME|NAME:LINEAR:RECOMPUTE,...]
"""

import argparse
import gc
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import (DEV, DT, GptBlock, LlamaBlock, elapsed_writer, freqs_for, run_block,  # noqa: E402
                                software_meta, timed)

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_fp8(t, dt):
    """torchao's tensorwise cast: scale = max / amax, saturate, cast; returns the fp8 tensor and 1 / scale."""
    fmax = torch.finfo(dt).max
    amax = t.abs().max().float()
    scale = fmax / torch.clamp(amax, min=1e-12)
    q = (t.float() * scale).clamp(-fmax, fmax).to(dt)
    return q, scale.reciprocal()


class Float8Mm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, w):
        ctx.save_for_backward(x2, w)
        xq, xs = to_fp8(x2, E4M3)
        wq, ws = to_fp8(w, E4M3)
        return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=x2.dtype, use_fast_accum=True)

    @staticmethod
    def backward(ctx, g):
        x2, w = ctx.saved_tensors
        g = g.contiguous()
        gq, gs = to_fp8(g, E5M2)
        wq, ws = to_fp8(w, E4M3)
        gx = torch._scaled_mm(gq, wq.t().contiguous().t(), scale_a=gs, scale_b=ws, out_dtype=g.dtype)
        xq, xs = to_fp8(x2, E4M3)
        gw = torch._scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), scale_a=gs, scale_b=xs,
                              out_dtype=g.dtype)
        return gx, gw


class Float8Linear(nn.Linear):
    def forward(self, x):
        y = Float8Mm.apply(x.reshape(-1, x.shape[-1]), self.weight)
        return y.view(*x.shape[:-1], y.shape[-1])


def kernel_kind(name):
    low = name.lower()
    if low.startswith("triton") or "triton_" in low:
        return "triton"
    if "flash" in low or "fmha" in low or "attention" in low:
        return "attention"
    if any(k in low for k in ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "sm80_", "cublas", "splitk")):
        return "gemm"
    if "memcpy" in low or "memset" in low:
        return "copy"
    return "eager"


def kernel_split(prof):
    """GPU time (ms) and count of the profiled kernels by kind, and the longest kernels."""
    ms, count, kernels = {}, {}, []
    for e in prof.key_averages():
        if "cuda" not in str(getattr(e, "device_type", "")).lower():
            continue
        if getattr(e, "is_user_annotation", False) or e.key.startswith("ProfilerStep#"):
            continue
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        kind = kernel_kind(e.key)
        ms[kind] = ms.get(kind, 0.0) + us / 1e3
        count[kind] = count.get(kind, 0) + e.count
        kernels.append([e.key[:160], kind, e.count, round(us / 1e3, 4)])
    kernels.sort(key=lambda r: -r[3])
    return {k: round(v, 4) for k, v in sorted(ms.items())}, dict(sorted(count.items())), kernels[:40]


CASES = [
    # name, kind, hidden, heads, kv, ffn, seq, batch, linear, recompute; heads of 128 (a TP8 rank's share for
    # the tp8-shapes: Llama 3 70B's 64 query and 8 kv heads, 405B's 128 and 8, the FFN / 8)
    ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 2, "bf16", "none"),
    ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 2, "fp8", "none"),
    ("mpt-1b", "gpt", 2048, 16, 16, 8192, 2048, 8, "bf16", "none"),
    ("llama3-70b-tp8-shapes", "llama", 8192, 8, 1, 3584, 8192, 2, "bf16", "none"),
    ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 2, "bf16", "op"),
    ("llama3-70b-tp8-shapes", "llama", 8192, 8, 1, 3584, 8192, 2, "fp8", "none"),
    ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 2, "fp8", "op"),
    ("mpt-1b", "gpt", 2048, 16, 16, 8192, 2048, 8, "fp8", "none"),
    ("llama3-405b-tp8-shapes", "llama", 16384, 16, 1, 6656, 8192, 1, "bf16", "none"),
    ("llama3-405b-tp8-shapes", "llama", 16384, 16, 1, 6656, 8192, 1, "fp8", "none"),
    ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 2, "fp8", "full"),
    ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 2, "bf16", "full"),
]

COLUMNS = ["name", "kind", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "linear", "recompute", "mode",
           "fwd_ms", "fwd_bwd_ms", "kept_bytes", "kept_per_sbh", "backward_peak_bytes", "first_call_s", "kernel_ms",
           "kernel_count", "max_abs_diff_vs_eager"]


def measure(case, mode, reference=None):
    name, kind, h, heads, kv, ffn, seq, batch, linear, policy = case
    gc.collect()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    d = 128  # every case's head width (a tensor-parallel rank's: heads / tp heads of 128)
    # One kv head: SDPA's enable_gqa instead of torchtitan's repeat_kv, whose expanded layout PyTorch 2.11's compiled
    # flash-attention backward rejects (a stride assertion in its fake kernel).
    gqa = kind == "llama" and kv == 1
    blk = (LlamaBlock(h, heads, kv, ffn, gqa=gqa, head_dim=d) if kind == "llama" else GptBlock(h, heads)).to(DEV, DT)
    if linear == "fp8":
        for m in blk.modules():
            if type(m) is nn.Linear:
                m.__class__ = Float8Linear
    freqs = freqs_for(kind, seq, d)
    x = (torch.randn(batch, seq, h, device=DEV, dtype=DT) * 0.5).requires_grad_(True)
    g = torch.randn(batch, seq, h, device=DEV, dtype=DT, generator=torch.Generator(DEV).manual_seed(1))

    def fn(inp):
        return run_block(blk, inp, freqs, policy)

    if mode == "compile":
        torch._dynamo.reset()  # a fresh compilation per block: no guard failures piling up to the cache limit
    run = torch.compile(fn) if mode == "compile" else fn
    row = dict(zip(COLUMNS, [name, kind, h, heads, kv, ffn, seq, batch, linear, policy, mode]))

    def clear():
        for p in blk.parameters():
            p.grad = None
        x.grad = None

    def fwd():
        return run(x)

    def both():
        run(x).backward(g)

    t0 = time.time()
    y = run(x)
    y.backward(g)
    torch.cuda.synchronize()
    row["first_call_s"] = round(time.time() - t0, 2)
    if reference is not None:
        row["max_abs_diff_vs_eager"] = round(float((y.detach().float() - reference).abs().max()), 5)
    out = y.detach().float() if mode == "eager" else None
    del y
    clear()
    row["fwd_ms"] = round(timed(fwd, 5), 4)
    clear()
    row["fwd_bwd_ms"] = round(timed(both, 5), 4)
    clear()
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    y = fwd()
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    y.backward(g)
    torch.cuda.synchronize()
    row["kept_bytes"] = kept
    row["kept_per_sbh"] = round(kept / (batch * seq * h), 3)
    row["backward_peak_bytes"] = torch.cuda.max_memory_allocated() - base
    del y
    clear()
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        both()
        torch.cuda.synchronize()
    row["kernel_ms"], row["kernel_count"], row["top_kernels"] = kernel_split(prof)
    del prof, blk, x, g, freqs
    gc.collect()
    torch.cuda.empty_cache()
    return row, out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=300.0, help="start no case after this many seconds")
    p.add_argument("--only", default="", help="comma-separated case names or name:linear:recompute (default: all)")
    args = p.parse_args()
    only = {s for s in args.only.split(",") if s}
    props = torch.cuda.get_device_properties(0)
    doc = {"meta": {"tool": "dtsim_compile.py", "gpu": props.name, **software_meta(sys.argv),
                    "timing": "CUDA events around 5 back-to-back calls after 3 warm-up calls; median of 3",
                    "attention": "SDPA flash backend", "compile": "torch.compile(block, default mode), per block",
                    "float8": "replica of torchao's tensorwise dynamic scaling (see the script's docstring)"},
           "columns": COLUMNS,
           "description": "one block, bf16 activations, input (batch, seq, hidden) with requires_grad; kept_bytes is "
                          "memory_allocated after the forward minus before (the output included); backward_peak_bytes "
                          "the peak during backward above the same base; kernel_ms/kernel_count by kind from one "
                          "profiled forward+backward; first_call_s the wall time of the first forward+backward",
           "rows": [], "errors": []}
    t_start, write = elapsed_writer(doc, args.out)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for case in CASES:
            if only and case[0] not in only and ":".join((case[0], case[8], case[9])) not in only:
                continue
            reference = None
            for mode in ("eager", "compile"):
                if time.time() - t_start > args.budget_s:
                    doc["errors"].append({"case": list(case), "mode": mode, "error": "skipped: budget spent"})
                    continue
                try:
                    row, out = measure(case, mode, reference)
                    if mode == "eager":
                        reference = out
                    doc["rows"].append(row)
                    print({k: row.get(k) for k in COLUMNS}, flush=True)
                except Exception as e:
                    traceback.print_exc()
                    doc["errors"].append({"case": list(case), "mode": mode,
                                          "error": f"{type(e).__name__}: {str(e)[:600]}"})
                    torch._dynamo.reset()
                    gc.collect()
                    torch.cuda.empty_cache()
                write()
            reference = None
    write()


if __name__ == "__main__":
    main()
