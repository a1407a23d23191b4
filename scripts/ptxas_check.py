#!/usr/bin/env python3
"""Static checks of the CUDA kernels (issue 11, part 8): compiles every kernels/cuda/*.cu with the
exact nvcc command of a CUDA build folder (its compile_commands.json: sm_80 and sm_90) plus
`-Xptxas=-v,-warn-spills,-warn-lmem-usage`, and reports, for every kernel and architecture, the
registers, static shared memory, stack frame and spill bytes that ptxas prints.

Fails (exit 1) when any kernel spills registers (non-zero spill stores/loads, or a ptxas spill
warning) or a file does not compile. Local memory that is not a spill (a kernel's small
per-thread arrays: ptxas's -warn-lmem-usage "Local memory used" lines) is listed, not failed.
Prints one summary line per file and architecture and, with --table FILE, writes the per-kernel
table (Markdown) there.

Usage: scripts/ptxas_check.py [BUILD_DIR] [--table FILE] [--jobs N]
BUILD_DIR defaults to build; it must have been configured with CUDA (nvcc found) and
CMAKE_EXPORT_COMPILE_COMMANDS (the project sets it).
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

PTXAS_FLAGS = "-Xptxas=-v,-warn-spills,-warn-lmem-usage"
CCACHE = shutil.which("ccache")
RE_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
RE_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")
RE_WARN = re.compile(r"ptxas warning\s*:\s*(.*)")


def compile_one(entry, tmp):
    """Runs one nvcc command with the ptxas flags; returns (file, rc, stderr text)."""
    args = shlex.split(entry["command"])
    if "-o" in args:
        i = args.index("-o")
        args[i + 1] = os.path.join(tmp, os.path.basename(entry["file"]) + ".o")
    args.insert(1, PTXAS_FLAGS)
    # Through the compiler cache when there is one: it keeps ptxas's report (stderr) with the
    # object, so an unchanged kernel file is not compiled again on the next run.
    if CCACHE:
        args.insert(0, CCACHE)
    p = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], p.returncode, p.stdout + p.stderr


def parse(text):
    """Kernels [(mangled, arch, regs, smem, stack, spill_st, spill_ld)] and ptxas warnings."""
    kernels, warnings = [], []
    cur = None
    for line in text.splitlines():
        m = RE_ENTRY.search(line)
        if m:
            cur = {"name": m.group(1), "arch": m.group(2), "regs": 0, "smem": 0, "stack": 0, "st": 0, "ld": 0}
            kernels.append(cur)
            continue
        m = RE_WARN.search(line)
        if m:
            warnings.append(m.group(1).strip())
            continue
        if cur is None:
            continue
        m = RE_FRAME.search(line)
        if m:
            cur["stack"], cur["st"], cur["ld"] = int(m.group(1)), int(m.group(2)), int(m.group(3))
            continue
        m = RE_USED.search(line)
        if m:
            cur["regs"] = int(m.group(1))
            cur["smem"] = int(m.group(2) or 0)
    return kernels, warnings


def demangle(names):
    try:
        p = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        out = p.stdout.splitlines()
        if len(out) == len(names):
            return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        pass
    return {n: n for n in names}


def short(name, width=110):
    name = name.replace("kernels::cuda::", "").replace("(anonymous namespace)::", "")
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", nargs="?", default="build")
    ap.add_argument("--table", help="write the per-kernel Markdown table here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    cc = os.path.join(a.build_dir, "compile_commands.json")
    if not os.path.exists(cc):
        print(f"ptxas_check: {cc} not found (configure a CUDA build first)", file=sys.stderr)
        return 2
    with open(cc) as f:
        entries = [e for e in json.load(f) if e["file"].endswith(".cu") and "/kernels/cuda/" in e["file"]
                   and "nvcc" in e.get("command", "")]
    if not entries:
        print(f"ptxas_check: no nvcc-compiled kernels/cuda/*.cu in {cc} (not a CUDA build?)", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for r in ex.map(lambda e: compile_one(e, tmp), entries):
            results.append(r)
    failed = False
    rows = []
    all_names = set()
    per_file = []
    lmem_rows = []
    for path, rc, text in sorted(results):
        rel = os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if rc != 0:
            print(f"ptxas_check: {rel}: nvcc failed (rc {rc}):\n{text[-3000:]}")
            failed = True
            continue
        kernels, warnings = parse(text)
        spill = [w for w in warnings if "spill" in w.lower()]
        for w in spill:
            print(f"ptxas_check: SPILL WARNING {rel}: {w}")
        lmem = sorted({w for w in warnings if "local memory" in w.lower() and w not in spill})
        for w in lmem:
            m = re.search(r"function '([^']+)', size of stack frame: (\d+) bytes", w)
            if m:
                all_names.add(m.group(1))
                lmem_rows.append((rel, m.group(1), int(m.group(2))))
        for k in kernels:
            all_names.add(k["name"])
            if k["st"] or k["ld"]:
                failed = True
            rows.append((rel, k))
        if spill:
            failed = True
        per_file.append((rel, kernels))
    names = demangle(sorted(all_names))
    for rel, kernels in per_file:
        for arch in sorted({k["arch"] for k in kernels}):
            ks = [k for k in kernels if k["arch"] == arch]
            top = max(ks, key=lambda k: k["regs"])
            spills = sum(k["st"] + k["ld"] for k in ks)
            print(f"{rel} {arch}: {len(ks)} kernels, max {top['regs']} registers ({short(names[top['name']], 60)}), "
                  f"max smem {max(k['smem'] for k in ks)} B, max stack {max(k['stack'] for k in ks)} B, "
                  f"spill bytes {spills}")
    for rel, name, frame in sorted(set(lmem_rows)):
        print(f"ptxas_check: local memory (per-thread arrays, not spills) {rel}: {short(names[name], 80)}: "
              f"{frame} B stack frame")
    for rel, k in rows:
        if k["st"] or k["ld"]:
            print(f"ptxas_check: SPILL {rel} {k['arch']} {short(names[k['name']])}: "
                  f"{k['st']} B stores, {k['ld']} B loads")
    if a.table:
        with open(a.table, "w") as f:
            f.write("| file | arch | kernel | registers | smem B | stack B | spill st/ld B |\n")
            f.write("| --- | --- | --- | ---: | ---: | ---: | ---: |\n")
            for rel, k in rows:
                f.write(f"| {os.path.basename(rel)} | {k['arch']} | `{short(names[k['name']])}` | {k['regs']} | "
                        f"{k['smem']} | {k['stack']} | {k['st']}/{k['ld']} |\n")
    n = len(rows)
    print(f"ptxas_check: {n} kernel builds over {len(per_file)} files: "
          + ("FAILED (spills or compile errors above)" if failed else "no spills"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
