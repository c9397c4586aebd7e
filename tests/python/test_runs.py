"""dtsim.run, dtsim.compare and dtsim.plan: the reports `dtsim run --json`, `dtsim compare --json`
and `dtsim plan --json` print, as dicts, with the timeline and the charts for Jupyter."""

import json
import pathlib
import subprocess

import pytest

import dtsim
from dtsim.runs import executable

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs" / "runs"
DDP = CONFIGS / "llama3-8b-16xh100-ddp.json"
FSDP = CONFIGS / "llama3-8b-16xh100-fsdp.json"


def cli_json(*args):
    out = subprocess.run([executable(), *args, "--json"], capture_output=True, text=True).stdout  # 3: out of memory, still a report
    return json.loads(out)


def without_wall_time(report):
    # Less the host's time and how many ranks ran (one rank for its twins without a trace): the same report.
    return {k: v for k, v in report.items() if k not in ("wall_s", "simulated_ranks")}


def test_run_gives_the_report_run_json_prints_and_its_timeline():
    report = dtsim.run(DDP)
    assert without_wall_time(report) == without_wall_time(cli_json("run", str(DDP)))
    assert report["gpus"] == 16 and report["step_time_s"] > 0
    assert "<svg" in report._repr_svg_()


def test_run_takes_set_overrides_and_sweeps():
    one = dtsim.run(DDP, set="training.micro_batch=2", timeline=False)
    assert one["micro_batch"] == 2 and one.svg is None
    rows = dtsim.run(DDP, set=["training.micro_batch=1,2"])
    assert [row["set"] for row in rows] == [{"training.micro_batch": "1"}, {"training.micro_batch": "2"}]
    assert without_wall_time(rows[1]["report"]) == without_wall_time(one)


def test_run_takes_a_config_as_a_dict_with_includes_from_the_current_directory(monkeypatch):
    monkeypatch.chdir(CONFIGS)
    doc = json.loads(DDP.read_text())
    assert without_wall_time(dtsim.run(doc, timeline=False)) == without_wall_time(cli_json("run", str(DDP)))


def test_compare_gives_one_report_per_config_and_the_chart():
    reports = dtsim.compare([DDP, FSDP])
    cli = cli_json("compare", str(DDP), str(FSDP))
    assert [without_wall_time(r) for r in reports] == [without_wall_time(r) for r in cli]
    assert "<svg" in reports._repr_svg_()


def test_a_bad_config_raises_with_the_commands_message_and_status():
    with pytest.raises(dtsim.DtsimError, match="no-such-config.json") as e:
        dtsim.run("no-such-config.json")
    assert e.value.status == 2
    with pytest.raises(dtsim.DtsimError, match="nosuch"):
        dtsim.run(DDP, set="training.nosuch=1")


MEGATRON = CONFIGS / "llama3-8b-8xh100-megatron.json"


def without_host_times(plan):
    out = {k: v for k, v in plan.items() if k not in ("wall_s", "configs_per_s")}
    out["top"] = [{**row, "report": without_wall_time(row["report"])} for row in plan["top"]]
    return out


def test_plan_gives_what_plan_json_prints_and_the_pareto_chart():
    space = {"strategy": ["megatron", "fsdp"], "tp": [2], "recompute": ["none", "full"], "micro_batch": [1, 2]}
    result = dtsim.plan(MEGATRON, space=space, top=3, jobs=1)
    cli = cli_json("plan", str(MEGATRON), "--space", "strategy=megatron,fsdp", "--space", "tp=2", "--space",
                   "recompute=none,full", "--space", "micro_batch=1,2", "--top", "3", "-j", "1")
    assert without_host_times(result) == without_host_times(cli)
    assert len(result["top"]) == 3 and result["top"][0]["report"]["step_time_s"] > 0
    assert "<svg" in result._repr_svg_()
    # The same space as strings.
    again = dtsim.plan(MEGATRON, space=["strategy=megatron,fsdp", "tp=2", "recompute=none,full", "micro_batch=1,2"],
                       top=3, chart=False)
    assert without_host_times(again) == without_host_times(result) and again.svg is None


def test_plan_with_a_headroom_is_plan_headroom():
    space = ["strategy=megatron,fsdp", "tp=2", "recompute=none,full", "micro_batch=1,2"]
    result = dtsim.plan(MEGATRON, space=space, top=3, jobs=1, headroom=10, chart=False)
    cli = cli_json("plan", str(MEGATRON), *[w for s in space for w in ("--space", s)], "--top", "3", "-j", "1",
                   "--headroom", "10")
    assert without_host_times(result) == without_host_times(cli)
    assert result["headroom_bytes"] == 10 * 2**30
    for row in result["top"]:
        assert row["report"]["memory"]["peak"]["bytes"] <= 70 * 2**30


