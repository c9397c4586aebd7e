#!/usr/bin/env python3
"""Activation memory one transformer block keeps for its backward, as eager PyTorch keeps it.

dtsim accounts a layer's kept activations with Korthikanti et al.'s formula
(include/dtsim/hw/transformer.hpp, layer_activation_bytes). This script measures, on one GPU, what
eager PyTorch (bf16, autograd, SDPA with the FlashAttention-2 backend) really keeps, for a Llama 3
block as torchtitan writes it (nn.RMSNorm, complex rotary, repeat_kv then SDPA, SwiGLU) and an
MPT-style GPT block (LayerNorm, multi-head SDPA, tanh GeLU 4h, no linear biases), under three
activation-checkpointing policies:

  none  plain autograd;
  full  torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False);
  op    torchtitan's per-op selective checkpointing: torch.utils.checkpoint with
        context_fn=create_selective_checkpoint_contexts(policy), the policy saving the outputs of
        aten.mm (all but every second one: a counter of mm calls, recomputing when it is even),
        of SDPA's flash, memory-efficient and cuDNN attention ops, of c10d functional
        reduce_scatter_tensor and of aten.max, and preferring to recompute everything else.
        Followed: pytorch/torchtitan torchtitan/models/llama3/parallelize_llama.py (_save_list and
        _apply_ac_to_transformer_block's _custom_policy with meta[f"{mode}_mm_count"]) and the later
        torchtitan/distributed/activation_checkpoint.py, which added
        aten._scaled_dot_product_cudnn_attention to the list (its newest form names the saved
        tensors instead of counting; the counting form is the one most runs used).

For each case, after two warm-up steps (so that cuBLAS workspaces and the like are allocated
already) and with the parameters' gradients freed:
  saved_bytes    torch.cuda.memory_allocated() after the forward minus before it, the input created
                 beforehand and the output kept: for a block in a stack this is what one block adds,
                 since its output is the next block's input (and this block's input is the last one's);
  backward_peak_extra_bytes  torch.cuda.max_memory_allocated() during the backward (peak reset after
                 the forward) minus memory_allocated() when the backward starts: the recompute, the
                 gradients of the parameters (param_bytes of them, bf16) and the temporaries;
  fwd_bwd_ms     median of 5 single forward+backward steps timed with CUDA events, after warm-up;
  reserved_bytes torch.cuda.memory_reserved() at the end of the case.
A second section lists, for the policy none, every tensor autograd saved (walking the graph's
_saved_* attributes), and for the policy op every output the policy kept (from a dispatch mode
watching the forward), so that the totals can be explained tensor by tensor.

    python3 dtsim_memory.py --out memory.json
"""

import argparse
import datetime
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

DT = torch.bfloat16
DEV = "cuda"


def repeat_kv(x, n_rep):
    """torchtitan's repeat_kv: torch.repeat_interleave(x, dim=2, repeats=n_rep), as expand + reshape."""
    bs, slen, n_kv, d = x.shape
    if n_rep == 1:
        return x
    return x.unsqueeze(3).expand(bs, slen, n_kv, n_rep, d).reshape(bs, slen, n_kv * n_rep, d)


