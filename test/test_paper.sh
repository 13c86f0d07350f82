#!/bin/sh
# test_paper.sh — the experiment files of configs/paper/ (docs/reproduce.md): every one passes
# `dsgd-run --check` against a small pack that this test makes with `dsgd-run --pack` (1000
# classes of one tiny PNG each, so data.classes = 1000 holds, plus a few val images), and holds the
# papers' numbers, read back from `dsgd-run --print-config` (Jin et al. 2016 §4.2, Figures 1 and 2;
# Chen et al. 2016); tools/paper.py --dry-run shows every figure's jobs; tools/report.py reads a
# sweep with a finished, a running and a failed run; tools/paper.py fig1 --simulate runs the kit in
# sim mode at p = 2, 4 and tools/report.py marks it and keeps a real run apart; with a measured
# device gossip is left out, with its reason. Called by test/test_tools.sh (make check);
# runs from the repository root with ./dsgd-run built.
set -u
PY=/usr/bin/python3
T=${TEST_MPI_TIMEOUT:-120}
dir=$(mktemp -d /tmp/dsgd-paper.XXXXXX)
trap 'rm -rf "$dir"' EXIT INT TERM
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# 1. a tiny ImageNet-like tree: 1000 class folders (n00000000 ...) of one 16x12 PNG each; 20 val.
$PY - "$dir/src" <<'EOF' || { echo "FAIL: cannot write the tree"; exit 1; }
import os, struct, sys, zlib
def png(w, h, seed):
    def chunk(k, b):
        return struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b) & 0xFFFFFFFF)
    raw = b"".join(b"\0" + bytes((seed * 7 + r * 13 + c * 3) % 256 for c in range(3 * w)) for r in range(h))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
src = sys.argv[1]
for k in range(1000):
    for split, n in (("train", 1), ("val", 1 if k < 20 else 0)):
        if n:
            d = os.path.join(src, split, f"n{k:08d}")
            os.makedirs(d)
            open(os.path.join(d, "0.png"), "wb").write(png(16, 12, k))
EOF
./dsgd-run --pack "$dir/src" "$dir/pack" --threads 2 >"$dir/pack.log" 2>&1 \
    && ok "a 1000-class pack of 1020 images: $(tail -n 1 "$dir/pack.log" | cut -c1-80)" || bad "--pack: $(tail -n 3 "$dir/pack.log")"

