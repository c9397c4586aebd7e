#!/usr/bin/env python3
"""Writes the fuzz seed corpora.

    make_corpus.py              the committed seeds, into tests/fuzz/corpus/<corpus>/
    make_corpus.py --large DIR  the large seeds, into DIR/<corpus>/ (.ci/run writes them into
                                build-asan/tests/fuzz/corpus beside the committed ones)

The committed seeds: the run configs of configs/ merged into single documents (corpus/config),
the same runs as an including file plus its includes (corpus/include, "source"/"note" dropped and
'/' removed, as that target skips inputs with '/'), the example schedules with the reader selector
byte in front (corpus/schedule: '0' text, '1' CSV), `dtsim failures`' parameters (corpus/failures);
and for each reader the inputs that break checks written for ordinary ones: numbers out of range
(NaN, Infinity, 1e308, 1e-300, -0, integers past 64 bits), nesting at the depth limit (256 levels,
the document itself the first) and one past it, long strings, includes forming diamonds and cycles.
The regression-* seeds are inputs that once crashed a target, kept as they were found.

The large seeds are the same kinds at the sizes that broke the readers: 200,000 nested arrays or
objects (100,000 overflowed the stack once), strings of 256 KiB, an include listing a file 20,000
times; each is under 1 MiB, .ci/run's -max_len. They are written at CI time rather than committed."""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
out = pathlib.Path(__file__).resolve().parent / "corpus"

MAX_DEPTH = 256      # sim/json/reader.hpp, kMaxDepth: the document itself is the first level
DEEP = 200_000       # the large seeds' nesting
LONG = 256 * 1024    # the large seeds' long strings
MAX_LEN = 1 << 20    # .ci/run's -max_len for the readers

# Numbers as JSON text (some are not JSON: the readers must refuse them as they refuse any bad text).
NUMBERS = ["NaN", "-NaN", "Infinity", "-Infinity", "inf", "-inf", "1e308", "-1e308", "1e400", "1e-300",
           "4.9e-324", "-0", "-0.0", "18446744073709551615", "18446744073709551616",
           "9223372036854775807", "-9223372036854775809", "2147483648", "1e9", "\"NaN\"", "\"1e308\""]


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


def nested_arrays(depth, inner=""):
    return "[" * depth + inner + "]" * depth


def nested_objects(depth, key="a", inner="1"):
    return ('{"%s":' % key) * depth + inner + "}" * depth


def put(doc, path, token):
    """The document as text with the value at the dotted `path` replaced by the raw `token`."""
    d = json.loads(json.dumps(doc))
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = "@@TOKEN@@"
    return json.dumps(d).replace('"@@TOKEN@@"', token)


def with_note(doc, note):
    """The document as text with a "note" (read by nobody) holding `note`, as text."""
    text = json.dumps(doc)
    return text[:-1] + ', "note": ' + note + "}"


def base_run():
    return scrub(load(root / "configs" / "runs" / "llama3-8b-16xh100-ddp.json"))


def write(folder, name, data):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


# ---------------------------------------------------------------- configs

