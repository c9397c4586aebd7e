#!/usr/bin/env bash
# dtsim plan split into shards gives what one process gives (docs/planning.md): for N = 1, 2, 3
# and 7 shards, `--shard I/N --out FILE` for each I, then `--merge` of the files (in reverse
# order), byte for byte the one process's output, as text and as JSON (less host times), with
# the one process's exit status (DTSIM_PLAN_SHARD_COUNTS, if set, gives other counts than 1 2 3 7).
# Usage: plan_shards.sh DTSIM CONFIG WORKDIR [plan options...]
set -euo pipefail
dtsim=$1 config=$2 work=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
"$dtsim" plan "$config" "$@" --no-timings >"$work/one.txt" && rc=0 || rc=$?
"$dtsim" plan "$config" "$@" --no-timings --json >"$work/one.json" || true
for n in ${DTSIM_PLAN_SHARD_COUNTS:-1 2 3 7}; do
  files=()
  for ((i = n - 1; i >= 0; i--)); do
    "$dtsim" plan "$config" "$@" -j 1 --shard "$i/$n" --out "$work/s$n-$i.json" >/dev/null
    files+=("$work/s$n-$i.json")
  done
  "$dtsim" plan "$config" "$@" --no-timings --merge "${files[@]}" >"$work/merged$n.txt" && mrc=0 || mrc=$?
  "$dtsim" plan "$config" "$@" --no-timings --json --merge "${files[@]}" >"$work/merged$n.json" || true
  if [[ $mrc != "$rc" ]]; then echo "$n shards: exit status $mrc, one process $rc" >&2; exit 1; fi
  cmp "$work/one.txt" "$work/merged$n.txt" || { diff "$work/one.txt" "$work/merged$n.txt" >&2; exit 1; }
  cmp "$work/one.json" "$work/merged$n.json" || { diff "$work/one.json" "$work/merged$n.json" >&2; exit 1; }
  echo "$n shards: the same $(wc -c <"$work/one.txt") bytes of text and $(wc -c <"$work/one.json") of JSON, exit status $rc"
done
grep -q "simulated" "$work/one.txt"
# Where a layout fits, each ranked row carries its GPU count.
if [[ $rc == 0 ]] && ! grep -q '"gpus": [0-9]' "$work/one.json"; then echo "no gpus field in the rows" >&2; exit 1; fi
# The shards of another search (here another --top) are refused, naming the file (exit 2).
"$dtsim" plan "$config" "$@" --top 2 --merge "$work"/s3-*.json >"$work/other.txt" 2>&1 && orc=0 || orc=$?
if [[ $orc != 2 ]] || ! grep -q 's3-0.json: \$.fingerprint: .* is another search' "$work/other.txt"; then
  echo "a merge of another search's shards: exit status $orc, output:" >&2
  cat "$work/other.txt" >&2
  exit 1
fi
