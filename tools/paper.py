#!/usr/bin/python3
"""paper.py — submit one of the papers' experiments whole, as Slurm (or PBS) job arrays, through
tools/sweep.py: the points are the experiment files of configs/paper/ (docs/reproduce.md).

    tools/paper.py fig1    --time T [--max-time TOTAL] [--gpu G --cores-per-node N] [--scheduler slurm|pbs]
                           [--data-dir DIR] [--runs-dir DIR] [--dry-run] ...
    tools/paper.py fig2    ...      # Jin et al. Figure 2: pull gossip vs all-reduce, p = 32, 64, 128
    tools/paper.py backup  ...      # Chen et al.: N = 16 gradients per step + 0, 1, 2 backup workers
    tools/paper.py scaling [--methods allreduce,easgd,...] [--p 1,2,4,8,16] [--m 256] ...

| figure | files | points |
|---|---|---|
| fig1 | configs/paper/fig1-*.cfg | allreduce, easgd (τ = 10, β = 0.8), gossip_push at p = 8 (b = 32) and 16 (b = 16) |
| fig2 | configs/paper/fig2-*.cfg | allreduce, gossip_pull at p = 32, 64, 128 (m = 256) |
| backup | configs/paper/chen-*.cfg | backup at N = 16 (b = 16) with 0, 1, 2 backup workers (p = 16, 17, 18) |
| scaling | configs/paper/scaling.cfg | synthetic data, 300 steps: --methods × --p (img/s against p) |

- CPU cluster (default): one rank per node (`--ranks-per-node R`: R). `--gpu G`: G GPUs per node, one rank per GPU
  (`device = "cuda"`; Slurm: --ntasks-per-node=G --gpus-per-node=G; PBS: one chunk of one rank
  and one GPU per rank, chunks packed on the nodes by PBS, since a server rank makes the world
  size p + 1 that G rarely divides).
- `--data-dir DIR`: the ImageNet pack (`dsgd-run --pack`; default data/imagenet, relative to the
  submission directory). `--set KEY=VALUE` (repeatable): more overrides for every point.
- `--p LIST --m M`: the figure at other node counts (e.g. a small trial): one file per method
  (its smallest p) is the template, p takes the listed values and b = M/p.
- Resources (tools/sweep.py): CPU points ask for whole nodes (Slurm --exclusive --mem=0, PBS
  ncpus=<cores per node> with place=scatter:excl) or `--cpus-per-rank C`; `--gpu G` gives each
  GPU rank `--cores-per-node N` / G cores for its JPEG decoder (N: required with --gpu, or
  DSGD_CORES_PER_NODE in the job script's site block; PBS CPU points need it too).
- Time: the paper's figures (fig1, fig2, backup) need `--time T` (each job's wall time; a time in
  --job-args counts too): without it paper.py refuses, naming the longest point's estimated time
  (`--dry-run` prints every point's). A point longer than T runs as a chain of K jobs, each
  continuing the last: `--max-time TOTAL` (the most a point may take in all) gives K = TOTAL / T
  rounded up; without it K comes from the longest point's estimate × 1.25 (tools/sweep.py --chain
  auto). `--rank-img-s R`: your measured img/s per worker rank (tools/report.py on the scaling
  sweep) instead of docs/reproduce.md's CPU figures. `--runs-dir DIR`: run files and checkpoints
  on scratch (DSGD_RUNS_DIR).
- `--name` (default: the figure), `--dir`, `--array`/no: one job array per world size (default
  on), `--job-args`, `--dsgd`, `--dry-run`: as tools/sweep.py, which this calls (and whose
  sweeps/<name>/sweep.json tools/report.py reads). Unfinished points later: tools/sweep.py
  --continue sweeps/<name>.

Report: /usr/bin/python3 tools/report.py sweeps/fig1 --out plots/fig1

Sim mode (docs/simulate.md; docs/reproduce.md §9), on this machine, no scheduler:

    tools/paper.py fig1|fig2 --simulate DEVICE,NETWORK [--proxy linear|resnet18w4] [--p LIST [--m M]]
                             [--timeout S] [--set KEY=VALUE] [--name N] [--runs-dir DIR]

- DEVICE, NETWORK: values of sim.device and sim.network as `dsgd-run --help` lists them (k80,10gbe:
  Jin et al.'s K80 cluster; k20x,gemini: their Cray). Every point of the figure gets sim.enabled,
  sim.device, sim.network and the proxy task: `linear` (default: the linear model on Fashion-MNIST,
  cheap enough for p = 128 ranks on 2 cores) or `resnet18w4` (ResNet-18 width 4, CIFAR stem), 600
  iterations (--set iterations=N) with α ×0.1 at 1/3 and 2/3, an evaluation every 1/24 of the run;
  the clock still charges ResNet-18 (the device's step time at b, 46.8 MB per all-reduce).
- A method sim mode refuses with these settings (`dsgd-run --print-config` exits 2, and passes with
  sim.enabled = false: asynchronous gossip with DEVICE measured, which needs a modelled compute
  time) is left out, printed with dsgd-run's reason and listed in sweep.json's meta
  (not_simulated: method, p, file, why); tools/report.py lists it "Not simulated" with the reason.
  Any other exit 2 (a bad --set) stops paper.py, naming the file.
- The points run one after another here (tools/sweep.py --local), each under `timeout` --timeout S
  (default 1800), `mpiexec -n p` ($MPIEXEC), into runs/<stem>.<UTC time>_<k>.h5 (never replacing a
  run); sweeps/<name>/ (default <figure>-sim-<device>-<network>-<proxy>) is never overwritten.
  Unfinished points later (interrupted, timed out, failed): tools/sweep.py --continue
  sweeps/<name> runs them here again (resumed where a checkpoint is), the completed ones not.
- `--p LIST`: other node counts (m = 256 held, or --m M), e.g. `--p 32,64` where p = 128 is too heavy.

Report: /usr/bin/python3 tools/report.py sweeps/fig1-sim-k80-10gbe-linear --out plots/fig1-sim --targets 0.25,0.2,0.18
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sweep  # noqa: E402  (time_seconds, site_default: the same rules as the submission)
FIGURES = {"fig1": "fig1-*.cfg", "fig2": "fig2-*.cfg", "backup": "chen-*.cfg", "scaling": "scaling.cfg"}


def die(msg):
    print(f"paper.py: {msg}", file=sys.stderr)
    sys.exit(2)


def file_keys(path):
    """method and p of a point file (its own `key = value;` lines; the common part sets neither)."""
    keys = {}
    for line in open(path):
        m = re.match(r'\s*(method|p)\s*=\s*"?([A-Za-z0-9_]+)"?\s*;', line)
        if m:
            keys[m.group(1)] = m.group(2)
    return keys.get("method", "allreduce"), int(keys.get("p", 1))


# --simulate's proxy tasks: what is really trained while the clock charges ResNet-18 on the target
# (docs/reproduce.md, "Figures in sim mode"). Fashion-MNIST, not synthetic data: a time to target
# needs an error that falls. Both start from the figure's files (m = 256, Nesterov, the papers'
# α schedule shape: ×0.1 at 1/3 and 2/3 of the iterations) with a shorter run.
PROXIES = {
    "linear": {"what": "linear model (7,850 parameters) on Fashion-MNIST",
               "set": ["model.arch=linear", "alpha.base=0.01"]},
    "resnet18w4": {"what": "ResNet-18 width 4 (CIFAR stem) on Fashion-MNIST",
                   "set": ["model.arch=resnet18", "model.width=4", "model.stem=cifar", "alpha.base=0.05"]},
}
SIM_ITERATIONS = 600
# top-1 error targets the proxies reach (Fashion-MNIST: the linear model ends near 0.16-0.17)
SIM_TARGETS = "0.25,0.2,0.18"
FMNIST = "/usr/share/datasets/fashion-mnist"


def help_choices(dsgd, key):
    """The values `dsgd-run --help` lists for an enum key (its key table: name, type, unit, default, values)."""
    r = subprocess.run([dsgd, "--help"], capture_output=True, text=True)
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r"\s+" + re.escape(key) + r"\s+enum\s+\S+\s+\"[^\"]*\"\s+(.*)$", line)
        if m:
            return [v.strip() for v in m.group(1).split(",") if v.strip()]
    die(f"{dsgd} --help lists no enum key {key} (sim mode not built into this dsgd-run?)")


def sim_refuses(cmd):
    """Whether a --print-config that exited 2 was refused for sim mode alone: the same command with
    sim.enabled = false passes (e.g. asynchronous gossip with sim.device = "measured", which needs a
    modelled compute time), as against an error of the file or of --set, which stays an error."""
    r = subprocess.run(cmd[:-1] + ["--set", "sim.enabled=false", cmd[-1]], capture_output=True, text=True)
    return r.returncode == 0


def simulate(a):
    """--simulate DEVICE,NETWORK: the figure's points in sim mode on the proxy task, run here with
    mpiexec one after another (tools/sweep.py --local); the methods sim mode refuses (exit 2 at
    --print-config, sim_refuses) are left out and listed in sweep.json's meta, which tools/report.py shows."""
    if a.figure not in ("fig1", "fig2"):
        die(f"--simulate: fig1 or fig2 (not {a.figure})")
    for opt, v in (("--gpu", a.gpu), ("--time", a.time), ("--max-time", a.max_time), ("--data-dir", a.data_dir),
                   ("--job-args", a.job_args), ("--rank-img-s", a.rank_img_s), ("--no-array", a.no_array),
                   ("--dry-run", a.dry_run), ("--cpus-per-rank", a.cpus_per_rank), ("--ranks-per-node", a.ranks_per_node)):
        if v:
            die(f"--simulate runs the kit here: {opt} is for a cluster's scheduler")
    parts = a.simulate.split(",")
    if len(parts) != 2 or not all(parts):
        die(f"--simulate {a.simulate!r}: expected DEVICE,NETWORK, e.g. k80,10gbe or k20x,gemini")
    device, network = parts
    if not os.access(a.dsgd, os.X_OK):
        die(f"{a.dsgd} not found or not executable (build it with make, or --dsgd PATH)")
    for key, v in (("sim.device", device), ("sim.network", network)):
        ok = help_choices(a.dsgd, key)
        if v not in ok:
            die(f"--simulate {a.simulate}: {key} {v!r} is not one of {', '.join(ok)} (dsgd-run --help; docs/simulate-models.md)")
    files = sorted(glob.glob(os.path.join(a.configs, FIGURES[a.figure])))
    if not files:
        die(f"no {FIGURES[a.figure]} in {a.configs}/ (run from the repository root)")
    proxy = PROXIES[a.proxy]
    it = SIM_ITERATIONS
    for s in a.set:
        if s.startswith("iterations="):
            it = int(s.split("=", 1)[1]) if s.split("=", 1)[1].isdigit() else it
    sets = (["data.format=idx", f'data.train_images="{FMNIST}/train-images-idx3-ubyte.gz"',
             f'data.train_labels="{FMNIST}/train-labels-idx1-ubyte.gz"', f'data.val_images="{FMNIST}/t10k-images-idx3-ubyte.gz"',
             f'data.val_labels="{FMNIST}/t10k-labels-idx1-ubyte.gz"', 'data.dir=""', "data.augment=none", "data.classes=10",
             f"iterations={it}", f"alpha.steps=[{it // 3},{2 * it // 3}]", f"eval.every={max(1, it // 24)}",
             f"log_every={max(1, it // 24)}", "checkpoint.every=0"] + proxy["set"]
            + ["sim.enabled=true", f'sim.device="{device}"', f'sim.network="{network}"'] + list(a.set))
    m = a.m or (256 if a.p else None)
    # each method's template (its smallest p; all its files with the files' own p)
    first = {}
    for f in files:
        method, p = file_keys(f)
        if method not in first or p < first[method][1]:
            first[method] = (f, p)
    run, left = [], []
    for f in files:
        method, _ = file_keys(f)
        if a.p and f != first[method][0]:
            continue
        cmd = [a.dsgd, "--print-config"] + [x for s in sets for x in ("--set", s)] + [f]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 2 and sim_refuses(cmd):
            ps = a.p.split(",") if a.p else [str(file_keys(f)[1])]
            why = re.sub(r"^dsgd-run: ", "", r.stderr.strip().splitlines()[-1])
            left += [{"method": method, "p": int(p), "file": f, "why": why} for p in ps]
            continue
        if r.returncode != 0:
            die(f"{f}: {r.stderr.strip() or 'dsgd-run --print-config failed'}")
        run.append(f)
    what = (f"simulated: {device}, {network}; proxy task: {proxy['what']}, {it} iterations")
    for method in sorted({x["method"] for x in left}):
        x = [y for y in left if y["method"] == method]
        print(f"paper.py: {method} at p = {', '.join(str(y['p']) for y in x)}: left out, sim mode refuses it with these "
              f"settings (docs/simulate.md): {x[0]['why']}", file=sys.stderr)
    if not run:
        die(f"--simulate: sim mode refuses every one of {a.figure}'s methods with these settings (above; docs/simulate.md)")
    name = a.name or f"{a.figure}-sim-{device}-{network}-{a.proxy}"
    cmd = [sys.executable, os.path.join(HERE, "sweep.py")] + run
    if a.p:
        cmd += ["--vary", f"p={a.p}", "--m", str(m)]
    elif a.m:
        die("--m goes with --p (the figure files hold m = 256 already)")
    cmd += ["--name", name, "--dir", a.dir, "--dsgd", a.dsgd, "--local", "--local-timeout", f"{a.timeout:g}",
            "--meta", json.dumps({"simulate": {"device": device, "network": network, "proxy": a.proxy, "proxy_task": proxy["what"],
                                               "iterations": it}, "not_simulated": left})]
    if len(run) == 1 and not a.p:  # one file: sweep.py needs something to vary
        cmd += ["--vary", f"p={file_keys(run[0])[1]}"]
    if a.runs_dir:
        cmd += ["--runs-dir", a.runs_dir]
    for s in sets:
        cmd += ["--set", s]
    print(f"paper.py: {what}: {len(run)} file(s) of {a.figure}" + (f" at p = {a.p}" if a.p else ""), file=sys.stderr)
    print("paper.py: " + " ".join(cmd[1:]), file=sys.stderr)
    rc = subprocess.run(cmd).returncode
    if rc in (0, 1):
        print(f"paper.py: report: /usr/bin/python3 tools/report.py {os.path.join(a.dir, name)} --out plots/{name} "
              f"--targets {SIM_TARGETS}", file=sys.stderr)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("figure", choices=sorted(FIGURES))
    ap.add_argument("--configs", default="configs/paper", help="where the experiment files are (default configs/paper)")
    ap.add_argument("--gpu", type=int, default=0, metavar="G", help="GPU nodes with G GPUs, one rank per GPU (default: CPU nodes, one rank each)")
    ap.add_argument("--ranks-per-node", type=int, default=0, metavar="R",
                    help="CPU nodes: ranks per node (default 1; a workstation or a one-node test cluster: more)")
    ap.add_argument("--cpus-per-rank", type=int, default=0, metavar="C", help="cores per rank to ask for (sweep.py)")
    ap.add_argument("--scheduler", choices=("slurm", "pbs"), default="slurm")
    ap.add_argument("--data-dir", metavar="DIR", help="the ImageNet pack (data.dir)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--p", metavar="LIST", help="node counts instead of the files' (with --m)")
    ap.add_argument("--m", type=int, help="hold m = p*b (with --p; scaling: instead of the file's b)")
    ap.add_argument("--methods", default="allreduce,easgd,gossip_pull,gossip_push",
                    help="scaling: methods (default allreduce,easgd,gossip_pull,gossip_push)")
    ap.add_argument("--name")
    ap.add_argument("--dir", default="sweeps")
    ap.add_argument("--no-array", action="store_true", help="one job per point instead of job arrays")
    ap.add_argument("--job-args", default="", metavar="'OPTIONS'", help="more sbatch / qsub options (write --job-args='...')")
    ap.add_argument("--dsgd", default="./dsgd-run")
    ap.add_argument("--cores-per-node", type=int, default=None, metavar="N",
                    help="cores per node (--gpu: N/G per GPU rank; PBS CPU chunks); default: the job script's DSGD_CORES_PER_NODE")
    ap.add_argument("--time", metavar="T", help="wall time of each job (required for fig1, fig2, backup)")
    ap.add_argument("--max-time", metavar="TOTAL", help="the most one point may take in all: a chain of TOTAL/T jobs")
    ap.add_argument("--rank-img-s", type=float, default=0, metavar="R", help="measured img/s per worker rank (cost estimate)")
    ap.add_argument("--runs-dir", metavar="DIR", help="where run files and checkpoints go (default: the job script's DSGD_RUNS_DIR)")
    ap.add_argument("--dry-run", action="store_true", help="write the sweep and print the jobs; submit nothing")
    ap.add_argument("--simulate", metavar="DEVICE,NETWORK",
                    help="fig1, fig2: run the kit here in sim mode (docs/simulate.md) on the proxy task, the time axis "
                         "that of DEVICE's step times and NETWORK (values of sim.device and sim.network)")
    ap.add_argument("--proxy", choices=sorted(PROXIES), default="linear",
                    help="--simulate: the proxy task really trained (default linear: the linear model on Fashion-MNIST)")
    ap.add_argument("--timeout", type=float, default=1800, metavar="S", help="--simulate: each point's limit in seconds (default 1800)")
    a = ap.parse_args()
    if a.simulate is not None:
        return simulate(a)

    files = sorted(glob.glob(os.path.join(a.configs, FIGURES[a.figure])))
    if not files:
        die(f"no {FIGURES[a.figure]} in {a.configs}/ (run from the repository root)")
    cmd = [sys.executable, os.path.join(HERE, "sweep.py")]
    vary = []
    if a.figure == "scaling":
        vary += ["--vary", f"method={a.methods}", "--vary", f"p={a.p or '1,2,4,8,16'}"]
        if a.m:
            vary += ["--m", str(a.m)]
    elif a.p:
        if not a.m:
            die("--p needs --m (b = m/p at every point)")
        first = {}
        for f in files:  # the template of each method: its file of smallest p
            method, p = file_keys(f)
            if method not in first or p < first[method][1]:
                first[method] = (f, p)
        files = sorted(f for f, _ in first.values())
        vary += ["--vary", f"p={a.p}", "--m", str(a.m)]
    elif a.m:
        die("--m goes with --p (the figure files hold m = 256 already)")
    cmd += files + vary + ["--name", a.name or a.figure, "--dir", a.dir, "--scheduler", a.scheduler, "--dsgd", a.dsgd]
    if not a.no_array:
        cmd.append("--array")
    sets = list(a.set)
    if a.data_dir:
        sets.insert(0, f'data.dir="{a.data_dir}"')
    if a.gpu:
        # A login node's dsgd-run may be built without CUDA: then the jobs get device=cuda
        # (their binary checks it), the points are resolved on the CPU settings.
        v = subprocess.run([a.dsgd, "--version"], capture_output=True, text=True).stdout
        if "GPU backend not built" in v:
            print(f"paper.py: {a.dsgd} has no GPU backend: device=cuda goes to the jobs' dsgd-run (--job-set)", file=sys.stderr)
            cmd += ["--job-set", "device=cuda"]
        else:
            sets.insert(0, "device=cuda")
        script = sweep.SCRIPTS[a.scheduler]
        cores = a.cores_per_node if a.cores_per_node is not None else int(sweep.site_default(script, "DSGD_CORES_PER_NODE") or 0)
        if not cores and not a.cpus_per_rank:
            die(f"--gpu {a.gpu}: give --cores-per-node N (the nodes' cores: each GPU rank asks for N/{a.gpu} for its JPEG "
                f"decoder; or set DSGD_CORES_PER_NODE in {script}'s site block), or --cpus-per-rank C")
        if cores and cores < a.gpu:
            die(f"--cores-per-node {cores}: fewer cores than --gpu {a.gpu}")
        if a.scheduler == "slurm":
            cmd += ["--ranks-per-node", str(a.gpu), "--gpus-per-node", str(a.gpu)]
            if not a.cpus_per_rank:
                cmd += ["--cores-per-node", str(cores)]
        else:  # one chunk per GPU rank: its cores are the node's share of one GPU
            cmd += ["--ranks-per-node", "1", "--gpus-per-node", "1"]
            if not a.cpus_per_rank:
                cmd += ["--cpus-per-rank", str(cores // a.gpu)]
    elif a.cores_per_node is not None:
        cmd += ["--cores-per-node", str(a.cores_per_node)]
    if a.ranks_per_node and a.gpu:
        die("--ranks-per-node is for CPU nodes; --gpu G puts G ranks on a node")
    if a.ranks_per_node:
        cmd += ["--ranks-per-node", str(a.ranks_per_node)]
    if a.cpus_per_rank:
        cmd += ["--cpus-per-rank", str(a.cpus_per_rank)]
    for s in sets:
        cmd += ["--set", s]
    if a.time:
        cmd += ["--time", a.time]
        if a.max_time:
            t, total = sweep.time_seconds(a.time, a.scheduler), sweep.time_seconds(a.max_time, a.scheduler)
            if not t or total is None:
                die(f"--time {a.time} / --max-time {a.max_time}: expected wall times such as 24:00:00 or 3-00:00:00")
            if total < t:
                die(f"--max-time {a.max_time} is less than one job's --time {a.time}: it is the most a point may take in all")
            cmd += ["--chain", str(max(1, -(-total // t)))]
        else:
            cmd += ["--chain", "auto"]
    elif a.max_time:
        die("--max-time goes with --time (each job's wall time; the chain is --max-time / --time jobs)")
    if a.figure != "scaling":
        cmd.append("--require-time")
    if a.rank_img_s:
        cmd += ["--rank-img-s", str(a.rank_img_s)]
    if a.runs_dir:
        cmd += ["--runs-dir", a.runs_dir]
    if a.job_args:
        cmd.append(f"--job-args={a.job_args}")
    if a.dry_run:
        cmd.append("--dry-run")
    print("paper.py: " + " ".join(cmd[1:]), file=sys.stderr)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