def config_seeds(large):
    base = base_run()
    seeds = {}
    if not large:
        paths = ["cluster.gpu.hbm_GiB", "cluster.gpu.peak_tflops.bf16", "cluster.links.intra_node.bandwidth_GBps",
                 "cluster.storage.write_GBps", "model.layers", "strategy.dp", "training.global_batch",
                 "stragglers.slowdown.3", "strategy.bucket_MiB", "cluster.nodes"]
        for i, token in enumerate(NUMBERS):
            path = paths[i % len(paths)]
            seeds[f"number-{i:02d}-{path.replace('.', '-')}.json"] = put(base, path, token) + "\n"
        sets = ["cluster.gpu.peak_tflops.bf16=1e-300", "stragglers.slowdown.3=1e308", "cluster.storage.write_GBps=nan",
                "model.layers=1000000000", "strategy.dp=18446744073709551616", "cluster.gpu.hbm_GiB=Infinity",
                "training.global_batch=-0", "strategy.tp=1,2,4,8", "note=" + nested_arrays(MAX_DEPTH + 10),
                ".".join(["note"] + ["a"] * (MAX_DEPTH + 10)) + "=1", "=1", "strategy.tp", "model..layers=2",
                "cluster.gpu.power_limit_W=1e-300", "strategy.norm_kernel=composed", "strategy.repeat_kv=true"]
        for i, s in enumerate(sets):
            seeds[f"set-{i:02d}.json"] = "@set " + s + "\n" + json.dumps(base) + "\n"
        for depth, what in [(MAX_DEPTH - 1, "at-limit"), (MAX_DEPTH, "over-limit")]:
            seeds[f"nested-arrays-{what}.json"] = with_note(base, nested_arrays(depth)) + "\n"
            seeds[f"nested-objects-{what}.json"] = with_note(base, nested_objects(depth)) + "\n"
        seeds["nested-root.json"] = nested_arrays(MAX_DEPTH + 1) + "\n"
        long = dict(base, name="x" * 4096)
        seeds["long-name.json"] = json.dumps(long) + "\n"
        seeds["long-key.json"] = json.dumps(dict(base, **{"k" * 4096: 1})) + "\n"
        seeds["long-choice.json"] = put(base, "strategy.name", json.dumps("ddp" * 1000)) + "\n"
        seeds["escapes.json"] = put(base, "name", r'"\u0000\ud800\udfff\u00e9\\"') + "\n"
        seeds["include-in-memory.json"] = json.dumps(dict(base, include="f1.json")) + "\n"
    else:
        seeds["large-nested-arrays.json"] = with_note(base, nested_arrays(DEEP)) + "\n"
        seeds["large-nested-objects.json"] = with_note(base, nested_objects(DEEP, key="")) + "\n"
        seeds["large-nested-root.json"] = nested_arrays(DEEP) + "\n"
        seeds["large-set-nested.json"] = "@set note=" + nested_arrays(DEEP) + "\n" + json.dumps(base) + "\n"
        seeds["large-long-name.json"] = json.dumps(dict(base, name="x" * LONG)) + "\n"
        seeds["large-long-key.json"] = json.dumps(dict(base, **{"k" * LONG: 1})) + "\n"
    return seeds


# --------------------------------------------------------------- includes

def include_input(*docs):
    """f0.json, f1.json, ... as fuzz_config_include takes them: documents separated by lines "----"."""
    texts = [d if isinstance(d, str) else json.dumps(d) for d in docs]
    assert not any(c in t for t in texts for c in "/\\"), "that target skips inputs with '/' or '\\'"
    return "\n----\n".join(texts) + "\n"