def test_run_and_plan_with_evidence_are_their_evidence_options():
    space = ["strategy=megatron,fsdp", "tp=2", "recompute=none,full", "micro_batch=1,2"]
    result = dtsim.plan(MEGATRON, space=space, top=3, jobs=1, evidence=True, chart=False)
    cli = cli_json("plan", str(MEGATRON), *[w for s in space for w in ("--space", s)], "--top", "3", "-j", "1",
                   "--evidence")
    assert without_host_times(result) == without_host_times(cli)
    for row in result["top"]:
        e, step = row["evidence"], row["report"]["step_time_s"]
        assert e["rows"] and row["step_time_if_erred_s"]["median"] == pytest.approx(step * (1 + e["median_error"]))
    report = dtsim.run(FSDP, timeline=False, evidence=True)
    assert without_wall_time(report) == without_wall_time(cli_json("run", str(FSDP), "--evidence"))
    assert report["evidence"]["rows"]


def test_rows_flatten_each_report_for_a_table():
    # compare: one row per config, the layout's fields and the figures at the top level.
    reports = dtsim.compare([CONFIGS / "llama3-8b-16xh100-ddp.json", CONFIGS / "llama3-8b-16xh100-fsdp.json"],
                            chart=False)
    rows = reports.rows()
    assert [r["name"] for r in rows] == [r["name"] for r in reports]
    for row, report in zip(rows, reports):
        assert row["dp"] == report["layout"]["dp"] and row["zero_stage"] == report["layout"]["zero_stage"]
        assert row["step_time_s"] == report["step_time_s"] and row["tokens_per_s"] == report["tokens_per_s"]
        assert row["compute_s"] == report["time_split_s"]["compute"]
        assert row["peak_bytes"] == report["memory"]["peak"]["bytes"]
        assert row["fits"] == (report["memory"]["oom"] is None)
        assert all(not isinstance(v, (dict, list)) for v in row.values())
    assert [r["fits"] for r in rows] == [False, True]  # ddp keeps 18 bytes a parameter on each GPU
    # A single run's row, from its own report.
    single = dtsim.run(DDP, timeline=False)
    row = single.row()
    assert row["dp"] == single["layout"]["dp"] == 16 and row["step_time_s"] == single["step_time_s"]
    assert row["name"] == rows[0]["name"] and row["tokens_per_s"] == rows[0]["tokens_per_s"]
    # A sweep: each row's settings, then its figures; a failed run gives its settings and error.
    sweep = dtsim.run(DDP, set=["training.micro_batch=1,2"], jobs=1).rows()
    assert [r["training.micro_batch"] for r in sweep] == ["1", "2"] and [r["micro_batch"] for r in sweep] == [1, 2]
    bad = dtsim.run(DDP, set=["training.micro_batch=1,2", "strategy.zero_stage=5"]).rows()
    assert all("expected 0, 1, 2 or 3" in r["error"] and r["strategy.zero_stage"] == "5" for r in bad)
    # A plan: each top layout's rank and settings, then its figures.
    plan = dtsim.plan(MEGATRON, space=["strategy=megatron,fsdp", "tp=2", "micro_batch=1,2"], top=2, chart=False)
    prow = plan.rows()
    assert [r["rank"] for r in prow] == [1, 2]
    assert [r["step_time_s"] for r in prow] == [t["report"]["step_time_s"] for t in plan["top"]]
    assert all(r["strategy.tp"] == 2 == r["tp"] for r in prow)


def test_plan_where_nothing_fits_and_a_bad_knob():
    none = dtsim.plan(MEGATRON, space={"strategy": "megatron"}, set="cluster.gpu.hbm_GiB=4", chart=False)
    assert none["top"] == [] and none["counts"]["candidates"] == 0
    with pytest.raises(dtsim.DtsimError, match="unknown knob") as e:
        dtsim.plan(MEGATRON, space=["tpp=1"])
    assert e.value.status == 2


