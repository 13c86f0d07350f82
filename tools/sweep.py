#!/usr/bin/python3
"""sweep.py — a node-count / method sweep: one experiment file per point, then one batch job per
point (or one job array per world size), submitted or printed.

    tools/sweep.py BASE.cfg --vary p=8,16,32,64,128 --vary method=allreduce,gossip_pull,easgd \\
        --m 256 --name s1 [--set KEY=VALUE ...] [--scheduler slurm|pbs] [--array] [--dry-run]
    tools/sweep.py configs/paper/fig1-*.cfg --name fig1 --array       # one point per file

- `--vary KEY=V1,V2,...` (repeatable): the points are every combination of the lists (and of the
  experiment files, when several are given: each file is a point of its own, crossed with the
  --vary lists; with several files --vary may be left out).
- `--m M` holds the aggregate minibatch m = p·b: each point gets b = M / p (Jin et al. hold m = 256
  while p grows); a p that does not divide M is an error, before anything is written.
- `--set KEY=VALUE` (repeatable): fixed overrides for every point.
- Each point's experiment is resolved and validated by dsgd-run itself (`dsgd-run --print-config`,
  with every --set applied) and written to sweeps/<name>/<name>-<key><value>-....cfg with
  `name` set to that file's stem (s1-allreduce-p8 for method=allreduce, p=8), so that the run files (runs/<stem>.<job id>.h5) and the plot
  tool (tools/plot_runs.py) group runs by sweep, method and p. With several experiment files the
  stem is <name>-<method>-p<p> (then the other --vary parts), or <name>-<file stem>-<parts>
  where that would not be unique.
- Jobs: jobs/slurm/dsgd.sbatch (sbatch --nodes=W) or jobs/pbs/dsgd.pbs (qsub -l select=W), W = the
  point's MPI ranks (p, plus the servers of ps, easgd and backup), one rank per node;
  `--ranks-per-node R` packs R ranks per node (GPU nodes: R = GPUs per node; Slurm jobs ask for
  --ntasks = the point's ranks, so the last node may hold fewer; PBS needs R to divide them), `--job-args`
  passes more options to sbatch/qsub, `--gpus-per-node G` asks for G GPUs per node (Slurm
  --gpus-per-node, PBS ngpus in the chunk), `--cpus-per-rank C` for C cores per rank (Slurm
  --cpus-per-task, PBS ncpus = R·C; default: PBS ncpus = R, Slurm the site's). `--job-set KEY=VALUE`
  (repeatable) is given to each job's dsgd-run (`--set` after the experiment; PBS: ARGS) without
  being resolved here: for what this build cannot resolve, e.g. device=cuda on a login node whose
  dsgd-run was built without CUDA (the jobs' dsgd-run checks it before training). `--array`: one job array per world size, the job script
  picking its point from a list file (sweeps/<name>/ranksW.list) by the array index.
- `--dry-run` writes the experiment files and sweep.json but prints the commands instead of
  running them. Otherwise the job ids are recorded in sweeps/<name>/sweep.json.

An existing sweeps/<name>/ is never overwritten (choose another --name), except the output of a
--dry-run, or of a submission whose every job the scheduler refused: running the same command
again replaces it.
"""
import argparse
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys

SERVER_METHODS = ("ps", "easgd", "backup")


def die(msg):
    print(f"sweep.py: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_kv(s, what):
    if "=" not in s:
        die(f"{what} {s!r}: expected KEY=VALUE")
    k, v = s.split("=", 1)
    if not k:
        die(f"{what} {s!r}: empty KEY")
    return k, v


def resolve(dsgd, base, sets):
    """The point's resolved experiment text, or die with dsgd-run's own message."""
    cmd = [dsgd, "--print-config"]
    for s in sets:
        cmd += ["--set", s]
    cmd.append(base)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"point {' '.join(sets)}: {r.stderr.strip() or 'dsgd-run --print-config failed'}")
    return r.stdout


