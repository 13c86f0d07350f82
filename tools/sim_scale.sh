#!/bin/sh
# sim_scale.sh — the cost of sim mode on this machine (docs/simulate.md, "Cost"): one short sim-mode
# all-reduce run at p ranks, with the real seconds per simulated step and the memory per rank.
#
#   tools/sim_scale.sh [-m linear|resnet4] [-d fmnist|synthetic] [-s STEPS] [-t TIMEOUT_S] [-b BINARY]
#                      [-e VAR=VALUE]... P...
#
# For each P: `timeout TIMEOUT_S mpiexec -n P BINARY configs/linear.cfg --set p=P ...` with
# sim.enabled = true (k80, 10gbe), STEPS steps (default 20), one evaluation at the end (10,000
# images spread over the ranks), the run file in a temporary directory. While it runs, every
# second, /proc/PID/smaps_rollup of every rank: the peak over time of the ranks' summed PSS
# (proportional set size: a page shared by k processes counts 1/k in each, so the node's
# one copy of the data, the libraries and MPICH's shared memory are counted once in all) and of
# their summed RSS (shared pages counted in every rank). One line per P:
#
#   p  model  data  steps  real_s_per_step  total_s  pss_MB_per_rank  rss_MB_per_rank  node_pss_MB  load
#
# real_s_per_step: the run's own "s real" training time (evaluation and start-up excluded) / steps;
# total_s: mpiexec's wall time, start-up and evaluation included; load: the 1-minute load average
# at the end (the machine is shared: numbers move with it). -e sets an environment variable for
# the ranks (DSGD_COMM_SPIN_S=0, say); SIM_SCALE_DEBUG=1 prints every memory sample. Not part
# of make check (minutes at p = 128); the commands behind docs/simulate.md's table are there
# ("Cost"). Runs from the repository root; mpiexec from PATH (or $MPIEXEC).
set -u
model=linear data=fmnist steps=20 tmo=900 bin=./dsgd-run envs=""
while getopts m:d:s:t:b:e: o; do
    case $o in
        m) model=$OPTARG ;; d) data=$OPTARG ;; s) steps=$OPTARG ;; t) tmo=$OPTARG ;; b) bin=$OPTARG ;;
        e) envs="$envs $OPTARG" ;;
        *) echo "usage: $0 [-m linear|resnet4] [-d fmnist|synthetic] [-s STEPS] [-t TIMEOUT_S] [-b BINARY] [-e VAR=VALUE]... P..." >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "$0: give at least one P" >&2; exit 2; }
case $model in
    linear) margs="" ;;
    resnet4) margs="--set model.arch=\"resnet18\" --set model.width=4 --set model.stem=\"cifar\"" ;;
    *) echo "$0: -m linear or resnet4, not '$model'" >&2; exit 2 ;;
esac
case $data in
    fmnist) dargs="" ;;
    synthetic) dargs="--set data.format=\"synthetic\" --set data.shape=[1,28,28] --set data.classes=10" ;;
    *) echo "$0: -d fmnist or synthetic, not '$data'" >&2; exit 2 ;;
esac
MPIEXEC=${MPIEXEC:-mpiexec}
tmp=$(mktemp -d /tmp/sim_scale.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The pids of the processes named like the binary below pid $1 (one ps: cheap at p = 128).
name=$(basename "$bin" | cut -c1-15)
ranks_of() {
    ps -e -o pid=,ppid=,comm= | awk -v root="$1" -v name="$name" '
        { parent[$1] = $2; comm[$1] = $3 }
        END { for (q in comm) if (comm[q] == name) for (a = parent[q]; a > 1; a = parent[a]) if (a == root) { print q; break } }'
}

printf '%-4s %-8s %-9s %5s %15s %8s %15s %15s %11s %s\n' p model data steps real_s_per_step total_s pss_MB_per_rank rss_MB_per_rank node_pss_MB load
for P in "$@"; do
    log=$tmp/run.$P.log
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    eval "env $envs timeout -k 10 $tmo $MPIEXEC -n $P $bin configs/linear.cfg --set p=$P --set iterations=$steps \
        --set log_every=$steps --set eval.every=$steps --set eval.at_start=false --set sim.enabled=true \
        --set output=\\\"$tmp/run.$P.h5\\\" $margs $dargs" > "$log" 2>&1 &
    job=$!
    peak_pss=0 peak_rss=0 nr=0
    while kill -0 $job 2>/dev/null; do
        pids=$(ranks_of $job)
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2046
            set -- $(for q in $pids; do echo /proc/$q/smaps_rollup; done | xargs cat 2>/dev/null |
                awk '/^Pss:/ {p += $2} /^Rss:/ {r += $2; n++} END {printf "%d %d %d\n", p, r, n}')
            [ -n "${SIM_SCALE_DEBUG:-}" ] && echo "sample: $# $* (of $(echo $pids | wc -w) pids)" >&2
            if [ "$3" -eq "$P" ] && [ "$1" -gt "$peak_pss" ]; then peak_pss=$1 peak_rss=$2 nr=$3; fi
        fi
        sleep 1
    done
    wait $job
    rc=$?
    t1=$(date +%s.%N)
    load=$(cut -d' ' -f1 /proc/loadavg)
    real=$(sed -n 's/^done: .*(\([0-9.]*\) s real.*/\1/p' "$log" | head -1)
    if [ $rc -ne 0 ] || [ -z "$real" ]; then
        echo "p = $P: exit status $rc; the run's last lines:" >&2
        tail -5 "$log" >&2
        continue
    fi
    awk -v p="$P" -v m="$model" -v d="$data" -v s="$steps" -v real="$real" -v t0="$t0" -v t1="$t1" \
        -v pss="$peak_pss" -v rss="$peak_rss" -v nr="$nr" -v load="$load" 'BEGIN {
        n = nr > 0 ? nr : 1
        printf "%-4d %-8s %-9s %5d %15.4f %8.1f %15.1f %15.1f %11.0f %s\n", p, m, d, s, real / s, t1 - t0,
               pss / n / 1024, rss / n / 1024, pss / 1024, load }'
done
