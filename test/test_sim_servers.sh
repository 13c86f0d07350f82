#!/bin/sh
# test_sim_servers.sh — sim mode (docs/simulate.md, "Methods with parameter servers"; issue 25 §4)
# for ps, easgd (asynchronous and synchronous) and backup on configs/linear.cfg, real runs under
# mpiexec:
#   (a) closed form, ps at p = 1, one server, sim.step_ms = 25: one step is compute + request +
#       reply, P = c + 2 sim_p2p_s = c + 2(2α + n/β) with n = 4 · 11,689,512 bytes on the flat
#       10 GbE preset; the /train row of iteration s is logged when the server applies the s-th
#       gradient, at its arrival s·P − (2α + n/β); /ranks after the first row: step P, compute c,
#       comm 2(2α + n/β), wait 0; the final evaluation at the last message's arrival, 100·P + 2α (a header);
#   (b) incast: ps at p = 4, one server, no jitter: the server's downlink takes the 4 gradients
#       one after the other, so an iteration (4 gradients) takes 4 n/β in the steady state;
#   (c) backup, p = 4, backups = 1, worker 3 slowed by 400 ms a step (more than the others'
#       gradients and the reply take): only its gradients are dropped, at most one a step, and
#       /eval equals the run in which it fails before its first step (it never makes the first N);
#   (d) determinism: each of ps, easgd (τ = 2), easgd synchronous, backup at p = 4 with 2
#       servers, sim.jitter = 0.3, a slow worker and random stragglers, run twice, the second
#       while two busy loops load the machine: every dataset but wall_s equal bit for bit;
#   (e) a sim run of ps stopped by SIGTERM writes its checkpoint and says it cannot be continued;
#       a resume is refused (exit 2, key sim.enabled), the run file and the checkpoint kept;
#       tools/report.py calls it "not resumable (sim mode)".
# The common part (PY, T, DSGD, dir, ok, bad, sim_run, same: test/sim/h5same.py): test/sim/lib.sh.
# Runs from the repository root with ./dsgd-run built (DSGD=... for another binary) and mpiexec
# on PATH (make check puts build/bin first); every mpiexec under a timeout.
#     PATH=build/bin:$PATH sh test/test_sim_servers.sh
set -u
SIM_TAG=simsrv . test/sim/lib.sh  # PY, T, DSGD, CFG, dir, ok, bad, sim_run, same, busy_start/stop
sim() {  # sim P S NAME METHOD [dsgd-run args...]: a sim run of linear.cfg with S servers into $dir/NAME.h5
    np=$1 ns=$2 name=$3 m=$4
    shift 4
    sim_run $((np + ns)) "$name" --set p="$np" --set servers="$ns" --set "method=\"$m\"" "$@" \
        || { bad "$name: exit $? ($(tail -3 "$dir/$name.log"))"; return 1; }
}

# (a) closed form: ps at p = 1.
if sim 1 1 a ps --set iterations=100 --set eval.every=50 --set log_every=10 --set sim.step_ms=25; then
    $PY - "$dir/a.h5" <<'EOF' && ok "(a) ps at p = 1: every step = compute + request + reply (sim_p2p_s)" || bad "(a) closed form"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
A = f.attrs
alpha, beta, n, c = 2 * A['sim_link_latency_s'], A['sim_bandwidth_Bps'], 4 * 11689512, 0.025
assert A['sim_link_latency_s'] == 5e-6 and beta == 1.25e9 and A['time_axis'].startswith('simulated')
p2p = alpha + n / beta
P = c + 2 * p2p
st, ts = f['train/step'][()], f['train/time_s'][()]
assert list(st) == list(range(10, 101, 10)), st
exp = st * P - p2p
assert np.allclose(ts, exp, rtol=1e-12, atol=0), (ts, exp)
es, et = f['eval/step'][()], f['eval/time_s'][()]
assert list(es) == [0, 50, 100], es
assert np.allclose(et, [0, 50 * P - p2p, 100 * P + alpha], rtol=1e-12, atol=0), (et, P)
assert abs(A['train_time_s'] - (100 * P + alpha)) < 1e-9
r = f['ranks']
for k, v in (('step_time_s', P), ('compute_s', c), ('comm_s', 2 * p2p), ('wait_s', 0.0)):
    x = r[k][()][1:]  # a header carries the times before its own exchange: the first row lacks one
    assert np.allclose(x, v, rtol=1e-9, atol=1e-12), (k, x.ravel()[:4], v)
print(f"P = {P * 1e3:.6f} ms per step; train time {A['train_time_s']:.6f} s")
EOF
fi

# (b) incast at one server: p = 4, no jitter.
if sim 4 1 b ps --set iterations=60 --set eval.every=1000 --set log_every=10 --set sim.step_ms=25; then
    $PY - "$dir/b.h5" <<'EOF' && ok "(b) ps at p = 4, one server: the gradients queue on its downlink (4 n/β per iteration)" || bad "(b) incast"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
beta, n = f.attrs['sim_bandwidth_Bps'], 4 * 11689512
ts = f['train/time_s'][()]
d = np.diff(ts) / 10  # per iteration, rows every 10 iterations
assert np.allclose(d[1:], 4 * n / beta, rtol=1e-9), (d, 4 * n / beta)
print(f"per iteration {d[-1] * 1e3:.4f} ms = 4 n/β")
EOF
fi

