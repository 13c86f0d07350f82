#!/bin/sh
# test_sim_gossip.sh — sim mode (docs/simulate.md "Gossip"; issue 25) with the lock-step gossip
# methods (gossip_pull and gossip_push, synchronous = true) on configs/linear.cfg, real runs under
# mpiexec:
#   (a) the model, p = 2 and p = 4, sim.step_ms = 25, no jitter: every /train and /eval time_s
#       equals a reference written here from the rules of src/train/vclock_gossip.h (the peers
#       drawn as gossip.c draws them, each θ message of 4 · 11,689,512 bytes booked FIFO on the
#       sender's uplink and the receiver's downlink, the clock = max(start + compute, the last
#       arrival of what the node sends or receives)), bit for bit; at p = 2 also the closed form
#       s · max(c, 2α + n/β); at p = 4 steps with two or three nodes pulling from one (incast)
#       occur and cost k · n/β on the serving NIC; p = 4 with node 2 failing at step 20 (no
#       message to or from it afterwards); /ranks is virtual (compute 25 ms, comm = wait);
#   (b) determinism: pull and push at p = 4 and p = 16 (P16=8 for a quicker run) with
#       sim.jitter = 0.3, a slow rank and random stragglers, run twice, the second while two busy
#       loops load the machine: every dataset but wall_s equal bit for bit;
#   (c) a lock-step pull run stopped by SIGTERM at step 30 and resumed equals the uninterrupted
#       one;
#   (d) the lock-step variants pass --check (asynchronous: test_sim_gossip_async.sh).
# The common part (PY, T, DSGD, dir, ok, bad, sim_run, same: test/sim/h5same.py): test/sim/lib.sh.
# Runs from the repository root with ./dsgd-run built (DSGD=... for another binary) and mpiexec
# on PATH (make check puts build/bin first); every mpiexec under a timeout.
#     PATH=build/bin:$PATH sh test/test_sim_gossip.sh
set -u
P16=${P16:-16}
SIM_TAG=simg . test/sim/lib.sh  # PY, T, DSGD, CFG, dir, ok, bad, sim_run, same, busy_start/stop
sim() {  # sim NP NAME METHOD [dsgd-run args...]: a lock-step gossip sim run of linear.cfg into $dir/NAME.h5
    np=$1 name=$2 m=$3
    shift 3
    sim_run "$np" "$name" --set p="$np" --set method="\"$m\"" --set synchronous=true "$@"
}

# (a) the model against a reference, p = 2 and 4, pull and push.
L="--set iterations=60 --set eval.every=30 --set log_every=1 --set sim.step_ms=25"
for np_ in 2 4 4f; do for m in gossip_pull gossip_push; do
    F=; [ $np_ = 4f ] && F="--set inject.fail_rank=2 --set inject.fail_step=20"  # 4f: node 2 fails at step 20
    if sim ${np_%f} a$np_$m $m $L $F; then
        $PY - "$dir/a$np_$m.h5" $np_ $m <<'EOF' && ok "(a) $m at p = $np_: time_s = the reference model, bit for bit" || bad "(a) $m at p = $np_"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
p, push, A = int(sys.argv[2].rstrip('f')), sys.argv[3] == 'gossip_push', f.attrs
failed = lambda k, s: sys.argv[2].endswith('f') and k == 2 and s >= 20  # inject_failed
c, seed, steps = A['sim_step_s'], int(A['seed']), 60
assert c == 0.025 and A['sim_model_bytes'] == 4 * 11689512 and A['time_axis'].startswith('simulated')
n, lat, bw = int(A['sim_model_bytes']), A['sim_link_latency_s'], A['sim_bandwidth_Bps']
assert lat == 5e-6 and bw == 1.25e9
sys.path.insert(0, "test/sim")
from gossip_peers import peer_of  # gossip.c's peer draw
peer = lambda i, s: peer_of(seed, p, i, s)
# the reference: vclock_gossip.h's rules
alpha = 2 * lat  # flat: host-up + host-down
now, at, incast = [0.0] * p, {0: 0.0}, 0
for s in range(steps):
    S = now[:]
    msgs = []
    for k in range(p):
        j = peer(k, s)
        if failed(k, s) or failed(j, s): continue  # no message to or from a failed node
        fr, to = (k, j) if push else (j, k)
        msgs.append((max(S[fr], S[to]), fr, to))
    msgs.sort()
    up, down = [0.0] * p, [0.0] * p
    end = S[:]
    for t, a, b in msgs:
        tx = n / bw
        st = max(t, up[a]); up[a] = st + tx
        arr = max(st + alpha + tx, down[b] + tx); down[b] = arr
        end[a] = max(end[a], arr); end[b] = max(end[b], arr)
    deg = [sum(1 for _, a, b in msgs if (a if not push else b) == k) for k in range(p)]
    incast += max(deg) >= 2
    now = [max(S[i] + c, end[i]) for i in range(p)]
    at[s + 1] = now[0]