def include_seeds(large):
    base = base_run()
    cluster = {"cluster": base["cluster"]}
    rest = {k: v for k, v in base.items() if k != "cluster"}
    seeds = {}
    if not large:
        # Diamonds: files reached through several routes are read once.
        seeds["diamond.json"] = include_input({"include": ["f1.json", "f2.json"], "name": "diamond"},
                                              {"include": "f3.json", "training": base["training"]},
                                              {"include": "f3.json", "strategy": base["strategy"]}, base)
        seeds["diamond-chain.json"] = include_input({"include": ["f1.json", "f1.json", "f2.json"]},
                                                    {"include": ["f2.json", "f2.json"]},
                                                    {"include": ["f3.json", "f3.json"]}, base)
        seeds["diamond-split.json"] = include_input({"include": ["f1.json", "f2.json", "f3.json"]}, cluster,
                                                    dict(rest, include="f1.json"), {"include": ["f1.json", "f2.json"]})
        seeds["include-many-times.json"] = include_input({"include": ["f1.json"] * 200}, base)
        # Cycles: errors naming them.
        seeds["cycle-self.json"] = include_input(dict(base, include="f0.json"))
        seeds["cycle-two.json"] = include_input({"include": "f1.json"}, dict(base, include="f0.json"))
        seeds["cycle-below-diamond.json"] = include_input({"include": ["f1.json", "f2.json"]},
                                                          dict(base, include="f3.json"), {"include": "f3.json"},
                                                          {"include": "f2.json"})
        seeds["cycle-later.json"] = include_input({"include": ["f1.json", "f2.json"]}, cluster,
                                                  dict(rest, include=["f1.json", "f0.json"]))
        # Include values that are no file.
        for i, value in enumerate([5, [1], {}, "", "..", ".", "f9.json", "F1.JSON", "f1.json ", None, True, [[]],
                                   ["f1.json", 2]]):
            seeds[f"bad-include-{i:02d}.json"] = include_input(dict(rest, include=value), cluster)
        # Nesting in an included file, at the limit and past it; numbers in one.
        for depth, what in [(MAX_DEPTH - 1, "at-limit"), (MAX_DEPTH, "over-limit")]:
            seeds[f"nested-included-{what}.json"] = include_input(
                {"include": "f1.json"}, with_note(base, nested_arrays(depth)))
            seeds[f"nested-includer-{what}.json"] = include_input(
                with_note({"include": "f1.json"}, nested_objects(depth)), base)
        for i, token in enumerate(["NaN", "1e400", "-0", "18446744073709551616", "1e-300"]):
            seeds[f"number-included-{i}.json"] = include_input({"include": "f1.json"},
                                                               put(base, "cluster.gpu.hbm_TBps", token))
        seeds["long-include-name.json"] = include_input({"include": "f" * 4096 + ".json"}, base)
    else:
        seeds["large-nested-included.json"] = include_input({"include": "f1.json"}, with_note(base, nested_arrays(DEEP)))
        seeds["large-nested-includer.json"] = include_input(with_note({"include": "f1.json"}, nested_arrays(DEEP)), base)
        seeds["large-include-many-times.json"] = include_input({"include": ["f1.json"] * 20_000}, base)
        seeds["large-long-include-name.json"] = include_input({"include": "f" * LONG}, base)
    return seeds


# ----------------------------------------------------------------- traces

def trace_text(meta="{}", ranks=None, extra=""):
    """A trace as text: `meta` and `ranks` as JSON text."""
    if ranks is None:
        ranks = ('[{"rank": 0, "events": [{"op": "forward", "layer": 0, "start": 0, "duration": 4, '
                 '"memory": 1572864, "batches": [0, 1]}]}]')
    return ('{"format": "dtsim-trace", "version": 1, "time_unit": "step", "memory_unit": "unit", "meta": '
            + meta + extra + ', "ranks": ' + ranks + "}\n")


def event(**fields):
    e = {"op": "forward", "layer": 0, "start": 0, "duration": 1, "memory": 0}
    e.update(fields)
    return e