# (c) backup with one slow worker: it never makes the first N. Its gradients are all dropped, at
#     most one per step, and the center moves exactly as when it fails before its first step
#     (inject.fail_rank): /eval equal bit for bit.
C="--set backups=1 --set iterations=40 --set eval.every=20 --set log_every=10 --set sim.step_ms=25"
if sim 4 1 c backup $C --set 'inject.slow_ranks=[3]' --set inject.delay_ms=400 && sim 4 1 c0 backup $C --set inject.fail_rank=3 --set inject.fail_step=0; then
    $PY - "$dir/c.h5" "$dir/c0.h5" <<'EOF2' && ok "(c) backup: the slow worker never makes the first N (the center as without it)" || bad "(c) backup first N"
import sys, h5py, numpy as np
f, g = h5py.File(sys.argv[1], 'r'), h5py.File(sys.argv[2], 'r')
d = f['backup/dropped'][()]
assert d.shape[0] == 40 and np.all(d <= 1) and d.sum() >= 5, d
assert np.all(g['backup/dropped'][()] == 0)
for k in ('step', 'loss', 'top1_error'):
    assert np.array_equal(f['eval/' + k][()], g['eval/' + k][()]), (k, f['eval/' + k][()], g['eval/' + k][()])
print(f"{d.sum()} gradients of the slow worker dropped; /eval equal to the run without it")
EOF2
fi

# (d) determinism, p = 4, 2 servers, jitter and stragglers; the second run beside two busy loops.
D="--set iterations=80 --set eval.every=40 --set log_every=10 --set sim.jitter=0.3 --set inject.slow_ranks=[1] --set inject.delay_ms=30
   --set inject.random_slow=0.1"
for cs in "ps ps" "easgd easgd --set tau=2" "easgdsync easgd --set tau=2 --set synchronous=true" "backup backup --set backups=1"; do
    set -- $cs
    case_=$1
    shift
    sim 4 2 "d-$case_-1" "$@" $D || continue
    busy_start
    sim 4 2 "d-$case_-2" "$@" $D
    rc=$?
    busy_stop
    [ $rc = 0 ] && same "$dir/d-$case_-1.h5" "$dir/d-$case_-2.h5" "(d) $case_: two runs (the second loaded) equal in every dataset but wall_s" --time-increasing
done

# (e) a resume is refused, not mixed (the servers' virtual state is not in their checkpoints):
# ps stopped by SIGTERM after step 20, then --resume: exit 2 naming sim.enabled, the file kept.
E="--set iterations=100 --set log_every=10 --set eval.every=50"
DSGD_TEST_SIGNAL=TERM@20 timeout -k 5 $T mpiexec -n 3 "$DSGD" "$CFG" --set p=2 --set servers=1 --set 'method="ps"' \
    --set sim.enabled=true --set "output=\"$dir/e.h5\"" $E >"$dir/e1.log" 2>&1
rc=$?
if [ $rc = 3 ]; then
    sum=$(md5sum <"$dir/e.h5")
    cks=$(cat "$dir/e.ckpt/latest" "$dir/e.ckpt/step-20"/* | md5sum)
    "$DSGD" --status "$dir/e.h5" >"$dir/e.status"
    [ $? = 3 ] && grep -q "^interrupted: .* after step 20, checkpoint written; sim mode cannot resume this method yet (docs/simulate.md, Limits): its checkpoint cannot be continued; start it again under another output$" "$dir/e.status" \
        && ok "(e) the stop's status says the checkpoint it wrote cannot be continued" || bad "(e) status: $(cat "$dir/e.status")"
    timeout -k 5 $T mpiexec -n 3 "$DSGD" "$CFG" --set p=2 --set servers=1 --set 'method="ps"' --set sim.enabled=true \
        --set "output=\"$dir/e.h5\"" $E --resume >"$dir/e2.log" 2>&1
    rc=$?
    if [ $rc = 2 ] && grep -q "key 'sim.enabled': method 'ps' in sim mode cannot be resumed yet.*(the run file and its checkpoint are left as they are)" "$dir/e2.log" &&
        [ "$(md5sum <"$dir/e.h5")" = "$sum" ] && [ "$(cat "$dir/e.ckpt/latest" "$dir/e.ckpt/step-20"/* | md5sum)" = "$cks" ]; then
        ok "(e) ps in sim mode: --resume refused (exit 2), run file and checkpoint kept"
    else bad "(e) resume: exit $rc: $(tail -n 2 "$dir/e2.log")"; fi
    $PY tools/report.py "$dir/e.h5" --out "$dir/erep" >/dev/null 2>&1
    grep -q "| interrupted (.*) at step 20 of 100, checkpoint written; not resumable (sim mode): start it again under another output |$" "$dir/erep.md" \
        && ok "(e) tools/report.py: interrupted, not resumable (sim mode)" || bad "(e) report: $(grep '^| ' "$dir/erep.md" | tail -n 1)"
else bad "(e) SIGTERM at step 20: exit $rc, not 3: $(tail -n 2 "$dir/e1.log")"; fi
exit $fail
