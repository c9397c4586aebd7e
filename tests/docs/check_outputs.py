#!/usr/bin/env python3
"""Are the outputs the docs show what dtsim prints now?

Every code block line of the README and docs/*.md that starts with `$ dtsim ...` or
`$ build/dtsim ...` (after any indentation; a trailing backslash continues it) is run with the
given binary, from a scratch folder holding copies of the repository's configs/, calibration/ and
examples/ (so nothing a command writes lands in the repository), and the lines the docs show after
it, up to the next `$ ` line or the end of the block, must be lines of what it printed (stdout,
then stderr), in the same order; lines may be left out between them (`...` marks where the docs
say so). Host timings are masked on both sides: "events in X s", "searched in ...",
"X configs/s", "wall_s". A command whose file arguments do not exist there (files the docs make in
an earlier step, such as a hand-written schedule) is skipped and listed; one that runs past
--timeout seconds counts as stale. Exit statuses are not checked: the docs do not show them.

With --update, a stale block that shows the whole output (no `...`, at least 80 % as many lines as
are printed now, and a first line like the first printed) is replaced by what is printed now; in
any other, each shown line that is no longer printed is replaced by the printed line most like it
(difflib's ratio at least 0.6) after the one the previous shown line matched, and lines with no
such match are left and reported. Read the diff
before committing it: the prose around a block may quote its figures.

    check_outputs.py --dtsim build/dtsim [--root .] [--update] [FILE.md ...]

Exit status 0 when every block matches, 1 when some do not (each is named, with the doc's lines
that were not printed), 2 for bad arguments.
"""

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

COMMAND = re.compile(r"^(\s*)\$ (?:build/)?dtsim (.*)$")
MASKS = [
    (re.compile(r"events in [0-9.]+ s"), "events in X s"),
    (re.compile(r"searched in .*"), "searched in X"),
    (re.compile(r"[0-9.]+(e[+-]?[0-9]+)? configs/s"), "X configs/s"),
    (re.compile(r'"(wall_s|configs_per_s)": [0-9.e+-]+'), r'"\1": X'),
]


def mask(line):
    for pattern, repl in MASKS:
        line = pattern.sub(repl, line)
    return line.rstrip()


