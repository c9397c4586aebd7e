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

--section output measures instead the output layer and its loss, which dtsim accounts with
logits_activation_bytes (4 bytes per logit kept) and a loss cost of 12 bytes of traffic per logit: torchtitan's
final nn.RMSNorm and bias-free nn.Linear output projection in bf16, then the cross-entropy in three forms,
  torchtitan  F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)), torchtitan's cross_entropy_loss
              (pytorch/torchtitan torchtitan/components/loss.py at commit f90c845c; later versions take pred
              flattened with reduction="sum" and ignore_index=-100, the same tensors);
  bf16        the same without .float();
  megatron    Megatron-LM's _VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py) written out
              for one rank: fp32 upcast, max subtracted, exponentiated and normalised in place, the fp32 softmax
              saved and turned into the gradient in place; the per-token losses averaged.
For each form and shape it takes the bytes kept from the forward to the backward, the forward's and the backward's
peaks (above the allocation before the forward; x and the labels made beforehand), the gradients' sizes and the
median forward and forward+backward times, then lists the saved tensors and traces every op's memory:

    python3 dtsim_memory.py --section output --out output_layer.json
"""

import argparse
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import (DEV, DT, MM, GptBlock, LlamaBlock, elapsed_writer, freqs_for,  # noqa: E402
                                op_sac_context, run_block, software_meta)


class Stack(nn.Module):
    def __init__(self, blocks, policy):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.policy = policy

    def forward(self, x, freqs):
        for blk in self.blocks:
            x = run_block(blk, x, freqs, self.policy)
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


def graph_nodes(y):
    """The nodes of y's autograd graph, each once, depth first from y.grad_fn."""
    seen = set()
    stack = [y.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        yield n
        for nf, _ in n.next_functions:
            stack.append(nf)


def graph_saved(y, inp, params):
    """Every tensor saved on y's autograd graph, as
    [node, attribute, shape, dtype, bytes, storage_bytes, first_reference_to_its_storage, origin]."""
    rows, seen_storage = [], set()
    for n in graph_nodes(y):
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
    return rows


def build(kind, h, heads, kv, ffn, nblocks=1, policy="none", gqa=False):
    mk = (lambda: LlamaBlock(h, heads, kv, ffn, gqa)) if kind == "llama" else (lambda: GptBlock(h, heads))
    return Stack([mk() for _ in range(nblocks)], policy).to(DEV, DT)


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


# --- The output layer and its loss (--section output) ---------------------------------------------------------------


class OutputLayer(nn.Module):
    """torchtitan's final norm and output projection (nn.RMSNorm, then nn.Linear without bias): h = norm(x);
    logits = output(h)."""

    def __init__(self, h, vocab):
        super().__init__()
        self.norm = nn.RMSNorm(h, eps=1e-5)
        self.output = nn.Linear(h, vocab, bias=False)

    def forward(self, x):
        return self.output(self.norm(x))


class MegatronCrossEntropy(torch.autograd.Function):
    """Megatron-LM's _VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py) on one rank: the
    all-reduces are identities, the vocabulary range is [0, V), no target is masked, no label smoothing. It upcasts
    the logits to fp32, subtracts the max in place, exponentiates in place and divides by the sum in place, saving
    that softmax (fp32) for the backward, which turns it into the gradient in place and returns it in fp32 (autograd
    casts it to the bf16 logits' dtype)."""

    @staticmethod
    def forward(ctx, vocab_parallel_logits, target):
        vocab_parallel_logits = vocab_parallel_logits.float()
        logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
        vocab_start_index, vocab_end_index = 0, vocab_parallel_logits.size(-1)
        vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)
        target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = target.clone() - vocab_start_index
        masked_target[target_mask] = 0
        partition_vocab_size = vocab_parallel_logits.size()[-1]
        logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_logits_1d = predicted_logits_1d.clone().contiguous()
        predicted_logits = predicted_logits_1d.view_as(target)
        predicted_logits[target_mask] = 0.0
        exp_logits = vocab_parallel_logits
        torch.exp(vocab_parallel_logits, out=exp_logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp_logits) - predicted_logits
        exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_input = softmax
        partition_vocab_size = softmax.size()[-1]
        grad_2d = grad_input.view(-1, partition_vocab_size)
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
        softmax_update = 1.0 - target_mask.view(-1).float()
        grad_2d[arange_1d, masked_target_1d] -= softmax_update
        grad_input.mul_(grad_output.unsqueeze(dim=-1))
        return grad_input, None


