#!/bin/sh
# run.sh — the batch-job workflow on a real Slurm: a multi-node Slurm cluster on localhost (one
# slurmd per node, the machine's cores split between the nodes), started in a private temporary
# directory, gets real sbatch submissions of jobs/slurm/dsgd.sbatch, from
# tools/sweep.py and by hand; the jobs' states, run files and output files are checked, and
# tools/plot_runs.py plots the runs. (test/test_tools.sh tests the same scripts without a
# scheduler, with SLURM_* set by hand.)
#
#   sh test/slurm/run.sh --all    # from the repository root, after `make dsgd-run` (make check-slurm)
#   sh test/slurm/run.sh          # sections 3-5 only;  --walkthrough: section 8 only
#   sh test/slurm/run.sh --fig1-small OUTDIR    # the same cluster, then only section 6 (make fig1-small)
#
# 1. Debian's slurm-wlm and munge are installed if missing (apt-get, as root; otherwise the exact
#    command is printed and the test fails).
# 2. munged, slurmctld and DSGD_SLURM_NODES (default 5) slurmd run as root, in the foreground
#    (-F / -D) as background processes of this script, with everything in
#    $TMPDIR/dsgd-slurm.XXXXXX: slurm.conf and cgroup.conf (through SLURM_CONF), munge key and
#    socket, state, spool, logs, and free TCP ports. No file under /etc, /run or /var is written;
#    the only thing outside it is each node's cgroup (slurm_<node>/ in the cgroup v1 hierarchies),
#    removed at exit. The nodes c<port>n1 ... (all 127.0.0.1, a slurmd each: `slurmd -N`, Debian's
#    Slurm has multiple-slurmd) get one core each, really: task/cgroup (a cpuset per job) plus
#    task/affinity, and core specialization (CpuSpecList) reserving every other core, so node i's
#    jobs run on core (i-1) mod cores — with 2 cores, odd nodes on core 0, even nodes on core 1.
#    Without a usable cgroup v1 cpuset (or DSGD_SLURM_CGROUP=0) the nodes are 1-CPU slots and
#    nothing is bound; a NOT ENFORCED line says so. Jobs ask for one rank per node, as on a CPU
#    cluster; a 5-rank job (EASGD at p = 4) has 5 nodes. Jobs run as root (the test is root).
# 3. tools/sweep.py submits methods allreduce and ps at p = 2, m = 64 (linear model, 300
#    iterations) from a scratch copy of the submission directory (nothing is written into the
#    repository); every job must end COMPLETED with exit code 0:0 and leave dsgd-<id>.out and
#    runs/<stem>.<id>.h5 with status "completed" and a last /eval row at step 300; plot_runs.py
#    must draw them and list both in its table.
#    3b. the same with --array: allreduce and gossip_pull (2 ranks each) as one job array.
# 4. dsgd.sbatch submitted by hand on 3 nodes with method ps and an experiment saying p = 1:
#    p = 3 − 1 server = 2 in the run file (dsgd-run --p-from-world).
# 5. Requeue: a job with checkpoint.every = 100 (3000 iterations, slowed by an injected delay) is
#    requeued with `scontrol requeue` once its first checkpoint exists; the requeued job (same job
#    id, the script passes resume = "auto") must continue the same run file from the checkpoint
#    and complete: status "completed", resumes >= 1, /train/step rows strictly increasing every 100
#    iterations up to 3000 (no duplicates, no gaps), time_s never going back; plot_runs.py draws it.
#
# MPI inside the jobs: the job script's default DSGD_LAUNCH="mpiexec -n $SLURM_NTASKS". Debian's
# MPICH (Hydra) sees the allocation and starts a proxy on every node with
# `srun -N <nodes> -n <nodes> hydra_pmi_proxy`, which works with MpiDefault=none; no HYDRA_*
# setting is needed. Each proxy, and the ranks it starts, run in their node's cpuset. All nodes
# have the machine's host name, so MPICH connects the ranks through shared memory.
#
# 6. (--fig1-small OUTDIR only, instead of 3-5) a small Figure 1 through the commands of
#    docs/reproduce.md: Fashion-MNIST as a --pack of JPEGs (tools/idx_to_tree.py, 12,000 train and
#    2,000 val images), `tools/paper.py fig1 --p 2,4 --m 64` (allreduce, easgd, gossip_push; the
#    configs/paper files with a linear model and 28-pixel crops set on the command line) as
#    exclusive job arrays, every job COMPLETED, then tools/report.py on the sweep: OUTDIR gets the
#    run files, the sweep and fig1-small.{md,png,pdf}.
#
# 8. (--all, --walkthrough) the cluster walk-through of docs/reproduce.md with 1-minute jobs:
#    `tools/paper.py fig1 --p 2 --m 64 --time 1 --max-time 8` (the fig1-small settings, a checkpoint
#    every 250 iterations, every worker slowed by DSGD_SLURM_WALK_DELAY_MS = 120 ms a step, so each
#    point needs 3 or more chained jobs; DSGD_STOP_MARGIN_S = 10; USR1 40 s before the limit); the
#    ranks of one running all-reduce link killed with kill -9 after a checkpoint of their own;
#    checked: every point completed, trained by >= 3 jobs, links stopped by stop_at (or Slurm's
#    SIGTERM: TIMEOUT), the killed link's successor resumed from its checkpoint, the chained
#    all-reduce run bitwise equal to the same point run unchained by hand (every /eval and /train
#    dataset but time_s), tools/report.py's job states equal to Slurm's record (sacct -c). Beside
#    it, a 2-minute job without stop_at reaches its limit (USR1 checkpoint, SIGTERM checkpoint,
#    TIMEOUT) and its DSGD_RUN_ID continuation completes it. (docs/testing.md, "The Slurm tests".)
#
# Every wait has a timeout. The daemons, and every process of a job, are stopped at exit (trap),
# found by a marker in their environment; the script fails if any is left. Exit status 0: all
# passed; 1: a check failed, or Slurm could not be started here (the reason is printed).
#
# Environment: DSGD_SLURM_KEEP=1 keeps the temporary directory (logs, run files) for a look;
# DSGD_SLURM_JOB_TIMEOUT (default 240) bounds the wait for the jobs, in seconds (the walk-through's:
# DSGD_SLURM_WALK_TIMEOUT, default 720); DSGD_SLURM_NODES (5; 9 with the walk-through) nodes;
# DSGD_SLURM_CGROUP=0: no cgroups (nothing bound).
set -u
MODE=check
WALK=0
case "${1:-}" in
--fig1-small | --scaling-small)
    [ -n "${2:-}" ] || { echo "usage: sh test/slurm/run.sh --fig1-small|--scaling-small OUTDIR"; exit 2; }
    MODE=fig1
    [ "$1" = --scaling-small ] && MODE=scaling
    FIG1_OUT=$(mkdir -p "$2" && cd "$2" && pwd) || exit 2
    ;;
