"""What the PyTorch measurement scripts share: the transformer blocks, torchtitan's per-op selective
checkpointing, CUDA-event timing, the GPU and software metadata and JSON writing.

The scripts import it from their own folder, which Python puts first on sys.path when it runs one.
"""

import datetime
import json
import platform
import shlex
import statistics
import subprocess
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

DT = torch.bfloat16
DEV = "cuda"


def timed(fn, iters, warmup=3, repeats=3, scale=1.0):
    """Median over repeats groups of the CUDA-event time per call of iters back-to-back calls of fn, after warmup
    calls: in milliseconds times scale (1e3 for microseconds)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * scale / iters)
    return statistics.median(times)


def driver_version():
    """The NVIDIA driver's version as nvidia-smi reports it, or None."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return None


def software_meta(argv):
    """The meta keys every script writes after its GPU's: versions, driver, date, host and the command line."""
    return {"torch": torch.__version__, "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "driver": driver_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": platform.node(), "command": " ".join(shlex.quote(a) for a in argv)}


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def run_sections(bench, names, out, meta, tool):
    """Runs bench.<name>() for each name, one after another: a section that fails is listed under "errors" with the
    end of its traceback and the next one runs; after each, the file at out holds every section so far (written
    beside it, then moved over it)."""
    import os
    import traceback
    for name in names:
        try:
            getattr(bench, name)()
        except Exception:
            bench.sections.setdefault("errors", []).append(f"{name}: {traceback.format_exc()[-600:]}")
        torch.cuda.empty_cache()
        write_json(out + ".tmp", {"meta": meta, **bench.sections})
        os.replace(out + ".tmp", out)
        print(f"{tool}: {name} done", flush=True)


def elapsed_writer(doc, path):
    """The time now and a function that stores the seconds since in doc["meta"]["elapsed_s"] and writes doc."""
    t0 = time.time()

    def write():
        doc["meta"]["elapsed_s"] = round(time.time() - t0, 1)
        write_json(path, doc)

    return t0, write


# --- The transformer blocks -----------------------------------------------------------------------------------------


def repeat_kv(x, n_rep):
    """torchtitan's repeat_kv: torch.repeat_interleave(x, dim=2, repeats=n_rep), as expand + reshape."""
    bs, slen, n_kv, d = x.shape
    if n_rep == 1:
        return x
    return x.unsqueeze(3).expand(bs, slen, n_kv, n_rep, d).reshape(bs, slen, n_kv * n_rep, d)


class LlamaBlock(nn.Module):
    """torchtitan's llama3 TransformerBlock (Attention, FeedForward, nn.RMSNorm) without its TP hooks.

    gqa=True passes enable_gqa to SDPA instead of repeating K and V (not torchtitan's form; a variant).
    head_dim (default h / heads) gives a tensor-parallel rank's shapes: heads / tp heads of the model's width.
    """

    def __init__(self, h, heads, kv, ffn, gqa=False, head_dim=None):
        super().__init__()
        self.heads, self.kv, self.d, self.gqa = heads, kv, head_dim or h // heads, gqa
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


def freqs_for(kind, seq, d):
    if kind != "llama":
        return None
    f = torch.polar(torch.ones(seq, d // 2, device=DEV), torch.randn(seq, d // 2, device=DEV))
    return f.view(1, seq, 1, d // 2)


# --- Activation checkpointing ---------------------------------------------------------------------------------------


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


def run_block(blk, x, freqs, policy):
    """blk(x, freqs) under an activation-checkpointing policy: none; full (torch.utils.checkpoint,
    use_reentrant=False); op (torchtitan's per-op selective checkpointing, op_sac_context)."""
    if policy == "none":
        return blk(x, freqs)
    elif policy == "full":
        return checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False)
    elif policy == "op":
        return checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False,
                          context_fn=op_sac_context)
    else:
        raise ValueError(policy)
