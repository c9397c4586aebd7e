#!/usr/bin/env python3
"""Writes the fuzz seed corpora from configs/: run configs merged into single
documents (corpus/config), the same runs as an including file plus its
includes (corpus/include, "source"/"note" dropped and '/' removed, as that
target skips inputs with '/'), and the example schedules with the reader
selector byte in front (corpus/schedule: '0' text, '1' CSV)."""
import json
import pathlib

root = pathlib.Path(__file__).resolve().parents[2]
out = pathlib.Path(__file__).resolve().parent / "corpus"


def merge(dst, src):
    for k, v in src.items():
        if isinstance(dst.get(k), dict) and isinstance(v, dict):
            merge(dst[k], v)
        else:
            dst[k] = v


def load(path):
    doc = json.loads(path.read_text())
    merged = {}
    inc = doc.pop("include", [])
    for name in [inc] if isinstance(inc, str) else inc:
        merge(merged, load(path.parent / name))
    merge(merged, doc)
    return merged


def scrub(v):
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items() if k not in ("source", "note")}
    if isinstance(v, list):
        return [scrub(x) for x in v]
    if isinstance(v, str):
        return v.replace("/", " per ")
    return v


runs = [(r, r.name) for r in sorted((root / "configs" / "runs").glob("*.json"))]
runs += [(r, "resilience-" + r.name) for r in sorted((root / "configs" / "resilience").glob("*.json"))]
for run, name in runs:
    (out / "config" / name).write_text(json.dumps(scrub(load(run)), indent=1) + "\n")
    doc = json.loads(run.read_text())
    inc = doc.pop("include", [])
    inc = [inc] if isinstance(inc, str) else inc
    parts = [scrub(load(run.parent / name)) for name in inc[:3]]
    doc["include"] = [f"f{i + 1}.json" for i in range(len(parts))]
    text = "\n----\n".join(json.dumps(scrub(d), indent=1) for d in [doc] + parts)
    (out / "include" / name).write_text(text + "\n")
(out / "config" / "override.json").write_text(
    "@set strategy.tp=2,4\n@set strategy.name=megatron\n"
    + json.dumps(scrub(load(root / "configs" / "runs" / "llama3-8b-8xh100-megatron.json"))) + "\n")

for sched in sorted((root / "configs" / "schedules").iterdir()):
    if sched.suffix in (".txt", ".csv"):
        selector = b"1" if sched.suffix == ".csv" else b"0"
        (out / "schedule" / sched.name).write_bytes(selector + sched.read_bytes())