--walkthrough) MODE=none WALK=1 ;;
--all) WALK=1 ;;
'') ;;
*) echo "usage: sh test/slurm/run.sh [--all | --walkthrough | --fig1-small OUTDIR | --scaling-small OUTDIR]"; exit 2 ;;
esac
PY=/usr/bin/python3
JOB_TIMEOUT=${DSGD_SLURM_JOB_TIMEOUT:-240}
KEEP=${DSGD_SLURM_KEEP:-0}
# (read here: every DSGD_* variable is unset below, before the cluster starts)
NNODES=${DSGD_SLURM_NODES:-}
CGROUP=${DSGD_SLURM_CGROUP:-1}
WALK_TIMEOUT=${DSGD_SLURM_WALK_TIMEOUT:-720}
WALK_DELAY_MS=${DSGD_SLURM_WALK_DELAY_MS:-120}
WALK_MARGIN=${DSGD_SLURM_WALK_MARGIN_S:-10}
REPO=$(pwd)
t0=$(date +%s)
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
info() { echo "   $*"; }
section() { echo "== $* (at $(($(date +%s) - t0)) s)"; }
# A failure the rest cannot go on from (Slurm cannot run here, ...): say why, show the logs, stop
# (the trap cleans up).
fatal() {
    echo "FAIL: $*"
    show_logs
    exit 1
}
# the last error lines of a daemon's output, on one line
last_words() {
    w=$(grep -iE "error|fatal|fail" "$1" 2>/dev/null | grep -v -i pmix | tail -n 3 | tr '\n' ' ')
    echo "${w:-$(tail -n 3 "$1" 2>/dev/null | tr '\n' ' ')}"
}
show_logs() {
    [ -n "${T:-}" ] || return 0
    for f in "$T"/log/*; do
        [ -s "$f" ] || continue
        echo "   --- last lines of $f:"
        tail -n 15 "$f" | sed 's/^/   | /'
    done
}

if [ ! -x ./dsgd-run ] || [ ! -f jobs/slurm/dsgd.sbatch ] || [ ! -f tools/sweep.py ]; then
    echo "FAIL: run from the repository root after make dsgd-run (no ./dsgd-run, jobs/slurm/dsgd.sbatch or tools/sweep.py here)"
    exit 1
fi

# ---------------------------------------------------------------------------------------------
# 1. packages
# ---------------------------------------------------------------------------------------------
missing=
for b in slurmctld slurmd sbatch squeue sinfo scontrol scancel munged mungekey munge unmunge; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$b" >/dev/null 2>&1 || missing="$missing $b"
done
if [ -n "$missing" ]; then
    echo "   missing:$missing (Debian packages slurm-wlm, munge)"
    if [ "$(id -u)" -ne 0 ]; then
        echo "FAIL: run as root, or install them:  apt-get update && apt-get install -y --no-install-recommends slurm-wlm munge"
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || echo "   (apt-get update failed; trying the install anyway)"
    pkgs=$(apt-get install -s --no-install-recommends slurm-wlm munge 2>/dev/null | awk '/^Inst /{printf " %s", $2}')
    echo "   installing slurm-wlm munge with apt-get --no-install-recommends; new packages:${pkgs:- (unknown)}"
    if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >/tmp/dsgd-slurm-apt.$$ 2>&1; then
        tail -n 20 /tmp/dsgd-slurm-apt.$$
        rm -f /tmp/dsgd-slurm-apt.$$
        echo "FAIL: apt-get install slurm-wlm munge failed"
        exit 1
    fi
    rm -f /tmp/dsgd-slurm-apt.$$
fi
PATH=$PATH:/usr/sbin:/sbin
export PATH
ok "slurm-wlm $(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null), munge $(dpkg-query -W -f='${Version}' munge 2>/dev/null) installed"
if [ "$(id -u)" -ne 0 ]; then
    echo "FAIL: the test cluster's slurmd must run as root (it starts jobs as their user); run as root"
    exit 1
fi

# ---------------------------------------------------------------------------------------------
# 2. a multi-node cluster in a private directory
# ---------------------------------------------------------------------------------------------
# Nothing from a surrounding Slurm (CI inside a Slurm job, a site's SBATCH_* defaults, DSGD_*
# settings) may leak into the test.
for v in $(env | sed -n 's/^\(\(SLURM\|SBATCH\|SALLOC\|SRUN\|SQUEUE\|SINFO\|SCONTROL\|SCANCEL\|DSGD\|HYDRA\|MPIEXEC\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
T=$(mktemp -d "${TMPDIR:-/tmp}/dsgd-slurm.XXXXXX") || { echo "FAIL: mktemp -d"; exit 1; }
# Our daemons and jobs carry MARK in their environment (this shell does not): teardown finds every
# process of the test cluster by it, and only those.
MARK="DSGD_SLURM_TEST_CLUSTER=$T"
pid_munged='' pid_ctld='' pid_slurmd='' pid_watch='' PFX=''

# The pids of live processes with MARK in their environment.
marked() {
    for d in /proc/[0-9]*; do
        [ -r "$d/environ" ] || continue
        if { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | grep -qxF "$MARK"; then
            # a zombie or a kernel thread has no environ; skip what already went
            [ -d "$d" ] && echo "${d#/proc/}"
        fi
    done
}
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
# wait up to $2 seconds for the pids in $1 to go
wait_gone() {
    _n=0
    while [ $_n -lt $(($2 * 5)) ]; do
        _left=
        for _p in $1; do alive "$_p" && _left="$_left $_p"; done
        [ -z "$_left" ] && return 0
        sleep 0.2
        _n=$((_n + 1))
    done
    return 1
}
# Remove the cgroups the test cluster's slurmds left (slurm_<node>/... in each v1 hierarchy; Slurm
# removes a job's on its end but keeps slurm_<node> and its system cgroup). Fails quietly where a
# process still holds one.
rm_cgroups() {
    [ -n "$PFX" ] || PFX=$(cat "$T/run/node-prefix" 2>/dev/null)   # (the watchdog learns it late)
    [ -n "$PFX" ] || return 0
    for _d in /sys/fs/cgroup/*/slurm_"$PFX"[0-9]*; do
        [ -d "$_d" ] && find "$_d" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    return 0
}
# TERM, then KILL, every process with MARK; prints their pids
reap_marked() {
    _m=$(marked | tr '\n' ' ')
    [ -n "${_m% }" ] || return 0
    echo "$_m"
    # shellcheck disable=SC2086
    kill -TERM $_m 2>/dev/null
    # shellcheck disable=SC2086
    wait_gone "$_m" 5 || { kill -KILL $_m 2>/dev/null; wait_gone "$_m" 5; }
}
cleanup() {
    rc=$?
    trap - EXIT INT TERM HUP
    trap '' PIPE   # a closed stdout (| head) must not stop the teardown
    section teardown
    if alive "$pid_ctld"; then
        ids=$(timeout 15 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
        if [ -n "$ids" ]; then
            info "cancelling jobs $ids"
            # shellcheck disable=SC2086
            timeout 15 scancel $ids 2>/dev/null
            n=0
            while [ $n -lt 30 ] && [ -n "$(timeout 10 squeue -h -o %i 2>/dev/null)" ]; do sleep 0.5; n=$((n + 1)); done
        fi
    fi
    # the slurmds first (they stop with their steps), then slurmctld, then munged
    # shellcheck disable=SC2086
    [ -n "${pid_slurmd# }" ] && kill -TERM $pid_slurmd 2>/dev/null && { wait_gone "$pid_slurmd" 15 || kill -KILL $pid_slurmd 2>/dev/null; }
    for p in "$pid_ctld" "$pid_munged"; do
        alive "$p" && kill -TERM "$p" 2>/dev/null && { wait_gone "$p" 15 || kill -KILL "$p" 2>/dev/null; }
    done
    # anything else of ours: slurmstepd, job scripts, mpiexec, hydra proxies, dsgd-run ranks
    left=$(reap_marked)
    [ -n "$left" ] && info "stopped leftover processes of the test cluster: $left"
    # shellcheck disable=SC2086
    wait $pid_munged $pid_ctld $pid_slurmd 2>/dev/null
    rm_cgroups
    if [ -n "$PFX" ] && ls -d /sys/fs/cgroup/*/slurm_"$PFX"[0-9]* >/dev/null 2>&1; then
        echo "FAIL: cgroups of the test cluster left: $(ls -d /sys/fs/cgroup/*/slurm_"$PFX"[0-9]* | tr '\n' ' ')"
        rc=1
    fi
    left=$(marked | tr '\n' ' ')
    if [ -n "$left" ]; then
        echo "FAIL: processes of the test cluster still running after teardown: $left"
        for p in $left; do ps -o pid=,args= -p "$p" 2>/dev/null | sed 's/^/   /'; done
        rc=1
    else
        ok "teardown: no daemon or job process of the test cluster left"
    fi
    alive "$pid_watch" && kill "$pid_watch" 2>/dev/null
    if [ "$KEEP" = 1 ]; then
        echo "   kept $T (DSGD_SLURM_KEEP=1)"
    else
        rm -rf "$T"
    fi
    [ $rc -eq 0 ] && echo "slurm tests passed" || echo "slurm tests FAILED"
    exit $rc
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 1' INT TERM HUP
trap 'exit 1' PIPE

# A watchdog for when this script is killed outright (SIGKILL, e.g. timeout -k): it stops the
# test cluster's processes and removes the directory once this shell is gone.
(
    trap 'kill $! 2>/dev/null; exit 0' TERM   # the teardown ends it, and its sleep
    while kill -0 $$ 2>/dev/null; do sleep 1 & wait $!; done
    reap_marked >/dev/null
    rm_cgroups
    [ "$KEEP" = 1 ] || rm -rf "$T"
) </dev/null >/dev/null 2>&1 &
pid_watch=$!

chmod 711 "$T"   # munged wants its socket's directory reachable by every user
mkdir -p "$T/etc" "$T/munge" "$T/munge-run" "$T/state" "$T/spool" "$T/log" "$T/run" "$T/work"
chmod 700 "$T/etc" "$T/munge" "$T/state" "$T/spool" "$T/log" "$T/run"
chmod 755 "$T/munge-run" "$T/work"

# munge: a fresh key, our own socket
if ! mungekey -c -b 1024 -k "$T/munge/munge.key" 2>"$T/log/mungekey.log"; then
    dd if=/dev/urandom of="$T/munge/munge.key" bs=128 count=1 2>/dev/null || fatal "cannot make a munge key"
fi
chmod 400 "$T/munge/munge.key"
SOCK=$T/munge-run/munge.socket
env "$MARK" munged -F -S "$SOCK" --key-file="$T/munge/munge.key" \
    --pid-file="$T/run/munged.pid" --seed-file="$T/munge/munged.seed" >"$T/log/munged.out" 2>&1 &
pid_munged=$!
n=0
until munge -n -S "$SOCK" 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1; do
    alive "$pid_munged" || fatal "Slurm cannot run here: munged exited at start: $(last_words "$T/log/munged.out")"
    [ $n -ge 50 ] && fatal "Slurm cannot run here: munged not answering on $SOCK after 10 s"
    sleep 0.2
    n=$((n + 1))
done
ok "munged (pid $pid_munged) on $SOCK: a credential encodes and decodes"

# NNODES slurmd "nodes" on localhost, each its own slurmd (slurmd -N NAME: Debian's Slurm is built
# with multiple-slurmd), its own port, spool and log. Their names carry the controller's port so
# that two test clusters on one machine never share a cgroup (Slurm's are slurm_<node name>/...).
# The walk-through runs its three points (2 + 3 + 2 ranks) and a 2-rank job side by side: 9 nodes.
[ -n "$NNODES" ] || { NNODES=5; [ "$WALK" = 1 ] && NNODES=9; }
case "$NNODES" in ''|*[!0-9]*) fatal "DSGD_SLURM_NODES='$NNODES': expected a number of nodes (3..16)" ;; esac
[ "$NNODES" -ge 3 ] && [ "$NNODES" -le 16 ] || fatal "DSGD_SLURM_NODES=$NNODES: expected 3..16"
# free TCP ports: the controller's and one per slurmd (another Slurm here keeps its 6817/6818)
ports=$($PY -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]) + 1)]
for s in ss: s.bind(("", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$NNODES") || fatal "cannot find free TCP ports"
CTLD_PORT=${ports%% *}
NODE_PORTS=${ports#* }
PFX=c${CTLD_PORT}n
echo "$PFX" >"$T/run/node-prefix"
NODES="${PFX}[1-$NNODES]"
NODE_NAMES=$(i=1; while [ $i -le "$NNODES" ]; do printf '%s%s ' "$PFX" $i; i=$((i + 1)); done)
NCORE=$(nproc)
# Cores are split between the nodes with cgroups (cgroup v1 cpuset, Slurm's task/cgroup) and
# core specialization: node i has the machine's NCORE cores, all but core (i-1) mod NCORE reserved
# for the system (CpuSpecList), so its jobs get exactly that core, in a cpuset they cannot leave,
# and task/affinity binds each task to it; slurmd itself is confined to the reserved cores. With
# 2 cores: odd nodes' jobs run on core 0, even nodes' on core 1. Without a writable cgroup v1
# cpuset hierarchy (cgroup v2 needs systemd in Slurm 22.05; a container may mount none), or with
# DSGD_SLURM_CGROUP=0, each node declares 1 CPU and nothing is bound (said below).
CG_ROOT=/sys/fs/cgroup
if [ "$CGROUP" = 1 ]; then
    if [ ! -f "$CG_ROOT/cpuset/cpuset.cpus" ] || [ ! -d "$CG_ROOT/freezer" ]; then
        CGROUP=0 CG_WHY="no cgroup v1 cpuset and freezer hierarchies under $CG_ROOT"
    elif ! mkdir "$CG_ROOT/cpuset/dsgd-probe.$$" 2>/dev/null; then
        CGROUP=0 CG_WHY="cannot create a cgroup under $CG_ROOT/cpuset"
    else
        rmdir "$CG_ROOT/cpuset/dsgd-probe.$$"
    fi
else
    CG_WHY="DSGD_SLURM_CGROUP=$CGROUP"
fi
export SLURM_CONF="$T/etc/slurm.conf"
: >"$T/etc/plugstack.conf"
if [ "$CGROUP" = 1 ]; then
    PLUGINS="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity"
    cat >"$T/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=$CG_ROOT
ConstrainCores=yes
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
else
    PLUGINS="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none"
fi
cat >"$SLURM_CONF" <<EOF
# $NNODES-node test cluster of test/slurm/run.sh on localhost (removed at exit)
ClusterName=dsgdtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$SOCK,cred_expire=30
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd-%n.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$T/etc/plugstack.conf
MailProg=/bin/true
$PLUGINS
JobAcctGatherType=jobacct_gather/none
# no slurmdbd: finished jobs are recorded by jobcomp/filetxt, which sacct -c reads
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$T/log/jobcomp.txt
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
MessageTimeout=10
InactiveLimit=0
# time limits as a site has them, only shorter: SIGTERM at the limit (no grace: OverTimeLimit=0),
# SIGKILL KillWait s later
KillWait=15
OverTimeLimit=0
Waittime=0
MinJobAge=600
PartitionName=test Nodes=$NODES Default=YES MaxTime=INFINITE State=UP
EOF
i=1
for port in $NODE_PORTS; do
    node=$PFX$i
    core=$(((i - 1) % NCORE))
    if [ "$CGROUP" = 1 ] && [ "$NCORE" -gt 1 ]; then
        spec=$(c=0; while [ $c -lt "$NCORE" ]; do [ $c -ne $core ] && printf '%s,' $c; c=$((c + 1)); done)
        echo "NodeName=$node NodeAddr=127.0.0.1 Port=$port CPUs=$NCORE Sockets=1 CoresPerSocket=$NCORE ThreadsPerCore=1 CpuSpecList=${spec%,} State=UNKNOWN"
    else
        echo "NodeName=$node NodeAddr=127.0.0.1 Port=$port CPUs=1 Sockets=1 CoresPerSocket=1 ThreadsPerCore=1 State=UNKNOWN"
    fi
    mkdir -p "$T/spool/$node"
    i=$((i + 1))
done >>"$SLURM_CONF"

env "$MARK" slurmctld -D -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
pid_ctld=$!
n=0
until timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"; do
    alive "$pid_ctld" || fatal "Slurm cannot run here: slurmctld exited at start: $(last_words "$T/log/slurmctld.out")"
    [ $n -ge 60 ] && fatal "Slurm cannot run here: slurmctld not answering scontrol ping after 30 s"
    sleep 0.5
    n=$((n + 1))
done
ok "slurmctld (pid $pid_ctld) up on port $CTLD_PORT"
for node in $NODE_NAMES; do
    env "$MARK" slurmd -D -N "$node" -f "$SLURM_CONF" >"$T/log/slurmd-$node.out" 2>&1 &
    pid_slurmd="$pid_slurmd $!"
done
n=0
while :; do
    idle=$(timeout 10 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | grep -c .)
    [ "$idle" = "$NNODES" ] && break
    for p in $pid_slurmd; do
        alive "$p" || fatal "Slurm cannot run here: a slurmd (pid $p) exited at start: $(for f in "$T"/log/slurmd-*.out; do last_words "$f"; done)"
    done
    [ $n -ge 120 ] && fatal "Slurm cannot run here: $idle of $NNODES nodes idle after 60 s (sinfo: $(timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | tr '\n' ' '); $(timeout 10 scontrol show node 2>/dev/null | grep -o 'Reason=.*' | head -n 1))"
    sleep 0.5
    n=$((n + 1))
done
ok "$NNODES slurmd (pids$pid_slurmd) up: sinfo shows nodes $NODES idle ($NCORE cores here)"
# What is really split: each node's job cpuset, read back from a one-task step on every node.
if [ "$CGROUP" = 1 ]; then
    timeout 60 srun -N "$NNODES" -n "$NNODES" --time=1 sh -c 'echo "$SLURMD_NODENAME $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) $(cat '"$CG_ROOT"'/cpuset$(sed -n "s/^[0-9]*:cpuset://p" /proc/self/cgroup)/cpuset.cpus)"' \
        2>"$T/log/srun-cores.log" | sort >"$T/node-cores"
    bad_nodes=
    i=1
    for node in $NODE_NAMES; do
        want=$(((i - 1) % NCORE))
        grep -qx "$node $want $want" "$T/node-cores" || bad_nodes="$bad_nodes $node"
        i=$((i + 1))
    done
    if [ -z "$bad_nodes" ]; then
        ok "cores split by cgroup cpusets and task/affinity: $(awk '{printf "%s%s core %s", s, $1, $3; s=", "}' "$T/node-cores")"
    else
        bad "node cpusets (node, affinity mask, cgroup cpuset.cpus) not the expected core for$bad_nodes: $(tr '\n' ';' <"$T/node-cores") $(tail -n 2 "$T/log/srun-cores.log" | tr '\n' ' ')"
    fi
else
    echo "   NOT ENFORCED: the nodes' cores are not split ($CG_WHY): ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, every task may run on every core"
fi
[ "$(id -u)" -eq 0 ] && info "jobs run as root here (the test cluster's slurmd runs as root and the test submits as root)"

# The submission directory: a scratch copy of what jobs need (nothing is written to the repository).
W=$T/work
mkdir -p "$W/jobs" "$W/configs"
cp ./dsgd-run "$W/" && cp -r jobs/slurm "$W/jobs/" && cp configs/linear.cfg "$W/configs/" \
    || fatal "cannot copy dsgd-run, jobs/slurm and configs/linear.cfg to $W"

# The state and exit code of a job: "COMPLETED 0:0", "FAILED 2:0", ... (or nothing if unknown).
job_state() {
    timeout 10 scontrol show job -o "$1" </dev/null 2>/dev/null \
        | sed -n 's/.*JobState=\([A-Z_]*\).* ExitCode=\([0-9:]*\).*/\1 \2/p'
}
# Wait (up to JOB_TIMEOUT s from now) until every job in $* has ended; 1 on a timeout.
wait_jobs() {
    end=$(($(date +%s) + JOB_TIMEOUT))
    while :; do
        going=
        for j in "$@"; do
            st=$(job_state "$j")   # one line per task of an array
            if [ -z "$st" ] || echo "$st" | grep -qE '^(PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUE|RESIZING|SUSPENDED|STAGE_OUT)'; then
                going="$going $j"
            fi
        done
        [ -z "$going" ] && return 0
        if [ "$(date +%s)" -ge "$end" ]; then
            echo "   still not ended after ${JOB_TIMEOUT} s:$going"
            for j in $going; do timeout 10 scontrol show job "$j" 2>/dev/null | grep -E "JobState|Reason" | sed 's/^/   /'; done
            return 1
        fi
        sleep 1
    done
}
# Check one finished job: state, output file, run file (status, last eval step, and more attrs).
#   check_job JOBID RUNFILE ITERATIONS [ATTR=VALUE ...]
check_job() {
    _j=$1
    shift
    check_files "$_j" "$(job_state "$_j")" "$@"
}
#   check_files JOBID "STATE EXITCODE" RUNFILE ITERATIONS [ATTR=VALUE ...]
check_files() {
    j=$1 st=$2 run=$3 iters=$4
    shift 4
    if [ "$st" = "COMPLETED 0:0" ]; then
        ok "job $j: COMPLETED, exit code 0:0"
    else
        bad "job $j: ${st:-no state from scontrol} (expected COMPLETED 0:0)"
        [ -f "$W/dsgd-$j.out" ] && tail -n 15 "$W/dsgd-$j.out" | sed 's/^/   | /'
    fi
    [ -s "$W/dsgd-$j.out" ] && ok "job $j: output file dsgd-$j.out" || bad "job $j: no output file $W/dsgd-$j.out"
    if [ ! -f "$W/$run" ]; then
        bad "job $j: no run file $run"
        return
    fi
    msg=$(timeout 60 $PY - "$W/$run" "$iters" "$@" <<'EOF' 2>&1
import sys, h5py
path, iters, want = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def a(f, k):
    v = f.attrs.get(k)
    return v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)
errs = []
with h5py.File(path, "r") as f:
    st = a(f, "status")
    if st != "completed":
        errs.append(f"status {st!r}, expected 'completed'")
    steps = f["eval/step"][:] if "eval" in f and "step" in f["eval"] else []
    if len(steps) == 0 or int(steps[-1]) != iters:
        errs.append(f"last /eval step {int(steps[-1]) if len(steps) else None}, expected {iters}")
    for kv in want:
        k, v = kv.split("=", 1)
        if str(a(f, k)) != v:
            errs.append(f"attribute {k} = {a(f, k)!r}, expected {v}")
    desc = f"status {st}, last /eval step {int(steps[-1]) if len(steps) else None}, top-1 error {float(f['eval/top1_error'][-1]):.4f}" if len(steps) else ""
print("; ".join(errs) if errs else desc + "".join(f", {kv}" for kv in want))
sys.exit(1 if errs else 0)
EOF
)
    if [ $? -eq 0 ]; then ok "job $j: $run: $msg"; else bad "job $j: $run: $msg"; fi
}

if [ "$MODE" = check ]; then
# ---------------------------------------------------------------------------------------------
# 3. a sweep, submitted for real: allreduce (2 ranks) and ps (2 workers + 1 server), p = 2, m = 64
# ---------------------------------------------------------------------------------------------
section "tools/sweep.py, submitted with sbatch"
# --ranks-per-node 1 (a CPU cluster): allreduce on 2 nodes, ps on 3; --time: a bound on each job.
(cd "$W" && env "$MARK" timeout 120 $PY "$REPO/tools/sweep.py" configs/linear.cfg --vary method=allreduce,ps --vary p=2 \
    --m 64 --set iterations=300 --set eval.every=100 --name slurmtest --ranks-per-node 1 --job-args=--time=5) \
    >"$T/log/sweep.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/sweep.log"
[ $rc -eq 0 ] || fatal "tools/sweep.py exit status $rc"
# stem and job id of every point
pairs=$($PY -c '
import json, sys
s = json.load(open(sys.argv[1]))
for j in s["jobs"]:
    for stem in j["points"]:
        print(stem, j.get("job_id", "none"))' "$W/sweeps/slurmtest/sweep.json") || fatal "cannot read sweeps/slurmtest/sweep.json"
n=$(echo "$pairs" | grep -c .)
ids=$(echo "$pairs" | awk '{print $2}' | tr '\n' ' ')
if [ "$n" = 2 ] && ! echo "$ids" | grep -q none; then
    ok "sweep.py submitted 2 jobs: $ids"
else
    bad "sweep.py: expected 2 submitted jobs, sweep.json has: $pairs"
fi
# shellcheck disable=SC2086
wait_jobs $ids || bad "sweep jobs not ended within $JOB_TIMEOUT s"
runs=
echo "$pairs" >"$T/pairs"
while read -r stem j; do
    check_job "$j" "runs/$stem.$j.h5" 300 p=2
    runs="$runs runs/$stem.$j.h5"
done <"$T/pairs"
# the sweep's ps job had 3 tasks on the node
ps_id=$(echo "$pairs" | awk '/-ps-/{print $2}')
nt=$(timeout 10 scontrol show job -o "$ps_id" 2>/dev/null | sed -n 's/.*NumTasks=\([0-9]*\).*/\1/p')
[ "$nt" = 3 ] && ok "sweep's ps job ran on 3 tasks (2 workers + 1 server)" || bad "sweep's ps job: NumTasks=${nt:-?}, expected 3"

section "tools/plot_runs.py on the sweep's run files"
# shellcheck disable=SC2086
(cd "$W" && timeout 120 $PY "$REPO/tools/plot_runs.py" $runs --out "$T/plots/slurmtest") >"$T/table.md" 2>"$T/log/plot.log"
rc=$?
[ $rc -eq 0 ] && ok "plot_runs.py exit status 0" || bad "plot_runs.py exit status $rc: $(tail -n 5 "$T/log/plot.log")"
for s in .png -steptime.png; do
    [ -s "$T/plots/slurmtest$s" ] && ok "plot slurmtest$s written" || bad "no plot slurmtest$s"
done
while read -r stem j; do
    method=${stem#slurmtest-}
    method=${method%-p2}
    if grep -q "^| $stem.$j.h5 | $method | 2 | 32 | 64 | 300/300 | .* | completed |" "$T/table.md"; then
        ok "table row: $stem.$j.h5, $method, p = 2, b = 32, m = 64, 300/300, completed"
    else
        bad "table has no completed row for $stem.$j.h5"
        sed 's/^/   | /' "$T/table.md"
    fi
done <"$T/pairs"

# ---------------------------------------------------------------------------------------------
# 3b. a sweep with --array: the two points of one world size (2 ranks) in one job array, each
#     task taking its experiment from the point list by SLURM_ARRAY_TASK_ID
# ---------------------------------------------------------------------------------------------
section "tools/sweep.py --array, submitted with sbatch"
(cd "$W" && env "$MARK" timeout 120 $PY "$REPO/tools/sweep.py" configs/linear.cfg --vary method=allreduce,gossip_pull --vary p=2 \
    --m 64 --set iterations=300 --set eval.every=100 --name slurmarray --array --ranks-per-node 1 --job-args=--time=5) \
    >"$T/log/sweep-array.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/sweep-array.log"
aid=$($PY -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["jobs"]) == 1 and len(s["jobs"][0]["points"]) == 2, s["jobs"]
print(s["jobs"][0]["job_id"])' "$W/sweeps/slurmarray/sweep.json" 2>"$T/log/sweep-array.err")
if [ $rc -ne 0 ] || [ -z "$aid" ]; then
    bad "sweep.py --array: exit status $rc, no single array job in sweep.json ($(tail -n 1 "$T/log/sweep-array.err"))"
else
    ok "sweep.py --array submitted one job array: $aid"
    wait_jobs "$aid" || bad "array job $aid not ended within $JOB_TIMEOUT s"
    # each task: its own job id, its point (line ArrayTaskId of the list), state, files
    timeout 10 scontrol show job -o "$aid" 2>/dev/null \
        | sed -n 's/^JobId=\([0-9]*\) .*ArrayTaskId=\([0-9]*\) .*JobState=\([A-Z_]*\) .* ExitCode=\([0-9:]*\) .*/\1 \2 \3 \4/p' \
        >"$T/array-tasks"
    n=$(grep -c . "$T/array-tasks")
    [ "$n" = 2 ] && ok "array job $aid has 2 tasks" || bad "array job $aid: $n tasks in scontrol show job, expected 2"
    while read -r tj k st ec; do
        stem=$(sed -n "$((k + 1))p" "$W/sweeps/slurmarray/ranks2.list" 2>/dev/null)
        stem=$(basename "${stem:-none}" .cfg)
        method=${stem#slurmarray-}
        # an array task's run id is <array job id>_<task index>, as squeue shows it (INTERFACES.md)
        check_files "$tj" "$st $ec" "runs/$stem.${aid}_$k.h5" 300 p=2 "method=${method%-p2}"
    done <"$T/array-tasks"
fi

# ---------------------------------------------------------------------------------------------
# 4. dsgd.sbatch by hand: p from the allocation (3 tasks, ps with 1 server: p = 2)
# ---------------------------------------------------------------------------------------------
section "sbatch jobs/slurm/dsgd.sbatch by hand, p from the allocation"
# 3 nodes, the script's one rank per node. The experiment says p = 1 (linear.cfg: 2); the
# allocation must decide: 3 ranks - 1 server = 2 workers, m = 2 * 32.
j=$(cd "$W" && env "$MARK" timeout 30 sbatch --parsable --nodes=3 --time=5 \
    jobs/slurm/dsgd.sbatch configs/linear.cfg --set method=ps --set p=1 --set iterations=300 --set eval.every=100 \
    2>"$T/log/sbatch.log")
rc=$?
j=${j%%;*}
if [ $rc -ne 0 ] || [ -z "$j" ]; then
    bad "sbatch dsgd.sbatch: exit status $rc: $(cat "$T/log/sbatch.log")"
else
    ok "submitted job $j (3 nodes, a task on each)"
    wait_jobs "$j" || bad "job $j not ended within $JOB_TIMEOUT s"
    check_job "$j" "runs/linear.$j.h5" 300 p=2 m=64 method=ps
    grep -q "3 rank(s)" "$W/dsgd-$j.out" 2>/dev/null && ok "job $j: the job script saw 3 ranks (SLURM_NTASKS)" \
        || bad "job $j: dsgd-$j.out does not say 3 rank(s)"
fi

# A bad experiment: dsgd-run's exit status 2 must reach Slurm (FAILED, 2:0) with its message in
# the job's output; this also shows the checks above can fail.
j=$(cd "$W" && env "$MARK" timeout 30 sbatch --parsable --nodes=2 --time=5 \
    jobs/slurm/dsgd.sbatch configs/linear.cfg --set alpha.bse=1 2>"$T/log/sbatch-bad.log")
rc=$?
j=${j%%;*}
if [ $rc -ne 0 ] || [ -z "$j" ]; then
    bad "sbatch dsgd.sbatch (bad key): exit status $rc: $(cat "$T/log/sbatch-bad.log")"
else
    wait_jobs "$j" || bad "job $j not ended within $JOB_TIMEOUT s"
    st=$(job_state "$j")
    if [ "$st" = "FAILED 2:0" ] && grep -q "unknown key 'alpha.bse'" "$W/dsgd-$j.out" 2>/dev/null; then
        ok "job $j (--set alpha.bse=1): FAILED with exit code 2:0, dsgd-run's message in dsgd-$j.out"
    else
        bad "job $j (--set alpha.bse=1): ${st:-no state}, expected FAILED 2:0 and the unknown key message: $(tail -n 3 "$W/dsgd-$j.out" 2>/dev/null)"
    fi
fi

# ---------------------------------------------------------------------------------------------
# 5. Requeue: the job continues from its checkpoint in the same run file
# ---------------------------------------------------------------------------------------------
section "scontrol requeue of a running job: it resumes from its checkpoint"
# 3000 iterations with a 2 ms delay per step on worker 0: about 8 s here, long enough to be
# requeued after its first checkpoint (every 100 iterations); log and evaluate every 100.
j=$(cd "$W" && env "$MARK" timeout 30 sbatch --parsable --nodes=2 --time=5 \
    jobs/slurm/dsgd.sbatch configs/linear.cfg --set iterations=3000 --set log_every=100 --set eval.every=500 \
    --set checkpoint.every=100 --set inject.slow_ranks=[0] --set inject.delay_ms=2.0 2>"$T/log/sbatch-rq.log")
rc=$?
j=${j%%;*}
if [ $rc -ne 0 ] || [ -z "$j" ]; then
    bad "sbatch dsgd.sbatch (requeue test): exit status $rc: $(cat "$T/log/sbatch-rq.log")"
else
    ok "submitted job $j (3000 iterations, a checkpoint every 100)"
    latest="$W/runs/linear.$j.ckpt/latest"
    n=0
    while [ ! -s "$latest" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
    if [ ! -s "$latest" ]; then
        bad "job $j: no checkpoint ($latest) within 60 s: $(job_state "$j"); $(tail -n 3 "$W/dsgd-$j.out" 2>/dev/null)"
    else
        first=$(cat "$latest")
        sleep 0.5
        if timeout 30 scontrol requeue "$j" 2>"$T/log/requeue.log"; then
            ok "job $j requeued by scontrol after its checkpoint $first"
        else
            bad "scontrol requeue $j: $(cat "$T/log/requeue.log")"
        fi
        # the requeued job waits as PENDING (Slurm holds it back briefly), then runs again
        wait_jobs "$j" || bad "job $j not ended within $JOB_TIMEOUT s after the requeue"
        check_job "$j" "runs/linear.$j.h5" 3000
        run="$W/runs/linear.$j.h5"
        restarts=$(timeout 10 scontrol show job "$j" 2>/dev/null | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
        [ "${restarts:-0}" -ge 1 ] && ok "job $j: Restarts=$restarts (Slurm ran it again)" \
            || bad "job $j: Restarts=${restarts:-?}: it was not run again"
        grep -q "resuming from" "$W/dsgd-$j.out" 2>/dev/null && ok "job $j: $(grep -m1 "resuming from" "$W/dsgd-$j.out")" \
            || bad "job $j: dsgd-$j.out does not say it resumed: $(tail -n 5 "$W/dsgd-$j.out" 2>/dev/null | tr '\n' '|')"
        if $PY - "$run" >"$T/log/requeue-check.log" 2>&1 <<'PYEOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
steps, times = f["train/step"][:], f["train/time_s"][:]
want = np.arange(100, 3001, 100)
assert np.array_equal(steps, want), f"/train/step {steps.tolist()} (want 100, 200, ..., 3000: no duplicates, no gaps)"
assert np.all(np.diff(times) >= 0), f"/train/time_s goes back: {times.tolist()}"
ev = f["eval/step"][:]
assert np.all(np.diff(ev) > 0) and ev[-1] == 3000, f"/eval/step {ev.tolist()}"
assert int(f.attrs["resumes"]) >= 1, "no resume recorded"
print(f"{len(steps)} /train rows 100..3000, time_s {times[0]:.2f}..{times[-1]:.2f} s, /eval at {ev.tolist()}, "
      f"resumes = {int(f.attrs['resumes'])}: {f.attrs['resumed_at']}")
PYEOF
        then
            ok "job $j: the run file continues across the requeue: $(tail -n 1 "$T/log/requeue-check.log")"
        else
            bad "job $j: run file after the requeue: $(tail -n 3 "$T/log/requeue-check.log" | tr '\n' ' ')"
        fi
        if (cd "$W" && timeout 120 $PY "$REPO/tools/plot_runs.py" "runs/linear.$j.h5" --out "plots/requeued" >"$T/log/plot-rq.log" 2>&1) \
            && [ -s "$W/plots/requeued.png" ]; then
            ok "plot_runs.py drew the requeued run: plots/requeued.png"
        else
            bad "plot_runs.py on the requeued run: $(tail -n 3 "$T/log/plot-rq.log" | tr '\n' ' ')"
        fi
    fi
fi

fi  # MODE = check

if [ "$MODE" = fig1 ]; then
# ---------------------------------------------------------------------------------------------
# 6. a small Figure 1 (Jin et al.): tools/paper.py fig1 at p = 2, 4 on packed Fashion-MNIST
# ---------------------------------------------------------------------------------------------
section "small Figure 1: data"
mkdir -p "$W/configs/paper" && cp configs/paper/* "$W/configs/paper/" || fatal "cannot copy configs/paper"
$PY tools/idx_to_tree.py "$T/fm-src" --train 12000 --val 2000 >"$T/log/tree.log" 2>&1 || fatal "idx_to_tree.py: $(tail -n 2 "$T/log/tree.log")"
./dsgd-run --pack "$T/fm-src" "$T/fm-pack" --threads 2 --shard-images 4000 >"$T/log/pack.log" 2>&1 \
    && ok "$(tail -n 1 "$T/log/pack.log")" || fatal "dsgd-run --pack: $(tail -n 3 "$T/log/pack.log")"
section "small Figure 1: tools/paper.py fig1 --p 2,4 --m 64, submitted with sbatch"
# The paper's files with what a 2-core machine affords instead of ResNet-18 on ImageNet: a linear
# model (ResNet-18 costs seconds per step here), 28-pixel crops of S in [28, 32], 1500 iterations
# with alpha x0.1 at 500 and 1000 (the paper's 150k / 300k of our 450k, scaled), alpha_0 = 0.01
# (0.1 diverges on the linear model). One rank per node (--ranks-per-node 1) on exclusive nodes,
# one job at a time (--dependency=singleton: the jobs share the name dsgd), so wall clocks compare.
(cd "$W" && env "$MARK" timeout 300 $PY "$REPO/tools/paper.py" fig1 --p 2,4 --m 64 --data-dir "$T/fm-pack" \
    --set model.arch=linear --set data.crop=28 --set 'data.scale=[28,32]' --set data.eval_resize=28 --set data.classes=10 \
    --set iterations=1500 --set alpha.base=0.01 --set 'alpha.steps=[500,1000]' --set eval.every=50 --set log_every=20 \
    --set checkpoint.every=0 --name fig1-small --ranks-per-node 1 --time 10 --job-args='--dependency=singleton') >"$T/log/fig1.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/fig1.log"
[ $rc -eq 0 ] || fatal "tools/paper.py fig1: exit status $rc"
ids=$($PY -c '
import json, sys
print(" ".join(j["job_id"] for j in json.load(open(sys.argv[1]))["jobs"]))' "$W/sweeps/fig1-small/sweep.json") || fatal "no job ids in sweep.json"
ok "submitted: $ids"
# shellcheck disable=SC2086
wait_jobs $ids || bad "small Figure 1 jobs not ended within $JOB_TIMEOUT s"
for j in $ids; do
    timeout 10 scontrol show job -o "$j" 2>/dev/null | sed -n 's/^JobId=\([0-9]*\) .*JobState=\([A-Z_]*\) .* ExitCode=\([0-9:]*\) .*/\1 \2 \3/p'
done >"$T/fig1-jobs"
while read -r tj st ec; do
    [ "$st $ec" = "COMPLETED 0:0" ] && ok "job $tj: COMPLETED 0:0" || { bad "job $tj: $st $ec"; tail -n 5 "$W/dsgd-$tj.out" 2>/dev/null | sed 's/^/   | /'; }
done <"$T/fig1-jobs"
n=$(ls "$W"/runs/fig1-small-*.h5 2>/dev/null | wc -l)
[ "$n" = 6 ] && ok "6 run files (3 methods x p = 2, 4)" || bad "$n run files in runs/, expected 6"
section "small Figure 1: tools/report.py"
(cd "$W" && timeout 120 $PY "$REPO/tools/report.py" sweeps/fig1-small --out "$FIG1_OUT/fig1-small" --targets 0.3,0.25,0.22 \
    --title "small Figure 1: linear model on packed Fashion-MNIST (JPEG), local Slurm, 2 cores" --overwrite) \
    >"$T/log/report.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/report.log"
[ $rc -eq 0 ] && [ -s "$FIG1_OUT/fig1-small.png" ] && ok "report: $FIG1_OUT/fig1-small.{md,png,pdf}" || bad "report.py: exit status $rc"
grep -c "| completed |" "$FIG1_OUT/fig1-small.md" | grep -qx 6 && ok "report: 6 completed points" || bad "report: not 6 completed rows"
mkdir -p "$FIG1_OUT/runs" "$FIG1_OUT/sweeps" && cp "$W"/runs/fig1-small-*.h5 "$FIG1_OUT/runs/" && cp -r "$W/sweeps/fig1-small" "$FIG1_OUT/sweeps/" \
    && cp "$W"/dsgd-*.out "$FIG1_OUT/" 2>/dev/null
fi  # MODE = fig1

if [ "$MODE" = scaling ]; then
# ---------------------------------------------------------------------------------------------
# 7. a small scaling sweep: tools/paper.py scaling (synthetic data, img/s against p) at p = 1, 2, 4
# ---------------------------------------------------------------------------------------------
section "small scaling sweep: tools/paper.py scaling --p 1,2,4, submitted with sbatch"
mkdir -p "$W/configs/paper" && cp configs/paper/* "$W/configs/paper/" || fatal "cannot copy configs/paper"
# What 2 cores afford instead of ResNet-18 at 224²: ResNet-18 width 16 on 3x32x32 synthetic inputs
# with 10 classes, 30 steps of b = 16 per worker (weak scaling: m grows with p), evaluation only
# at the end; one rank per node, one job at a time (--dependency=singleton), so the img/s compare.
(cd "$W" && env "$MARK" timeout 300 $PY "$REPO/tools/paper.py" scaling --p 1,2,4 --methods allreduce,easgd,gossip_pull,gossip_push \
    --set model.width=16 --set model.stem=cifar --set 'data.shape=[3,32,32]' --set data.classes=10 --set b=16 \
    --set iterations=30 --set 'alpha.steps=[10,20]' --set eval.every=30 --set eval.at_start=false --set log_every=10 --set checkpoint.every=0 --set threads=1 \
    --name scaling-small --ranks-per-node 1 --time 10 --job-args='--dependency=singleton') >"$T/log/scaling.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/scaling.log"
[ $rc -eq 0 ] || fatal "tools/paper.py scaling: exit status $rc"
ids=$($PY -c '
import json, sys
print(" ".join(j["job_id"] for j in json.load(open(sys.argv[1]))["jobs"]))' "$W/sweeps/scaling-small/sweep.json") || fatal "no job ids in sweep.json"
ok "submitted: $ids"
# shellcheck disable=SC2086
wait_jobs $ids || bad "scaling jobs not ended within $JOB_TIMEOUT s"
n=$(ls "$W"/runs/scaling-small-*.h5 2>/dev/null | wc -l)
[ "$n" = 12 ] && ok "12 run files (4 methods x p = 1, 2, 4)" || bad "$n run files in runs/, expected 12"
(cd "$W" && timeout 120 $PY "$REPO/tools/report.py" sweeps/scaling-small --out "$FIG1_OUT/scaling-small" \
    --title "small scaling sweep: ResNet-18 w16, synthetic 3x32x32, local Slurm, 2 cores" --overwrite) >"$T/log/report.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/report.log"
[ $rc -eq 0 ] && [ -s "$FIG1_OUT/scaling-small.png" ] && ok "report: $FIG1_OUT/scaling-small.{md,png,pdf}" || bad "report.py: exit status $rc"
mkdir -p "$FIG1_OUT/runs" && cp "$W"/runs/scaling-small-*.h5 "$FIG1_OUT/runs/" && cp "$W"/dsgd-*.out "$FIG1_OUT/" 2>/dev/null
fi  # MODE = scaling

if [ "$WALK" = 1 ]; then
# ---------------------------------------------------------------------------------------------
# 8. The cluster walk-through of docs/reproduce.md with a 1-minute time limit: tools/paper.py fig1
#    (small: p = 2, linear model, Fashion-MNIST as JPEG shards) as chains of 1-minute jobs, one job
#    SIGKILLed mid-run, the chained all-reduce point against the same point run unchained, and
#    tools/report.py's job states against Slurm's record; beside it a job that reaches its time
#    limit for real (no stop_at) and is continued by hand.
# ---------------------------------------------------------------------------------------------
tw=$(date +%s)
# the job id of a job or array task (1234_0 -> its own JobId, whose output is dsgd-<that>.out)
raw_id() { timeout 10 scontrol show job -o "$1" 2>/dev/null | sed -n 's/^JobId=\([0-9]*\) .*/\1/p' | head -n 1; }
# Each step of every worker sleeps WALK_DELAY_MS (inject.delay_ms; slept, not computed: the cores
# stay free), so a point is over 1500 x 0.12 s = 180 s of training: more than two jobs even where
# a run does not stop itself and Slurm's SIGTERM comes as late as 89 s after the start (slurmctld
# checks time limits every 30 s); with stop_at (10 s before the end) 4-5 jobs.
# The run stops (checkpoint, exit 3) this long before the job's end (key stop_at, set by dsgd.sbatch).
section "walk-through: data (Fashion-MNIST as JPEG shards)"
mkdir -p "$W/configs/paper" && cp configs/paper/* "$W/configs/paper/" || fatal "cannot copy configs/paper"
$PY tools/idx_to_tree.py "$T/fm-src" --train 12000 --val 2000 >"$T/log/tree.log" 2>&1 || fatal "idx_to_tree.py: $(tail -n 2 "$T/log/tree.log")"
./dsgd-run --pack "$T/fm-src" "$T/fm-pack" --threads 2 --shard-images 4000 >"$T/log/pack.log" 2>&1 \
    && ok "$(tail -n 1 "$T/log/pack.log")" || fatal "dsgd-run --pack: $(tail -n 3 "$T/log/pack.log")"
stop_key=0
./dsgd-run --help 2>/dev/null | grep -q '^  stop_at ' && stop_key=1
[ $stop_key = 1 ] && info "dsgd-run knows stop_at: each link stops itself $WALK_MARGIN s before its end (DSGD_STOP_MARGIN_S)" \
    || info "this dsgd-run has no stop_at key: every link runs into its time limit (SIGTERM at the limit)"

# The time limit for real, as docs/reproduce.md's fallback: a 2-minute job whose run does not stop
# itself (stop_at an hour after the limit: DSGD_STOP_MARGIN_S=-3600) gets USR1 40 s before the
# limit (a checkpoint, training goes on; Slurm sends it at its periodic time-limit check, up to
# 30 s earlier: with a 1-minute limit it comes right at the start) and SIGTERM at it (a checkpoint,
# exit 3): TIMEOUT. checkpoint.every = 0: any checkpoint before the last is USR1's. The
# continuation documented in jobs/README.md (sbatch --export=ALL,DSGD_RUN_ID=<id>) finishes it.
section "walk-through: a job that reaches its 2-minute limit (TIMEOUT), then its continuation"
T8_ARGS="configs/linear.cfg --set iterations=4000 --set log_every=100 --set eval.every=500 --set checkpoint.every=0 --set inject.slow_ranks=[0,1] --set inject.delay_ms=40"
# shellcheck disable=SC2086
t8=$(cd "$W" && env "$MARK" DSGD_STOP_MARGIN_S=-3600 timeout 30 sbatch --parsable --nodes=2 --time=2 --signal=B:USR1@40 \
    jobs/slurm/dsgd.sbatch $T8_ARGS 2>"$T/log/sbatch-t8.log")
t8=${t8%%;*}
[ -n "$t8" ] && ok "submitted job $t8 (2 nodes, --time=2 --signal=B:USR1@40, 4000 iterations of >= 40 ms)" \
    || bad "sbatch of the time-limit job: $(cat "$T/log/sbatch-t8.log")"

section "walk-through: tools/paper.py fig1 --p 2 --m 64 --time 1 --max-time 8 (chains of 1-minute jobs)"
# docs/reproduce.md §5 with what 2 cores afford (the fig1-small settings: linear model, 28-pixel
# crops, 1500 iterations, alpha_0 = 0.01 x0.1 at 500 and 1000) and: a checkpoint every 250
# iterations, every worker slowed by WALK_DELAY_MS a step, --time 1 (minute) and --max-time 8: a
# chain of 8 links per point (the links after the run's completion exit 0 at once), USR1 40 s
# before each limit. The points run side by side: allreduce and gossip_push (2 nodes each, one job
# array per link), easgd (3 nodes).
(cd "$W" && env "$MARK" DSGD_STOP_MARGIN_S="$WALK_MARGIN" timeout 300 $PY "$REPO/tools/paper.py" fig1 --p 2 --m 64 --data-dir "$T/fm-pack" \
    --set model.arch=linear --set data.crop=28 --set 'data.scale=[28,32]' --set data.eval_resize=28 --set data.classes=10 \
    --set iterations=1500 --set alpha.base=0.01 --set 'alpha.steps=[500,1000]' --set eval.every=50 --set log_every=20 \
    --set checkpoint.every=250 --set 'inject.slow_ranks=[0,1]' --set inject.delay_ms="$WALK_DELAY_MS" \
    --name fig1-chain --time 1 --max-time 8 --job-args='--signal=B:USR1@40') >"$T/log/walk.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/walk.log"
[ $rc -eq 0 ] || fatal "tools/paper.py fig1 --time 1 --max-time 8: exit status $rc"
# stem, link, the scheduler's id of the link (an array task: <array id>_<index>), run id
$PY - "$W/sweeps/fig1-chain/sweep.json" >"$T/walk-links" 2>"$T/log/walk-links.err" <<'PYEOF' || fatal "sweeps/fig1-chain/sweep.json: $(tail -n 2 "$T/log/walk-links.err")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["chain"] >= 3 and s["time"], f"chain {s['chain']}, time {s['time']}"
for j in s["jobs"]:
    jid = str(j["job_id"]).split(";")[0]
    for stem in j["points"]:
        rid = j["run_ids"][stem]
        sid = f"{jid}_{rid.split('_')[1]}" if "_" in rid else jid
        print(stem, j["link"], sid, rid)
PYEOF
nlinks=$(grep -c . "$T/walk-links")
npoints=$(awk '{print $1}' "$T/walk-links" | sort -u | grep -c .)
[ "$npoints" = 3 ] && ok "sweep.json: $npoints points, $nlinks links (chain of $((nlinks / npoints)))" \
    || bad "sweep.json: $npoints points, expected 3 (allreduce, easgd, gossip_push at p = 2)"
ar_stem=$(awk '$1 ~ /-allreduce-p2$/ {print $1; exit}' "$T/walk-links")
ar_run=$(awk -v s="$ar_stem" '$1 == s {print $4; exit}' "$T/walk-links")
ar_ckpt="$W/runs/$ar_stem.$ar_run.ckpt"
walk_ids=$(awk '{print $3}' "$T/walk-links" | tr '\n' ' ')

# The dsgd-run ranks of this cluster: pid, job id, node (from the rank's cgroup,
# /slurm_<node>/uid_<u>/job_<id>/step_<s>: Hydra gives every rank the batch node's SLURM_*
# variables), MPI rank, affinity mask and cpuset.
ranks_of() {
    for pid in $(marked); do
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dsgd-run ] || continue
        rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^PMI_RANK=//p')
        mask=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
        cg=$(sed -n 's/^[0-9]*:cpuset://p' "/proc/$pid/cgroup" 2>/dev/null)
        cpus=$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.cpus" 2>/dev/null)
        node=$(echo "$cg" | sed -n 's|^/slurm_\([^/]*\)/.*|\1|p')
        job=$(echo "$cg" | sed -n 's|.*/job_\([0-9]*\)/.*|\1|p')
        echo "$pid ${job:-?} ${node:-?} ${rank:-?} ${mask:-?} ${cpus:-none}"
    done
}

# One job SIGKILLed mid-run: the first link of the all-reduce point that is running after a
# checkpoint of its own loses its ranks to kill -9 (an OOM kill, a crashed node). (Not scancel -s
# KILL: for SIGKILL, scancel cancels the job, which sends SIGTERM first and KILL after KillWait.)
section "walk-through: SIGKILL of a running all-reduce link after its checkpoint"
killed='' kill_ckpt=''
end=$(($(date +%s) + 300))
while [ -z "$killed" ] && [ "$(date +%s)" -lt "$end" ]; do
    for sid in $(awk -v s="$ar_stem" '$1 == s {print $3}' "$T/walk-links"); do
        st=$(job_state "$sid")
        case "$st" in RUNNING*) ;; *) continue ;; esac
        start=$(date -d "$(timeout 10 squeue -h -j "$sid" -o %S 2>/dev/null)" +%s 2>/dev/null) || continue
        [ -s "$ar_ckpt/latest" ] || continue
        [ "$(stat -c %Y "$ar_ckpt/latest")" -ge "${start:-0}" ] || continue
        sleep 3   # a few steps past the checkpoint: work that the kill loses
        ranks_of >"$T/rank-cpus"
        raw=$(raw_id "$sid")
        victims=$(awk -v j="$raw" '$2 == j {printf "%s ", $1}' "$T/rank-cpus")
        kill_ckpt=$(cat "$ar_ckpt/latest")
        if [ -n "$victims" ]; then
            # shellcheck disable=SC2086
            kill -KILL $victims 2>/dev/null
            killed=$sid
            ok "kill -9 of the ranks (pids $victims) of $sid (job $raw, a link of $ar_stem) after its checkpoint $kill_ckpt"
        else
            killed=none
            bad "no dsgd-run rank of $sid (job $raw) found to kill: $(tr '\n' ';' <"$T/rank-cpus")"
        fi
        break
    done
    [ -z "$killed" ] && sleep 1
done
[ -n "$killed" ] || bad "no running all-reduce link with a checkpoint of its own within 300 s"
[ -s "$T/rank-cpus" ] && sort -k2,2n -k4,4n "$T/rank-cpus" | awk '{printf "   CPUs: job %s rank %s on node %s: affinity %s, cpuset %s\n", $2, $4, $3, $5, $6}'

# The same all-reduce point unchained: by hand with mpiexec (2 ranks, no Slurm, no time limit), the
# threads its first link printed ("threads per rank: C compute ... + D decode"), started now to run
# beside the chains.
ar_first=$(awk -v s="$ar_stem" '$1 == s && $2 == 0 {print $3}' "$T/walk-links")
ar_out="$W/dsgd-$(raw_id "$ar_first").out"
tline=$(grep -h -m1 "threads per rank" "$ar_out" 2>/dev/null)
thr=$(echo "$tline" | sed -n 's/.*threads per rank: \([0-9]*\) compute.*/\1/p')
dthr=$(echo "$tline" | sed -n 's/.* + \([0-9]*\) decode.*/\1/p')
if [ -z "$thr" ] || [ -z "$dthr" ]; then
    bad "no 'threads per rank' line in the first all-reduce link's output (${ar_out:-none}); the reference runs with threads 1, data.threads 1"
    thr=1 dthr=1
fi
mkdir -p "$W/ref"
(cd "$W" && env "$MARK" timeout 900 mpiexec -n 2 ./dsgd-run --set 'output="ref/allreduce-unchained.h5"' \
    --set threads="$thr" --set data.threads="$dthr" "sweeps/fig1-chain/$ar_stem.cfg" >"$T/log/ref.log" 2>&1) &
pid_ref=$!
info "the unchained all-reduce point: mpiexec -n 2 ./dsgd-run --set threads=$thr --set data.threads=$dthr sweeps/fig1-chain/$ar_stem.cfg (pid $pid_ref)"

section "walk-through: waiting for the chains"
JOB_TIMEOUT=$WALK_TIMEOUT
# shellcheck disable=SC2086
wait_jobs $walk_ids ${t8:-} || bad "walk-through jobs not ended within $WALK_TIMEOUT s"

# The time-limit job: TIMEOUT after a USR1 checkpoint and a SIGTERM one; continued to the end.
if [ -n "$t8" ]; then
    st=$(job_state "$t8")
    t8run="$W/runs/linear.$t8.h5"
    t8status=$("$W/dsgd-run" --status "$t8run" 2>/dev/null)
    ck=$(grep -c "^checkpoint: step" "$W/dsgd-$t8.out" 2>/dev/null)
    if [ "${st%% *}" = TIMEOUT ] && echo "$t8status" | grep -q "interrupted: SIGTERM after step .*checkpoint written" && [ "${ck:-0}" -ge 2 ]; then
        ok "job $t8: $st (the limit reached for real): $t8status; $ck checkpoints written (USR1, then SIGTERM)"
    else
        bad "job $t8: $st, run file: ${t8status:-none}, $ck checkpoint line(s) (expected TIMEOUT, interrupted by SIGTERM with a checkpoint, 2 checkpoints)"
        tail -n 8 "$W/dsgd-$t8.out" 2>/dev/null | sed 's/^/   | /'
    fi
    # shellcheck disable=SC2086
    t8c=$(cd "$W" && env "$MARK" timeout 30 sbatch --parsable --export=ALL,DSGD_RUN_ID="$t8" --nodes=2 --time=5 \
        jobs/slurm/dsgd.sbatch $T8_ARGS 2>"$T/log/sbatch-t8c.log")
    t8c=${t8c%%;*}
    if [ -z "$t8c" ]; then
        bad "sbatch of the continuation: $(cat "$T/log/sbatch-t8c.log")"
    else
        JOB_TIMEOUT=240
        wait_jobs "$t8c" || bad "job $t8c not ended within 240 s"
        check_job "$t8c" "runs/linear.$t8.h5" 4000 resumes=1
    fi
fi

section "walk-through: the chained points"
# How each link ended (the job script's last line) and each point's run file.
while read -r stem link sid rid; do
    st=$(job_state "$sid")
    raw=$(raw_id "$sid")
    out="$W/dsgd-$raw.out"
    last=$(grep -h "^dsgd.sbatch: .*exit\|nothing to continue" "$out" 2>/dev/null | tail -n 1)
    res=$(grep -h -o "resuming from .*done" "$out" 2>/dev/null | head -n 1)
    cks=$(grep -h -o "^checkpoint: step [0-9]*" "$out" 2>/dev/null | awk '{printf "%s%s", s, $3; s=","}')
    echo "$stem $link $sid ${st:-? ?} | ${res:-fresh start} | checkpoints ${cks:--} | ${last:-no end line} | $raw"
done <"$T/walk-links" >"$T/walk-table"
sed 's/^/   link: /' "$T/walk-table"
for stem in $(awk '{print $1}' "$T/walk-links" | sort -u); do
    rid=$(awk -v s="$stem" '$1 == s {print $4; exit}' "$T/walk-links")
    # the last link that trained must have completed the run. It may still be TIMEOUT: when Slurm's
    # SIGTERM (up to 30 s after the limit) comes during the last steps, the run completes first.
    lastl=$(awk -v s="$stem" '$1 == s && !/nothing to continue/' "$T/walk-table" | tail -n 1)
    lst=$(echo "$lastl" | awk '{print $4, $5}')
    lraw=$(echo "$lastl" | awk -F'|' '{gsub(/ /, "", $NF); print $NF}')
    case "$lst" in
    TIMEOUT*)
        if echo "$lastl" | grep -q "completed (exit 0)"; then
            info "job $lraw: $lst, but its run completed before the limit's SIGTERM took effect (job script: completed, exit 0)"
            lst="COMPLETED 0:0"
        fi
        ;;
    esac
    check_files "$lraw" "$lst" "runs/$stem.$rid.h5" 1500 p=2
    # jobs that trained: every link but those that found the run completed; >= 3 wanted
    trained=$(awk -v s="$stem" '$1 == s && !/nothing to continue/' "$T/walk-table" | grep -c .)
    res=$($PY -c 'import h5py, sys; print(int(h5py.File(sys.argv[1], "r").attrs.get("resumes", 0)))' "$W/runs/$stem.$rid.h5" 2>/dev/null)
    if [ "$trained" -ge 3 ] && [ "${res:-0}" -ge 2 ]; then
        ok "$stem: $trained jobs trained it (resumes = $res in the run file)"
    else
        bad "$stem: $trained job(s) trained it, resumes = ${res:-?}: expected at least 3 chained jobs"
    fi
done
# every link before the last that trained ended by the time limit: stop_at (exit 3, status
# 'time limit (stop_at)') or SIGTERM at the limit (TIMEOUT), except the one we killed
n_stop=$(grep -c "time limit (stop_at)" "$T/walk-table")
n_term=$(grep -c "interrupted: SIGTERM" "$T/walk-table")
n_timeout=$(awk '$4 == "TIMEOUT"' "$T/walk-table" | grep -c .)
info "links that stopped at stop_at: $n_stop; by SIGTERM at the limit: $n_term (TIMEOUT: $n_timeout)"
[ $stop_key = 1 ] && { [ "$n_stop" -ge 3 ] && ok "stop_at ended $n_stop links before their limit" || bad "only $n_stop links ended by stop_at"; }
# the killed link: no status (exit 1), and the next link continued from the checkpoint it had
if [ -n "$killed" ] && [ "$killed" != none ]; then
    kline=$(awk -v j="$killed" '$3 == j' "$T/walk-table")
    klink=$(echo "$kline" | awk '{print $2}')
    nline=$(awk -v s="$ar_stem" -v l="$((klink + 1))" '$1 == s && $2 == l' "$T/walk-table")
    kst=$(echo "$kline" | awk '{print $4, $5}')
    if echo "$nline" | grep -q "resuming from .*$kill_ckpt: "; then
        ok "killed link $killed ($kst) lost the steps after $kill_ckpt; link $((klink + 1)) resumed from it: $(echo "$nline" | awk -F'|' '{print $2}')"
    else
        bad "after the SIGKILL of $killed ($kst, checkpoint $kill_ckpt), the next link: $nline"
    fi
fi

section "walk-through: the chained all-reduce point against the same point unchained"
n=0
while alive "$pid_ref" && [ $n -lt 600 ]; do sleep 1; n=$((n + 1)); done
wait "$pid_ref"
rc=$?
if [ $rc -ne 0 ]; then
    bad "the unchained run: exit status $rc: $(tail -n 3 "$T/log/ref.log" | tr '\n' ' ')"
elif $PY - "$W/runs/$ar_stem.$ar_run.h5" "$W/ref/allreduce-unchained.h5" >"$T/log/bitwise.log" 2>&1 <<'PYEOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
for g in ("eval", "train"):
    for k in sorted(a[g]):
        if k == "time_s":
            continue
        x, y = a[g][k][:], b[g][k][:]
        assert x.shape == y.shape and np.array_equal(x, y), f"/{g}/{k} differs: {x.shape} vs {y.shape}, first at {np.argmax(x != y) if x.shape == y.shape else '-'}"
        names.append(f"/{g}/{k}")
print(f"{len(names)} datasets bitwise equal ({', '.join(names)}; {len(a['eval/step'])} /eval rows, {len(a['train/step'])} /train rows); "
      f"chained: resumes = {int(a.attrs['resumes'])}, final top-1 error {float(a['eval/top1_error'][-1]):.4f}")
PYEOF
then
    ok "chained = unchained, bitwise: $(tail -n 1 "$T/log/bitwise.log")"
else
    bad "chained all-reduce vs unchained: $(tail -n 3 "$T/log/bitwise.log" | tr '\n' ' ')"
fi

section "walk-through: tools/report.py, job states against Slurm's record"
(cd "$W" && timeout 120 $PY "$REPO/tools/report.py" sweeps/fig1-chain --out "$T/report/fig1-chain" --targets 0.3,0.25,0.22) \
    >"$T/log/walk-report.log" 2>&1
rc=$?
sed 's/^/   | /' "$T/log/walk-report.log"
[ $rc -eq 0 ] || bad "report.py: exit status $rc"
# Slurm's record of every finished job (jobcomp/filetxt, read by sacct -c): id (an array task as
# <array id>_<index>), state, exit code
timeout 30 sacct -c -n -P -o JobID,State,ExitCode,Elapsed,NodeList >"$T/sacct-c" 2>"$T/log/sacct-c.log" \
    || bad "sacct -c: $(cat "$T/log/sacct-c.log")"
$PY - "$T/log/walk-report.log" "$T/sacct-c" "$T/walk-links" "$T/walk-table" >"$T/log/states.log" 2>&1 <<'PYEOF'
import re, sys
report, sacct, links = open(sys.argv[1]).read(), open(sys.argv[2]).read().split("\n"), open(sys.argv[3]).read().split("\n")
truth, raw = {}, {}
for line in open(sys.argv[4]):
    f = line.split("|")
    if len(f) > 2:
        raw[f[0].split()[2]] = f[-1].strip()
for line in sacct:
    f = line.split("|")
    if len(f) >= 3:
        truth[f[0]] = (f[1].split()[0], f[2])
errs, seen = [], 0
for line in links:
    if not line.strip():
        continue
    stem, link, sid, rid = line.split()
    t = truth.get(sid) or truth.get(raw.get(sid, ""))
    if t is None:
        errs.append(f"{sid}: no record in sacct -c")
        continue
    m = re.search(rf"(?<![\d_]){re.escape(sid)}(?: \(link \d+\))? ([A-Z_]+)(?: (\d+:\d+)(?![:\d]))?", report)
    if not m:
        errs.append(f"{sid} ({stem} link {link}): not in report.py's jobs table")
        continue
    seen += 1
    if m.group(1) != t[0] or (m.group(2) and m.group(2) != t[1]):
        errs.append(f"{sid}: report.py says {m.group(1)} {m.group(2) or ''}, Slurm {t[0]} {t[1]}")
rows = [l for l in report.split("\n") if l.startswith("|") and "fig1-chain-" in l and l.count("|") == 5]
for l in rows:
    if not l.split("|")[4].strip().startswith("completed"):
        errs.append(f"a run not completed in the jobs table: {l}")
if len(rows) != 3:
    errs.append(f"{len(rows)} rows of fig1-chain runs in the jobs table, expected 3")
print("\n".join(errs) if errs else f"{seen} jobs: report.py's state (and exit code where it gives one) = sacct -c's; {len(rows)} runs completed")
sys.exit(1 if errs else 0)
PYEOF
[ $? -eq 0 ] && ok "$(tail -n 1 "$T/log/states.log")" || bad "report.py's job states: $(tr '\n' ';' <"$T/log/states.log")"
echo "   job states (sacct -c: job, state, exit code, elapsed, nodes):"
sed 's/^/   | /' "$T/sacct-c"
echo "   threads per rank (rank 0 of each job):"
for f in "$W"/dsgd-*.out; do
    l=$(grep -h -m1 "threads per rank" "$f") && echo "   | $(basename "$f" .out): $l"
done
info "walk-through took $(($(date +%s) - tw)) s"
fi  # WALK

echo "   (slurm test took $(($(date +%s) - t0)) s)"
[ $fail -ne 0 ] && show_logs
exit $fail   # the verdict is printed after the teardown (cleanup)
