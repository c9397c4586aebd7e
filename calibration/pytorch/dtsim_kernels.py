#!/usr/bin/env python3
"""Kernel throughput as PyTorch runs it, for the hardware world's cost models.

dtsim-gemm and dtsim-membw measure cuBLAS and plain copy kernels. A training step in
Megatron-LM or torchtitan also runs flash attention, normalisations, activations, rotary
embeddings, a cross-entropy over the vocabulary and the optimizer step, each with its own
efficiency; and eager PyTorch pays a host overhead per operator. This script measures each
of those by shape on one GPU and writes one JSON file (schema: docs/calibration.md).

    python3 dtsim_kernels.py --out kernels.json [--only attention,norm,...] [--quick]

Timing: CUDA events around ITERS back-to-back calls after WARMUP calls; the figure is the
median over REPEATS such groups. Bytes are the tensors each kernel must read and write
once (its minimum traffic), FLOPs the matrix products' (causal attention counts half of
the square). Nothing here is fitted: the cost models are fitted to these rows by
`dtsim calibrate`.
"""

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import DT, run_sections, software_meta, timed  # noqa: E402


def host_timed(fn, iters):
    """Wall time per call of a loop of tiny operators: the host's cost per eager operator."""
    import time
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / iters


class Bench:
    def __init__(self, args):
        self.a = args
        self.sections = {}

    def t(self, fn, iters=None):
        return timed(fn, iters or self.a.iters, self.a.warmup, self.a.repeats, scale=1e3)  # microseconds per call

    # ---- GEMM by shape (torch.mm, bf16 and fp8) --------------------------------------------
    def gemm(self):
        shapes = [(s, s, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
        tokens = (2048, 8192, 16384)
        # (N, K) of a layer's GEMMs: Llama 3 8B (h 4096, ffn 14336, kv 8 of 32 heads),
        # 70B at TP8 (h 8192, ffn 28672/8, q+kv 10240/8), 405B at TP8 (h 16384, ffn 53248/8),
        # GPT-3 175B at TP8 (h 12288, ffn 49152/8), vocabulary 128256 and 50257.
        layer = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                 (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584),
                 (2560, 16384), (16384, 2048), (13312, 16384), (16384, 6656),
                 (4608, 12288), (12288, 1536), (6144, 12288), (12288, 6144),
                 (128256, 4096), (16032, 8192), (6288, 12288)]
        for m in tokens:
            for n, k in layer:
                shapes.append((m, n, k))
        rows = []
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=DT)
            b = torch.randn(k, n, device="cuda", dtype=DT)
            us = self.t(lambda: torch.mm(a, b), iters=max(3, min(self.a.iters, int(2e12 / (2 * m * n * k)) + 1)))
            rows.append([m, n, k, "bf16", round(2 * m * n * k / us / 1e6, 2), round(us, 3)])
            del a, b
        fp8 = hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")
        if fp8:
            for m, n, k in shapes:
                if min(m, n, k) < 512 or n % 16 or k % 16:
                    continue
                try:
                    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
                    one = torch.tensor(1.0, device="cuda")
                    us = self.t(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=DT),
                                iters=max(3, min(self.a.iters, int(4e12 / (2 * m * n * k)) + 1)))
                    rows.append([m, n, k, "fp8", round(2 * m * n * k / us / 1e6, 2), round(us, 3)])
                    del a, b
                except Exception as e:  # an fp8 path this build lacks: say so once
                    rows.append([m, n, k, "fp8", None, None])
                    self.sections.setdefault("errors", []).append(f"fp8 {m}x{n}x{k}: {e}")
                    break
        self.sections["gemm"] = {
            "description": "torch.mm (bf16 in and out, fp32 accumulate; cuBLAS row-major C[M,N] = A[M,K] B[K,N]) "
                           "and torch._scaled_mm (fp8 e4m3 A and B, unit scales, bf16 out) by shape",
            "columns": ["m", "n", "k", "dtype", "tflops", "time_us"], "rows": rows}

    # ---- attention ------------------------------------------------------------------------
    def attention(self):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
        # (batch, q heads on this GPU, kv heads on this GPU, head dim, sequence)
        cases = []
        for seq, batch in ((1024, 8), (2048, 4), (4096, 2), (8192, 1), (16384, 1), (32768, 1)):
            for heads, kv, d in ((32, 8, 128),   # Llama 3 8B, TP1
                                 (8, 1, 128),    # Llama 3 70B at TP8
                                 (16, 1, 128),   # Llama 3 405B at TP8
                                 (12, 12, 128),  # GPT-3 175B at TP8 (96 heads of 128)
                                 (16, 16, 64)):  # a 1.3B-class GPT (h 2048, 32 heads of 64) at TP2
                cases.append((batch, heads, kv, d, seq))
        rows = []
        for name, backend in backends.items():
            for b, h, kv, d, s in cases:
                q = torch.randn(b, h, s, d, device="cuda", dtype=DT, requires_grad=True)
                k = torch.randn(b, kv, s, d, device="cuda", dtype=DT, requires_grad=True)
                v = torch.randn(b, kv, s, d, device="cuda", dtype=DT, requires_grad=True)
                gqa = kv != h
                flops_fwd = 4 * b * h * s * s * d / 2  # QK^T and PV, causal half
                try:
                    with sdpa_kernel(backend):
                        def fwd():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                        out = fwd()
                        grad = torch.randn_like(out)
                        iters = max(3, min(self.a.iters, int(1e12 / flops_fwd) + 1))
                        us_f = self.t(fwd, iters)

                        def fwd_bwd():
                            o = fwd()
                            torch.autograd.grad(o, (q, k, v), grad)
                        us_fb = self.t(fwd_bwd, iters)
                    rows.append([name, b, h, kv, d, s, round(us_f, 3), round(us_fb, 3),
                                 round(flops_fwd / us_f / 1e6, 2), round(3.5 * flops_fwd / us_fb / 1e6, 2)])
                except Exception as e:
                    rows.append([name, b, h, kv, d, s, None, None, None, None])
                    self.sections.setdefault("errors", []).append(f"attention {name} {(b, h, kv, d, s)}: "
                                                                  f"{type(e).__name__}: {str(e)[:200]}")
                del q, k, v
        self.sections["attention"] = {
            "description": "torch.nn.functional.scaled_dot_product_attention, causal, bf16, layout [batch, heads, "
                           "seq, dim], by backend (flash: FlashAttention-2 as PyTorch ships it; cudnn: cuDNN's fused "
                           "attention). tflops_fwd counts 4*b*h*s^2*d/2; tflops_fwd_bwd counts 3.5x that (backward "
                           "2.5x the forward's products, the FlashAttention papers' convention)",
            "columns": ["backend", "batch", "heads", "kv_heads", "head_dim", "seq", "fwd_us", "fwd_bwd_us",
                        "tflops_fwd", "tflops_fwd_bwd"], "rows": rows}

    # ---- memory-bound kernels -------------------------------------------------------------
    def elementwise(self):
        rows = []

        def add(kernel, tokens, width, us_f, us_fb, bytes_f, bytes_fb):
            rows.append([kernel, tokens, width, round(us_f, 3), None if us_fb is None else round(us_fb, 3),
                         bytes_f, bytes_fb, round(bytes_f / us_f / 1e3, 1),
                         None if us_fb is None else round(bytes_fb / us_fb / 1e3, 1)])

        def fb(fn, inputs):
            out = fn()
            g = torch.randn_like(out)

            def both():
                o = fn()
                torch.autograd.grad(o, inputs, g)
            return self.t(fn), self.t(both)

        E = 2  # bytes per bf16 element
        for tokens in (4096, 16384):
            for h in (2048, 4096, 8192, 16384):
                n = tokens * h
                x = torch.randn(tokens, h, device="cuda", dtype=DT, requires_grad=True)
                w = torch.ones(h, device="cuda", dtype=DT, requires_grad=True)
                bias = torch.zeros(h, device="cuda", dtype=DT, requires_grad=True)
                # RMSNorm: read x, write y; backward reads x, dy, writes dx (+ a weight-gradient reduction)
                f, b_ = fb(lambda: F.rms_norm(x, (h,), w, 1e-5), (x, w))
                add("rms_norm", tokens, h, f, b_, 2 * n * E, 5 * n * E)
                f, b_ = fb(lambda: F.layer_norm(x, (h,), w, bias, 1e-5), (x, w, bias))
                add("layer_norm", tokens, h, f, b_, 2 * n * E, 5 * n * E)
                r = torch.randn(tokens, h, device="cuda", dtype=DT)
                f = self.t(lambda: x.detach() + r)
                add("residual_add", tokens, h, f, None, 3 * n * E, None)
                f, b_ = fb(lambda: F.dropout(x, 0.1, training=True), (x,))
                add("dropout", tokens, h, f, b_, 2 * n * E, 3 * n * E)
                # rotary, as torchtitan applies it: complex multiply in fp32 over [tokens, heads, 128]
                heads = h // 128
                xq = torch.randn(1, tokens, heads, 128, device="cuda", dtype=DT, requires_grad=True)
                freqs = torch.polar(torch.ones(tokens, 64, device="cuda"),
                                    torch.randn(tokens, 64, device="cuda")).view(1, tokens, 1, 64)

                def rope():
                    xc = torch.view_as_complex(xq.float().reshape(1, tokens, heads, 64, 2))
                    return torch.view_as_real(xc * freqs).flatten(3).type_as(xq)
                f, b_ = fb(rope, (xq,))
                add("rotary_torchtitan", tokens, h, f, b_, 2 * n * E, 2 * n * E)
                del x, w, bias, r, xq, freqs
            for ffn in (8192, 14336, 28672 // 8 * 2, 53248 // 8):
                n = tokens * ffn
                a = torch.randn(tokens, ffn, device="cuda", dtype=DT, requires_grad=True)
                b2 = torch.randn(tokens, ffn, device="cuda", dtype=DT, requires_grad=True)
                f, b_ = fb(lambda: F.silu(a) * b2, (a, b2))
                add("swiglu", tokens, ffn, f, b_, 3 * n * E, 5 * n * E)
                f, b_ = fb(lambda: F.gelu(a, approximate="tanh"), (a,))
                add("gelu_tanh", tokens, ffn, f, b_, 2 * n * E, 3 * n * E)
                del a, b2
        self.sections["elementwise"] = {
            "description": "memory-bound kernels in eager PyTorch, bf16, [tokens, width]; bytes_* are the minimum "
                           "traffic (each tensor read or written once); GBps = bytes / time (GB = 1e9 bytes); "
                           "fwd_bwd is a forward then torch.autograd.grad",
            "columns": ["kernel", "tokens", "width", "fwd_us", "fwd_bwd_us", "bytes_fwd", "bytes_fwd_bwd",
                        "GBps_fwd", "GBps_fwd_bwd"], "rows": rows}

    # ---- cross-entropy over the vocabulary ------------------------------------------------
    def cross_entropy(self):
        rows = []
        for tokens in (2048, 8192, 16384):
            for vocab in (32000, 50257, 128256, 128256 // 8):
                logits = torch.randn(tokens, vocab, device="cuda", dtype=DT, requires_grad=True)
                target = torch.randint(0, vocab, (tokens,), device="cuda")

                def fwd():
                    return F.cross_entropy(logits.float(), target)

                def both():
                    torch.autograd.grad(fwd(), (logits,))
                us_f, us_fb = self.t(fwd), self.t(both)
                n = tokens * vocab
                rows.append([tokens, vocab, round(us_f, 3), round(us_fb, 3), 2 * n, round(2 * n / us_f / 1e3, 1)])
                del logits, target
        self.sections["cross_entropy"] = {
            "description": "F.cross_entropy(logits.float(), target) as torchtitan and Megatron (fp32 loss) compute "
                           "it, bf16 logits [tokens, vocab]; bytes_logits = the bf16 logits once; GBps_fwd = "
                           "bytes_logits / fwd time",
            "columns": ["tokens", "vocab", "fwd_us", "fwd_bwd_us", "bytes_logits", "GBps_fwd"], "rows": rows}

    # ---- optimizer step -------------------------------------------------------------------
    def optimizer(self):
        rows = []
        for params in (25_000_000, 100_000_000, 400_000_000):
            for impl in ("fused", "foreach"):
                chunks = 16  # several tensors, like a model's parameters
                ps = [torch.randn(params // chunks, device="cuda", dtype=torch.float32, requires_grad=True)
                      for _ in range(chunks)]
                for p in ps:
                    p.grad = torch.randn_like(p)
                opt = torch.optim.AdamW(ps, lr=1e-4, **{impl: True})
                us = self.t(opt.step, iters=max(3, min(self.a.iters, 10)))
                # fp32 param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written
                bytes_ = 7 * 4 * params
                rows.append(["adamw", impl, "fp32", params, round(us, 3), bytes_, round(bytes_ / us / 1e3, 1)])
                del ps, opt
        self.sections["optimizer"] = {
            "description": "torch.optim.AdamW.step over fp32 parameters in 16 tensors (fused=True or foreach=True); "
                           "bytes = 7 x 4 B per parameter (parameter, gradient, two moments read; parameter and "
                           "moments written)",
            "columns": ["optimizer", "impl", "dtype", "params", "step_us", "bytes", "GBps"], "rows": rows}

    # ---- host overhead per eager operator -------------------------------------------------
    def launch(self):
        x = torch.randn(16, device="cuda", dtype=DT)
        y = torch.randn(16, device="cuda", dtype=DT)
        a = torch.randn(64, 64, device="cuda", dtype=DT)
        rows = [["add_16_elements", round(host_timed(lambda: x + y, 20000), 3)],
                ["mm_64", round(host_timed(lambda: torch.mm(a, a), 20000), 3)],
                ["rms_norm_16", round(host_timed(lambda: F.rms_norm(x, (16,)), 20000), 3)]]
        # The GPU side of an empty kernel back to back: the launch-to-launch time when the host keeps ahead.
        rows.append(["add_16_elements_gpu", round(self.t(lambda: x + y, iters=2000), 3)])
        self.sections["launch"] = {
            "description": "host_us: wall time per call of an eager operator on tiny tensors in a loop of 20,000 "
                           "(the CPU cost PyTorch pays per operator; the GPU idles when kernels are shorter); "
                           "add_16_elements_gpu: CUDA-event time per back-to-back tiny kernel",
            "columns": ["op", "us"], "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="gemm,attention,elementwise,cross_entropy,optimizer,launch")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("dtsim_kernels: no CUDA device")
    bench = Bench(args)
    props = torch.cuda.get_device_properties(0)
    meta = {"tool": "dtsim_kernels.py", "gpu": props.name, "memory_GiB": round(props.total_memory / 2**30, 1),
            "sms": props.multi_processor_count, **software_meta(sys.argv),
            "timing": f"CUDA events around {args.iters} back-to-back calls (fewer for long kernels) after "
                      f"{args.warmup} warm-up calls; median of {args.repeats} groups; L2 not flushed"}
    run_sections(bench, args.only.split(","), args.out, meta, "dtsim_kernels")


if __name__ == "__main__":
    main()
