#!/bin/sh
# test_sim_gossip_async.sh — asynchronous gossip_pull and gossip_push in sim mode
# (docs/simulate.md "Gossip, asynchronous"; issue 25 §4) on configs/linear.cfg, real runs under
# mpiexec:
#   (a) closed form, p = 2, sim.step_ms = 25, no jitter, 10 GbE. Pull: a step is ℓ + α + n/β (the
#       4-byte request ℓ = α + 4/β, the θ reply α + n/β, longer than the 25 ms compute). Push: the
#       first step 25 ms, then n/β each (a push leaves when the previous one has left the
#       uplink). Every /train time_s equals that to 1e-12 relative;
#   (c) an independent re-implementation of the schedules (train/vclock_gossip_async.h) in
#       Python at p = 4 with node 3 slowed by 30 ms a step (and with node 2 failing at step 20
#       too): every /train and /eval time_s equal bit for bit;
#   (b) determinism: p = 16 (PB=… for another p) with sim.step_ms = 20 (shorter than a θ's
#       37 ms on 10 GbE: the network decides the order), sim.jitter = 0.3, a slow rank and random
#       stragglers, run twice, the second beside two busy loops: every dataset but wall_s equal;
#   (d) refusals: sim.device = "measured" (exit 2 naming sim.device), --resume (exit 2 naming
#       sim.enabled); a SIGTERM stops at the next meeting point with exit 3 and says to start
#       again.
# The common part (PY, T, DSGD, dir, ok, bad, sim_run, same: test/sim/h5same.py): test/sim/lib.sh.
# Runs from the repository root with ./dsgd-run built (DSGD=... for another binary) and mpiexec
# on PATH; every mpiexec under a timeout.   PATH=build/bin:$PATH sh test/test_sim_gossip_async.sh
set -u
PB=${PB:-16}
SIM_TAG=simga . test/sim/lib.sh  # PY, T, DSGD, CFG, dir, ok, bad, sim_run, same, busy_start/stop
sim() {  # sim NP NAME METHOD [dsgd-run args...]: an asynchronous gossip sim run of linear.cfg into $dir/NAME.h5
    np=$1 name=$2 m=$3
    shift 3
    sim_run "$np" "$name" --set p="$np" --set method="\"$m\"" --set synchronous=false "$@"
}

# (a) and (c): the schedule against a closed form and a reference written here.
L="--set iterations=60 --set eval.every=30 --set log_every=1 --set sim.step_ms=25"
for m in gossip_pull gossip_push; do for np_ in 2 4 4f; do
    F=; [ $np_ != 2 ] && F="--set inject.slow_ranks=[3] --set inject.delay_ms=30 --set inject.delay_dist=\"fixed\""
    [ $np_ = 4f ] && F="$F --set inject.fail_rank=2 --set inject.fail_step=20"
    if sim ${np_%f} a$np_$m $m $L $F; then
        $PY - "$dir/a$np_$m.h5" $np_ $m <<'EOF' && ok "(a/c) $m at p = $np_: time_s = the reference schedule, bit for bit" || bad "(a/c) $m at p = $np_"