def trace_seeds(large):
    seeds = {}
    if not large:
        # The 149-byte trace that made render grow to 4.2 GB: an event from 1e308 lasting 1e308.
        seeds["end-overflow.json"] = trace_text(ranks=json.dumps([{"rank": 0, "events": [
            event(start=1e308, duration=1e308)]}]))
        fields = ["start", "duration", "memory", "layer", "bytes", "flops"]
        for i, token in enumerate(NUMBERS + ["-5", "1000000001", "-1"]):
            field = fields[i % len(fields)]
            ev = json.dumps(event(**{field: "@@TOKEN@@"})).replace('"@@TOKEN@@"', token)
            seeds[f"number-{i:02d}-{field}.json"] = trace_text(ranks='[{"rank": 0, "events": [' + ev + "]}]")
        for i, token in enumerate(["18446744073709551615", "-1", "1.5", "9223372036854775808", "1e20"]):
            seeds[f"rank-{i}.json"] = trace_text(ranks='[{"rank": ' + token + ', "events": []}]')
            seeds[f"batch-{i}.json"] = trace_text(ranks='[{"rank": 0, "events": [' + json.dumps(
                event(batches="@@TOKEN@@")).replace('"@@TOKEN@@"', "[" + token + "]") + "]}]")
        seeds["capacity.json"] = trace_text(extra=', "memory_capacity": 1e-300')
        seeds["capacity-huge.json"] = trace_text(extra=', "memory_capacity": 1e308, "time_unit": "s"')
        for depth, what in [(MAX_DEPTH - 1, "at-limit"), (MAX_DEPTH, "over-limit")]:
            # The value of "meta" is the second level: the document is the first.
            seeds[f"nested-meta-arrays-{what}.json"] = trace_text(meta=nested_arrays(depth))
            seeds[f"nested-meta-objects-{what}.json"] = trace_text(meta=nested_objects(depth))
        seeds["nested-ranks.json"] = trace_text(ranks=nested_arrays(MAX_DEPTH + 10))
        seeds["nested-root.json"] = nested_arrays(MAX_DEPTH + 10) + "\n"
        seeds["long-op.json"] = trace_text(ranks=json.dumps([{"rank": 0, "events": [event(op="o" * 4096)]}]))
        seeds["long-meta-key.json"] = trace_text(meta=json.dumps({"k" * 4096: "v" * 4096}))
        seeds["escapes.json"] = trace_text(meta=r'{"x": "\u0000\ud800\udfff\\"}', ranks=json.dumps(
            [{"rank": 0, "events": [event(op="\u00e9\u0000")]}]))
        raw = trace_text(ranks=json.dumps([{"rank": 0, "events": [event(op="@@OP@@")]}])).encode()
        seeds["not-utf8.json"] = raw.replace(b"@@OP@@", b"\xff\xfe\xc0\xaf")
        seeds["streams.json"] = trace_text(ranks=json.dumps([{"rank": 0, "events": [
            event(stream="comm", bytes=1e18, flops=1e30), event(stream="gpu")]}]), extra=', "time_unit": "s"')
    else:
        seeds["large-nested-meta-arrays.json"] = trace_text(meta=nested_arrays(DEEP))
        seeds["large-nested-meta-objects.json"] = trace_text(meta=nested_objects(DEEP, key=""))
        seeds["large-nested-ranks.json"] = trace_text(ranks=nested_arrays(DEEP))
        # Long strings where the trace keeps them as they are: operation names are kept for the
        # life of the process (a table of at most 65535), so the long one is in the meta.
        seeds["large-long-meta.json"] = trace_text(meta=json.dumps({"k" * LONG: "v" * LONG}))
    return seeds


# -------------------------------------------------------------- schedules