# 2. every experiment file passes --check with data.dir at the pack (scaling.cfg: synthetic data).
n=0
for f in configs/paper/*.cfg; do
    if ./dsgd-run --check --set "data.dir=\"$dir/pack\"" --set "output=\"$dir/out.h5\"" "$f" >"$dir/check.log" 2>&1; then
        n=$((n + 1))
    else
        bad "$f: dsgd-run --check: $(tail -n 2 "$dir/check.log")"
    fi
done
[ "$n" -ge 16 ] && ok "$n experiment files of configs/paper/ pass dsgd-run --check" || bad "only $n files passed --check"

# 3. the papers' numbers, from the resolved experiments.
$PY - <<'EOF' && ok "configs/paper/ holds the papers' numbers (p, b, m, alpha steps, mu, lambda, tau, beta, backups, ResNet-18/64, jpeg, 1000 classes)" || bad "the papers' numbers (above)"
import glob, re, subprocess, sys
def resolved(f):
    t = subprocess.run(["./dsgd-run", "--print-config", f], capture_output=True, text=True, check=True).stdout
    kv, grp = {}, []
    for line in t.splitlines():
        s = line.strip()
        m = re.match(r"(\w+) = \{$", s)
        if m: grp.append(m.group(1)); continue
        if s == "};": grp.pop(); continue
        m = re.match(r"(\w+) = (.*);$", s)
        if m: kv[".".join(grp + [m.group(1)])] = m.group(2).strip('"')
    return kv
# (file, method, p, b, backups): Jin et al. Figure 1 (p = 8, b = 32; p = 16, b = 16), Figure 2
# (p = 32, 64, 128 at m = 256), Chen et al. (N = 16 gradients per step, 0-2 backup workers).
want = [("fig1-allreduce-p8", "allreduce", 8, 32, 0), ("fig1-easgd-p8", "easgd", 8, 32, 0), ("fig1-gossip_push-p8", "gossip_push", 8, 32, 0),
        ("fig1-allreduce-p16", "allreduce", 16, 16, 0), ("fig1-easgd-p16", "easgd", 16, 16, 0), ("fig1-gossip_push-p16", "gossip_push", 16, 16, 0),
        ("fig2-allreduce-p32", "allreduce", 32, 8, 0), ("fig2-allreduce-p64", "allreduce", 64, 4, 0), ("fig2-allreduce-p128", "allreduce", 128, 2, 0),
        ("fig2-gossip_pull-p32", "gossip_pull", 32, 8, 0), ("fig2-gossip_pull-p64", "gossip_pull", 64, 4, 0), ("fig2-gossip_pull-p128", "gossip_pull", 128, 2, 0),
        ("chen-backup-p16", "backup", 16, 16, 0), ("chen-backup-p17", "backup", 17, 16, 1), ("chen-backup-p18", "backup", 18, 16, 2)]
files = sorted(glob.glob("configs/paper/*.cfg"))
errs = []
if sorted(f"configs/paper/{w[0]}.cfg" for w in want) + ["configs/paper/scaling.cfg"] != files:
    errs.append(f"files: {files}")
for name, method, p, b, backups in want:
    kv = resolved(f"configs/paper/{name}.cfg")
    exp = {"name": name, "method": method, "p": str(p), "b": str(b), "backups": str(backups), "iterations": "450000",
           "alpha.base": "0.1", "alpha.schedule": "step", "alpha.steps": "[150000, 300000]", "alpha.factor": "0.1",
           "alpha.warmup": "0", "momentum": "0.9", "nesterov": "true", "weight_decay": "0.0001",
           "model.arch": "resnet18", "model.width": "64", "model.stem": "imagenet", "data.format": "jpeg",
           "data.classes": "1000", "data.crop": "224", "data.scale": "[256, 480]", "eval.every": "2500", "precision": "fp32"}
    if method == "easgd":
        exp.update({"tau": "10", "beta": "0.8", "servers": "1", "synchronous": "false"})  # a = beta/p = 0.8/p
    if method.startswith("gossip"):
        exp["synchronous"] = "false"
    for k, v in exp.items():
        if kv.get(k) != v:
            errs.append(f"{name}: {k} = {kv.get(k)!r}, expected {v!r}")
    if (p - backups) * b != 256:
        errs.append(f"{name}: (p - backups)·b = {(p - backups) * b}, expected m = 256")
kv = resolved("configs/paper/scaling.cfg")
for k, v in {"data.format": "synthetic", "model.width": "64", "model.stem": "imagenet", "b": "32", "data.shape": "[3, 224, 224]"}.items():
    if kv.get(k) != v:
        errs.append(f"scaling: {k} = {kv.get(k)!r}, expected {v!r}")
if errs:
    print("\n".join(errs))
sys.exit(1 if errs else 0)
EOF

# 4. tools/paper.py --dry-run: every figure's jobs, CPU and GPU, Slurm and PBS; the time limit
#    (T1), chains (T2), whole nodes (L1, L2) and cores per GPU rank (L6, L7).
out=$($PY tools/paper.py fig1 --dir "$dir/sw" --dry-run 2>&1)
rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "no time limit: give --time .*the longest point, fig1-allreduce-p8, needs about 18.4 h" && [ ! -e "$dir/sw/fig1" ] \
    && echo "$out" | grep -q "fig1-easgd-p8: 9 rank(s), 450000 iterations of b = 32: about 18.4 h, 165 node-hours" \
    && ok "paper.py fig1 without --time: refused (exit 2), naming the longest point's estimate (18.4 h; easgd p = 8: 165 node-hours)" \
    || bad "paper.py fig1 without --time: exit $rc: $out"
# Time limits that cannot be meant: refused with the reason, nothing written.
for case_ in "--time 0|a zero time limit" "--time 90 --scheduler pbs --cores-per-node 32|a chain of 920 jobs per point (90 = 90 s each" \
             "--time 1-00:00:00 --scheduler pbs --cores-per-node 32|PBS takes a walltime as" \
             "--time 24:00:00 --max-time 1:00:00|is less than one job's --time"; do
    args=${case_%%|*}
    out=$($PY tools/paper.py fig1 $args --dir "$dir/sw" --dry-run 2>&1)
    rc=$?
    [ $rc = 2 ] && echo "$out" | grep -qF "${case_#*|}" && [ ! -e "$dir/sw/fig1" ] \
        && ok "paper.py fig1 $args: refused (exit 2), nothing written" || bad "paper.py fig1 $args: exit $rc: $out"
done
out=$($PY tools/paper.py fig1 --time 12:00:00 --dir "$dir/sw" --dry-run 2>&1)
echo "$out" | grep -q -- "--nodes=9 --ntasks=9 --ntasks-per-node=1 --exclusive --mem=0 --time=12:00:00 .*fig1-easgd-p8.cfg" && echo "$out" | grep -q -- "--array=0-1 .*ranks16.list" \
    && ok "paper.py fig1 --time 12:00:00: EASGD at p = 8 on 9 whole nodes (a server), allreduce + gossip_push at p = 16 as one array" \
    || bad "paper.py fig1 --dry-run: $out"
n=$(ls "$dir/sw/fig1"/*.cfg 2>/dev/null | wc -l)
[ "$n" = 6 ] && grep -q '^b = 16;' "$dir/sw/fig1/fig1-gossip_push-p16.cfg" && ok "fig1: 6 points written, gossip_push p16 with b = 16" || bad "fig1: $n points"
# 18.4 h × 1.25 / 12 h: chains of 2; --max-time 3-00:00:00 with 24-hour jobs: 3.
$PY -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s['chain'] == 2 and s['time'] == '12:00:00' and len(s['jobs']) == 8 and s['jobs'][1]['link'] == 1 else 1)" "$dir/sw/fig1/sweep.json" \
    && ok "paper.py fig1 --time 12:00:00: chains of 2 jobs (the 18.4 h estimate × 1.25), 4 jobs × 2 links in sweep.json" || bad "fig1 chain: $(echo "$out" | tail -n 3)"
out=$($PY tools/paper.py fig1 --time 24:00:00 --max-time 3-00:00:00 --dir "$dir/sw" --dry-run 2>&1)
echo "$out" | grep -q "4 × a chain of 3" && echo "$out" | grep -q -- "DSGD_RUN_ID=<link-0 id>' '--dependency=afterany:<link-1 id>' jobs/slurm/dsgd.sbatch .*fig1-easgd-p8.cfg" \
    && ok "paper.py --max-time 3-00:00:00 --time 24:00:00: a chain of 3 per job, each link after the one before" || bad "paper.py --max-time: $out"
out=$($PY tools/paper.py fig2 --gpu 4 --time 24:00:00 --dir "$dir/sw" --dry-run 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "give --cores-per-node N" && ok "paper.py --gpu without --cores-per-node: refused (L6)" || bad "paper.py --gpu without cores: $out"
out=$($PY tools/paper.py fig2 --gpu 4 --cores-per-node 64 --time 24:00:00 --dir "$dir/sw" --dry-run 2>&1)
echo "$out" | grep -q -- "--nodes=32 --ntasks=128 --ntasks-per-node=4 --gpus-per-node=4 --cpus-per-task=16 --time=24:00:00 .*--array=0-1 .*ranks128.list" \
    && echo "$out" | grep -q -- "device=cuda" && ok "paper.py fig2 --gpu 4 --cores-per-node 64: p = 128 on 32 GPU nodes, 16 cores per GPU rank, device=cuda" || bad "paper.py fig2 --gpu 4: $out"
out=$($PY tools/paper.py fig1 --gpu 4 --cores-per-node 64 --time 24:00:00 --dir "$dir/sw" --dry-run 2>&1)
echo "$out" | grep -q -- "sbatch --parsable --ntasks=9 --gpus-per-task=1 --cpus-per-task=16 --time=24:00:00 .*fig1-easgd-p8.cfg" \
    && ok "paper.py fig1 --gpu 4: EASGD p = 8 + server as 9 tasks of one GPU each, no --nodes (L7)" || bad "paper.py fig1 --gpu 4: $out"
out=$($PY tools/paper.py backup --scheduler pbs --cores-per-node 32 --time 48:00:00 --dir "$dir/sw" --dry-run 2>&1)
echo "$out" | grep -q "qsub -l select=19:ncpus=32:mpiprocs=1 -l place=scatter:excl -l walltime=48:00:00 .*backup-p18.cfg" \
    && ok "paper.py backup --scheduler pbs: p = 18 + 1 server, whole 32-core nodes, scatter:excl, walltime" || bad "paper.py backup pbs: $out"
out=$($PY tools/paper.py fig1 --scheduler pbs --gpu 4 --cores-per-node 64 --time 24:00:00 --dir "$dir/sw" --dry-run 2>&1)
echo "$out" | grep -q "qsub -l select=9:ncpus=16:mpiprocs=1:ngpus=1 -l walltime=24:00:00 .*fig1-easgd-p8.cfg" \
    && ok "paper.py fig1 --scheduler pbs --gpu 4: chunks of one GPU and 16 cores" || bad "paper.py pbs gpu: $out"
out=$($PY tools/paper.py scaling --p 1,2 --dir "$dir/sw" --dry-run 2>&1)
[ "$(ls "$dir/sw/scaling"/*.cfg | wc -l)" = 8 ] && ok "paper.py scaling --p 1,2: 4 methods x 2 node counts (no time limit needed)" || bad "paper.py scaling: $out"

# 5. report.py on a sweep: two finished allreduce runs (a repeat: another seed), a gossip_pull run
#    marked as stopped and a ps run whose status is removed (as a run still going, or killed, has
#    none) — the report must read them as failed and running — and an easgd point without a run.
mkdir -p "$dir/r/runs" "$dir/r/sweeps"
(cd "$dir/r" && $PY "$OLDPWD/tools/sweep.py" "$OLDPWD/configs/linear.cfg" --vary method=allreduce,gossip_pull,ps,easgd --vary p=2 \
    --dsgd "$OLDPWD/dsgd-run" --set iterations=200 --set eval.every=20 --name s --dry-run >/dev/null 2>&1) || bad "sweep for the report"
for spec in "allreduce 1 2" "allreduce 2 2 --set seed=2" "gossip_pull 3 2" "ps 4 3"; do
    set -- $spec
    m=$1 id=$2 n=$3
    shift 3
    timeout -k 5 $T mpiexec -n "$n" ./dsgd-run "$@" --set "output=\"$dir/r/runs/s-$m-p2.$id.h5\"" "$dir/r/sweeps/s/s-$m-p2.cfg" \
        >"$dir/run$id.log" 2>&1 || bad "run s-$m-p2.$id: $(tail -n 2 "$dir/run$id.log")"
done
$PY -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    f.attrs['status'] = 'stopped: communication timeout (comm_timeout_s)'
with h5py.File(sys.argv[2], 'r+') as f:
    del f.attrs['status']" "$dir/r/runs/s-gossip_pull-p2.3.h5" "$dir/r/runs/s-ps-p2.4.h5" || bad "cannot edit the run files"
$PY tools/report.py "$dir/r/sweeps/s" --out "$dir/rep" --targets 0.3,0.2 >"$dir/rep.txt" 2>&1
rc=$?
[ $rc = 0 ] && [ -s "$dir/rep.png" ] && [ -s "$dir/rep.pdf" ] && [ -s "$dir/rep.md" ] && ok "report.py wrote rep.md, rep.png, rep.pdf" \
    || bad "report.py: exit $rc: $(tail -n 3 "$dir/rep.txt")"
grep -q "^| 2 | allreduce | 2 | 2 completed | 32 | " "$dir/rep.txt" && ok "report: the two allreduce runs combined (2 completed)" || bad "report: no combined allreduce row: $(cat "$dir/rep.txt")"
grep -q "^| 2 | gossip_pull | 1 | failed | " "$dir/rep.txt" && ok "report: the stopped gossip_pull run shown failed" || bad "report: no failed row"
grep -q "^| 2 | ps | 1 | running | " "$dir/rep.txt" && ok "report: the ps run without a status shown running" || bad "report: no running row"
grep -q "Pending (no run file yet): s-easgd-p2" "$dir/rep.txt" && ok "report: easgd without a run file listed pending" || bad "report: pending point not listed"
grep -q "^- p = 2: \*\*" "$dir/rep.txt" && ok "report: $(grep '^- p = 2' "$dir/rep.txt")" || bad "report: no winner line"
$PY tools/report.py "$dir/r/sweeps/s" --out "$dir/rep" >/dev/null 2>&1
[ $? = 2 ] && ok "report: an existing output is not replaced" || bad "report replaced its output"
grep -qi "simulated\|virtual clock" "$dir/rep.md" && bad "report of real runs mentions simulation: $(grep -i simulated "$dir/rep.md" | head -n 2)" \
    || ok "report of real runs: no word of simulation (its tables as before)"

# 6. tools/paper.py fig1 --simulate (docs/reproduce.md, "Figures in sim mode"): the kit at p = 2, 4
#    (m = 64: b = 32, 16), 40 iterations, run here; the methods sim mode refuses listed, not run;
#    tools/report.py marks the simulated table and figure and keeps a real run of the same point apart.
out=$($PY tools/paper.py fig1 --simulate k81,10gbe --dir "$dir/sim/sweeps" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "sim.device 'k81' is not one of measured, k20x, k80" && [ ! -e "$dir/sim/sweeps" ] \
    && ok "paper.py --simulate k81,10gbe: refused (exit 2), naming dsgd-run's devices" || bad "paper.py --simulate k81: $out"
out=$($PY tools/paper.py fig1 --simulate k80,10gbe --time 1:00:00 --dir "$dir/sim/sweeps" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q -- "--time is for a cluster's scheduler" && ok "paper.py --simulate --time: refused" || bad "--simulate --time: $out"
$PY tools/paper.py fig1 --simulate k80,10gbe --p 2,4 --m 64 --set iterations=40 --timeout "$T" --name fs \
    --dir "$dir/sim/sweeps" --runs-dir "$dir/sim/runs" >"$dir/sim.log" 2>&1
rc=$?
[ $rc = 0 ] && ok "paper.py fig1 --simulate k80,10gbe --p 2,4: exit 0" || bad "paper.py --simulate: exit $rc: $(tail -n 5 "$dir/sim.log")"
$PY - "$dir/sim/sweeps/fs/sweep.json" "$dir/sim/runs" <<'EOF2' && ok "sim kit: every fig1 method run in sim mode (k80 at b = 32: 197.7 ms), none listed as not simulated" || bad "sim kit (above)"
import glob, json, os, sys, h5py
sw = json.load(open(sys.argv[1]))
assert sw["scheduler"] == "local" and sw["meta"]["simulate"]["device"] == "k80", sw.get("meta")
ran = {pt["method"] for pt in sw["points"]}
left = {x["method"] for x in sw["meta"]["not_simulated"]}
assert "allreduce" in ran and ran | left == {"allreduce", "easgd", "gossip_push"} and not ran & left, (ran, left)
assert ran == {"allreduce", "easgd", "gossip_push"} and not left, (ran, left)  # sim mode runs every method (asynchronous gossip too)
assert all(j["local"]["state"] == "COMPLETED" for j in sw["jobs"]), [j["local"] for j in sw["jobs"]]
assert len(sw["points"]) == 2 * len(ran)
for pt in sw["points"]:
    (rf,) = glob.glob(os.path.join(sys.argv[2], pt["stem"] + ".*.h5"))
    with h5py.File(rf) as f:
        assert f.attrs["status"] == b"completed" or f.attrs["status"] == "completed"
        assert str(f.attrs["time_axis"]).startswith("simulated"), f.attrs["time_axis"]
        assert f.attrs["sim_device"] in ("k80", b"k80") and f.attrs["sim_network"] in ("10gbe", b"10gbe")
        if pt["p"] == 2:
            assert abs(f.attrs["sim_step_s"] - 0.1977) < 1e-4, f.attrs["sim_step_s"]  # docs/simulate-models.md, k80 at b = 32
EOF2
$PY tools/report.py "$dir/sim/sweeps/fs" --out "$dir/simrep" --targets 0.4,0.3 >"$dir/simrep.txt" 2>&1 \
    && [ -s "$dir/simrep.png" ] && [ -s "$dir/simrep.pdf" ] && ok "report.py on the sim kit: simrep.{md,png,pdf}" || bad "report.py sim: $(tail -n 3 "$dir/simrep.txt")"
$PY - "$dir/simrep.md" "$dir/sim/sweeps/fs/sweep.json" "$dir/sim/runs" <<'EOF2' && ok "report: simulated table and figure marked (device and network with their sources, proxy task), s per iteration = the simulated training time per step (allreduce: the k80 step + the modelled all-reduce), real wall clock beside it" || bad "sim report (above)"
import glob, json, os, sys, h5py
sys.path.insert(0, "tools")
from report import fmt_time
md = open(sys.argv[1]).read()
sw = json.load(open(sys.argv[2]))
for s in ("## Simulated: time to target top-1 error, per p", "**simulated: k80 (estimate: ", "10gbe (10 GbE", ", flat, ring all-reduce of 46,758,048 bytes",
          "proxy task: linear model on Fashion-MNIST", "| simulated time to top-1 ≤ 0.4 (speed-up vs allreduce) |",
          "| img/s (simulated) | s per iteration (simulated) | real wall clock here (wall_train_time_s) |",
          "a simulated run's, the virtual clock", "Scheduler (local): run here by tools/sweep.py --local"):
    assert s in md, f"missing: {s}"
assert ("Not simulated (docs/simulate.md): " in md) == bool(sw["meta"]["not_simulated"])
assert "## Time to target top-1 error, per p" not in md  # no real runs: no unmarked table
for pt in sw["points"]:
    (rf,) = glob.glob(os.path.join(sys.argv[3], pt["stem"] + ".*.h5"))
    with h5py.File(rf) as f:
        per_it = f.attrs["train_time_s"] / 40  # the table's m / (img/s)
        if pt["method"] == "allreduce":  # lock-step, no jitter: every iteration costs the step and the all-reduce
            closed = f.attrs["sim_step_s"] + f.attrs["sim_allreduce_s"]
            assert abs(per_it - closed) < 1e-6 * closed, (f.attrs["train_time_s"], closed)
        row = next(l for l in md.splitlines() if l.startswith(f"| {pt['p']} | {pt['method']} |"))
        assert f"| {fmt_time(per_it)} | {fmt_time(f.attrs['wall_train_time_s'])} |" in row, (row, per_it)
EOF2
# a real run (sim.enabled = false) of the same point beside the sim kit: reported apart, said so
cfg=$(ls "$dir/sim/sweeps/fs/"*p2.cfg | head -n 1)
timeout -k 5 $T mpiexec -n 2 ./dsgd-run --set sim.enabled=false --set "output=\"$dir/sim/real.h5\"" "$cfg" >"$dir/real.log" 2>&1 || bad "the real run: $(tail -n 2 "$dir/real.log")"
$PY tools/report.py "$dir/sim/sweeps/fs" "$dir/sim/real.h5" --out "$dir/mix" --targets 0.4,0.3 >"$dir/mix.txt" 2>&1
rc=$?
[ $rc = 0 ] && [ -s "$dir/mix.png" ] && [ -s "$dir/mix-sim.png" ] && grep -q "^\*\*Reported apart\*\*: .* simulated run(s) in 1 simulation setting(s) and 1 real run(s)" "$dir/mix.md" \
    && grep -q "^## Simulated: time to target" "$dir/mix.md" && grep -q "^## Time to target top-1 error, per p" "$dir/mix.md" \
    && ok "report: simulated and real runs of one point reported apart, said so (mix.png real, mix-sim.png simulated)" \
    || bad "report mixed: exit $rc: $(head -n 8 "$dir/mix.md" 2>/dev/null)"

# 7. --simulate measured,10gbe: asynchronous gossip refuses a measured device (it needs a modelled
#    compute time, exit 2 naming sim.device), so paper.py leaves gossip_pull out with that reason
#    and runs the rest; the report lists it "Not simulated" with the reason; a bad --set still
#    stops paper.py (exit 2, naming the file), nothing run.
$PY tools/paper.py fig2 --simulate measured,10gbe --p 2 --set iterations=4 --timeout "$T" --name fm \
    --dir "$dir/sim/sweeps" --runs-dir "$dir/sim/runs" >"$dir/fm.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^paper.py: gossip_pull at p = 2: left out, sim mode refuses it with these settings (docs/simulate.md): .*key 'sim.device': asynchronous gossip_pull in sim mode needs a modelled compute time" "$dir/fm.log" \
    && ok "paper.py fig2 --simulate measured,10gbe: gossip_pull left out, naming sim.device; exit 0" || bad "--simulate measured: exit $rc: $(tail -n 5 "$dir/fm.log")"
$PY - "$dir/sim/sweeps/fm/sweep.json" <<'EOF2' && ok "sweep.json: allreduce at p = 2 completed; not_simulated: gossip_pull at p = 2 with the reason" || bad "--simulate measured: sweep.json (above)"
import json, sys
sw = json.load(open(sys.argv[1]))
assert [pt["method"] for pt in sw["points"]] == ["allreduce"] and sw["points"][0]["p"] == 2, sw["points"]
assert [j["local"]["state"] for j in sw["jobs"]] == ["COMPLETED"], sw["jobs"]
(x,) = sw["meta"]["not_simulated"]
assert x["method"] == "gossip_pull" and x["p"] == 2 and x["file"].endswith("fig2-gossip_pull-p32.cfg"), x
assert x["why"].startswith("--set sim.device=\"measured\": key 'sim.device': ") and "sim.step_ms" in x["why"], x["why"]
EOF2
$PY tools/report.py "$dir/sim/sweeps/fm" --out "$dir/fmrep" --targets 0.9 >"$dir/fmrep.txt" 2>&1
grep -q "^Not simulated (docs/simulate.md): gossip_pull at p = 2 (--set sim.device=\"measured\": key 'sim.device': asynchronous gossip_pull .*) — sim mode refuses these methods with the sweep's settings" "$dir/fmrep.md" \
    && ok "report: gossip_pull listed not simulated, with the reason" || bad "report of the measured kit: $(grep -i 'not sim' "$dir/fmrep.md")"
out=$($PY tools/paper.py fig2 --simulate measured,10gbe --p 2 --set no.such_key=1 --name fb --dir "$dir/sim/sweeps" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "^paper.py: configs/paper/fig2-allreduce-p32.cfg: .*no.such_key" && [ ! -e "$dir/sim/sweeps/fb" ] \
    && ok "paper.py --simulate with a bad --set: exit 2 naming the file and key, nothing run" || bad "bad --set: $out"
exit $fail