import sys, heapq, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
p, A, push = int(sys.argv[2].rstrip('f')), f.attrs, sys.argv[3] == 'gossip_push'
delay = lambda k: 0.030 if p == 4 and k == 3 else 0.0  # inject.slow_ranks = [3], fixed 30 ms
fail = (2, 20) if sys.argv[2].endswith('f') else (-1, 0)
failed = lambda k, s: k == fail[0] and s >= fail[1]  # inject_failed
c, seed, steps, every = A['sim_step_s'], int(A['seed']), 60, 30
assert c == 0.025 and A['sim_model_bytes'] == 4 * 11689512 and A['time_axis'].startswith('simulated')
n, lat, bw = int(A['sim_model_bytes']), A['sim_link_latency_s'], A['sim_bandwidth_Bps']
assert lat == 5e-6 and bw == 1.25e9
sys.path.insert(0, "test/sim")
from gossip_peers import peer_of  # gossip.c's peer draw
peer = lambda i, s: peer_of(seed, p, i, s)
# the reference schedules, written from the rules of vclock_gossip_async.h
route, tx = 2 * lat, n / bw           # flat network: host-up + host-down
meets = lambda s: s == steps or s % every == 0
if push:  # a node's clock needs no one's pushes: its own chain, and the meetings
    S, up, D, clock0 = [0.0] * p, [0.0] * p, [0.0] * p, {0: 0.0}
    for s in range(steps):
        live = [k for k in range(p) if not failed(k, s)]
        for k in live:
            X = S[k] + (c + delay(k))
            D[k] = max(X, up[k]); up[k] = D[k] + tx     # sim_nic_out
            S[k] = D[k]
        if meets(s + 1):
            Mt = max(D[k] for k in live if not failed(k, s + 1))
            for k in range(p): S[k] = Mt
        clock0[s + 1] = S[0] if not failed(0, s) else clock0[s]
    for g in ('train', 'eval'):
        st, ts = f[g + '/step'][()], f[g + '/time_s'][()]
        want = np.array([clock0[int(x)] for x in st])
        assert np.array_equal(ts, want), (g, np.argwhere(ts != want)[:3].tolist(), ts[:4], want[:4])
    assert A['train_time_s'] == clock0[steps] and A['status'] == b'completed'
    if p == 2:  # closed form: 25 ms, then n/β a step (the uplink)
        for s in range(1, steps + 1):
            want = c + (s - 1) * tx
            assert abs(clock0[s] - want) <= 1e-12 * want, (s, clock0[s], want)
        print(f"closed form: {c * 1e3:.3f} ms, then {tx * 1e3:.9f} ms a step: {clock0[steps]:.9f} s for {steps} steps")
    print(f"p = {sys.argv[2]} push: {clock0[steps]:.9f} s simulated for {steps} steps")
    sys.exit(0)
small = route + 4 / bw                # a request (or a "gone" answer): 4 bytes, not booked
done, start, last = [0] * p, [0.0] * p, [float('-inf')] * p
up, down = [0.0] * p, [0.0] * p
heap, parked, clock0, gone_n, versions = [], [], {0: 0.0}, 0, []
def schedule(k):
    s = done[k]
    if s >= steps or failed(k, s): return
    j = peer(k, s)
    heapq.heappush(heap, (start[k] + small, k, j))
for k in range(p): schedule(k)
while heap or parked:
    if not heap:  # every live node at the meeting: all start at the latest end
        Mt = max(last[k] for k in parked)
        for k in parked: start[k] = Mt
        if 0 in parked or failed(0, done[0]): clock0[done[parked[0]]] = Mt
        for k in parked: schedule(k)
        parked = []
        continue
    a, k, j = heapq.heappop(heap)
    s = done[k]
    gone = failed(j, done[j]) and a >= last[j]
    if gone:
        R, gone_n = a + small, gone_n + 1
    else:
        versions.append(done[j] - (1 if last[j] > a else 0))
        st = max(a, up[j]); up[j] = st + tx
        down[k] = max(st + route + tx, down[k] + tx); R = down[k]
    X = start[k] + (c + delay(k))
    E = X if X > R else R
    last[k], done[k], start[k] = E, s + 1, E
    if k == 0: clock0[s + 1] = E
    if not failed(k, s + 1) and meets(s + 1): parked.append(k)
    else: schedule(k)
for g in ('train', 'eval'):
    st, ts = f[g + '/step'][()], f[g + '/time_s'][()]
    want = np.array([clock0[int(x)] for x in st])
    assert np.array_equal(ts, want), (g, np.argwhere(ts != want)[:3].tolist(), ts[:4], want[:4])
assert A['train_time_s'] == clock0[steps] and A['status'] == b'completed'
if p == 2:  # the closed form: each node's request, then the other's θ, every step
    step = small + (route + tx)
    assert abs(step - (2 * 5e-6 + 4 / 1.25e9 + 2 * 5e-6 + 46758048 / 1.25e9)) < 1e-15 and step > c
    for s in range(1, steps + 1):
        assert abs(clock0[s] - s * step) <= 1e-12 * s * step, (s, clock0[s], s * step)
    print(f"closed form: {step * 1e3:.9f} ms a step, {clock0[steps]:.9f} s for {steps} steps")