def test_plan_searches_a_schedule_file_beside_its_generated_schedule():
    # The shipped ZB-H1 file is the generator's output: each of its layouts runs as the generated one does.
    config = MEGATRON.parent / "llama3-70b-32xh100-schedule-file.json"
    zbh1 = MEGATRON.parent.parent / "schedules" / "zbh1_p4_m8.txt"
    result = dtsim.plan(config, space={"strategy": "zbh1", "pp": 4, "tp": 8, "schedule_file": [str(zbh1)]}, top=40,
                        chart=False)
    rows = {r["layout"]: r for r in result["top"]}
    files = [label for label in rows if label.startswith(f"schedule {zbh1} ")]
    assert files and all(rows[label]["set"]["strategy.schedule_file"] == str(zbh1) for label in files)
    for label in files:
        twin = rows["zbh1 " + label[len(f"schedule {zbh1} "):]]
        assert rows[label]["report"]["step_time_s"] == twin["report"]["step_time_s"]
    with pytest.raises(dtsim.DtsimError, match="name the schedule files") as e:
        dtsim.plan(config, space={"strategy": "schedule"})
    assert e.value.status == 2


def test_plan_csv_has_the_json_rows_figures_and_settings(tmp_path):
    # Every fitting layout simulated, fastest first: the JSON's top rows, figure for figure, with a column per
    # setting the search made (its `set`), empty where a layout leaves one out.
    import csv
    path = tmp_path / "plan.csv"
    args = ["plan", str(MEGATRON), "--space", "strategy=megatron,1f1b,fsdp", "--space", "tp=2,4", "--space",
            "recompute=none,full", "--top", "4", "-j", "1", "--csv", str(path)]
    result = cli_json(*args)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= len(result["top"]) == 4
    settings = [c for c in rows[0].keys() if "." in c]
    assert "strategy.tp" in settings and "strategy.name" in settings
    for row, top in zip(rows, result["top"]):
        assert int(row["rank"]) == top["rank"] and row["layout"] == top["layout"]
        assert float(row["step_time_s"]) == pytest.approx(top["report"]["step_time_s"], rel=1e-12)
        assert float(row["peak_bytes"]) == pytest.approx(top["report"]["memory"]["peak"]["bytes"], rel=1e-12)
        for s in settings:
            want = top["set"].get(s)
            assert row[s] == ("" if want is None else want if isinstance(want, str) else json.dumps(want))
        assert int(row["strategy.tp"]) == top["report"]["layout"]["tp"]


SCHEDULES = pathlib.Path(__file__).resolve().parents[2] / "configs" / "schedules"


def test_schedule_gives_what_schedule_json_prints_beside_the_built_in_ones():
    report = dtsim.schedule(generate="zbh1", stages=4, microbatches=8, against="all")
    cli = cli_json("schedule", "--generate", "zbh1", "--stages", "4", "--microbatches", "8", "--against", "all")
    assert dict(report) == cli
    assert "<svg" in report._repr_svg_()
    # ZB-H1's own figures against Qi et al.'s formulas, and the others at ZB-H1's work per rank (by hand, in
    # steps: 1F1B and GPipe (m + p - 1)(T_F + T_B) = 33, interleaved and BFS 24 + 9 / 2, DualPipeV 27).
    assert report["makespan"] == 27 and report["generator"] == "zbh1"
    assert all(report["formulas"]["exact"].values())
    assert [(a["generator"], a["makespan"]) for a in report["against"]] == [
        ("gpipe", 33), ("1f1b", 33), ("interleaved", 28.5), ("zbh1", 27), ("bfs", 28.5), ("dualpipev", 27)]
    # Costs by name; a list of generators; a generator that does not take the sizes says why.
    small = dtsim.schedule(generate="1f1b", stages=2, microbatches=2, against=["1f1b", "dualpipev"],
                           costs={"forward": 2, "backward": 4}, timeline=False)
    assert small["makespan"] == 18 and small.svg is None  # (m + p - 1)(T_F + T_B)
    assert small["against"][0]["makespan"] == 18 and "needs at least 2p microbatches" in small["against"][1]["error"]


def test_schedule_of_a_file_without_a_formula_and_one_that_deadlocks(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("rank 0: 0F0 0F1 0B1 0B0\nrank 1: 1F0 1B0 1F1 1B1\n")
    report = dtsim.schedule(mine, timeline=False)
    assert report["generator"] is None and report["formulas"] is None and report["makespan"] == 11
    assert [r["peak_in_flight"] for r in report["per_rank"]] == [2, 1]
    with pytest.raises(dtsim.DtsimError, match="wait cycle: rank 0 -> rank 1 -> rank 0") as e:
        dtsim.schedule(SCHEDULES / "deadlock_p2_m2.txt")
    assert e.value.status == 1
    with pytest.raises(dtsim.DtsimError, match="unknown cost 'fwd'") as e:
        dtsim.schedule(generate="1f1b", stages=2, microbatches=2, costs={"fwd": 1})
    assert e.value.status == 2
