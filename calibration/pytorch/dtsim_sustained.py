#!/usr/bin/env python3
"""GEMMs as a training step runs them for minutes, and beside other kernels.

dtsim_kernels.py times each kernel for milliseconds, on a GPU that starts cool and idle. Published
runs of hours on H100 nodes come out slower than the kernels say (docs/calibration.md): their GPUs
may run below the clock of a short benchmark (power and temperature limits), and their GEMMs share
the SMs with the communication kernels beside them (NCCL's, Transformer Engine's userbuffers').
This script measures the three things that separate them, on one GPU, and writes one JSON file:

  sustained  back-to-back bf16 GEMMs of random inputs for --seconds, TFLOP/s per second of it, with
             the SM clock, power draw, temperature and throttle reasons nvidia-smi samples meanwhile;
  carveout   GEMMs of transformer-layer shapes on fewer SMs (cuBLASLt's SM carveout, as PyTorch's
             torch._C._set_sm_carveout_experimental sets it for async tensor parallelism): time by
             SMs left out;
  beside     a GEMM and a memory-bound copy launched together on two streams, against each alone:
             how much of the shorter one the pair hides, and how much the GEMM slows.

    python3 dtsim_sustained.py --out sustained.json [--only sustained,carveout,beside] [--seconds 120]

Nothing here is fitted; what a cost model takes from it is decided where the data is read.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

import torch

# dtsim_torch_common.py sits beside this script: found also when the script is loaded from elsewhere.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtsim_torch_common import DT, run_sections, software_meta, timed  # noqa: E402

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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="sustained,carveout,beside")
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