if sys.argv[2] == '4f':
    assert gone_n > 0, gone_n  # pulls from node 2 after its failure were answered "gone"
    assert np.all(np.isnan(f['ranks/compute_s'][()][1:, 2])), f['ranks/compute_s'][()]
stale = sum(1 for v in versions if v < 0)
assert stale == 0
print(f"p = {sys.argv[2]}: {clock0[steps]:.9f} s simulated for {steps} steps; {gone_n} pulls answered gone")
EOF
    else bad "(a/c) $m at p = $np_: $(tail -n 3 "$dir/a$np_$m.log")"; fi
done; done

# (b) determinism: jitter, a slow rank and random stragglers; the second run loaded.
D="--set iterations=40 --set eval.every=20 --set log_every=5 --set sim.step_ms=20 --set sim.jitter=0.3 --set inject.slow_ranks=[3] --set inject.delay_ms=40 \
   --set inject.delay_dist=\"exponential\" --set inject.random_slow=0.3 --set eval.batch=500"
for m in gossip_pull gossip_push; do
    t0=$(date +%s)
    if sim $PB b1$m $m $D; then
        t1=$(date +%s)
        busy_start
        sim $PB b2$m $m $D || bad "(b) $m p = $PB, the loaded run: $(tail -n 3 "$dir/b2$m.log")"
        t2=$(date +%s)
        busy_stop
        echo "(b) $m p = $PB: $((t1 - t0)) s unloaded, $((t2 - t1)) s loaded; $(grep '^done:' "$dir/b1$m.log")"
        same "$dir/b1$m.h5" "$dir/b2$m.h5" "(b) $m: determinism at p = $PB under load"
    else bad "(b) $m p = $PB, the first run: $(tail -n 3 "$dir/b1$m.log")"; fi
done

# (d) refusals, and a SIGTERM stop.
for m in gossip_pull gossip_push; do
    out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set sim.enabled=true --set "method=\"$m\"" --set 'sim.device="measured"' 2>&1)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -q "key 'sim.device': asynchronous $m in sim mode needs a modelled compute" \
        && ok "(d) $m: measured device -> exit 2" || bad "(d) $m measured: exit $rc: $out"
    S="--set iterations=60 --set eval.every=20 --set log_every=10 --set sim.step_ms=25"
    DSGD_TEST_SIGNAL=TERM@25 sim 3 d$m $m $S
    rc=$?
    if [ $rc -eq 3 ] && grep -q "stopped by .* after step 40; sim mode cannot resume this method yet (docs/simulate.md, Limits): its checkpoint cannot be continued" "$dir/d$m.log"; then
        ok "(d) $m: SIGTERM at step 25: stopped at the meeting point after step 40, exit 3"
    else bad "(d) $m SIGTERM: exit $rc: $(tail -n 4 "$dir/d$m.log")"; fi
    sim 3 d$m $m $S --resume
    rc=$?
    [ $rc -eq 2 ] && grep -q "key 'sim.enabled'.*cannot be resumed yet" "$dir/d$m.log" && ok "(d) $m: --resume -> exit 2" \
        || bad "(d) $m resume: exit $rc: $(tail -n 3 "$dir/d$m.log")"
done
# (e) a signal after the last evaluation is taken at the end: every step done, the run complete
DSGD_TEST_SIGNAL=TERM@45 sim 3 e gossip_pull $S
rc=$?
st=$($PY -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs["status"].decode())' "$dir/e.h5" 2>&1)
if [ $rc -eq 0 ] && [ "$st" = completed ] && grep -q "SIGTERM after the last step: the run is complete" "$dir/e.log"; then
    ok "(e) gossip_pull: SIGTERM at step 45 of 60 (last evaluation at 40): taken at the end, completed, exit 0"
else bad "(e) SIGTERM at 45: exit $rc, status $st: $(tail -n 3 "$dir/e.log")"; fi
exit $fail