class LlamaBlock(nn.Module):
    """torchtitan's llama3 TransformerBlock (Attention, FeedForward, nn.RMSNorm) without its TP hooks.

    gqa=True passes enable_gqa to SDPA instead of repeating K and V (not torchtitan's form; a variant).
    """

    def __init__(self, h, heads, kv, ffn, gqa=False):
        super().__init__()
        self.heads, self.kv, self.d, self.gqa = heads, kv, h // heads, gqa
        self.wq = nn.Linear(h, heads * self.d, bias=False)
        self.wk = nn.Linear(h, kv * self.d, bias=False)
        self.wv = nn.Linear(h, kv * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, h, bias=False)
        self.w1 = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)
        self.w3 = nn.Linear(h, ffn, bias=False)
        self.attention_norm = nn.RMSNorm(h, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(h, eps=1e-5)

    def attention(self, x, freqs):
        bs, s, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, s, -1, self.d)
        xk = xk.view(bs, s, -1, self.d)
        xv = xv.view(bs, s, -1, self.d)
        q_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        k_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        xq = torch.view_as_real(q_ * freqs).flatten(3).type_as(xq)
        xk = torch.view_as_real(k_ * freqs).flatten(3).type_as(xk)
        if self.gqa:
            keys, values = xk, xv
        else:
            keys, values = repeat_kv(xk, self.heads // self.kv), repeat_kv(xv, self.heads // self.kv)
        o = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                           is_causal=True, enable_gqa=self.gqa and self.kv != self.heads)
        o = o.transpose(1, 2).contiguous().view(bs, s, -1)
        return self.wo(o)

    def forward(self, x, freqs):
        h = x + self.attention(self.attention_norm(x), freqs)
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class GptBlock(nn.Module):
    """An MPT-style block: pre-LayerNorm, fused QKV, multi-head SDPA, tanh GeLU 4h, no linear biases."""

    def __init__(self, h, heads):
        super().__init__()
        self.heads, self.d = heads, h // heads
        self.qkv = nn.Linear(h, 3 * h, bias=False)
        self.proj = nn.Linear(h, h, bias=False)
        self.up = nn.Linear(h, 4 * h, bias=False)
        self.down = nn.Linear(4 * h, h, bias=False)
        self.n1 = nn.LayerNorm(h)
        self.n2 = nn.LayerNorm(h)

    def forward(self, x, freqs=None):
        b, s, h = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, self.d).unbind(2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, h))
        return x + self.down(F.gelu(self.up(self.n2(x)), approximate="tanh"))


def _op(path):
    obj = torch.ops
    try:
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    except (AttributeError, RuntimeError):
        return None


SAVE_OPS = {o for o in (_op("aten.mm.default"),
                        _op("aten._scaled_dot_product_efficient_attention.default"),
                        _op("aten._scaled_dot_product_flash_attention.default"),
                        _op("aten._scaled_dot_product_cudnn_attention.default"),
                        _op("_c10d_functional.reduce_scatter_tensor.default"),
                        _op("aten.max.default")) if o is not None}
MM = torch.ops.aten.mm.default


def op_sac_context(decisions=None):
    """torchtitan's op-SAC context: save SAVE_OPS' outputs but recompute every second mm."""
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func == MM:
            meta[key] += 1
        save = func in SAVE_OPS and not (func == MM and meta[key] % 2 == 0)
        if decisions is not None and not ctx.is_recompute:
            decisions.append([func, save, None])
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Stack(nn.Module):
    def __init__(self, blocks, policy):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.policy = policy

    def forward(self, x, freqs):
        for blk in self.blocks:
            if self.policy == "none":
                x = blk(x, freqs)
            elif self.policy == "full":
                x = checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False)
            elif self.policy == "op":
                x = checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False,
                               context_fn=op_sac_context)
            else:
                raise ValueError(self.policy)
        return x


def tensor_bytes(t):
    return t.numel() * t.element_size()


class OutputLog(TorchDispatchMode):
    """Below the SAC caching mode: pairs each policy decision with the op's outputs' shapes and bytes."""

    def __init__(self, decisions):
        super().__init__()
        self.decisions = decisions

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.decisions and self.decisions[-1][0] is func and self.decisions[-1][2] is None:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            self.decisions[-1][2] = [[list(o.shape), str(o.dtype).replace("torch.", ""), tensor_bytes(o)]
                                     for o in outs if isinstance(o, torch.Tensor)]
        return out


