#!/usr/bin/python3
"""plot_runs.py — the papers' panels from dsgd-run run files (Jin et al. 2016, Figures 1 and 2):
validation loss and top-1 error against wall-clock time (hours; minutes or seconds for short
runs) and against iterations, one line per
run labelled by method and p (and the experiment's name where those repeat), plus each worker's
distribution of time per step not spent waiting for other ranks (straggler studies), to
PNG and PDF; and a summary table (final top-1 error, time to a target error, img/s) on stdout.

    /usr/bin/python3 tools/plot_runs.py runs/*.h5 [--out plots/fig] [--target 0.15] [--title T]

Writes OUT.png, OUT.pdf (the four curve panels) and OUT-steptime.png, OUT-steptime.pdf. Runs
that are still going are read like finished ones (dsgd-run replaces the file whole at each
publication: docs/output.md); their rows are marked "running (or killed)" in the table, and
"stale (no publication for N s)" once the file is older than 10 times its publication interval
(runfiles.stale: killed, or hung; tools/report.py asks the scheduler). Runs of the same method and p (e.g. a
requeued job's pieces, or repeats) get the same colour. An existing OUT.* is never replaced
unless --overwrite. Needs h5py and matplotlib (Debian: python3-h5py, python3-matplotlib).
"""
import argparse
import math
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from runfiles import img_per_s, read_run, stale, time_to  # noqa: E402  (tools/runfiles.py)