def setting(text, key):
    """A top-level scalar of a resolved experiment (as --print-config writes it: `key = value;`)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(key + " =") and line.endswith(";"):
            return line[len(key) + 2:-1].strip().strip('"')
    die(f"resolved experiment has no key {key!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", nargs="+", help="base experiment file(s); several: one point per file (crossed with --vary)")
    ap.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--m", type=int, help="hold m = p*b: b = M/p at every point")
    ap.add_argument("--name", required=True, help="sweep name: letters, digits, ._+-")
    ap.add_argument("--dir", default="sweeps", help="where sweeps/<name>/ goes (default sweeps)")
    ap.add_argument("--scheduler", choices=("slurm", "pbs"), default="slurm")
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--job-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for the jobs' dsgd-run only (not resolved here)")
    ap.add_argument("--gpus-per-node", type=int, default=0, metavar="G", help="GPUs per node to ask for (0: none)")
    ap.add_argument("--cpus-per-rank", type=int, default=0, metavar="C", help="cores per rank to ask for (0: the default)")
    ap.add_argument("--array", action="store_true", help="one job array per world size")
    ap.add_argument("--job-args", default="", metavar="'OPTIONS'",
                    help="more options for sbatch / qsub, one string; write it with '=' since it starts "
                         "with '-': --job-args='--time=30 --partition=gpu'")
    ap.add_argument("--dsgd", default="./dsgd-run",
                    help="the dsgd-run binary (default ./dsgd-run), also given to the jobs (DSGD_BIN)")
    ap.add_argument("--dry-run", action="store_true", help="print the submit commands, run none")
    a = ap.parse_args()

    if not a.name or any(not (c.isalnum() or c in "._+-") for c in a.name):
        die(f"--name {a.name!r}: use letters, digits and ._+-")
    for base in a.base:
        if not os.path.isfile(base):
            die(f"base experiment {base!r} not found")
    if len(set(a.base)) != len(a.base):
        die("an experiment file is given twice")
    if not os.access(a.dsgd, os.X_OK):
        die(f"{a.dsgd} not found or not executable (build it with make, or --dsgd PATH)")
    if a.ranks_per_node < 1:
        die("--ranks-per-node must be >= 1")
    if a.gpus_per_node < 0 or a.cpus_per_rank < 0:
        die("--gpus-per-node and --cpus-per-rank must be >= 0")
    if a.m is not None and a.m < 1:
        die("--m must be >= 1")
    axes = []
    for v in a.vary:
        k, vals = parse_kv(v, "--vary")
        vals = [x.strip() for x in vals.split(",") if x.strip()]
        if not vals:
            die(f"--vary {v!r}: no values")
        if k in [ax[0] for ax in axes]:
            die(f"--vary {k} given twice")
        if len(set(vals)) != len(vals):
            die(f"--vary {v!r}: a value is listed twice")
        axes.append((k, vals))
    if not axes and len(a.base) == 1:
        die("nothing to sweep: give --vary KEY=V1,V2,..., or several experiment files")
    if a.m is not None and "b" in [k for k, _ in axes]:
        die("--m sets b = m/p at every point: do not also --vary b")
    fixed = [parse_kv(s, "--set") and s for s in a.set]
    if a.m is not None and any(parse_kv(x, "--set")[0] == "b" for x in a.set):
        die("--m sets b = m/p at every point: do not also --set b")
    job_script = "jobs/slurm/dsgd.sbatch" if a.scheduler == "slurm" else "jobs/pbs/dsgd.pbs"
    if not a.dry_run and not os.path.isfile(job_script):
        die(f"{job_script} not found: run sweep.py from the repository root (jobs are submitted from here)")

    out = os.path.join(a.dir, a.name)
    replace_dry_run = False
    if os.path.exists(out):
        try:
            with open(os.path.join(out, "sweep.json")) as f:
                old = json.load(f)
            # a dry run, or a submission of which no job was accepted, is replaced
            replace_dry_run = old.get("dry_run") is True or not any("job_id" in j for j in old.get("jobs", []))
        except (OSError, ValueError):
            pass
        if not replace_dry_run:
            die(f"{out} exists: an earlier sweep is never overwritten; choose another --name")

    # 1. every point resolved and validated before anything is written
    def part(k, v):
        return v if k == "method" else f"{k.replace('.', '_')}{v}"

    def safe(stem):
        return "".join(c if (c.isalnum() or c in "._+-") else "_" for c in stem)

    # Several files: a first pass finds each point's method and p for its stem.
    multi = len(a.base) > 1
    combos = [(base, list(zip([k for k, _ in axes], combo)))
              for base in a.base for combo in itertools.product(*[vals for _, vals in axes])]
    stems = []
    for base, vary in combos:
        if not multi:
            stems.append(safe(a.name + "-" + "-".join(part(k, v) for k, v in vary)))
            continue
        text = resolve(a.dsgd, base, list(fixed) + [f"{k}={v}" for k, v in vary])
        rest = [part(k, v) for k, v in vary if k not in ("method", "p")]
        stems.append(safe("-".join([a.name, setting(text, "method"), "p" + setting(text, "p")] + rest)))
    if multi and len(set(stems)) != len(stems):  # two files of one method and p: name by file
        stems = [safe("-".join([a.name, os.path.splitext(os.path.basename(base))[0]] + [part(k, v) for k, v in vary]))
                 for base, vary in combos]
    if len(set(stems)) != len(stems):
        die("two points would share a name: " + ", ".join(sorted({x for x in stems if stems.count(x) > 1})))

    points = []
    for (base, vary), stem in zip(combos, stems):
        sets = list(fixed) + [f"{k}={v}" for k, v in vary]
        if a.m is not None:
            text = resolve(a.dsgd, base, sets)
            p = int(setting(text, "p"))
            if a.m % p:
                die(f"point {' '.join(f'{k}={v}' for k, v in vary)}: p = {p} does not divide m = {a.m}")
            sets.append(f"b={a.m // p}")
        sets.append(f'name="{stem}"')
        sets.append(f'output="runs/{stem}.h5"')  # run by hand; a job names its run file by job id
        text = resolve(a.dsgd, base, sets)
        p, method = int(setting(text, "p")), setting(text, "method")
        servers = int(setting(text, "servers")) if method in SERVER_METHODS else 0
        points.append({"file": os.path.join(out, stem + ".cfg"), "stem": stem, "base": base, "vary": dict(vary),
                       "p": p, "b": int(setting(text, "b")), "method": method, "ranks": p + servers,
                       "text": text})

    rpn = a.ranks_per_node
    if a.scheduler == "pbs":
        for pt in points:
            if pt["ranks"] % rpn:
                die(f"point {pt['stem']}: {pt['ranks']} ranks do not fill PBS chunks of --ranks-per-node {rpn}")

    # 2. the experiment files (a dry run of the same name is replaced)
    if replace_dry_run:
        print(f"sweep.py: replacing {out}/ (a dry run, or no job of it was accepted)")
        shutil.rmtree(out)
    os.makedirs(out)
    for pt in points:
        with open(pt["file"], "x") as f:
            f.write(pt.pop("text"))

    # 3. the jobs
    extra = shlex.split(a.job_args)
    for s in a.job_set:
        parse_kv(s, "--job-set")
        if "," in s and a.scheduler == "pbs":
            die(f"--job-set {s!r}: PBS's -v cannot carry a comma")
    job_sets = [x for s in a.job_set for x in ("--set", s)]
    jobs = []
    groups = {}
    for pt in points:
        groups.setdefault(pt["ranks"], []).append(pt)
    for ranks, pts in sorted(groups.items()):
        nodes = (ranks + rpn - 1) // rpn  # Slurm: the last node may hold fewer (--ntasks = ranks)
        if ranks % rpn and a.scheduler == "pbs":
            die(f"{ranks} ranks do not fill nodes of --ranks-per-node {rpn} (PBS: choose R dividing every point's ranks)")
        if a.array and len(pts) > 1:
            lst = os.path.join(out, f"ranks{ranks}.list")
            with open(lst, "x") as f:
                f.write("".join(pt["file"] + "\n" for pt in pts))
            targets = [(lst, pts)]
        else:
            targets = [(pt["file"], [pt]) for pt in pts]
        for exp, members in targets:
            n = len(members)
            if a.scheduler == "slurm":
                cmd = ["sbatch", "--parsable", f"--nodes={nodes}", f"--ntasks={ranks}", f"--ntasks-per-node={rpn}"]
                if a.gpus_per_node:
                    cmd.append(f"--gpus-per-node={a.gpus_per_node}")
                if a.cpus_per_rank:
                    cmd.append(f"--cpus-per-task={a.cpus_per_rank}")
                if a.dsgd != "./dsgd-run":
                    cmd.append(f"--export=ALL,DSGD_BIN={a.dsgd}")
                if n > 1:
                    cmd.append(f"--array=0-{n - 1}")
                cmd += extra + ["jobs/slurm/dsgd.sbatch", exp] + job_sets
            else:
                env = f"EXP={exp}" + (f",DSGD_BIN={a.dsgd}" if a.dsgd != "./dsgd-run" else "")
                if job_sets:
                    env += ",ARGS=" + shlex.join(job_sets)
                chunk = f"select={nodes}:ncpus={rpn * (a.cpus_per_rank or 1)}:mpiprocs={rpn}"
                if a.gpus_per_node:
                    chunk += f":ngpus={a.gpus_per_node}"
                cmd = ["qsub", "-l", chunk, "-v", env]
                if n > 1:
                    cmd += ["-J", f"0-{n - 1}"]
                cmd += extra + ["jobs/pbs/dsgd.pbs"]
            jobs.append({"command": cmd, "points": [m["stem"] for m in members]})

    for j in jobs:
        print(("(dry run) " if a.dry_run else "") + shlex.join(j["command"]))
        if a.dry_run:
            continue
        r = subprocess.run(j["command"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"sweep.py: {shlex.join(j['command'])} failed: {r.stderr.strip()}", file=sys.stderr)
            j["error"] = r.stderr.strip()
        else:
            j["job_id"] = r.stdout.strip().split(";")[0]
            print(f"  job {j['job_id']}")
    with open(os.path.join(out, "sweep.json"), "x") as f:
        json.dump({"name": a.name, "submit_dir": os.getcwd(), "base": a.base[0] if len(a.base) == 1 else a.base, "vary": {k: v for k, v in axes}, "set": a.set, "job_set": a.job_set, "m": a.m,
                   "scheduler": a.scheduler, "dry_run": a.dry_run, "points": points, "jobs": jobs}, f, indent=1)
    print(f"sweep.py: {len(points)} point(s) in {out}/, {len(jobs)} job(s)"
          + (" (dry run: nothing submitted)" if a.dry_run else ""))
    return 1 if any("error" in j for j in jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