def graph_saved(y, inp, params):
    """Every tensor saved on y's autograd graph, as
    [node, attribute, shape, dtype, bytes, storage_bytes, first_reference_to_its_storage, origin]."""
    rows, seen_nodes, seen_storage = [], set(), set()
    stack = [y.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in seen_nodes:
            continue
        seen_nodes.add(n)
        for attr in sorted(a for a in dir(n) if a.startswith("_saved_")):
            try:
                v = getattr(n, attr)
            except Exception:
                continue
            for t in (v if isinstance(v, (tuple, list)) else (v,)):
                if not isinstance(t, torch.Tensor) or not t.is_cuda:
                    continue
                st = t.untyped_storage()
                ptr, nb = st.data_ptr(), st.nbytes()
                first = ptr not in seen_storage
                seen_storage.add(ptr)
                origin = "input" if ptr == inp else "param" if ptr in params else "forward"
                rows.append([type(n).__name__, attr, list(t.shape), str(t.dtype).replace("torch.", ""),
                             tensor_bytes(t), nb, first, origin])
        for nf, _ in n.next_functions:
            stack.append(nf)
    return rows


def build(kind, h, heads, kv, ffn, nblocks=1, policy="none", gqa=False):
    mk = (lambda: LlamaBlock(h, heads, kv, ffn, gqa)) if kind == "llama" else (lambda: GptBlock(h, heads))
    return Stack([mk() for _ in range(nblocks)], policy).to(DEV, DT)


def freqs_for(kind, seq, d):
    if kind != "llama":
        return None
    f = torch.polar(torch.ones(seq, d // 2, device=DEV), torch.randn(seq, d // 2, device=DEV))
    return f.view(1, seq, 1, d // 2)


def measure(kind, h, heads, kv, ffn, seq, batch, policy, nblocks, gqa, reps=5):
    torch.cuda.empty_cache()
    model = build(kind, h, heads, kv, ffn, nblocks, policy, gqa)
    freqs = freqs_for(kind, seq, h // heads)
    x = torch.randn(batch, seq, h, device=DEV, dtype=DT, requires_grad=True)
    g = torch.randn(batch, seq, h, device=DEV, dtype=DT)
    param_bytes = sum(tensor_bytes(p) for p in model.parameters())
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(2):
            model(x, freqs).backward(g)
        for p in model.parameters():
            p.grad = None
        x.grad = None
        torch.cuda.synchronize()
        m0 = torch.cuda.memory_allocated()
        y = model(x, freqs)
        torch.cuda.synchronize()
        m1 = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        m2 = torch.cuda.memory_allocated()
        y.backward(g)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - m2
        del y
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(x, freqs).backward(g)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    out_bytes = tensor_bytes(x)
    del model, x, g, freqs
    return m1 - m0, peak, statistics.median(times), reserved, out_bytes, param_bytes


def breakdown(kind, h, heads, kv, ffn, seq, batch, policy, gqa):
    """Per-tensor list of what one block keeps: graph walk (none) or the op policy's saved outputs (op)."""
    torch.cuda.empty_cache()
    model = build(kind, h, heads, kv, ffn, 1, "none", gqa)
    blk = model.blocks[0]
    freqs = freqs_for(kind, seq, h // heads)
    x = torch.randn(batch, seq, h, device=DEV, dtype=DT, requires_grad=True)
    rows = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        if policy == "none":
            y = blk(x, freqs)
            params = {q.untyped_storage().data_ptr() for q in model.parameters()}
            if freqs is not None:
                params.add(freqs.untyped_storage().data_ptr())
            rows = graph_saved(y, x.untyped_storage().data_ptr(), params)
            del y
        else:
            decisions = []
            with OutputLog(decisions):
                y = checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False,
                               context_fn=lambda: op_sac_context(decisions))
            for func, save, outs in decisions:
                if save or func == MM:
                    rows.append([str(func), save, outs])
            del y
    del model, x, freqs
    torch.cuda.empty_cache()
    return rows


def gpu_meta():
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        driver = None
    return {"tool": "dtsim_memory.py", "gpu": props.name, "gpu_memory_bytes": props.total_memory,
            "torch": torch.__version__, "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "driver": driver, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": platform.node(), "command": " ".join(shlex.quote(a) for a in sys.argv),
            "attention": "SDPA restricted to SDPBackend.FLASH_ATTENTION", "dtype": "bfloat16 parameters and activations",
            "timing": "CUDA events around one forward+backward; median of 5 after 2 warm-up steps"}


COLUMNS = ["name", "policy", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "saved_bytes",
           "saved_bytes_per_token", "backward_peak_extra_bytes", "fwd_bwd_ms", "reserved_bytes",
           "blocks", "output_bytes", "param_bytes"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    # name, kind, hidden, heads, kv, ffn, seq, batch, blocks, gqa, policies
    cases = [
        ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 1, 1, False, ("none", "full", "op")),
        ("llama3-8b", "llama", 4096, 32, 8, 14336, 4096, 2, 1, False, ("none", "full", "op")),
        ("mpt-1b", "gpt", 2048, 16, 16, 8192, 2048, 4, 1, False, ("none", "full", "op")),
        ("mpt-7b", "gpt", 4096, 32, 32, 16384, 2048, 4, 1, False, ("none", "full", "op")),
        ("llama3-8b-x4", "llama", 4096, 32, 8, 14336, 8192, 1, 4, False, ("none", "op")),
        ("llama3-8b-enable_gqa", "llama", 4096, 32, 8, 14336, 8192, 1, 1, True, ("none", "op")),
    ]
    breakdowns = [  # name, kind, hidden, heads, kv, ffn, seq, batch, gqa
        ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 1, False),
        ("mpt-7b", "gpt", 4096, 32, 32, 16384, 2048, 4, False),
    ]
    doc = {
        "description": "Activation memory one transformer block keeps for its backward in eager PyTorch (bf16, SDPA "
                       "flash backend) under three activation-checkpointing policies, with the forward+backward time; "
                       "for validating dtsim's activation accounting (layer_activation_bytes), not for fitting.",
        "meta": gpu_meta(),
        "memory": {
            "description": "saved_bytes: memory_allocated after the forward minus before (input made beforehand, output "
                           "kept; for a stacked block this is what one block adds), divided by blocks when blocks > 1 "
                           "(the x4 rows: 4 blocks in sequence, totals / 4); saved_bytes_per_token = saved_bytes / "
                           "(seq*batch); backward_peak_extra_bytes: max_memory_allocated during backward minus "
                           "allocated at its start (includes param_bytes of weight gradients, all blocks); fwd_bwd_ms: "
                           "whole case (all blocks); reserved_bytes: memory_reserved at the end of the case; "
                           "output_bytes: the block's output (= its input), kept in saved_bytes. Policies: none, full "
                           "(checkpoint, use_reentrant=False), op (torchtitan's per-op selective AC, see the script). "
                           "llama: torchtitan's block (nn.RMSNorm, complex rotary, repeat_kv, SDPA, SwiGLU); "
                           "llama3-8b-enable_gqa: SDPA's enable_gqa instead of repeat_kv; gpt: MPT-style.",
            "columns": COLUMNS, "rows": []},
        "saved_tensors": {
            "description": "What one block keeps, tensor by tensor, at the first rows' shapes. policy none: each tensor "
                           "saved on the autograd graph as [node, attribute, shape, dtype, bytes, storage_bytes, "
                           "first_reference_to_its_storage, origin (input, param or forward)]; storage counted once "
                           "where first_reference is true. policy op: each op whose output the policy saved, and "
                           "each mm, in forward order, as [op, saved, [[shape, dtype, bytes], ...]] (the checkpoint "
                           "also keeps the block's input).",
            "rows": []},
        "errors": [],
    }

    def write():
        doc["meta"]["elapsed_s"] = round(time.time() - t0, 1)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)

    t0 = time.time()
    write()
    for name, kind, h, heads, kv, ffn, seq, batch, nb, gqa, policies in cases:
        for policy in policies:
            try:
                saved, peak, ms, reserved, out_b, par_b = measure(kind, h, heads, kv, ffn, seq, batch, policy, nb, gqa)
                per_block = saved / nb
                row = [name, policy, h, heads, kv, ffn, seq, batch, int(per_block), round(per_block / (seq * batch), 1),
                       int(peak), round(ms, 3), int(reserved), nb, int(out_b), int(par_b)]
                doc["memory"]["rows"].append(row)
                print(f"[{time.time() - t0:6.1f}s] {row}", flush=True)
            except Exception as e:
                doc["errors"].append(f"{name} {policy}: {type(e).__name__}: {str(e)[:300]}")
                print(f"{name} {policy}: {traceback.format_exc()}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
            write()
    for name, kind, h, heads, kv, ffn, seq, batch, gqa in breakdowns:
        for policy in ("none", "op"):
            try:
                rows = breakdown(kind, h, heads, kv, ffn, seq, batch, policy, gqa)
                doc["saved_tensors"]["rows"].append({"name": name, "policy": policy, "hidden": h, "seq": seq,
                                                     "batch": batch, "tensors": rows})
                print(f"[{time.time() - t0:6.1f}s] breakdown {name} {policy}: {len(rows)} tensors", flush=True)
                for r in rows:
                    print("   ", r, flush=True)
            except Exception as e:
                doc["errors"].append(f"breakdown {name} {policy}: {type(e).__name__}: {str(e)[:300]}")
                print(f"breakdown {name} {policy}: {traceback.format_exc()}", file=sys.stderr, flush=True)
            write()
    write()
    print("done", round(time.time() - t0, 1), "s; errors:", doc["errors"], flush=True)


if __name__ == "__main__":
    main()
