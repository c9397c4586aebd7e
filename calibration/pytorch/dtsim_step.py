#!/usr/bin/env python3
"""A whole training step on one GPU as eager PyTorch runs it: a check of dtsim's step without communication.

dtsim_layer.py times single blocks and dtsim_memory.py measures what one block keeps; this script runs a whole
model's step: the token embedding, the transformer blocks (dtsim_torch_common.py's LlamaBlock, torchtitan's form, and
GptBlock, MPT's form), the final norm, the output projection, the fp32 cross-entropy (torchtitan's
F.cross_entropy(logits.float(), labels)), the backward and AdamW. Two models:

  llama  torchtitan's Llama 3: token embedding, blocks, nn.RMSNorm, an untied bias-free nn.Linear output;
  gpt    MPT's form: token embedding, blocks, nn.LayerNorm, the output tied to the embedding (F.linear with its
         weight), no linear biases, no dropout.

Precision as torchtitan's FSDP2 computes with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), here
on one GPU with nothing sharded: the module's parameters are bf16 (FSDP2's all-gathered copy), so the forward and
backward run in bf16 throughout (activations, residual stream, weights); each parameter has an fp32 master, and
a hook run when a bf16 gradient has been accumulated casts it to fp32 into the master's .grad and frees it
(FSDP2 casts to reduce_dtype before its reduce-scatter); torch.optim.AdamW(fused=True) steps the fp32 masters,
whose states are fp32; the bf16 parameters are then refreshed from the masters (FSDP2 casts the fp32 shard before
the next all-gather). Model states are thus 2 (bf16) + 4 (master) + 4 (fp32 gradient) + 8 (Adam) = 18 bytes per
parameter, dtsim's count with grad_dtype fp32.

Activation checkpointing per block: none; full (torch.utils.checkpoint, use_reentrant=False); op, torchtitan's
per-op selective policy (dtsim_torch_common.py's op_sac_context). SDPA runs with the FlashAttention-2 backend.
With --compile each block (with its checkpointing) runs under torch.compile, as torchtitan's training.compile
applies it; the embedding, final norm, output layer and loss stay eager.

For each case: 3 warm-up steps, then the peak statistics are reset and 5 steps are timed, each with CUDA events at
its start, after the forward (the loss), after the backward and after the optimizer (AdamW step, the bf16 refresh
and zero_grad(set_to_none=True)); the medians are reported with torch.cuda.max_memory_allocated() and
max_memory_reserved() over the timed steps. One more step runs under torch.profiler and its kernels' GPU time
is summed by kind (GEMM, attention, optimizer, other).

    python3 dtsim_step.py --out steps.json [--only NAME,...] [--policies none,op] [--compile]
"""

import argparse
import gc
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import (DEV, DT, GptBlock, LlamaBlock, freqs_for, run_block, software_meta,  # noqa: E402
                                write_json)

GIB = 2.0 ** 30


class Model(nn.Module):
    def __init__(self, kind, h, heads, kv, ffn, layers, vocab, policy):
        super().__init__()
        self.kind, self.policy = kind, policy
        self.tok_embeddings = nn.Embedding(vocab, h)
        if kind == "llama":
            self.layers = nn.ModuleList([LlamaBlock(h, heads, kv, ffn) for _ in range(layers)])
            self.norm = nn.RMSNorm(h, eps=1e-5)
            self.output = nn.Linear(h, vocab, bias=False)
        else:
            self.layers = nn.ModuleList([GptBlock(h, heads) for _ in range(layers)])
            self.norm = nn.LayerNorm(h)
            self.output = None  # tied to the embedding

        self.blocks = [self.block_fn(blk) for blk in self.layers]

    def block_fn(self, blk):
        return lambda x, freqs: run_block(blk, x, freqs, self.policy)

    def compile_blocks(self):
        # One compilation per block (a guard on the block it closes over): more than dynamo's default cache.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(self.layers))
        self.blocks = [torch.compile(self.block_fn(blk)) for blk in self.layers]

    def forward(self, tokens, labels, freqs):
        x = self.tok_embeddings(tokens)
        for fn in self.blocks:
            x = fn(x, freqs)
        x = self.norm(x)
        w = self.output.weight if self.output is not None else self.tok_embeddings.weight
        logits = F.linear(x, w)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def kernel_split(prof):
    """GPU time of the profiled step's kernels, summed by kind, and the longest kernels."""
    cats = {"gemm": 0.0, "attention": 0.0, "optimizer": 0.0, "other": 0.0}
    kernels = []
    for e in prof.key_averages():
        if "cuda" not in str(getattr(e, "device_type", "")).lower():
            continue
        # The profiler's GPU-side annotations (Optimizer.step#AdamW.step, ProfilerStep#n) span kernels: not kernels.
        if getattr(e, "is_user_annotation", False) or e.key.startswith(("Optimizer.", "ProfilerStep#")):
            continue
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        name = e.key
        low = name.lower()
        if "flash" in low or "fmha" in low or "attention" in low:
            cat = "attention"
        elif any(k in low for k in ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "sm80_", "cublas", "splitk")):
            cat = "gemm"
        elif "adam" in low or "multi_tensor" in low or "foreach" in low:
            cat = "optimizer"
        else:
            cat = "other"
        cats[cat] += us / 1e3
        kernels.append([name[:120], cat, e.count, round(us / 1e3, 3)])
    kernels.sort(key=lambda r: -r[3])
    return {k: round(v, 3) for k, v in cats.items()}, kernels[:25]