def blocks(text):
    """(line number, indentation, command, the lines shown after it) of each command in code blocks."""
    lines = text.split("\n")
    in_code = False
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith("```"):
            in_code = not in_code
            i += 1
            continue
        m = COMMAND.match(lines[i]) if in_code else None
        if not m:
            i += 1
            continue
        start, indent, command = i, m.group(1), m.group(2)
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        shown, where = [], []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```") and not re.match(r"^\s*\$ ", lines[i]):
            shown.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            where.append(i)
            i += 1
        yield start + 1, command, shown, where, indent


def in_order(shown, printed):
    """The shown lines (masked) that are not found in `printed` in order, each after the last found."""
    absent, at = [], 0
    for s in shown:
        if not s.strip() or s.strip() == "...":
            continue
        try:
            at = printed.index(mask(s), at) + 1
        except ValueError:
            absent.append(s)
    return absent


def updated(shown, printed, raw):
    """The shown lines with each one no longer printed replaced by the most similar printed line
    after the previous match (None where none is similar enough)."""
    out, at = [], 0
    for s in shown:
        if not s.strip() or s.strip() == "...":
            out.append(s)
            continue
        try:
            at = printed.index(mask(s), at) + 1
            out.append(s)
            continue
        except ValueError:
            pass
        best, best_ratio = None, 0.6
        for k in range(at, len(printed)):
            r = difflib.SequenceMatcher(None, mask(s), printed[k]).ratio()
            if r > best_ratio:
                best, best_ratio = k, r
        if best is None:
            out.append(None)
        else:
            out.append(raw[best].rstrip())
            at = best + 1
    return out


def missing_inputs(command, root):
    """The file arguments (not an option's output file) that do not exist under root."""
    words = shlex.split(command.replace("{", "").replace("}", ""))
    out = []
    for k, w in enumerate(words):
        if w.startswith("-") or not re.search(r"\.(json|txt|csv)$", w):
            continue
        if k > 0 and words[k - 1] in ("--trace", "--svg", "--png", "--pdf", "--csv", "--out", "--chrome-trace", "--write", "-o"):
            continue
        if "," in w or "=" in w:
            continue
        if not os.path.exists(os.path.join(root, w)):
            out.append(w)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtsim", required=True, help="the dtsim binary")
    ap.add_argument("--root", default=".", help="the repository (default: .)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a command may run (default: 120)")
    ap.add_argument("--update", action="store_true", help="replace the lines no longer printed by the nearest printed ones")
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/*.md)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    dtsim = os.path.abspath(args.dtsim)
    if not os.access(dtsim, os.X_OK):
        print(f"check_outputs: {args.dtsim}: not an executable", file=sys.stderr)
        return 2
    files = args.files or [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    stale, skipped, checked = [], [], 0
    with tempfile.TemporaryDirectory(prefix="dtsim-docs-") as scratch:
        for name in ("configs", "calibration", "examples"):
            if os.path.isdir(os.path.join(root, name)):
                shutil.copytree(os.path.join(root, name), os.path.join(scratch, name), symlinks=True)
        for path in files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            rel = os.path.relpath(path, root)
            edits = {}
            for line, command, shown, where, indent in blocks(text):
                absent = missing_inputs(command, scratch)
                if absent:
                    skipped.append(f"{rel}:{line}: dtsim {command[:80]} (no {', '.join(absent)} here)")
                    continue
                checked += 1
                try:
                    run = subprocess.run(f"{shlex.quote(dtsim)} {command}", shell=True, executable="/bin/bash",
                                         cwd=scratch, capture_output=True, text=True, timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    stale.append((rel, line, command, [f"(ran past {args.timeout:g} s)"]))
                    continue
                raw = (run.stdout + "\n" + run.stderr).split("\n")
                printed = [mask(x) for x in raw]
                absent_lines = in_order(shown, printed)
                if absent_lines and args.update and where:
                    body = [x.rstrip() for x in raw]
                    while body and not body[-1]:
                        body.pop()
                    # The block's shown lines, without the blank ones that end it.
                    last = len(shown)
                    while last > 0 and not shown[last - 1].strip():
                        last -= 1
                    # A whole block only where the command printed something that begins as the block
                    # did: a command that now fails or prints nothing is reported, not written in.
                    first_shown = next((x for x in shown if x.strip()), "")
                    first_printed = next((x for x in printed if x.strip()), "")
                    whole = (bool(body) and all(x.strip() != "..." for x in shown) and len(shown) >= 0.8 * len(body)
                             and difflib.SequenceMatcher(None, mask(first_shown), first_printed).ratio() >= 0.6)
                    if whole:
                        new, absent_lines = body, []
                    else:
                        matched = updated(shown[:last], printed, raw)
                        new = [x if x is not None else s for s, x in zip(shown[:last], matched)]
                        absent_lines = [s for s, x in zip(shown[:last], matched) if x is None]
                    if last > 0:
                        edits[where[0]] = (where[last - 1], [indent + x if x.strip() else x for x in new])
                if absent_lines:
                    stale.append((rel, line, command, absent_lines))
            if edits:
                lines = text.split("\n")
                for first in sorted(edits, reverse=True):
                    end, new_lines = edits[first]
                    lines[first:end + 1] = new_lines
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines))
    for rel, line, command, absent_lines in stale:
        print(f"{rel}:{line}: dtsim {command}")
        for s in absent_lines[:6]:
            print(f"    not printed now: {s[:160]}")
        if len(absent_lines) > 6:
            print(f"    ... and {len(absent_lines) - 6} more")
    for s in skipped:
        print(f"skipped {s}")
    print(f"check_outputs: {checked} commands run, {len(stale)} with lines the docs show that dtsim no longer prints, "
          f"{len(skipped)} skipped")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
