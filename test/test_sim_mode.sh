#!/bin/sh
# test_sim_mode.sh — sim mode (key group `sim`, docs/simulate.md; issue 25) with method allreduce on
# configs/linear.cfg (Fashion-MNIST, the linear model), real runs under mpiexec:
#   (a) closed form, p = 4, sim.step_ms = 25, no jitter: every /train and /eval time_s equals the
#       virtual clock's sum, step by step, of 25 ms + the modelled all-reduce (the root attribute
#       sim_allreduce_s, itself checked against the ring's α-β closed form on the flat 10 GbE
#       preset: Σ over the 4 MiB pieces of 2(p−1)(2α + piece/(p·β))); /ranks is virtual too
#       (step 25 ms + T, compute 25 ms, wait 0, data 0) and wall_s is beside it;
#   (b) determinism: p = 16 (P16=8 for a quicker run) with sim.jitter = 0.3 and injected
#       stragglers, run twice, the second while two busy loops load the machine: every dataset
#       but wall_s and the final attributes of the virtual clock equal bit for bit;
#   (c) a run stopped by SIGTERM at step 50 (DSGD_TEST_SIGNAL) and resumed equals the
#       uninterrupted run (every dataset but wall_s);
#   (d) bad values exit 2 naming the key; asynchronous gossip_pull with sim.device = "measured"
#       exits 2 naming sim.device; unused sim keys get a note, and so does a fat tree
#       whose one leaf holds every rank (accepted: the flat network); --check prints the
#       modelled times of the start-up line (run (a)'s line, the ring's closed form; gossip's
#       line says what it sends).
# The common part (PY, T, DSGD, dir, ok, bad, sim_run, same: test/sim/h5same.py): test/sim/lib.sh.
# Runs from the repository root with ./dsgd-run built (DSGD=... for another binary) and mpiexec
# on PATH (make check puts build/bin first); every mpiexec under a timeout.
#     PATH=build/bin:$PATH sh test/test_sim_mode.sh
set -u
P16=${P16:-16}
SIM_TAG=sim . test/sim/lib.sh  # PY, T, DSGD, CFG, dir, ok, bad, sim_run, same, busy_start/stop
sim() {  # sim NP NAME [dsgd-run args...]: an allreduce sim run of linear.cfg into $dir/NAME.h5
    np=$1 name=$2
    shift 2
    sim_run "$np" "$name" --set p="$np" "$@"
}

# (a) closed form at p = 4.
L="--set iterations=100 --set eval.every=50 --set log_every=10"
if sim 4 a $L --set sim.step_ms=25; then
    $PY - "$dir/a.h5" <<'EOF' && ok "(a) closed form: time_s = the sum of 25 ms + the ring all-reduce per step" || bad "(a) closed form"