def schedule_seeds(large):
    text, csv = "0", "1"  # the selector byte: the text reader, the CSV reader
    seeds = {}
    if not large:
        for i, token in enumerate(["0F99999999999999999999", "99999999999999999999F0", "0F-1", "-1F0", "0FNaN",
                                   "0Finf", "0F1e308", "0F0x10", "0F 0", "0SEND_F18446744073709551616",
                                   "(0F0;0B99999999999999999999)OVERLAP_F_B"]):
            seeds[f"number-{i:02d}.txt"] = f"{text}rank 0: {token} 0B0\n"
            seeds[f"number-{i:02d}.csv"] = f"{csv}{token},0B0\n"
        for i, header in enumerate(["rank 18446744073709551616:", "rank -1:", "rank 2147483648:", "NaN:",
                                    "rank 99999999999999999999999999:"]):
            seeds[f"rank-{i}.txt"] = f"{text}{header} 0F0 0B0\n"
        seeds["brackets.txt"] = f"{text}rank 0: " + nested_arrays(1000, "0F0") + " 0B0\n"
        seeds["parens.txt"] = f"{text}rank 0: " + "(" * 1000 + "0F0;0B0" + ")" * 1000 + "OVERLAP_F_B\n"
        seeds["long-token.txt"] = f"{text}rank 0: 0F" + "1" * 4096 + "\n"
        seeds["long-comment.txt"] = f"{text}# " + "c" * 4096 + "\nrank 0: 0F0 0B0\n"
        seeds["many-ranks.txt"] = text + "".join(f"rank {r}: {r}F0 {r}B0\n" for r in range(300))
        seeds["long-cell.csv"] = csv + "0F0," + "x" * 4096 + "\n"
        seeds["quotes.csv"] = csv + '"0F0","0B0"\r\n"0F1"",""0B1"\n"unterminated\n'
        seeds["not-utf8.txt"] = (text + "rank 0: 0F0 \xff\xfe 0B0\n").encode("latin-1")
    else:
        seeds["large-brackets.txt"] = f"{text}rank 0: " + nested_arrays(DEEP, "0F0") + "\n"
        seeds["large-parens.txt"] = f"{text}rank 0: " + "(" * DEEP + "0F0;0B0" + ")" * DEEP + "OVERLAP_F_B\n"
        seeds["large-long-token.txt"] = f"{text}rank 0: 0F" + "1" * LONG + "\n"
        seeds["large-long-cell.csv"] = csv + "0F0," + "x" * LONG + "\n"
        seeds["large-many-ranks.txt"] = text + "".join(f"{r}: {r}F0\n" for r in range(20_000))
        # Stages far beyond those that run (the checks allow 16 per action): a pass over the actions
        # for each stage without an owner once took minutes.
        seeds["large-many-stages.txt"] = (text + "".join(f"{r}: {r}F0 {r}B0\n" for r in range(20_000))
                                          + "20000: 600000F0 600000B0\n")
    return seeds


# -------------------------------------------------------------- failures