def die(msg):
    print(f"plot_runs.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="HDF5 run files")
    ap.add_argument("--out", default="plots/runs", help="output prefix (default plots/runs)")
    ap.add_argument("--target", type=float, default=0.15, help="top-1 error for 'time to target' (default 0.15)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--overwrite", action="store_true", help="replace existing output files")
    a = ap.parse_args()

    outs = [a.out + s for s in (".png", ".pdf", "-steptime.png", "-steptime.pdf")]
    if not a.overwrite:
        for o in outs:
            if os.path.exists(o):
                die(f"{o} exists; use --overwrite or another --out")
    runs = []
    for p in a.runs:
        try:
            runs.append(read_run(p))
        except (OSError, KeyError, ValueError) as ex:
            die(f"{p}: {ex}")
    runs.sort(key=lambda r: (r["method"], r["p"], r["path"]))

    # One colour per line: (method, p), or (method, p, experiment name) where runs of one method
    # and p differ in something else (a sweep over alpha, precision, stragglers, ...); the pieces
    # of one requeued experiment share its name and so its line colour. Line style and marker
    # per method.
    names = {}
    for r in runs:
        names.setdefault((r["method"], r["p"]), set()).add(r["name"])
    for r in runs:
        k = (r["method"], r["p"])
        r["key"] = k + ((r["name"],) if len(names[k]) > 1 else ())
        r["label"] = f"{r['method']} p={r['p']}" + (f" ({r['name']})" if len(names[k]) > 1 else "")
        if r.get("sim"):  # sim mode (docs/simulate.md): its time axis is a virtual clock
            r["label"] += f" (simulated: {r['sim'].get('sim_device')}, {r['sim'].get('sim_network')})"
    nsim = sum(1 for r in runs if r.get("sim"))
    if 0 < nsim < len(runs):
        print(f"plot_runs.py: warning: {nsim} simulated and {len(runs) - nsim} real run(s) on one time axis: a virtual "
              "clock beside wall clocks (docs/simulate.md); tools/report.py reports them apart", file=sys.stderr)
    keys = sorted({r["key"] for r in runs})
    cmap = plt.get_cmap("tab10" if len(keys) <= 10 else "tab20")
    colour = {k: cmap(i % cmap.N) for i, k in enumerate(keys)}
    methods = sorted({r["method"] for r in runs})
    lstyles, markers = ["-", "--", "-.", ":"], ["o", "s", "^", "D", "v", "x"]
    style = {m: (lstyles[i % len(lstyles)], markers[i % len(markers)]) for i, m in enumerate(methods)}

    # Wall-clock axis in hours as the papers, or minutes / seconds for short runs.
    tmax = max((float(r["e_time"][-1]) for r in runs if len(r["e_time"])), default=0.0)
    unit, scale = ("hours", 3600.0) if tmax >= 7200 else ("minutes", 60.0) if tmax >= 120 else ("seconds", 1.0)
    fig, ax = plt.subplots(2, 2, figsize=(12, 8.5))
    labelled = set()
    for r in runs:
        k = r["key"]
        lab = None if k in labelled else r["label"]
        labelled.add(k)
        ls, mk = style[r["method"]]
        kw = dict(color=colour[k], linestyle=ls, marker=mk, markersize=3, label=lab)
        wall = np.asarray(r["e_time"]) / scale
        ax[0, 0].plot(wall, r["e_loss"], **kw)
        ax[0, 1].plot(wall, r["e_top1"], **kw)
        ax[1, 0].plot(r["e_step"], r["e_loss"], **kw)
        ax[1, 1].plot(r["e_step"], r["e_top1"], **kw)
        # where the run was resumed from a checkpoint (a requeued job): a thin line of its colour
        for s in r["resumed"]:
            # the time axis at the checkpoint: interpolated between the /train rows around it
            ts, tt = np.asarray(r["t_step"], dtype=float), np.asarray(r["t_time"], dtype=float)
            tw = float(np.interp(s, np.concatenate(([0.0], ts)), np.concatenate(([0.0], tt)))) / scale if len(ts) else None
            for j in (0, 1):
                ax[1, j].axvline(s, color=colour[k], linewidth=0.8, alpha=0.35)
                ax[1, j].annotate("resumed", (s, 1.0), xycoords=("data", "axes fraction"), rotation=90, ha="right", va="top",
                                  fontsize=6, color=colour[k])
                if tw is not None:
                    ax[0, j].axvline(tw, color=colour[k], linewidth=0.8, alpha=0.35)
    tlabel = (f"simulated training time ({unit}, virtual clock)" if nsim == len(runs) else
              f"training time ({unit}): wall clock, virtual clock for the simulated runs" if nsim else
              f"wall-clock training time ({unit})")
    for i, x in enumerate((tlabel, "iterations")):
        ax[i, 0].set_xlabel(x)
        ax[i, 1].set_xlabel(x)
        ax[i, 0].set_ylabel("validation loss (nats)")
        ax[i, 1].set_ylabel("validation top-1 error")
    for x in ax.flat:
        x.grid(True, alpha=0.3)
    ax[0, 1].axhline(a.target, color="grey", linewidth=0.8, linestyle=":")
    ax[1, 1].axhline(a.target, color="grey", linewidth=0.8, linestyle=":")
    ax[0, 1].legend(fontsize=8)
    fig.suptitle((a.title or f"{len(runs)} run(s): validation loss and top-1 error")
                 + (f"\n{nsim} simulated run(s) (docs/simulate.md)" + (": NOT one time axis with the real runs" if nsim < len(runs) else "")
                    if nsim else ""))
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    fig.savefig(outs[0], dpi=120)
    fig.savefig(outs[1])
    plt.close(fig)

    # Each worker's time per step not spent waiting for other ranks (busy: computing, its own
    # communication calls, an injected delay) — a straggler stands out here, where under a
    # synchronous method every worker's whole step time is the slowest one's — with the median
    # wait marked. Boxes: quartiles and median, whiskers 5-95 %.
    with_ranks = [r for r in runs if r["step_time"] is not None and r["step_time"].size]
    n = max(len(with_ranks), 1)
    fig, axs = plt.subplots(n, 1, figsize=(12, 2.6 * n), squeeze=False)
    for x, r in zip(axs[:, 0], with_ranks):
        busy, wait = (r["step_time"] - r["wait"]) * 1e3, r["wait"] * 1e3
        data = [c[np.isfinite(c)] for c in busy.T]
        data = [d if d.size else np.array([np.nan]) for d in data]
        x.boxplot(data, whis=(5, 95), showfliers=False)
        med_wait = [np.nanmedian(c) if np.isfinite(c).any() else np.nan for c in wait.T]
        x.plot(range(1, len(med_wait) + 1), med_wait, "x", color="tab:red", label="median wait")
        x.set_ylabel("ms per step")
        x.set_title(f"{os.path.basename(r['path'])}: {r['label']}: time per step not spent waiting, per worker "
                    f"(one value per /ranks row)", fontsize=9)
        x.set_xticks(range(1, busy.shape[1] + 1))
        x.set_xticklabels([str(j) for j in range(busy.shape[1])], fontsize=7)
        x.grid(True, axis="y", alpha=0.3)
        x.legend(fontsize=7, loc="upper right")
    axs[-1, 0].set_xlabel("worker rank")
    if not with_ranks:
        axs[0, 0].text(0.5, 0.5, "no /ranks data in these runs", ha="center", va="center")
    fig.tight_layout()
    fig.savefig(outs[2], dpi=120)
    fig.savefig(outs[3])
    plt.close(fig)

    # Summary table (Markdown).
    print(f"| run | method | p | b | m | iterations | final top-1 error | time to top-1 <= {a.target:g} | img/s | status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        final = f"{r['e_top1'][-1]:.4f}" if len(r["e_top1"]) else "-"
        t = time_to(r, a.target)
        tt = "-" if t is None else (f"{t:.3g} s" if t < 3600 else f"{t / 3600:.2f} h") + (" (simulated)" if r.get("sim") else "")
        done = int(r["t_step"][-1]) if len(r["t_step"]) else 0
        ips = img_per_s(r)
        age = stale(r, time.time())
        status = r["status"] or ("running (or killed)" if age is None else f"stale (no publication for {age:.0f} s)")
        print(f"| {os.path.basename(r['path'])} | {r['method']} | {r['p']} | {r['b']} | {r['m']} | {done}/{r['iterations']} | "
              f"{final} | {tt} | {'-' if math.isnan(ips) else f'{ips:.0f}'} | {status} |")
    print(f"\nwrote {', '.join(outs)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
