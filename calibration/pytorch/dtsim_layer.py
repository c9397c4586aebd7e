#!/usr/bin/env python3
"""One transformer layer as eager PyTorch runs it, timed whole: a check of the kernel sum.

dtsim prices a layer as the sum of its kernels (GEMMs, fused attention, memory-bound
passes). This script times whole layers, forward and forward+backward, in the two forms the
validation runs use: a Llama 3 block as torchtitan writes it (RMSNorm, rotary embedding in
complex arithmetic, grouped-query attention through SDPA, SwiGLU) and a GPT/MPT block
(LayerNorm, multi-head attention through SDPA, GeLU); plus the output layer with its
cross-entropy. The rows are for validation only: nothing is fitted to them.

    python3 dtsim_layer.py --out layers.json
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import DT, GptBlock, software_meta, timed, write_json  # noqa: E402


# The block these rows were timed with: SDPA's enable_gqa, w3 made before w2. dtsim_torch_common's LlamaBlock is
# torchtitan's exact form (repeat_kv), which dtsim_memory.py and dtsim_step.py use.
class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv, ffn):
        super().__init__()
        self.h, self.heads, self.kv, self.d = h, heads, kv, h // heads
        self.wq = nn.Linear(h, heads * self.d, bias=False)
        self.wk = nn.Linear(h, kv * self.d, bias=False)
        self.wv = nn.Linear(h, kv * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, h, bias=False)
        self.w1 = nn.Linear(h, ffn, bias=False)
        self.w3 = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)
        self.n1 = nn.RMSNorm(h, eps=1e-5)
        self.n2 = nn.RMSNorm(h, eps=1e-5)

    def forward(self, x, freqs):
        b, s, _ = x.shape
        y = self.n1(x)
        q = self.wq(y).view(b, s, self.heads, self.d)
        k = self.wk(y).view(b, s, self.kv, self.d)
        v = self.wv(y).view(b, s, self.kv, self.d)

        def rope(t):
            tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
            return torch.view_as_real(tc * freqs).flatten(3).type_as(t)
        q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=self.kv != self.heads)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    rows = []
    cases = [
        # name, kind, hidden, heads, kv, ffn, seq, batch
        ("llama3-8b", "llama", 4096, 32, 8, 14336, 8192, 1),
        ("llama3-8b", "llama", 4096, 32, 8, 14336, 4096, 2),
        ("llama3-70b-tp8-shapes", "llama", 8192, 8, 1, 3584, 8192, 1),
        ("mpt-1b", "gpt", 2048, 16, 16, 8192, 2048, 8),
        ("mpt-7b", "gpt", 4096, 32, 32, 16384, 2048, 4),
        ("mpt-30b", "gpt", 7168, 64, 64, 28672, 2048, 2),
    ]
    for name, kind, h, heads, kv, ffn, seq, batch in cases:
        if kind == "llama":
            blk = LlamaBlock(h, heads, kv, ffn)
        else:
            blk = GptBlock(h, heads)
        blk = blk.to("cuda", DT)
        d = h // heads
        freqs = torch.polar(torch.ones(seq, d // 2, device="cuda"), torch.randn(seq, d // 2, device="cuda"))
        freqs = freqs.view(1, seq, 1, d // 2)
        x = torch.randn(batch, seq, h, device="cuda", dtype=DT, requires_grad=True)
        for backend_name, backend in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        return blk(x, freqs)
                    y = fwd()
                    g = torch.randn_like(y)

                    def both():
                        blk(x, freqs).backward(g)
                    f_ms = timed(fwd, 5)
                    with torch.no_grad():
                        nograd_ms = timed(fwd, 5)
                    fb_ms = timed(both, 5)
                rows.append([name, kind, backend_name, h, heads, kv, ffn, seq, batch, round(nograd_ms, 4),
                             round(f_ms, 4), round(fb_ms, 4)])
            except Exception as e:  # a backend that refuses a shape: say so in the file
                rows.append([name, kind, backend_name, h, heads, kv, ffn, seq, batch, None, None, None])
                print(f"{name} {backend_name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            for prm in blk.parameters():
                prm.grad = None
            x.grad = None
        del blk, x
        torch.cuda.empty_cache()
    # The output layer and its loss: logits in bf16, cross-entropy in fp32 (torchtitan's form).
    head_rows = []
    for h, vocab, tokens in ((4096, 128256, 8192), (4096, 50368, 8192)):
        w = torch.randn(vocab, h, device="cuda", dtype=DT, requires_grad=True)
        x = torch.randn(tokens, h, device="cuda", dtype=DT, requires_grad=True)
        t = torch.randint(0, vocab, (tokens,), device="cuda")

        def both():
            F.cross_entropy((x @ w.t()).float(), t).backward()
        head_rows.append([h, vocab, tokens, round(timed(both, 3), 4)])
        del w, x
        torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    doc = {
        "meta": {"tool": "dtsim_layer.py", "gpu": props.name, **software_meta(sys.argv),
                 "timing": "CUDA events around 5 (head: 3) back-to-back calls after 3 warm-up calls; median of 3"},
        "layers": {"description": "one transformer block in bf16, eager PyTorch: forward without autograd (nograd_ms), "
                                  "forward recording autograd (fwd_ms), forward then backward (fwd_bwd_ms); "
                                  "llama: RMSNorm, complex rotary, GQA SDPA, SwiGLU (torchtitan's form); gpt: LayerNorm, "
                                  "MHA SDPA, GeLU (MPT's form without biases)",
                   "columns": ["name", "kind", "attention", "hidden", "heads", "kv_heads", "ffn", "seq", "batch",
                               "nograd_ms", "fwd_ms", "fwd_bwd_ms"], "rows": rows},
        "output_layer": {"description": "logits GEMM (bf16) then fp32 cross-entropy, forward and backward",
                         "columns": ["hidden", "vocab", "tokens", "fwd_bwd_ms"], "rows": head_rows},
    }
    write_json(args.out, doc)
    print(json.dumps(doc["layers"]["rows"]), json.dumps(head_rows))


if __name__ == "__main__":
    main()
