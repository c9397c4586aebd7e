"""Interrupted runs (docs/command-line.md, "Interrupted runs and output files").

    interrupt.py DTSIM SOURCE_DIR WORK_DIR CASE

Starts a dtsim command, waits until its output shows that it is at work (a line of its report, a
row of its table), sends it SIGINT or SIGTERM, and checks that it exits with 130 or 143 within a
few seconds, that what it had computed is printed (stdout is a pipe here: what is printed before
the signal must not be lost in a buffer), and that no file is left half-written under its final
name or under a temporary one. Exits 0 when the case passes, 1 with the reason otherwise.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

WAIT = 120  # seconds to wait for the output that shows the command at work (a slow, shared machine)
STOP = 30  # seconds the command may take to stop after the signal


def fail(why, out="", err=""):
    print(f"FAIL: {why}\n--- stdout:\n{out}\n--- stderr:\n{err}")
    sys.exit(1)


def interrupt(cmd, cwd, ready, sig, delay=0.0):
    """Runs cmd, sends sig once a line of its stdout satisfies ready (and delay seconds more); returns
    (exit status, stdout, stderr)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, err = [], []
    seen = threading.Event()

    def read_out():
        for line in proc.stdout:
            lines.append(line)
            if ready(line):
                seen.set()

    def read_err():
        err.append(proc.stderr.read())

    threads = [threading.Thread(target=read_out), threading.Thread(target=read_err)]
    for t in threads:
        t.start()
    start = time.monotonic()
    while not seen.is_set() and proc.poll() is None and time.monotonic() - start < WAIT:
        seen.wait(0.02)
    if not seen.is_set():
        proc.kill()
        proc.wait()
        for t in threads:
            t.join()
        fail("the command finished or stayed silent before the output it was to be interrupted at",
             "".join(lines), "".join(err))
    time.sleep(delay)
    proc.send_signal(sig)
    try:
        status = proc.wait(timeout=STOP)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        for t in threads:
            t.join()
        fail(f"the command did not stop within {STOP} s of the signal", "".join(lines), "".join(err))
    for t in threads:
        t.join()
    return status, "".join(lines), "".join(err)


def expect_stopped(status, sig, out, err):
    want = 128 + sig
    if status != want:
        fail(f"exit status {status}, expected {want}", out, err)
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    if f"stopped by {name}" not in err:
        fail(f"stderr does not say it was stopped by {name}", out, err)


def clean_folder(path):
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        os.remove(os.path.join(path, name))


def main():
    dtsim, source, work, case = sys.argv[1:5]
    configs = os.path.join(source, "configs")
    folder = os.path.join(work, case)
    clean_folder(folder)

    if case == "sweep_sigint":
        # A sweep of 40 runs, interrupted after its first row: the rows done are on stdout, not all 40.
        batches = ",".join(str(64 * (i + 1)) for i in range(40))
        cmd = [dtsim, "run", os.path.join(configs, "runs", "llama3-70b-64xh100-1f1b.json"),
               "--set", f"training.global_batch={batches}"]
        status, out, err = interrupt(cmd, folder, lambda line: line.startswith("64 "), signal.SIGINT)
        expect_stopped(status, signal.SIGINT, out, err)
        rows = [line for line in out.splitlines() if line[:1].isdigit()]
        if not 1 <= len(rows) < 40:
            fail(f"{len(rows)} rows printed, expected the rows done before the signal (1 to 39)", out, err)

    elif case == "sweep_json_sigterm":
        # The same as JSON: the rows done are printed as a JSON array when the sweep is stopped.
        batches = ",".join(str(64 * (i + 1)) for i in range(40))
        cmd = [dtsim, "run", os.path.join(configs, "runs", "llama3-70b-64xh100-1f1b.json"), "--json",
               "--set", f"training.global_batch={batches}"]
        # Nothing is printed before the rows: the signal goes after a second and a half of work.
        status, out, err = interrupt_silent(cmd, folder, signal.SIGTERM, 1.5)
        expect_stopped(status, signal.SIGTERM, out, err)
        try:
            rows = json.loads(out)
        except ValueError as e:
            fail(f"stdout is not JSON: {e}", out, err)
        if not isinstance(rows, list) or len(rows) >= 40 or any("report" not in r for r in rows):
            fail("stdout is not the array of the rows done", out, err)

    elif case == "failures_sigterm":
        # A long failures sweep, stopped while it simulates: the intervals done are printed.
        cmd = [dtsim, "failures", os.path.join(configs, "resilience", "gpt3-175b-1024xa100.json"),
               "--mtbf-hours", "5000", "--steps", "200000", "--trials", "200", "--trace", "f.json"]
        status, out, err = interrupt(cmd, folder, lambda line: line.startswith("without failures"),
                                     signal.SIGTERM, 0.5)
        expect_stopped(status, signal.SIGTERM, out, err)
        done = [line for line in out.splitlines() if line.startswith("(interrupted: ")]
        if len(done) != 1:
            fail("no line says how many intervals were simulated", out, err)
        n = int(done[0].split()[1])
        rows = [line for line in out.splitlines() if line.strip()[:1].isdigit() and "%" in line]
        if len(rows) != n:
            fail(f"{len(rows)} rows printed for {n} intervals simulated", out, err)
        if os.listdir(folder):
            fail(f"files left: {os.listdir(folder)}", out, err)

    elif case == "run_files_sigint":
        # A run that writes a large trace, a Chrome trace and a picture, stopped once its report is
        # printed (while it writes the files): the report is all there, no file is half-written.
        cmd = [dtsim, "run", os.path.join(configs, "runs", "llama3-70b-64xh100-1f1b.json"),
               "--trace", "t.json", "--chrome-trace", "c.json", "--png", "t.png"]
        status, out, err = interrupt(cmd, folder, lambda line: line.lstrip().startswith("simulated "),
                                     signal.SIGINT)
        expect_stopped(status, signal.SIGINT, out, err)
        if "step time" not in out or "peak memory" not in out:
            fail("the report is not printed whole", out, err)
        left = sorted(os.listdir(folder))
        if any(name.startswith(".") for name in left):
            fail(f"temporary files left: {left}", out, err)
        if "c.json" in left:
            fail("the Chrome trace, written last, is there although the run was stopped before", out, err)
        if "t.json" in left:  # finished before the signal: then it is whole
            with open(os.path.join(folder, "t.json")) as f:
                try:
                    json.load(f)
                except ValueError as e:
                    fail(f"t.json is not whole: {e}", out, err)
    else:
        fail(f"unknown case {case}")
    clean_folder(folder)
    print(f"{case}: passed")


def interrupt_silent(cmd, cwd, sig, delay):
    """Runs cmd, sends sig after delay seconds; returns (exit status, stdout, stderr)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    if proc.poll() is not None:
        out, err = proc.communicate()
        fail("the command finished before the signal", out, err)
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=STOP)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        fail(f"the command did not stop within {STOP} s of the signal", out, err)
    return proc.returncode, out, err


if __name__ == "__main__":
    main()
