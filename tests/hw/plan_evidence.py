"""dtsim plan --evidence: each printed layout's published runs, and the order once corrected.

Runs one search twice, as JSON and as text, and checks what the text says against the JSON:
each row's step had it erred as its runs did is its simulated step x (1 + their min, median and
max errors), in the JSON and in the text's figures (to their printed digits); the median is the
median of the rows' errors; a layout judged on the runs of an earlier one says so; and the order
line follows the corrected step times (the search ranks by step time, the default).

    plan_evidence.py DTSIM ARGS...   (ARGS: a plan search with --no-timings)
"""
import json
import re
import statistics
import subprocess
import sys


def main():
    dtsim, args = sys.argv[1], sys.argv[2:]
    run = lambda *extra: subprocess.run([dtsim, *args, "--evidence", *extra], capture_output=True, text=True,
                                        check=True).stdout
    top = json.loads(run("--json"))["top"]
    text = run()
    assert len(top) >= 2, "the search should print two layouts or more"
    lines = {int(m.group(1)): m.group(2) for m in re.finditer(r"^  #(\d+) +(.*)$", text, re.M)}
    assert sorted(lines) == list(range(1, len(top) + 1)), lines
    corrected, kinds = [], set()
    for i, row in enumerate(top):
        e, step = row["evidence"], row["report"]["step_time_s"]
        errors = [r["error"] for r in e["rows"]]
        assert errors, f"#{i + 1}: no published runs"
        kinds.add(tuple((r["set"], r["row"]) for r in e["rows"]))
        assert abs(e["median_error"] - statistics.median(errors)) < 1e-12
        assert (e["min_error"], e["max_error"]) == (min(errors), max(errors))
        erred = row["step_time_if_erred_s"]
        for key, err in (("min", e["min_error"]), ("median", e["median_error"]), ("max", e["max_error"])):
            assert abs(erred[key] - step * (1 + err)) <= 1e-12 * step, (i, key)
        # The text: the same three steps, to the digits it prints, and whose runs it names.
        figure = r"([0-9.]+) (m?s)"
        m = re.search(rf"median [0-9.]+ % (?:fast|slow): step {figure} to {figure} \(median {figure}\)$", lines[i + 1])
        assert m, lines[i + 1]
        for (value, unit), key in zip(((m[1], m[2]), (m[3], m[4]), (m[5], m[6])), ("min", "max", "median")):
            scale = 1e-3 if unit == "ms" else 1.0
            digits = len(value.split(".")[1]) if "." in value else 0
            assert abs(float(value) * scale - erred[key]) <= 0.51 * 10 ** -digits * scale, (i, key, value, erred[key])
        def described(x):
            return x["traits"], x["relaxed"], [(r["set"], r["row"]) for r in x["rows"]]
        same = [j for j in range(i) if described(top[j]["evidence"]) == described(e)]
        if same:
            assert lines[i + 1].startswith(f"the runs of #{same[0] + 1}:"), lines[i + 1]
        else:
            assert lines[i + 1].startswith(f"{len(errors)} run"), lines[i + 1]
        corrected.append(step * (1 + e["median_error"]))
    assert len(kinds) >= 2, "the search should print layouts judged on different runs"
    order = sorted(range(len(top)), key=lambda i: corrected[i])
    if order == list(range(len(top))):
        assert "each layout keeps its place" in text
    else:
        want = ", ".join(f"#{i + 1}" for i in order)
        assert f"the order would be {want}:" in text, (want, text)
    print(f"{len(top)} layouts, {len(kinds)} kinds of evidence: as the JSON says")


if __name__ == "__main__":
    main()