OUTPUT_FORMS = ("torchtitan", "bf16", "megatron")


def output_loss(form, model, x, labels):
    """The forward and the loss; the bf16 logits stay referenced until the loss is computed, as torchtitan's
    train step keeps pred until after loss_fn (and deletes it before the backward)."""
    logits = model(x)
    if form == "torchtitan":
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
    if form == "bf16":
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1))
    if form == "megatron":
        return MegatronCrossEntropy.apply(logits, labels).mean()
    raise ValueError(form)


class MemoryTrace(TorchDispatchMode):
    """Each aten op as it runs: [op, [[shape, dtype, bytes] of its outputs], memory_allocated after it minus base,
    max_memory_allocated so far minus base]."""

    def __init__(self, base):
        super().__init__()
        self.base, self.rows = base, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.rows.append([str(func), [[list(o.shape), str(o.dtype).replace("torch.", ""), tensor_bytes(o)]
                                      for o in outs if isinstance(o, torch.Tensor)],
                          torch.cuda.memory_allocated() - self.base, torch.cuda.max_memory_allocated() - self.base])
        return out


def custom_saved(y, inp, params):
    """Tensors a custom autograd.Function saved (ctx.save_for_backward), which graph_saved does not see, in its
    row format."""
    rows = []
    for n in graph_nodes(y):
        try:
            saved = n.saved_tensors if hasattr(n, "saved_tensors") else ()
        except Exception:
            saved = ()
        for t in saved:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                ptr = t.untyped_storage().data_ptr()
                origin = "input" if ptr == inp else "param" if ptr in params else "forward"
                rows.append([type(n).__name__, "saved_tensors", list(t.shape), str(t.dtype).replace("torch.", ""),
                             tensor_bytes(t), t.untyped_storage().nbytes(), True, origin])
    return rows


