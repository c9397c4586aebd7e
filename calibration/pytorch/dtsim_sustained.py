#!/usr/bin/env python3
"""GEMMs as a training step runs them for minutes, and beside other kernels.

dtsim_kernels.py times each kernel for milliseconds, on a GPU that starts cool and idle. Published
runs of hours on H100 nodes come out slower than the kernels say (docs/calibration.md): their GPUs
may run below the clock of a short benchmark (power and temperature limits), and their GEMMs share
the SMs with the communication kernels beside them (NCCL's, Transformer Engine's userbuffers').
This script measures what separates them, on one GPU, and writes one JSON file:

  sustained  back-to-back bf16 GEMMs of random inputs for --seconds, TFLOP/s per second of it, with
             the SM clock, power draw, temperature and throttle reasons nvidia-smi samples meanwhile;
  carveout   GEMMs of transformer-layer shapes on fewer SMs (cuBLASLt's SM carveout, as PyTorch's
             torch._C._set_sm_carveout_experimental sets it for async tensor parallelism): time by
             SMs left out;
  beside     a GEMM and a memory-bound copy launched together on two streams, against each alone:
             how much of the shorter one the pair hides, and how much the GEMM slows;
  held       GEMMs of layer shapes, a copy, memory-bound kernels of a step (RMSNorm, SwiGLU, the
             cross-entropy, fused AdamW) and a whole Llama 3 8B block while a kernel on another stream
             holds `held` SMs for their whole duration, one block per SM, as an NCCL collective's CTAs
             hold theirs (blocks of 640 threads of 96 registers, NCCL's most: a GEMM's blocks cannot fit
             beside one): time by SMs held;
  held_timing one GEMM or attention kernel beside a hold that ends partway through it, or that
             arrives after it started, or with cuBLASLt told to leave the held SMs free: when the
             held blocks and the kernel ran (the GPU's global timer).

    python3 dtsim_sustained.py --out sustained.json [--only sustained,carveout,beside,held,held_timing]
                               [--seconds 120]

held and held_timing need CuPy (its NVRTC compiles the holding kernel).

Nothing here is fitted; what a cost model takes from it is decided where the data is read.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import DT, LlamaBlock, freqs_for, run_sections, software_meta, timed  # noqa: E402

# Transformer-layer GEMMs, [tokens, in] x [in, out]: Llama 3 70B at TP 8 (QKV, output projection,
# gate and up, down) and GPT-3 175B at TP 4 (QKV, fc1), 8,192 and 4,096 tokens a microbatch.
LAYER_SHAPES = [(8192, 8192, 1280), (8192, 1024, 8192), (8192, 8192, 7168), (8192, 3584, 8192),
                (2048, 12288, 9216), (2048, 12288, 12288)]


class Sampler:
    """nvidia-smi's readings every interval_ms in a thread: (seconds since start, SM MHz, W, C, reasons)."""

    def __init__(self, interval_ms):
        self.rows, self.error = [], None
        self.t0 = time.monotonic()
        query = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
        # The GPU this process runs on, by UUID (CUDA_VISIBLE_DEVICES renumbers the indices).
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        which = ["-i", f"GPU-{props.uuid}"] if getattr(props, "uuid", None) else []
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", *which, f"--query-gpu={query}", "--format=csv,noheader,nounits",
                 "-lms", str(interval_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except Exception as e:  # no nvidia-smi: the throughput alone
            self.proc, self.error = None, repr(e)
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 4:
                continue
            try:
                self.rows.append([round(time.monotonic() - self.t0, 3), float(parts[0]), float(parts[1]),
                                  float(parts[2]), parts[3]])
            except ValueError:
                continue

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.thread.join(timeout=10)
        return self.rows


# Blocks shaped like NCCL's CTAs, one per SM: HOLD_THREADS threads of 96 registers each (NCCL compiles its kernels
# with -maxrregcount=96 and launches 512-640 threads a CTA: makefiles/common.mk, src/include/device.h), 61,440 of an
# SM's 65,536, so a second such block, a GEMM's or an attention kernel's cannot fit beside one, where a small block of
# few registers still might, as beside NCCL's. ptxas gives these kernels 96 registers (the most
# __launch_bounds__(640, 1) allows). hold waits until *flag is set (or max_ns pass) and records the SM it ran on;
# hold_for waits max_ns from its start and records that start (global timer, ns).
HOLD_THREADS = 640
HOLD_SOURCE = r"""
#define HOLD_VALUES 76

// Values no later instruction can recompute (each from a clock read), live until after the wait.
__device__ __forceinline__ void fill(float* r) {
#pragma unroll
    for (int i = 0; i < HOLD_VALUES; ++i) r[i] = (float)(clock() ^ (unsigned)(i * 2654435761u));
}
__device__ __forceinline__ void use(const float* r, float* sink) {
    float s = 0;
#pragma unroll
    for (int i = 0; i < HOLD_VALUES; ++i) s += r[i] * r[(i + 7) % HOLD_VALUES];
    if (s == -1.0f) sink[threadIdx.x] = s;  // never true: keeps them live
}
__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void __launch_bounds__(640, 1)
hold(const volatile int* flag, long long max_ns, int* smids, float* sink) {
    float r[HOLD_VALUES];
    fill(r);
    if (threadIdx.x == 0) {
        unsigned int smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        smids[blockIdx.x] = (int)smid;
        const unsigned long long t0 = now();
        do __nanosleep(500);
        while (*flag == 0 && (long long)(now() - t0) < max_ns);
    }
    __syncthreads();
    use(r, sink);
}

extern "C" __global__ void __launch_bounds__(640, 1)
hold_for(long long max_ns, unsigned long long* starts, float* sink) {
    float r[HOLD_VALUES];
    fill(r);
    if (threadIdx.x == 0) {
        const unsigned long long t0 = now();
        starts[blockIdx.x] = t0;
        do __nanosleep(500);
        while ((long long)(now() - t0) < max_ns);
    }
    __syncthreads();
    use(r, sink);
}

extern "C" __global__ void stamp(unsigned long long* out, int i) {
    out[i] = now();
}
"""


class Holding:
    """HOLD_SOURCE's kernels, compiled by CuPy's NVRTC and launched on PyTorch's streams."""

    def __init__(self):
        import cupy as cp

        self.cp = cp
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.sink = cp.zeros(HOLD_THREADS, dtype=cp.float32)
        self.kernels = {name: cp.RawKernel(HOLD_SOURCE, name) for name in ("hold", "hold_for", "stamp")}

    def launch(self, stream, name, grid, block, *args):
        """Kernel `name` on `stream` (a torch.cuda.Stream); tensors go as CuPy views of them."""
        cp = self.cp
        args = tuple(cp.asarray(a) if isinstance(a, torch.Tensor) else a for a in args)
        with cp.cuda.ExternalStream(stream.cuda_stream):
            self.kernels[name]((grid,), (block,), args)

    def hold(self, stream, name, blocks, *args):
        """`blocks` holding blocks of kernel `name` (hold or hold_for), one per SM."""
        self.launch(stream, name, blocks, HOLD_THREADS, *args, self.sink)

    def describe(self, name):
        return f"blocks of {HOLD_THREADS} threads of {self.kernels[name].num_regs} registers (one per SM)"


def flash(fn):
    """fn() with PyTorch's scaled_dot_product_attention held to its FlashAttention backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return fn()


def gemm_tflops(m, n, k, ms):
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


class Bench:
    def __init__(self, args):
        self.a = args
        self.sections = {}

    def sustained(self):
        m = n = k = 8192
        a = torch.randn(m, k, device="cuda", dtype=DT)
        b = torch.randn(k, n, device="cuda", dtype=DT)
        c = torch.empty(m, n, device="cuda", dtype=DT)
        per_window = 20  # GEMMs between two events: about 30 ms at 700 TFLOP/s
        sampler = Sampler(self.a.sample_ms)
        torch.cuda.synchronize()
        start = time.monotonic()
        windows = []
        while time.monotonic() - start < self.a.seconds:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(per_window):
                torch.mm(a, b, out=c)
            e1.record()
            e1.synchronize()
            ms = e0.elapsed_time(e1) / per_window
            windows.append([round(time.monotonic() - start, 3), round(gemm_tflops(m, n, k, ms), 2)])
        samples = sampler.stop()
        first = [w[1] for w in windows if w[0] <= 1.0]
        last = [w[1] for w in windows if w[0] >= self.a.seconds - 10]
        self.sections["sustained"] = {
            "description": f"torch.mm of bf16 randn [{m}, {k}] x [{k}, {n}] back to back for {self.a.seconds} s: "
                           f"TFLOP/s over each window of {per_window} GEMMs (CUDA events), and nvidia-smi's SM clock "
                           "(MHz), power draw (W), temperature (C) and active clock event reasons (a bit mask) every "
                           f"{self.a.sample_ms} ms",
            "shape": [m, n, k],
            "first_second_tflops": round(sum(first) / len(first), 2) if first else None,
            "last_10_seconds_tflops": round(sum(last) / len(last), 2) if last else None,
            "windows_columns": ["seconds", "tflops"], "windows": windows,
            "samples_columns": ["seconds", "sm_clock_MHz", "power_W", "temperature_C", "clock_event_reasons"],
            "samples": samples, "sampler_error": sampler.error}

    def carveout(self):
        if not hasattr(torch._C, "_set_sm_carveout_experimental"):
            raise RuntimeError(f"this PyTorch ({torch.__version__}) has no torch._C._set_sm_carveout_experimental")
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        rows = []
        for m, k, n in LAYER_SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=DT)
            b = torch.randn(k, n, device="cuda", dtype=DT)
            for carve in [0, 8, 16, 24, 32, sms // 4, sms // 2]:
                torch._C._set_sm_carveout_experimental(carve)
                try:
                    ms = timed(lambda: torch.mm(a, b), self.a.iters)
                finally:
                    torch._C._set_sm_carveout_experimental(None)
                rows.append([m, n, k, carve, sms - carve, round(ms * 1e3, 3), round(gemm_tflops(m, n, k, ms), 2)])
        self.sections["carveout"] = {
            "description": "torch.mm bf16 randn [m, k] x [k, n] with cuBLASLt told to leave `carveout` SMs free "
                           "(torch._C._set_sm_carveout_experimental): CUDA-event time per GEMM, median of groups",
            "columns": ["m", "n", "k", "carveout", "sms_used", "time_us", "tflops"], "rows": rows}

    def beside(self):
        rows = []
        copy_bytes = 256 << 20
        src = torch.empty(copy_bytes // 2, device="cuda", dtype=DT).normal_()
        dst = torch.empty_like(src)
        s_gemm, s_copy = torch.cuda.Stream(), torch.cuda.Stream()
        for m, k, n in LAYER_SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=DT)
            b = torch.randn(k, n, device="cuda", dtype=DT)

            def gemm():
                torch.mm(a, b)

            def copy():
                dst.copy_(src)

            def both():
                # The copy and the GEMM, each on its stream, started together; done when both are.
                ev = torch.cuda.Event()
                ev.record()
                with torch.cuda.stream(s_gemm):
                    s_gemm.wait_event(ev)
                    torch.mm(a, b)
                with torch.cuda.stream(s_copy):
                    s_copy.wait_event(ev)
                    dst.copy_(src)
                torch.cuda.current_stream().wait_stream(s_gemm)
                torch.cuda.current_stream().wait_stream(s_copy)

            t_gemm = timed(gemm, self.a.iters)
            t_copy = timed(copy, self.a.iters)
            t_both = timed(both, self.a.iters)
            hidden = (t_gemm + t_copy - t_both) / min(t_gemm, t_copy)
            rows.append([m, n, k, copy_bytes, round(t_gemm * 1e3, 3), round(t_copy * 1e3, 3), round(t_both * 1e3, 3),
                         round(hidden, 4)])
        self.sections["beside"] = {
            "description": "a bf16 GEMM [m, k] x [k, n] (torch.mm) and a device-to-device copy of copy_bytes "
                           "(Tensor.copy_), each alone and both started together on two streams: CUDA-event time per "
                           "call (median of groups); hidden = (gemm + copy - both) / min(gemm, copy), 1 when the "
                           "shorter one costs nothing beside the other, 0 when they run as if one after the other",
            "columns": ["m", "n", "k", "copy_bytes", "gemm_us", "copy_us", "both_us", "hidden"], "rows": rows}

    def held(self):
        h = Holding()
        cp, sms = h.cp, h.sms
        flag = torch.zeros(1, device="cuda", dtype=torch.int32)
        smids = torch.full((sms,), -1, device="cuda", dtype=torch.int32)
        s_hold, s_work = torch.cuda.Stream(), torch.cuda.Stream()
        iters, max_ns = self.a.iters, 5_000_000_000

        def run(work, held):
            """CUDA-event ms per call of work on s_work, iters calls, while `held` SMs are held; the SMs the
            holding blocks ran on (distinct count)."""
            flag.zero_()
            smids.fill_(-1)
            torch.cuda.synchronize()
            if held:
                h.hold(s_hold, "hold", held, flag, cp.int64(max_ns), smids)
            with torch.cuda.stream(s_work):
                torch.cuda._sleep(200_000)  # about 0.1 ms: the holding blocks are resident before the work starts
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(iters):
                    work()
                e1.record()
                flag.fill_(1)
            torch.cuda.synchronize()
            distinct = len(set(smids[:held].tolist())) if held else 0
            return e0.elapsed_time(e1) / iters, distinct

        copy_bytes = 1 << 30
        src = torch.empty(copy_bytes // 2, device="cuda", dtype=DT).normal_()
        dst = torch.empty_like(src)
        works = [("copy", 0, 0, 0, lambda: dst.copy_(src))]
        for m, k, n in LAYER_SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=DT)
            b = torch.randn(k, n, device="cuda", dtype=DT)
            works.append(("gemm", m, n, k, lambda a=a, b=b: torch.mm(a, b)))
        # Memory-bound kernels of a step, at Llama 3 8B's sizes for 8,192 tokens: RMSNorm, SwiGLU's product, the
        # cross-entropy over a 128,256 vocabulary, and AdamW over 2^28 parameters (fused).
        import torch.nn.functional as F
        x = torch.randn(8192, 4096, device="cuda", dtype=DT)
        norm = torch.nn.RMSNorm(4096, device="cuda", dtype=DT)
        gate, up = (torch.randn(8192, 14336, device="cuda", dtype=DT) for _ in range(2))
        logits = torch.randn(8192, 128256, device="cuda", dtype=DT)
        target = torch.randint(0, 128256, (8192,), device="cuda")
        param = torch.nn.Parameter(torch.randn(1 << 28, device="cuda", dtype=torch.float32))
        param.grad = torch.randn_like(param)
        adam = torch.optim.AdamW([param], fused=True)
        works += [("rmsnorm", 8192, 4096, 0, lambda: norm(x)),
                  ("swiglu", 8192, 14336, 0, lambda: F.silu(gate) * up),
                  ("cross_entropy", 8192, 128256, 0, lambda: F.cross_entropy(logits, target)),
                  ("adamw_fused", 1 << 28, 0, 0, adam.step)]
        # A whole Llama 3 8B block as torchtitan writes it (8,192 tokens; m = tokens, n = hidden): what a cost
        # model prices as one operation, its GEMMs, attention and memory-bound kernels back to back.
        blk = LlamaBlock(4096, 32, 8, 14336).to("cuda", DT)
        xb = torch.randn(1, 8192, 4096, device="cuda", dtype=DT, requires_grad=True)
        freqs = freqs_for("llama", 8192, 128)
        gb = torch.randn_like(xb)
        works += [("llama3_8b_block_forward", 8192, 4096, 0, lambda: flash(lambda: blk(xb, freqs))),
                  ("llama3_8b_block_forward_backward", 8192, 4096, 0,
                   lambda: flash(lambda: blk(xb, freqs).backward(gb)))]
        rows = []
        for kind, m, n, k, work in works:
            for _ in range(3):
                work()  # warm-up: cuBLAS's heuristics and workspace
            base = None
            for held in [0, 8, 16, 24, 32, sms // 4, sms // 2]:
                runs = [run(work, held) for _ in range(3)]
                ms = statistics.median(r[0] for r in runs)
                distinct = min(r[1] for r in runs)
                base = base if base is not None else ms
                rows.append([kind, m, n, k, held, distinct, round(ms * 1e3, 3), round(ms / base, 4),
                             round(sms / (sms - held), 4)])
        self.sections["held"] = {
            "description": f"a bf16 GEMM [m, k] x [k, n] (torch.mm), a device-to-device copy of {copy_bytes} bytes "
                           "(Tensor.copy_, m = n = k = 0), or a memory-bound kernel of a step (kind: nn.RMSNorm of "
                           "bf16 [m, n]; F.silu(gate) * up, bf16 [m, n]; F.cross_entropy of bf16 logits [m, n]; "
                           "torch.optim.AdamW(fused=True).step over m fp32 parameters), or a Llama 3 8B block "
                           "(dtsim_torch_common.LlamaBlock over m tokens, forward, or forward and backward, its "
                           f"attention held to SDPA's FlashAttention backend): {iters} calls back to back on one "
                           f"stream while a kernel on another holds `held` SMs, `held` {h.describe('hold')} "
                           "waiting on a flag the work's stream sets after its last call. CUDA-event time "
                           "per call (median of 3 runs); `distinct_sms`: the SMs the holding blocks ran on; "
                           "`slowdown`: time / time with none held; `sm_share`: sms / (sms - held), the slowdown if "
                           "the work ran at the speed of the SMs left",
            "sms": sms,
            "columns": ["kind", "m", "n", "k", "held", "distinct_sms", "time_us", "slowdown", "sm_share"],
            "rows": rows}

    def held_timing(self):
        import torch.nn.functional as F

        h = Holding()
        cp, sms = h.cp, h.sms
        starts = torch.zeros(sms, device="cuda", dtype=torch.int64)
        stamps = torch.zeros(2, device="cuda", dtype=torch.int64)
        s_hold, s_work = torch.cuda.Stream(), torch.cuda.Stream()
        gap_cycles = 200_000  # torch.cuda._sleep: about 0.1 ms at the clocks seen

        def once(work, held, hold_ns, order, carve):
            """One call of work on s_work with `held` SMs held for hold_ns by blocks launched before it
            (order "before", after a gap) or during it (order "after"): (CUDA-event us of the call, global-timer
            us from the call's start to the first and the last held block's start, and to the call's end)."""
            starts.zero_()
            torch.cuda.synchronize()
            if held and order == "before":
                h.hold(s_hold, "hold_for", held, cp.int64(hold_ns), starts)
            if carve:
                torch._C._set_sm_carveout_experimental(carve)
            try:
                with torch.cuda.stream(s_work):
                    if order == "before":  # with nothing held too: the baseline's call waits as the others do
                        torch.cuda._sleep(gap_cycles)
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    h.launch(s_work, "stamp", 1, 1, stamps, cp.int32(0))
                    e0.record()
                    work()
                    e1.record()
                    h.launch(s_work, "stamp", 1, 1, stamps, cp.int32(1))
                if held and order == "after":  # queued behind the call: its blocks arrive while it runs
                    with torch.cuda.stream(s_hold):
                        torch.cuda._sleep(gap_cycles // 4)
                    h.hold(s_hold, "hold_for", held, cp.int64(hold_ns), starts)
            finally:
                if carve:
                    torch._C._set_sm_carveout_experimental(None)
            torch.cuda.synchronize()
            t0, t1 = stamps.tolist()
            held_starts = starts[:held].tolist() if held else []
            first = (min(held_starts) - t0) / 1e3 if held_starts else None
            last = (max(held_starts) - t0) / 1e3 if held_starts else None
            return e0.elapsed_time(e1) * 1e3, first, last, (t1 - t0) / 1e3

        works = []
        for m, k, n in LAYER_SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=DT)
            b = torch.randn(k, n, device="cuda", dtype=DT)
            works.append((f"gemm {m}x{k}x{n}", lambda a=a, b=b: torch.mm(a, b)))
        q, k_, v = (torch.randn(1, 32, 8192, 128, device="cuda", dtype=DT, requires_grad=True) for _ in range(3))
        out = flash(lambda: F.scaled_dot_product_attention(q, k_, v, is_causal=True))
        grad = torch.randn_like(out)
        works.append(("sdpa forward 1x32x8192x128 causal",
                      lambda: flash(lambda: F.scaled_dot_product_attention(q, k_, v, is_causal=True))))
        works.append(("sdpa backward 1x32x8192x128 causal",
                      lambda: torch.autograd.grad(out, (q, k_, v), grad, retain_graph=True)))
        rows = []
        gap_us = None
        for name, work in works:
            for _ in range(3):
                work()
            base = statistics.median(once(work, 0, 0, "before", 0)[0] for _ in range(5))
            cases = [(n, f, "before", 0) for n in (16, 24) for f in (0.25, 0.5, 1.0, 3.0)]
            cases += [(n, f, "after", 0) for n in (16, 24) for f in (0.25, 3.0)]
            cases += [(n, 3.0, "before", n) for n in (16, 24)]
            for held, frac, order, carve in cases:
                # Held blocks start about a gap before the call (order "before"): they hold frac of the call past it.
                if gap_us is None:
                    probe = [once(work, 1, 1000, "before", 0) for _ in range(3)]
                    gap_us = statistics.median(-r[1] for r in probe)
                hold_ns = int((gap_us + frac * base) * 1e3) if order == "before" else int(frac * base * 1e3)
                runs = sorted((once(work, held, hold_ns, order, carve) for _ in range(5)), key=lambda r: r[0])
                us, first, last, span = runs[2]
                rows.append([name, held, order, carve, frac, round(base, 2), round(us, 2), round(us / base, 4),
                             round(first, 2), round(last, 2), round(span, 2),
                             round((first + hold_ns / 1e3) if order == "before" else 0.0, 2)])
        self.sections["held_timing"] = {
            "description": f"one call of `work` (a GEMM, or SDPA held to its FlashAttention backend) on a stream "
                           f"while `held` SMs are held on another by {h.describe('hold_for')}. Order "
                           "\"before\": the call waits gap_us behind a sleep, the blocks start about then and hold for "
                           "gap_us + frac x base_us; order \"after\": the blocks are launched after the call, on "
                           "their stream behind a sleep of a quarter of that gap, and hold for frac x base_us from "
                           "their start. carveout: cuBLASLt told to leave that many SMs free (0: not). base_us: the "
                           "call with nothing held, after the same sleep; time_us: CUDA-event time of the call (the "
                           "median of 5 by time, whose other columns are given); first_start_us and last_start_us: "
                           "the global timer from the call's start to the first and the last held block's start "
                           "(negative: before it); span_us: to the call's end (global timer, including a one-thread "
                           "stamp kernel); hold_end_us: the held SMs' release, from the call's start (order before)",
            "sms": sms, "gap_us": round(gap_us, 2),
            "columns": ["work", "held", "order", "carveout", "frac", "base_us", "time_us", "slowdown",
                        "first_start_us", "last_start_us", "span_us", "hold_end_us"],
            "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="sustained,carveout,beside,held,held_timing")
    p.add_argument("--seconds", type=float, default=120, help="length of the sustained run")
    p.add_argument("--sample-ms", type=int, default=250, help="nvidia-smi's sampling interval")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("dtsim_sustained: no CUDA device")
    props = torch.cuda.get_device_properties(0)
    meta = {"tool": "dtsim_sustained.py", "gpu": props.name, "memory_GiB": round(props.total_memory / 2**30, 1),
            "sms": props.multi_processor_count, **software_meta(sys.argv)}
    bench = Bench(args)
    run_sections(bench, args.only.split(","), args.out, meta, "dtsim_sustained")


if __name__ == "__main__":
    main()
