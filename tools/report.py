#!/usr/bin/python3
"""report.py — which method is fastest at each p: the papers' comparison from dsgd-run run files.

    /usr/bin/python3 tools/report.py RUNS_OR_SWEEP_DIRS... --out PREFIX [--targets 0.5,0.4,0.35]
                                     [--title T] [--overwrite]

Arguments: run files (*.h5), directories of run files, or sweep directories (sweeps/<name>/ of
tools/sweep.py or tools/paper.py: their points' run files runs/<stem>.<job id>.h5 are found
beside the sweeps/ folder, or in the current directory; a point without a run file yet is
listed as pending).

Training runs give, for every p, each method's time to each target top-1 error (with the
speed-up against all-reduce at that p), final top-1 error, img/s, scaling efficiency against
the same method at the smallest p it ran, and the winner (the least time to the tightest target
some method at that p reached); and the paper's figure (Jin et al. 2016, Figures 1 and 2):
validation loss and top-1 error against wall-clock time, one row of panels per p.
Synthetic-data runs (tools/paper.py scaling) give img/s and scaling efficiency against p per
method, table and plot (PREFIX-scaling.* when training runs are reported too).

Runs of the same point (the same experiment but for its name, output, seed, resume and
checkpoint keys) are repeats: combined as the median, with the spread (min-max) in brackets.
Runs still going are read as they stand and marked "running"; runs that stopped are marked
"failed" and drawn with a cross at their end. For `backup`, p is N = p - backups, the workers
whose gradients make each step (Chen et al.), so it sits beside the other methods at that p.

Writes PREFIX.md (the tables), PREFIX.png, PREFIX.pdf and prints the tables. An existing output
is never replaced unless --overwrite. Needs h5py, numpy, matplotlib (Debian python3-h5py,
python3-matplotlib).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from runfiles import config_value, img_per_s, read_run, time_to  # noqa: E402  (tools/runfiles.py)

# Keys that do not make two runs different points (docs/config.md, "What makes two runs identical").
NOT_THE_POINT = ("name", "output", "overwrite", "resume", "seed", "comm_timeout_s", "log_every", "threads")


def die(msg):
    print(f"report.py: {msg}", file=sys.stderr)
    sys.exit(2)


def point_key(config):
    """The resolved experiment without the keys that repeats may differ in."""
    out, group = [], []
    for line in config.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"(\w+) = \{$", s)
        if m:
            group.append(m.group(1))
            continue
        if s == "};":
            group.pop() if group else None
            continue
        m = re.match(r"(\w+) = ", s)
        k = ".".join(group + [m.group(1)]) if m else s
        if k in NOT_THE_POINT or k.startswith("checkpoint.") or k == "data.threads":
            continue
        out.append(f"{k}: {s}")
    return "\n".join(out)


def find_runs(args):
    """(run file paths, pending point names) from the arguments."""
    paths, pending = [], []
    for a in args:
        if os.path.isfile(a):
            paths.append(a)
        elif os.path.isfile(os.path.join(a, "sweep.json")):
            with open(os.path.join(a, "sweep.json")) as f:
                sw = json.load(f)
            roots = [os.path.dirname(os.path.dirname(os.path.abspath(a).rstrip("/"))), os.getcwd()]
            if sw.get("submit_dir"):
                roots.insert(0, sw["submit_dir"])
            for pt in sw["points"]:
                found = []
                for root in roots:
                    found = sorted(x for x in glob.glob(os.path.join(root, "runs", glob.escape(pt["stem"]) + ".*.h5"))
                                   if re.fullmatch(re.escape(pt["stem"]) + r"\.[0-9A-Za-z_]+\.h5", os.path.basename(x)))
                    if found:
                        break
                if found:
                    paths += found
                else:
                    pending.append(pt["stem"])
        elif os.path.isdir(a):
            paths += sorted(glob.glob(os.path.join(a, "*.h5")))
        else:
            die(f"{a}: not a run file, a directory of run files or a sweep directory")
    seen, uniq = set(), []
    for p in paths:
        r = os.path.realpath(p)
        if r not in seen:
            seen.add(r)
            uniq.append(p)
    return uniq, pending


def state(r):
    st = r["status"]
    if st is None:
        return "running"
    if st == "completed":
        return "completed"
    if st.startswith("interrupted"):
        return "interrupted"
    return "failed"


def median_spread(vals, fmt):
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    if not vals:
        return None, "-"
    med = statistics.median(vals)
    s = fmt(med)
    if len(vals) > 1 and fmt(min(vals)) != fmt(max(vals)):
        s += f" [{fmt(min(vals))}–{fmt(max(vals))}]"
    return med, s


def fmt_time(t):
    if t >= 3600:
        return f"{t / 3600:.2f} h"
    if t >= 120:
        return f"{t / 60:.1f} min"
    return f"{t:.3g} s"


def group_runs(runs):
    groups = {}
    for r in runs:
        groups.setdefault(point_key(r["config"]), []).append(r)
    out = []
    for key, rs in groups.items():
        r0 = rs[0]
        backups = int(config_value(r0, "backups") or 0) if r0["method"] == "backup" else 0
        g = {"runs": rs, "method": r0["method"], "p": r0["p"] - backups, "ranks_p": r0["p"], "backups": backups,
             "b": r0["b"], "synthetic": r0["synthetic"]}
        g["label"] = r0["method"] + (f"+{backups} backup" + ("s" if backups != 1 else "") if r0["method"] == "backup" else "")
        out.append(g)
    # two different points of one method and p: tell them apart by their names
    base = [(g["p"], g["label"]) for g in out]
    for i, g in enumerate(out):
        same = [j for j, k in enumerate(base) if k == base[i]]
        if len(same) > 1:
            names = {out[j]["runs"][0]["name"] for j in same}
            g["label"] += f" ({g['runs'][0]['name']})" if len(names) == len(same) else f" (#{same.index(i) + 1})"
    return sorted(out, key=lambda g: (g["p"], g["method"] != "allreduce", g["label"]))


def states_text(g):
    c = {}
    for r in g["runs"]:
        c[state(r)] = c.get(state(r), 0) + 1
    n = len(g["runs"])
    if len(c) == 1 and n == 1:
        return next(iter(c))
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items()))


def training_report(groups, targets, pending):
    lines = []
    by_p = {}
    for g in groups:
        by_p.setdefault(g["p"], []).append(g)
    # img/s and time to each target per group
    for g in groups:
        g["ips"], g["ips_s"] = median_spread([img_per_s(r) for r in g["runs"]], lambda v: f"{v:.0f}")
        g["final"], g["final_s"] = median_spread([float(r["e_top1"][-1]) if len(r["e_top1"]) else None for r in g["runs"]],
                                                 lambda v: f"{v:.4f}")
        g["tt"] = []
        for t in targets:
            ts = [time_to(r, t) for r in g["runs"]]
            med, s = median_spread(ts, fmt_time)
            hit = sum(x is not None for x in ts)
            if 0 < hit < len(ts):
                s += f" ({hit}/{len(ts)} reached)"
            g["tt"].append((med, s))
    # scaling efficiency against the same point at its smallest p (method and b-independent key)
    smallest = {}
    for g in groups:
        k = g["label"]
        if g["ips"] is not None and (k not in smallest or g["p"] < smallest[k]["p"]):
            smallest[k] = g
    hdr = (["p", "method", "runs", "status", "b"] + [f"time to top-1 ≤ {t:g} (speed-up vs allreduce)" for t in targets]
           + ["final top-1", "img/s", "scaling eff.", "winner"])
    lines.append("| " + " | ".join(hdr) + " |")
    lines.append("|" + "---|" * len(hdr))
    winners = []
    for p in sorted(by_p):
        gs = by_p[p]
        ref = next((g for g in gs if g["method"] == "allreduce"), None)
        # the winner: least time to the tightest target some method reached; ties by final error
        win, win_t = None, None
        for i in reversed(range(len(targets))):
            cand = [g for g in gs if g["tt"][i][0] is not None]
            if cand:
                win = min(cand, key=lambda g: (g["tt"][i][0], g["final"] if g["final"] is not None else 1))
                win_t = i
                break
        for g in gs:
            cells = []
            for i, (med, s) in enumerate(g["tt"]):
                if med is not None and ref is not None and ref is not g and ref["tt"][i][0] is not None:
                    s += f" ({ref['tt'][i][0] / med:.2f}×)"
                elif med is not None and ref is g:
                    s += " (1.00×)"
                cells.append(s)
            s0 = smallest.get(g["label"])
            eff = "-"
            if s0 is not None and g["ips"] is not None:
                eff = f"{(g['ips'] / s0['ips']) / (g['ranks_p'] / s0['ranks_p']):.2f} (vs p={s0['p']})"
            row = [str(p), g["label"], str(len(g["runs"])), states_text(g), str(g["b"])] + cells + [g["final_s"], g["ips_s"], eff,
                                                                                                   "**winner**" if g is win else ""]
            lines.append("| " + " | ".join(row) + " |")
        if win is not None:
            t = targets[win_t]
            vs = ""
            if ref is not None and ref is not win and ref["tt"][win_t][0] is not None:
                vs = f", {ref['tt'][win_t][0] / win['tt'][win_t][0]:.2f}× faster than allreduce"
            elif ref is not None and ref is not win:
                vs = ", allreduce did not reach it"
            winners.append(f"- p = {p}: **{win['label']}** reaches top-1 error ≤ {t:g} first, in {fmt_time(win['tt'][win_t][0])}{vs}.")
        else:
            winners.append(f"- p = {p}: no method reached top-1 error ≤ {targets[0]:g} yet.")
    lines.append("")
    lines += winners
    if pending:
        lines.append("")
        lines.append("Pending (no run file yet): " + ", ".join(pending))
    return lines


def training_figure(groups, targets, out, title):
    ps = sorted({g["p"] for g in groups})
    tmax = max((float(r["e_time"][-1]) for g in groups for r in g["runs"] if len(r["e_time"])), default=0.0)
    unit, scale = ("hours", 3600.0) if tmax >= 7200 else ("minutes", 60.0) if tmax >= 120 else ("seconds", 1.0)
    fig, ax = plt.subplots(len(ps), 2, figsize=(12, 3.8 * len(ps)), squeeze=False)
    labels = sorted({g["label"] for g in groups})
    cmap = plt.get_cmap("tab10")
    colour = {lab: cmap(i % 10) for i, lab in enumerate(labels)}
    for row, p in enumerate(ps):
        for g in [g for g in groups if g["p"] == p]:
            first = True
            for r in g["runs"]:
                st = state(r)
                lab = None
                if first:
                    lab = g["label"] + (f" ×{len(g['runs'])}" if len(g["runs"]) > 1 else "")
                    sts = {state(x) for x in g["runs"]} - {"completed"}
                    if sts:
                        lab += " (" + ", ".join(sorted(sts)) + ")"
                first = False
                wall = np.asarray(r["e_time"], dtype=float) / scale
                kw = dict(color=colour[g["label"]], linewidth=1.3, marker=".", markersize=3, label=lab,
                          linestyle="--" if st == "running" else "-")
                ax[row, 0].plot(wall, r["e_loss"], **kw)
                kw["label"] = None
                ax[row, 1].plot(wall, r["e_top1"], **kw)
                if st == "failed" and len(wall):
                    for j, y in ((0, r["e_loss"][-1]), (1, r["e_top1"][-1])):
                        ax[row, j].plot(wall[-1], y, "x", color=colour[g["label"]], markersize=9, mew=2)
        for t in targets:
            ax[row, 1].axhline(t, color="grey", linewidth=0.7, linestyle=":")
        for j, yl in enumerate(("validation loss (nats)", "validation top-1 error")):
            ax[row, j].set_title(f"p = {p}: {yl.split(' (')[0]}", fontsize=10)
            ax[row, j].set_xlabel(f"wall-clock time ({unit})")
            ax[row, j].set_ylabel(yl)
            ax[row, j].grid(True, alpha=0.3)
        ax[row, 0].legend(fontsize=8)
    fig.suptitle(title or "validation loss and top-1 error against wall-clock time (Jin et al. 2016, Figures 1 and 2)")
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=110)
    fig.savefig(out + ".pdf")
    plt.close(fig)


def scaling_report(groups):
    lines = []
    smallest = {}
    for g in groups:
        g["ips"], g["ips_s"] = median_spread([img_per_s(r) for r in g["runs"]], lambda v: f"{v:.0f}")
        if g["ips"] is not None and (g["label"] not in smallest or g["ranks_p"] < smallest[g["label"]]["ranks_p"]):
            smallest[g["label"]] = g
    for g in groups:
        s0 = smallest.get(g["label"])
        g["eff"] = (g["ips"] / s0["ips"]) / (g["ranks_p"] / s0["ranks_p"]) if s0 and g["ips"] is not None else None
    lines.append("| method | p | b | runs | status | img/s | img/s per worker | scaling eff. (vs smallest p) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for g in sorted(groups, key=lambda g: (g["label"], g["ranks_p"])):
        per = f"{g['ips'] / g['ranks_p']:.1f}" if g["ips"] is not None else "-"
        eff = f"{g['eff']:.2f}" if g["eff"] is not None else "-"
        lines.append(f"| {g['label']} | {g['ranks_p']} | {g['b']} | {len(g['runs'])} | {states_text(g)} | {g['ips_s']} | {per} | {eff} |")
    return lines


def scaling_figure(groups, out, title):
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    for lab in sorted({g["label"] for g in groups}):
        gs = sorted([g for g in groups if g["label"] == lab and g["ips"] is not None], key=lambda g: g["ranks_p"])
        if not gs:
            continue
        ps = [g["ranks_p"] for g in gs]
        ax[0].plot(ps, [g["ips"] for g in gs], "o-", label=lab)
        ax[1].plot(ps, [g["eff"] for g in gs], "o-", label=lab)
    allp = sorted({g["ranks_p"] for g in groups})
    ideal = [g for g in groups if g["ranks_p"] == allp[0] and g["ips"] is not None]
    if ideal:
        base = max(g["ips"] for g in ideal)
        ax[0].plot(allp, [base * p / allp[0] for p in allp], ":", color="grey", label="linear (best at smallest p)")
    for x, yl in ((ax[0], "img/s (training throughput)"), (ax[1], "scaling efficiency")):
        x.set_xscale("log", base=2)
        x.set_xticks(allp)
        x.set_xticklabels([str(p) for p in allp])
        x.set_xlabel("p (workers)")
        x.set_ylabel(yl)
        x.grid(True, alpha=0.3)
        x.legend(fontsize=8)
    ax[0].set_yscale("log")
    ax[1].axhline(1.0, color="grey", linewidth=0.7, linestyle=":")
    fig.suptitle(title or "throughput against p on synthetic data")
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=110)
    fig.savefig(out + ".pdf")
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", metavar="RUNS_OR_SWEEP_DIRS")
    ap.add_argument("--out", required=True, metavar="PREFIX")
    ap.add_argument("--targets", default="0.5,0.4,0.35", help="top-1 error targets, loosest first (default: the paper's 0.5,0.4,0.35)")
    ap.add_argument("--title")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args()
    try:
        targets = sorted({float(x) for x in a.targets.split(",") if x.strip()}, reverse=True)
    except ValueError:
        die(f"--targets {a.targets!r}: expected numbers like 0.5,0.4,0.35")
    if not targets:
        die("--targets: none given")

    paths, pending = find_runs(a.inputs)
    runs = []
    for p in paths:
        try:
            runs.append(read_run(p))
        except (OSError, KeyError, ValueError) as ex:
            die(f"{p}: {ex}")
    if not runs and not pending:
        die("no run files found")
    train = group_runs([r for r in runs if not r["synthetic"]])
    synth = group_runs([r for r in runs if r["synthetic"]])
    outs = []
    if train or not synth:
        outs += [a.out + ".png", a.out + ".pdf"]
    if synth:
        sp = a.out + ("-scaling" if train else "")
        outs += [sp + ".png", sp + ".pdf"]
    outs.append(a.out + ".md")
    if not a.overwrite:
        for o in outs:
            if os.path.exists(o):
                die(f"{o} exists; use --overwrite or another --out")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)

    md = [f"# {a.title or 'dsgd-run report'}", "",
          f"{len(runs)} run file(s)" + (f", {len(pending)} point(s) pending" if pending else "") + "; repeats combined as "
          "median [min–max]; time is the run's wall clock (docs/methods.md); scaling efficiency = "
          "(img/s ÷ img/s at the method's smallest p) ÷ (p ÷ that p).", ""]
    if train or (pending and not synth):
        md += ["## Time to target top-1 error, per p", ""] + training_report(train, targets, pending if not synth else []) + [""]
        if train:
            training_figure(train, targets, a.out, a.title)
            md += [f"![validation loss and top-1 error against wall-clock time]({os.path.basename(a.out)}.png)", ""]
    if synth:
        scaling_report_lines = scaling_report(synth)
        md += ["## Throughput against p (synthetic data)", ""] + scaling_report_lines + [""]
        sp = a.out + ("-scaling" if train else "")
        scaling_figure(synth, sp, None)
        md += [f"![img/s and scaling efficiency against p]({os.path.basename(sp)}.png)", ""]
        if pending:
            md += ["Pending (no run file yet): " + ", ".join(pending), ""]
    text = "\n".join(md)
    with open(a.out + ".md", "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {', '.join(outs)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