import sys, math, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
p, A = 4, f.attrs
c, T = A['sim_step_s'], A['sim_allreduce_s']
assert c == 0.025, c
assert A['sim_model_bytes'] == 4 * 11689512 and A['sim_network'] == '10gbe' and A['time_axis'].startswith('simulated')
# the ring's α-β closed form on the flat preset (route = 2 links of 5 µs, 1.25 GB/s), 4 MiB pieces
alpha, beta, n, C = A['sim_link_latency_s'], A['sim_bandwidth_Bps'], 4 * 11689512, 4 << 20
assert alpha == 5e-6 and beta == 1.25e9
closed = (n // C) * 2 * (p - 1) * (2 * alpha + C / p / beta) + (n % C > 0) * 2 * (p - 1) * (2 * alpha + (n % C) / p / beta)
assert abs(T - closed) <= 1e-12 * closed, (T, closed)
# the virtual clock, step by step as vclock.c adds: ready = now + c; now = max(ready) + T
now, at = 0.0, {0: 0.0}
for s in range(1, 101):
    now = (now + c) + T
    at[s] = now
for g in ('train', 'eval'):
    st, ts = f[g + '/step'][()], f[g + '/time_s'][()]
    want = np.array([at[int(s)] for s in st])
    assert np.array_equal(ts, want), (g, ts, want)
    assert abs(ts[-1] - 100 * (c + T)) < 1e-9, ts[-1]
    w = f[g + '/wall_s'][()]
    assert w.shape == ts.shape and np.all(np.isfinite(w)) and np.all(np.diff(w) >= 0), w
assert len(f['train/step']) == 10 and list(f['eval/step'][()]) == [0, 50, 100]
assert np.allclose(f['ranks/step_time_s'][()], c + T, rtol=1e-12, atol=0), f['ranks/step_time_s'][0]
assert np.allclose(f['ranks/compute_s'][()], c, rtol=1e-12) and np.all(f['ranks/wait_s'][()] == 0) and np.all(f['ranks/data_s'][()] == 0)
assert np.allclose(f['ranks/comm_s'][()], T, rtol=1e-12)
assert A['train_time_s'] == at[100] and A['wall_train_time_s'] > 0 and A['status'] == b'completed'
EOF
    grep -q 'simulated training' "$dir/a.log" && grep -q 'img/s (simulated)' "$dir/a.log" || bad "(a) the progress lines and summary say simulated"
else bad "(a) the run: $(tail -n 3 "$dir/a.log")"; fi

# (b) determinism at p = P16: jitter, a slow rank and random stragglers; the second run loaded.
D="--set iterations=60 --set eval.every=30 --set log_every=5 --set sim.jitter=0.3 --set inject.slow_ranks=[3] --set inject.delay_ms=40 \
   --set inject.delay_dist=\"exponential\" --set inject.random_slow=0.3 --set eval.batch=500"
t0=$(date +%s)
if sim "$P16" b1 $D; then
    t1=$(date +%s)
    busy_start
    sim "$P16" b2 $D || bad "(b) the loaded run: $(tail -n 3 "$dir/b2.log")"
    t2=$(date +%s)
    busy_stop
    echo "(b) p = $P16: $((t1 - t0)) s unloaded, $((t2 - t1)) s loaded"
    same "$dir/b1.h5" "$dir/b2.h5" "(b) determinism at p = $P16 under load: every dataset but wall_s and sim_allreduce_s equal" --attr sim_allreduce_s
    $PY - "$dir/b1.h5" "$P16" <<'EOF' || bad "(b) the stragglers and the jitter are on the virtual clock"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
w, comp = f['ranks/wait_s'][()], f['ranks/compute_s'][()]
# rank 3 (slow every step) waits least; the jitter spreads the compute over the ranks
assert w[:, 3].mean() < np.delete(w, 3, axis=1).mean(), w.mean(axis=0)
assert comp.std(axis=1).min() > 0, comp
# the run took far less real time than simulated (delays are charged, not slept)
assert f.attrs['wall_train_time_s'] < f.attrs['train_time_s'], (f.attrs['wall_train_time_s'], f.attrs['train_time_s'])
EOF
else bad "(b) the first run: $(tail -n 3 "$dir/b1.log")"; fi

# (c) a resumed run equals the uninterrupted one.
R="--set iterations=100 --set eval.every=40 --set log_every=10 --set sim.jitter=0.2 --set inject.slow_ranks=[1] --set inject.delay_ms=30"
if sim 3 c1 $R; then
    DSGD_TEST_SIGNAL=TERM@50 sim 3 c2 $R
    rc=$?
    [ $rc -eq 3 ] || bad "(c) SIGTERM at step 50: exit $rc, not 3: $(tail -n 3 "$dir/c2.log")"
    sim 3 c2 $R --resume || bad "(c) the resume: $(tail -n 3 "$dir/c2.log")"
    same "$dir/c1.h5" "$dir/c2.h5" "(c) resumed = uninterrupted" --attr sim_allreduce_s
else bad "(c) the run: $(tail -n 3 "$dir/c1.log")"; fi

# (d) bad values, and the methods sim mode does not order yet.
check() {  # check WHAT ARGS...: exit 2 and a message naming WHAT
    out=$(timeout -k 5 60 "$DSGD" --check "$CFG" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q -- "$what"; then ok "(d) $* -> exit 2"; else bad "(d) $*: exit $rc: $out"; fi
}
what="key 'sim.jitter'" check --set sim.jitter=-0.1
what="key 'sim.step_ms'" check --set sim.step_ms=-1
what="key 'sim.oversubscription'" check --set sim.oversubscription=0.5
what="key 'sim.bandwidth_gbps'" check --set sim.bandwidth_gbps=0
what="key 'sim.model_params'" check --set sim.model_params=0
# 4 bytes a parameter must not wrap (it gave a 0-byte, free all-reduce); a typo'd bandwidth.
what="key 'sim.model_params'" check --set sim.model_params=4611686018427387904L
what="key 'sim.bandwidth_gbps'" check --set 'sim.network="custom"' --set sim.bandwidth_gbps=1e-300
what="key 'sim.device'" check --set 'sim.device="k81"'
what="key 'sim.network'" check --set 'sim.network="ethernet"'
what="key 'sim.device': asynchronous gossip_pull in sim mode needs a modelled compute" check --set sim.enabled=true \
    --set 'method="gossip_pull"' --set 'sim.device="measured"'
out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set sim.jitter=0.1 2>&1)
echo "$out" | grep -q "key 'sim.jitter' (--set sim.jitter=0.1) has no effect: used only by sim.enabled = true" \
    && ok "(d) a sim key without sim.enabled: the unused-key note" || bad "(d) unused-key note: $out"
out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set sim.enabled=true --set sim.latency_us=2 2>&1)
echo "$out" | grep -q "key 'sim.latency_us' (--set sim.latency_us=2) has no effect: used only by sim.network = \"custom\"" \
    && ok "(d) sim.latency_us with a preset: the unused-key note" || bad "(d) latency with a preset: $out"