def run_case(name, kind, h, heads, kv, ffn, layers, vocab, seq, batch, policy, warmup=3, reps=5, profile=True,
             compile_blocks=False):
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    with torch.device(DEV):
        model = Model(kind, h, heads, kv, ffn, layers, vocab, policy)
    model.to(DT)
    if compile_blocks:
        torch._dynamo.reset()
        model.compile_blocks()
    params = [p for p in model.parameters()]
    n_params = sum(p.numel() for p in params)
    masters = [nn.Parameter(p.detach().float()) for p in params]

    def make_hook(m):
        def hook(p):
            m.grad = p.grad.float()  # FSDP2's cast to reduce_dtype
            p.grad = None
        return hook

    handles = [p.register_post_accumulate_grad_hook(make_hook(m)) for p, m in zip(params, masters)]
    opt = torch.optim.AdamW(masters, lr=1e-5, weight_decay=0.1, fused=True)
    freqs = freqs_for(kind, seq, h // heads)
    tokens = torch.randint(0, vocab, (batch, seq), device=DEV)
    labels = torch.randint(0, vocab, (batch, seq), device=DEV)

    def refresh():
        with torch.no_grad():
            try:
                torch._foreach_copy_(params, masters)
            except Exception:
                for p, m in zip(params, masters):
                    p.copy_(m)

    def step(ev=None):
        if ev:
            ev[0].record()
        loss = model(tokens, labels, freqs)
        if ev:
            ev[1].record()
        loss.backward()
        if ev:
            ev[2].record()
        opt.step()
        refresh()
        opt.zero_grad(set_to_none=True)
        if ev:
            ev[3].record()
        return loss

    row = {"name": name, "kind": kind, "hidden": h, "heads": heads, "kv_heads": kv, "ffn": ffn, "layers": layers,
           "vocab": vocab, "seq": seq, "batch": batch, "recompute": policy, "params": n_params,
           "compile": compile_blocks}
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            t0 = time.time()
            for _ in range(warmup):
                step()
            torch.cuda.synchronize()
            row["warmup_s"] = round(time.time() - t0, 2)
            row["states_allocated_GiB"] = round(torch.cuda.memory_allocated() / GIB, 3)
            torch.cuda.reset_peak_memory_stats()
            fwd, bwd, optm, whole = [], [], [], []
            for _ in range(reps):
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                loss = step(ev)
                ev[3].synchronize()
                fwd.append(ev[0].elapsed_time(ev[1]))
                bwd.append(ev[1].elapsed_time(ev[2]))
                optm.append(ev[2].elapsed_time(ev[3]))
                whole.append(ev[0].elapsed_time(ev[3]))
            row["loss"] = round(float(loss.detach()), 4)
            row["step_ms"] = round(statistics.median(whole), 3)
            row["step_ms_all"] = [round(t, 3) for t in whole]
            row["fwd_ms"] = round(statistics.median(fwd), 3)
            row["bwd_ms"] = round(statistics.median(bwd), 3)
            row["opt_ms"] = round(statistics.median(optm), 3)
            row["max_allocated_GiB"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
            row["max_reserved_GiB"] = round(torch.cuda.max_memory_reserved() / GIB, 3)
            del loss
            if profile:
                try:
                    from torch.profiler import ProfilerActivity, profile as tprofile
                    torch.cuda.synchronize()
                    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                        step()
                        torch.cuda.synchronize()
                    row["kernel_ms"], row["top_kernels"] = kernel_split(prof)
                    del prof
                except Exception as e:
                    row["profile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        traceback.print_exc()
        if "max_allocated_GiB" not in row:
            row["max_allocated_GiB_at_error"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
    for hd in handles:
        hd.remove()
    del model, params, masters, opt, tokens, labels, freqs, handles
    gc.collect()
    torch.cuda.empty_cache()
    return row


CASES = [
    # name, kind, hidden, heads, kv, ffn, layers, vocab, seq, batch, policies
    ("llama3-8b-8layers", "llama", 4096, 32, 8, 14336, 8, 128256, 8192, 1, ("none", "full", "op")),
    ("mpt-1b", "gpt", 2048, 16, 16, 8192, 24, 50368, 2048, 8, ("none", "full")),
    ("mpt-760m", "gpt", 1536, 12, 12, 6144, 24, 50368, 2048, 8, ("none", "full")),
    ("mpt-760m", "gpt", 1536, 12, 12, 6144, 24, 50368, 8192, 2, ("none", "full")),
]

COLUMNS = ["name", "kind", "hidden", "heads", "kv_heads", "ffn", "layers", "vocab", "seq", "batch", "recompute",
           "params", "step_ms", "fwd_ms", "bwd_ms", "opt_ms", "max_allocated_GiB", "max_reserved_GiB",
           "states_allocated_GiB", "compile"]


def meta(argv):
    props = torch.cuda.get_device_properties(0)
    return {"tool": "dtsim_step.py", "gpu": props.name, **software_meta(argv),
            "timing": "CUDA events at the start of each step, after the forward, after the backward and after "
                      "optimizer.step(), the bf16 refresh and zero_grad; 3 warm-up steps, median of 5; peaks over "
                      "the 5 timed steps (reset after the warm-up)"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="comma-separated case names to run (default: all)")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--policies", default="", help="comma-separated recompute policies to run (default: each case's)")
    p.add_argument("--compile", action="store_true", help="each block under torch.compile")
    args = p.parse_args()
    doc = {"meta": meta(sys.argv),
           "training_steps": {"description": "", "columns": COLUMNS, "rows": []},
           "details": []}
    only = {s for s in args.only.split(",") if s}
    for name, kind, h, heads, kv, ffn, layers, vocab, seq, batch, policies in CASES:
        if only and name not in only:
            continue
        wanted = [q for q in args.policies.split(",") if q]
        for policy in (wanted or policies):
            t0 = time.time()
            try:
                row = run_case(name, kind, h, heads, kv, ffn, layers, vocab, seq, batch, policy,
                               profile=not args.no_profile, compile_blocks=args.compile)
            except Exception as e:  # e.g. out of memory while building the model
                traceback.print_exc()
                row = {"name": name, "kind": kind, "hidden": h, "heads": heads, "kv_heads": kv, "ffn": ffn,
                       "layers": layers, "vocab": vocab, "seq": seq, "batch": batch, "recompute": policy,
                       "compile": args.compile, "error": f"{type(e).__name__}: {str(e)[:400]}"}
                gc.collect()
                torch.cuda.empty_cache()
            print(f"{name} seq {seq} batch {batch} {policy}: step {row.get('step_ms')} ms (fwd {row.get('fwd_ms')}, "
                  f"bwd {row.get('bwd_ms')}, opt {row.get('opt_ms')}), peak {row.get('max_allocated_GiB')} / "
                  f"{row.get('max_reserved_GiB')} GiB, kernels {row.get('kernel_ms')} {row.get('error', '')} "
                  f"[{time.time() - t0:.1f} s]", flush=True)
            doc["training_steps"]["rows"].append([row.get(c) for c in COLUMNS])
            doc["details"].append(row)
            write_json(args.out, doc)


if __name__ == "__main__":
    main()