for g in ('train', 'eval'):
    st, ts = f[g + '/step'][()], f[g + '/time_s'][()]
    want = np.array([at[int(x)] for x in st])
    assert np.array_equal(ts, want), (g, np.argwhere(ts != want)[:3].tolist(), ts[:4], want[:4])
if sys.argv[2] == '4f':  # the failed node's /ranks column is NaN after it stopped
    assert np.all(np.isnan(f['ranks/compute_s'][()][1:, 2])), f['ranks/compute_s'][()]
elif p == 2:  # the closed form: both nodes exchange one message each way, every step
    step = max(c, alpha + n / bw)
    assert abs(at[steps] - steps * step) < 1e-12 * steps * step, (at[steps], steps * step)
    assert abs(step - 0.03741643840) < 1e-10, step  # 2 · 5 µs + 46,758,048 B / 1.25 GB/s
else:  # incast happened: some node served (pull) or took (push) 2 or more θ in one step
    assert incast > 0, incast
    # and cost what the FIFO says: a node serving k pulls at one instant is done k · n/β later
    assert at[steps] > steps * (alpha + n / bw), (at[steps], steps * (alpha + n / bw))
r = f['ranks']
live = ~np.isnan(r['compute_s'][()])
assert np.allclose(r['compute_s'][()][live], c, rtol=1e-12)  # (gossip's /ranks has no data column: NaN)
assert np.array_equal(r['comm_s'][()], r['wait_s'][()], equal_nan=True) and np.all(r['comm_s'][()][live] > 0)
assert A['train_time_s'] == at[steps] and A['status'] == b'completed'
print(f"p = {p} {sys.argv[3]}: {at[steps]:.9f} s simulated for {steps} steps, incast in {incast} steps")
EOF
    else bad "(a) $m at p = $np_: $(tail -n 3 "$dir/a$np_$m.log")"; fi
done; done

# (b) determinism: jitter, a slow rank and random stragglers; the second run loaded.
D="--set iterations=40 --set eval.every=20 --set log_every=5 --set sim.jitter=0.3 --set inject.slow_ranks=[3] --set inject.delay_ms=40 \
   --set inject.delay_dist=\"exponential\" --set inject.random_slow=0.3 --set eval.batch=500"
for np_ in 4 $P16; do for m in gossip_pull gossip_push; do
    t0=$(date +%s)
    if sim $np_ b1$np_$m $m $D; then
        t1=$(date +%s)
        busy_start
        sim $np_ b2$np_$m $m $D || bad "(b) $m p = $np_, the loaded run: $(tail -n 3 "$dir/b2$np_$m.log")"
        t2=$(date +%s)
        busy_stop
        echo "(b) $m p = $np_: $((t1 - t0)) s unloaded, $((t2 - t1)) s loaded"
        same "$dir/b1$np_$m.h5" "$dir/b2$np_$m.h5" "(b) $m: determinism at p = $np_ under load"
        $PY - "$dir/b1$np_$m.h5" <<'EOF' || bad "(b) $m p = $np_: the stragglers and the jitter are on the virtual clock"
import h5py, numpy as np
f = h5py.File(__import__('sys').argv[1], 'r')
comp, d = f['ranks/compute_s'][()], f.attrs
assert comp.std(axis=1).min() > 0, comp  # the jitter spreads the compute over the ranks
assert d['wall_train_time_s'] < d['train_time_s'], (d['wall_train_time_s'], d['train_time_s'])
EOF
    else bad "(b) $m p = $np_, the first run: $(tail -n 3 "$dir/b1$np_$m.log")"; fi
done; done

# (c) a resumed lock-step run equals the uninterrupted one.
R="--set iterations=60 --set eval.every=20 --set log_every=10 --set sim.jitter=0.2 --set inject.slow_ranks=[1] --set inject.delay_ms=30"
if sim 3 c1 gossip_pull $R; then
    DSGD_TEST_SIGNAL=TERM@30 sim 3 c2 gossip_pull $R
    rc=$?
    [ $rc -eq 3 ] || bad "(c) SIGTERM at step 30: exit $rc, not 3: $(tail -n 3 "$dir/c2.log")"
    sim 3 c2 gossip_pull $R --resume || bad "(c) the resume: $(tail -n 3 "$dir/c2.log")"
    same "$dir/c1.h5" "$dir/c2.h5" "(c) resumed = uninterrupted"
else bad "(c) the run: $(tail -n 3 "$dir/c1.log")"; fi

# (d) the lock-step variants pass --check (the asynchronous ones: test_sim_gossip_async.sh).
for m in gossip_pull gossip_push; do
    out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set sim.enabled=true --set "method=\"$m\"" --set synchronous=true 2>&1)
    [ $? -eq 0 ] && ok "(d) lock-step $m in sim mode passes --check" || bad "(d) lock-step $m: $out"
done
exit $fail
