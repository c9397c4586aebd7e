#!/usr/bin/env bash
# dtsim plan over Slurm (docs/planning.md): `--slurm DIR --shards 3` writes the job array and the
# merge job, `submit.sh --wait` submits them to the cluster `sinfo` reaches, and the merged
# answer (DIR/plan.out) is byte for byte the one process's (JSON, less host times).
# Usage: plan_slurm.sh DTSIM CONFIG WORKDIR [plan options...]. Without a Slurm cluster it exits
# 77 (skipped), unless DTSIM_REQUIRE_SLURM=1 (.ci/run, after .ci/slurm-up): then it fails.
set -euo pipefail
dtsim=$1 config=$2 work=$3
shift 3
if ! command -v sbatch >/dev/null || ! sinfo -h >/dev/null 2>&1; then
  if [[ ${DTSIM_REQUIRE_SLURM:-0} == 1 ]]; then echo "no Slurm cluster answers (sinfo)" >&2; exit 1; fi
  echo "skipped: no Slurm cluster (start one with .ci/slurm-up)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$dtsim" plan "$config" "$@" --no-timings --json >"$work/one.json"
"$dtsim" plan "$config" "$@" --no-timings --json -j 1 --slurm "$work/slurm" --shards 3 --slurm-arg=--time=10
timeout 300 sh "$work/slurm/submit.sh" --wait
if [[ ! -s $work/slurm/plan.out ]]; then
  echo "the merge wrote no answer; its log and the shards' logs:" >&2
  cat "$work/slurm/"*.log >&2 || true
  exit 1
fi
cmp "$work/one.json" "$work/slurm/plan.out" || { diff "$work/one.json" "$work/slurm/plan.out" >&2; exit 1; }
echo "Slurm: 3 array tasks and the merge give the one process's $(wc -c <"$work/one.json") bytes"
