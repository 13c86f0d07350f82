"""report.py — the throughput table of the GPU check (test/gpu/run.sh, step f): reads the
BENCH and INFO lines that build/bench_gpu (tools/bench_gpu.c) and tools/bench_torch_gpu.py print
(collected in one log) and writes a Markdown table, img/s of dsgd-run against PyTorch per
(batch, precision) with the ratio, to stdout. Standard library only. Layouts: dsgd-run runs NCHW
in every precision; PyTorch's bf16 rows come in NCHW (the like-for-like row, layout=nchw) and
channels_last (a row of its own, "bf16, PyTorch channels_last", against the same dsgd-run number).
dsgd-run's switch rows (variant=NAME, bench_gpu --variants) come under their (batch, precision),
against PyTorch's faster row there, with their gain over dsgd-run's base row.
A line without layout= is NCHW, except PyTorch bf16 lines of earlier versions (channels_last).
A row that the benchmark's --budget left out (status=notrun) shows "NOT RUN (budget)"; a row
announced by a PLAN line with no BENCH line after it (the program was cut from outside, by the
step's time limit or a signal) shows "NOT RUN (cut)". Both are counted under the table.

    python3 test/gpu/report.py bench.log
"""
import re
import sys


def parse(path):
    rows, info, order = {}, {}, []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("INFO "):
                kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
                info.setdefault(kv.get("impl", "?"), {}).update({k: v.replace("_", " ") for k, v in kv.items()})  # merged: a budget line too
            elif line.startswith("BENCH ") or line.startswith("PLAN "):
                kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
                if line.startswith("PLAN "):
                    kv["status"] = "cut"  # until its BENCH line says otherwise
                prec, impl = kv.get("precision", "?"), kv.get("impl", "?")
                layout = kv.get("layout") or ("channels_last" if impl == "torch" and prec == "bf16" else "nchw")
                key = (prec, int(kv.get("batch", "0")))
                if key not in order:
                    order.append(key)
                name = impl if layout == "nchw" else f"{impl}:{layout}"
                if kv.get("variant", "base") != "base":  # a switch of the step (bench_gpu --variants)
                    name = f"{impl}@{kv['variant']}"
                if line.startswith("PLAN ") and name in rows.get(key, {}):
                    continue  # a PLAN line never replaces a result
                rows.setdefault(key, {})[name] = kv
                shape = (kv.get("width"), kv.get("stem"), kv.get("input"), kv.get("classes"))
                info.setdefault("_shape", shape)
    return rows, info, order


# bench_gpu --variants (docs/gpu.md, "Switches"); the base rows run every switch's default.
VARIANT_NOTE = {
    "det": "DSGD_CUDNN_DETERMINISTIC=1",
    "sync1": "DSGD_GPU_SYNC=step",
    "cast1": "DSGD_GPU_CASTS=one",
    "nccl": "+ one-rank NCCL all-reduce after the backward pass",
    "ncclov": "+ one-rank NCCL all-reduce per gradient group (DSGD_NCCL_OVERLAP=1)",
    "all": "sync=step + casts=one",
    "nhwc": "DSGD_GPU_LAYOUT=nhwc",
    "nhwcbn": "nhwc + DSGD_GPU_BNRELU=fused",
    "nhwcadd": "nhwc + DSGD_GPU_BNRELU=fused_add",
    "graph": "DSGD_GPU_GRAPH=1",
}

NOT_RUN = {"notrun": "NOT RUN (budget)", "cut": "NOT RUN (cut)"}


def cell(r):
    if r is None:
        return "—", None
    st = r.get("status", "?")
    if st == "ok":
        med = float(r["img_s_med"])
        return f"{med:,.0f} ({float(r['img_s_min']):,.0f}–{float(r['img_s_max']):,.0f})", med
    return ("not built" if st == "unsupported" else NOT_RUN.get(st, st)), None


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows, info, order = parse(sys.argv[1])
    if not rows:
        print("No throughput rows (no BENCH lines in the bench log).")
        return 1
    w, stem, inp, k = info.get("_shape", ("?", "?", "?", "?"))
    print(f"ResNet-18 width {w}, {stem} stem, {inp} input, {k} classes. One step: minibatch from pinned host"
          " memory to the GPU, forward, cross-entropy, backward, SGD Nesterov µ = 0.9 λ = 1e-4, loss to the host."
          " img/s: median (min–max) of the timings.\n")
    prec_rank = {"fp32": 0, "tf32": 1, "bf16": 2}
    print("| b | precision | dsgd-run img/s | PyTorch img/s | dsgd-run / PyTorch |")
    print("|---:|---|---:|---:|---:|")
    for prec, b in sorted(order, key=lambda t: (prec_rank.get(t[0], 9), t[1])):
        r = rows[(prec, b)]
        c_ours, ours = cell(r.get("dsgd-run"))
        c_torch, torch = cell(r.get("torch"))
        ratio = f"{ours / torch:.2f}" if ours and torch else "—"
        print(f"| {b} | {prec} | {c_ours} | {c_torch} | {ratio} |")
        if "torch:channels_last" in r:  # PyTorch's bf16 in NHWC: a separate row, not like for like
            c_cl, cl = cell(r.get("torch:channels_last"))
            ratio = f"{ours / cl:.2f}" if ours and cl else "—"
            print(f"| {b} | {prec}, PyTorch channels_last | {c_ours} | {c_cl} | {ratio} |")
        for name in [n for n in r if n.startswith("dsgd-run@")]:  # the switches in run order, against PyTorch's best
            v = name.split("@", 1)[1]
            c_v, ov = cell(r[name])
            best = max((x for x in (torch, cell(r.get("torch:channels_last"))[1]) if x), default=None)
            c_best = f"{best:,.0f}" if best else "—"
            ratio = f"{ov / best:.2f}" if ov and best else "—"
            gain = f"; ×{ov / ours:.2f} of base" if ov and ours else ""
            print(f"| {b} | {prec}, dsgd-run {VARIANT_NOTE.get(v, v)}{gain} | {c_v} | {c_best} | {ratio} |")
    print()
    for impl, label in (("dsgd-run", "dsgd-run"), ("torch", "PyTorch")):
        sts = [kv.get("status") for r in rows.values() for kv in r.values() if kv.get("impl") == impl]
        nb, nc = sts.count("notrun"), sts.count("cut")
        if nb or nc:
            print(f"- {label}: {len(sts)} rows planned; NOT RUN: {nb} left out by the benchmark's --budget (the least"
                  f" needed, last in its order), {nc} cut (the step's time limit or a signal ended the program first)")
    d, t = info.get("dsgd-run"), info.get("torch")
    if d:
        print(f"- dsgd-run {d.get('version', '?')}: {d.get('backend', '?')}; {d.get('gpu', '?')}")
    if t:
        print(f"- PyTorch {t.get('torch', '?')} (CUDA {t.get('cuda', '?')}, cuDNN {t.get('cudnn', '?')}) on {t.get('gpu', '?')};"
              " fp32: TF32 off, cudnn.benchmark; tf32: TF32 on; bf16: autocast, NCHW as dsgd-run"
              " (and a channels_last row)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