def failures_seeds():
    """fuzz_failures' "KEY VALUE" lines: `dtsim failures`' runs (config I: configs/resilience's I-th run
    config, 0 gpt3-175b-1024xa100, 1 llama3-8b-16xh100-ddp, 2 llama3-8b-16xh100-fsdp) and plans of its own."""
    def lines(**kv):
        return "".join(f"{k} {v}\n" for k, v in kv.items())
    seeds = {
        # As the command's tests run it.
        "fsdp.txt": lines(config=2, steps=2000, mtbf=200, trials=2, timeline=1),
        "ddp.txt": lines(config=1, steps=20000, mtbf=100, trials=2, every=300, timeline=1),
        "gpt3.txt": lines(config=0, steps=1000, mtbf=50, trials=1),
        "fail-at.txt": lines(config=2, steps=2000, fail="1,2.5,3", restart=5, step=1.5),
        # Issue 20's cases: a NaN restart, work out of reach, storage far too slow, huge counts.
        "nan-restart.txt": lines(config=2, fail=1, restart="nan", trials=1, steps=2000),
        "gpt3-mtbf-500.txt": lines(config=0, mtbf=500, trials=1, step=10),
        "fsdp-mtbf-0.1.txt": lines(config=2, mtbf=0.1, trials=10),
        "slow-storage.txt": lines(config=2, mtbf=0.5, set="cluster.storage.write_GBps=0.01"),
        "storage-1e-300.txt": lines(config=2, mtbf=200, set="cluster.storage.write_GBps=1e-300"),
        "steps-1e12.txt": lines(config=2, mtbf=200, steps=1000000000000),
        "trials-max.txt": lines(config=2, mtbf=200, trials=2147483647),
        "timeline-every-1.txt": lines(config=2, mtbf=200, trials=1, steps=2000000, every=1, timeline=1),
        # Plans of its own: numbers out of range, sizes at and past the limits.
        "nodes-max.txt": lines(mtbf=10000000, nodes=1048576, ranks=16, step=1, steps=10, trials=100),
        "nodes-over.txt": lines(mtbf=1000, nodes=1048577, steps=10),
        "mtbf-denormal.txt": lines(mtbf="4.9e-324", steps=100, trials=1),
        "mtbf-inf.txt": lines(mtbf="inf", steps=100),
        "mtbf-negative.txt": lines(mtbf=-1, fail=-0.0),
        "step-huge.txt": lines(mtbf=1000, step="1e308", steps=10),
        "step-tiny.txt": lines(mtbf=1000, step="1e-320", steps=100000, trials=1),
        "write-inf.txt": lines(fail=1, write="inf"),
        "read-nan.txt": lines(fail=1, read="nan"),
        "write-huge.txt": lines(fail="0,1e7", write="1e300", steps=3, every=1, timeline=1),
        "uneven.txt": lines(mtbf=100, uneven=1),
        "gpn-0.txt": lines(mtbf=100, gpn=0, nodes=0),
        "ranks-0.txt": lines(mtbf=100, ranks=0, timeline=1),
        "steps-huge.txt": lines(fail=1, steps=9223372036854775807, every=9223372036854775807),
        "steps-negative.txt": lines(mtbf=100, steps=-5, every=-1, trials=-1),
        "seed-max.txt": lines(mtbf=100, seed=18446744073709551615, trials=3),
        "fail-many.txt": lines(fail=",".join(str(h / 10) for h in range(150)), steps=200, restart=0),
        "restart-week.txt": lines(mtbf=1000, restart=10080, steps=100),
        "restart-over.txt": lines(mtbf=1000, restart=10081),
    }
    return seeds


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--large":
        dest = pathlib.Path(sys.argv[2])
        for corpus, seeds in [("config", config_seeds(True)), ("include", include_seeds(True)),
                              ("trace", trace_seeds(True)), ("schedule", schedule_seeds(True))]:
            for name, data in seeds.items():
                size = len(data if isinstance(data, bytes) else data.encode())
                assert size <= MAX_LEN, f"{corpus}/{name}: {size} bytes, over -max_len"
                write(dest / corpus, name, data)
        return
    if len(sys.argv) != 1:
        sys.exit("usage: make_corpus.py [--large DIR]")

    runs = [(r, r.name) for r in sorted((root / "configs" / "runs").glob("*.json"))]
    runs += [(r, "resilience-" + r.name) for r in sorted((root / "configs" / "resilience").glob("*.json"))]
    for run, name in runs:
        write(out / "config", name, json.dumps(scrub(load(run)), indent=1) + "\n")
        doc = json.loads(run.read_text())
        inc = doc.pop("include", [])
        inc = [inc] if isinstance(inc, str) else inc
        parts = [scrub(load(run.parent / name)) for name in inc[:3]]
        doc["include"] = [f"f{i + 1}.json" for i in range(len(parts))]
        text = "\n----\n".join(json.dumps(scrub(d), indent=1) for d in [doc] + parts)
        write(out / "include", name, text + "\n")
    write(out / "config", "override.json",
          "@set strategy.tp=2,4\n@set strategy.name=megatron\n"
          + json.dumps(scrub(load(root / "configs" / "runs" / "llama3-8b-8xh100-megatron.json"))) + "\n")

    for sched in sorted((root / "configs" / "schedules").iterdir()):
        if sched.suffix in (".txt", ".csv"):
            selector = b"1" if sched.suffix == ".csv" else b"0"
            write(out / "schedule", sched.name, selector + sched.read_bytes())

    for corpus, seeds in [("config", config_seeds(False)), ("include", include_seeds(False)),
                          ("trace", trace_seeds(False)), ("schedule", schedule_seeds(False)),
                          ("failures", failures_seeds())]:
        for name, data in seeds.items():
            write(out / corpus, name, data)


if __name__ == "__main__":
    main()