# A fat tree whose one leaf holds every rank (the default leaf_size 16 at p = 4) is the flat
# network: accepted, with a note; a leaf_size of 2 splits the 4 ranks: no note.
out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set p=4 --set sim.enabled=true --set 'sim.topology="fat_tree"' 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "note: key 'sim.leaf_size' ($CFG): a leaf of 16 hosts holds all 4 ranks (p = 4): the fat tree is one leaf switch, the same network as sim.topology = \"flat\"" \
    && ok "(d) sim.leaf_size >= p: accepted, the one-leaf note" || bad "(d) leaf_size >= p: exit $rc: $out"
out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set p=4 --set sim.enabled=true --set 'sim.topology="fat_tree"' --set sim.leaf_size=2 2>&1)
echo "$out" | grep -q "note: .*sim.leaf_size" && bad "(d) leaf_size 2 < p = 4: a note: $out" || ok "(d) sim.leaf_size < p: no note"
# --check prints the modelled times of the start-up line: the line of run (a), whose all-reduce
# is the ring's closed form (above), and 25 ms of compute.
out=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set p=4 --set sim.enabled=true $L --set sim.step_ms=25 2>&1)
want=$($PY -c "
p, a, b, n, C = 4, 5e-6, 1.25e9, 4 * 11689512, 4 << 20
t = (n // C) * 2 * (p - 1) * (2 * a + C / p / b) + (n % C > 0) * 2 * (p - 1) * (2 * a + (n % C) / p / b)
print(f'sim mode: simulated time axis; compute 25.000 ms per step, all-reduce of {n} bytes over p = 4: {1e3 * t:.3f} ms (10gbe, flat, ring)')")
line=$(echo "$out" | grep "^sim mode:")
run=$(grep "^sim mode:" "$dir/a.log" 2>/dev/null)
case "$line" in "$want"*) [ "$line" = "$run" ] && ok "(d) --check prints the modelled times, as run (a)'s start line: $line" \
    || bad "(d) --check's sim line differs from run (a)'s: '$line' / '$run'" ;;
*) bad "(d) --check's sim line: '$line', expected '$want...': $out" ;; esac
# gossip's line says what it sends: θ to or from one peer per step, one message 2α + n/β on 10 GbE
for m in pull:pulls:from push:pushes:to; do
    IFS=: read -r k verb dir_ <<EOF2
$m
EOF2
    line=$(timeout -k 5 60 "$DSGD" --check "$CFG" --set p=4 --set sim.enabled=true --set "method=\"gossip_$k\"" --set sim.step_ms=25 2>&1 | grep "^sim mode:")
    want=$($PY -c "print(f'sim mode: simulated time axis; compute 25.000 ms per step, each node $verb θ (46758048 bytes) $dir_ one peer per step: {1e3 * (2 * 5e-6 + 46758048 / 1.25e9):.3f} ms host to host on an idle route (10gbe, flat), booked per NIC (')")
    case "$line" in "$want"*) ok "(d) gossip_$k's sim line: $line" ;; *) bad "(d) gossip_$k's sim line: '$line', expected '$want...'" ;; esac
done
exit $fail