def measure_output(form, h, vocab, seq, batch, reps=5, trace=False):
    torch.cuda.empty_cache()
    model = OutputLayer(h, vocab).to(DEV, DT)
    x = torch.randn(batch, seq, h, device=DEV, dtype=DT, requires_grad=True)
    labels = torch.randint(0, vocab, (batch, seq), device=DEV)

    def clear():
        for p in model.parameters():
            p.grad = None
        x.grad = None

    for _ in range(2):
        output_loss(form, model, x, labels).backward()
    clear()
    torch.cuda.synchronize()
    m0 = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = output_loss(form, model, x, labels)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - m0
    fwd_peak = torch.cuda.max_memory_allocated() - m0
    torch.cuda.reset_peak_memory_stats()
    m2 = torch.cuda.memory_allocated()
    loss.backward()
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated() - m0
    bwd_peak_over_start = torch.cuda.max_memory_allocated() - m2
    del loss
    after = torch.cuda.memory_allocated() - m0
    r = {"kept": kept, "fwd_peak": fwd_peak, "bwd_peak": bwd_peak, "bwd_peak_over_start": bwd_peak_over_start,
         "after_backward": after, "grad_x": tensor_bytes(x.grad),
         "grad_output_weight": tensor_bytes(model.output.weight.grad),
         "grad_norm_weight": tensor_bytes(model.norm.weight.grad), "h_bytes": batch * seq * h * 2}
    clear()
    fwd, fwd_bwd = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = output_loss(form, model, x, labels)
        b.record()
        b.synchronize()
        fwd.append(a.elapsed_time(b))
        del loss
    for _ in range(reps):
        clear()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        output_loss(form, model, x, labels).backward()
        b.record()
        b.synchronize()
        fwd_bwd.append(a.elapsed_time(b))
    clear()
    r["fwd_ms"], r["fwd_bwd_ms"] = statistics.median(fwd), statistics.median(fwd_bwd)
    torch.cuda.synchronize()
    r["reserved"] = torch.cuda.memory_reserved()
    if trace:
        # A second, traced step: the saved tensors after the forward and every op's memory, forward and backward.
        try:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            with MemoryTrace(base) as tf:
                loss = output_loss(form, model, x, labels)
            params = {q.untyped_storage().data_ptr() for q in model.parameters()}
            xp = x.untyped_storage().data_ptr()
            r["saved"] = graph_saved(loss, xp, params) + custom_saved(loss, xp, params)
            with MemoryTrace(base) as tb:
                loss.backward()
            del loss
            r["trace_forward"], r["trace_backward"] = tf.rows, tb.rows
        except Exception as e:
            r["trace_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        clear()
    del model, x, labels
    torch.cuda.empty_cache()
    return r


OUTPUT_COLUMNS = ["form", "name", "hidden", "vocab", "seq", "batch", "logits", "kept_bytes", "kept_per_logit",
                  "forward_peak_bytes", "forward_peak_per_logit", "backward_peak_bytes", "backward_peak_per_logit",
                  "backward_peak_over_backward_start_bytes", "after_backward_bytes", "grad_x_bytes",
                  "grad_output_weight_bytes", "grad_norm_weight_bytes", "h_bytes", "fwd_ms", "fwd_bwd_ms",
                  "reserved_bytes"]


def main_output(args):
    """--section output: the output layer and the loss, per form and shape, into args.out."""
    torch.manual_seed(0)
    shapes = [  # name, hidden, vocab, seq, batch
        ("llama3-8b", 4096, 128256, 8192, 2),
        ("llama3-8b", 4096, 128256, 8192, 1),
        ("mpt-1b", 2048, 50368, 2048, 4),
    ]
    meta = gpu_meta()
    del meta["attention"]
    meta["dtype"] = "bfloat16 parameters, input and logits; the loss as each form computes it"
    meta["timing"] = ("CUDA events around one forward (with the loss) and one forward+backward, gradients freed "
                      "before each; medians of 5 after 2 warm-up steps")
    doc = {
        "description": "Memory and time of a language model's output layer and loss in eager PyTorch (bf16): "
                       "torchtitan's final RMSNorm and nn.Linear output projection, then the cross-entropy in three "
                       "forms; for validating dtsim's logits_activation_bytes and its loss cost, not for fitting.",
        "meta": meta,
        "output_layer": {
            "description": "Per form and shape, x [batch, seq, hidden] bf16 with requires_grad and the labels made "
                           "beforehand (not counted). logits = seq*batch*vocab; each *_per_logit is the bytes over "
                           "logits. kept_bytes: memory_allocated after the forward (the loss scalar kept) minus "
                           "before; forward_peak_bytes: max_memory_allocated during the forward minus allocated "
                           "before it; backward_peak_bytes: max_memory_allocated during loss.backward() minus "
                           "allocated before the forward (so it includes what the forward kept, the gradient of x "
                           "and the weights' gradients, grad_*_bytes, bf16); backward_peak_over_backward_start_bytes: "
                           "the same minus allocated when the backward starts; after_backward_bytes: allocated after "
                           "the backward, the loss deleted, minus before the forward (the gradients); h_bytes: the "
                           "norm's output (bf16), which the linear saves. Forms: torchtitan "
                           "(F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)), as "
                           "torchtitan/components/loss.py's cross_entropy_loss in pytorch/torchtitan commit f90c845c; "
                           "later versions take pred flattened, reduction='sum' and ignore_index=-100, the same "
                           "tensors), bf16 (the same without .float()), megatron (Megatron-LM's "
                           "_VocabParallelCrossEntropy on one rank, written out in the script: fp32 upcast, softmax "
                           "in place, per-token losses, then .mean()). The bf16 logits are referenced until the loss "
                           "is computed and dropped before the backward, as torchtitan's train step does.",
            "columns": OUTPUT_COLUMNS, "rows": []},
        "saved_tensors": {
            "description": "Per form at each shape, a second step: every tensor the autograd graph of the loss "
                           "saved, as [node, attribute, shape, dtype, bytes, storage_bytes, "
                           "first_reference_to_its_storage, origin (input, param or forward)] (custom Function "
                           "nodes: attribute saved_tensors).",
            "rows": []},
        "memory_trace": {
            "description": "The same traced step, op by op (a TorchDispatchMode), forward then backward: [op, "
                           "[[shape, dtype, bytes] of its outputs], memory_allocated after the op minus before the "
                           "forward, max_memory_allocated so far minus before the forward]. An op's temporaries "
                           "show in the running peak only.",
            "rows": []},
        "errors": [],
    }

    t0, write = elapsed_writer(doc, args.out)
    write()
    for name, h, vocab, seq, batch in shapes:
        for form in OUTPUT_FORMS:
            try:
                r = measure_output(form, h, vocab, seq, batch, trace=True)
                n = seq * batch * vocab
                row = [form, name, h, vocab, seq, batch, n, int(r["kept"]), round(r["kept"] / n, 3),
                       int(r["fwd_peak"]), round(r["fwd_peak"] / n, 3), int(r["bwd_peak"]), round(r["bwd_peak"] / n, 3),
                       int(r["bwd_peak_over_start"]), int(r["after_backward"]), int(r["grad_x"]),
                       int(r["grad_output_weight"]), int(r["grad_norm_weight"]), int(r["h_bytes"]),
                       round(r["fwd_ms"], 3), round(r["fwd_bwd_ms"], 3), int(r["reserved"])]
                doc["output_layer"]["rows"].append(row)
                print(f"[{time.time() - t0:6.1f}s] {row}", flush=True)
                key = {"form": form, "name": name, "hidden": h, "vocab": vocab, "seq": seq, "batch": batch}
                if "saved" in r:
                    doc["saved_tensors"]["rows"].append(dict(key, tensors=r["saved"]))
                    for t in r["saved"]:
                        print("   ", t, flush=True)
                if "trace_forward" in r:
                    doc["memory_trace"]["rows"].append(dict(key, forward=r["trace_forward"],
                                                            backward=r["trace_backward"]))
                if "trace_error" in r:
                    doc["errors"].append(f"trace {form} {name} {seq}x{batch}: {r['trace_error']}")
            except Exception as e:
                doc["errors"].append(f"{form} {name} {seq}x{batch}: {type(e).__name__}: {str(e)[:300]}")
                print(f"{form} {name} {seq}x{batch}: {traceback.format_exc()}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
            write()
    write()
    print("done", round(time.time() - t0, 1), "s; errors:", doc["errors"], flush=True)


def gpu_meta():
    props = torch.cuda.get_device_properties(0)
    return {"tool": "dtsim_memory.py", "gpu": props.name, "gpu_memory_bytes": props.total_memory,
            **software_meta(sys.argv),
            "attention": "SDPA restricted to SDPBackend.FLASH_ATTENTION", "dtype": "bfloat16 parameters and activations",
            "timing": "CUDA events around one forward+backward; median of 5 after 2 warm-up steps"}


COLUMNS = ["name", "policy", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "saved_bytes",
           "saved_bytes_per_token", "backward_peak_extra_bytes", "fwd_bwd_ms", "reserved_bytes",
           "blocks", "output_bytes", "param_bytes"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--section", choices=("blocks", "output"), default="blocks",
                   help="blocks: the transformer blocks (the default); output: the output layer and its loss")
    args = p.parse_args()
    if args.section == "output":
        main_output(args)
        return
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

    t0, write = elapsed_writer(doc, args.out)
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
