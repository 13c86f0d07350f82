#!/bin/sh
# smpi_check.sh CLI [OUTDIR] — sim mode's closed-form collectives (src/sim/simmodel.c, printed by
# CLI = build/test/sim_model_cli) against SimGrid/SMPI's offline trace replay on the same α, β:
# SMPI's calibration factors set to 1 and cross-traffic off, which makes SMPI's network model
# α-β (../shared/notes/simulation.md §1.2), and the SMPI algorithm that runs the same steps as
# ours. For each network, p, topology and algorithm: a platform file and hostfile, one
# time-independent trace per rank (init; STEPS × (compute 1e8 flops = 0.1 s on the 1 Gf hosts +
# ResNet-18's 46,758,048-byte gradient as dsgd-run's ≤ 4 MiB chunks: 12 blocking allreduce
# actions); finalize), `smpirun -replay`, and the per-step communication time SMPI simulated,
# (T − STEPS · 0.1 s) / STEPS, against ours. Pass: every row within 1 %. Table in
# OUTDIR/table.md (default build/sim-smpi); exit 1 if a row fails, 2 if SMPI is missing and
# cannot be installed. Installs Debian's libsimgrid-dev (3.32) when smpirun is missing (as root).
# Knobs (environment): SIM_SMPI_NETS (default "10gbe ib_hdr"), SIM_SMPI_P ("8 24 32 128"),
# SIM_SMPI_ALGOS ("ring recursive_doubling rabenseifner tree bcast"), SIM_SMPI_STEPS (2).
# p = 24 checks MPICH's rule for p not a power of two (and the fat tree's D-mod-k routing).
# Make target: check-sim-smpi. docs/simulate-models.md has the table and what each row checks.
set -eu
cli=$1
out=${2:-build/sim-smpi}
nets=${SIM_SMPI_NETS:-10gbe ib_hdr}
ps=${SIM_SMPI_P:-8 24 32 128}
algos=${SIM_SMPI_ALGOS:-ring recursive_doubling rabenseifner tree bcast}
steps=${SIM_SMPI_STEPS:-2}
n=46758048
chunk=4194304

if ! command -v smpirun >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "smpi_check.sh: needs SimGrid's smpirun: apt-get install libsimgrid-dev (as root)" >&2
        exit 2
    fi
    t0=$(date +%s)
    DEBIAN_FRONTEND=noninteractive apt-get install -y libsimgrid-dev >"$out.install.log" 2>&1 ||
        { apt-get update >>"$out.install.log" 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y libsimgrid-dev >>"$out.install.log" 2>&1; } ||
        { echo "smpi_check.sh: apt-get install libsimgrid-dev failed ($out.install.log)" >&2; exit 2; }
    echo "installed libsimgrid-dev in $(( $(date +%s) - t0 )) s"
fi
mkdir -p "$out"
echo "SimGrid: $(smpirun -version 2>&1 | head -1)"

# Hosts per leaf switch of the fat tree at p (2 leaves at p = 8, 4 at 32, 8 at 128).
leaf_of_p() { case $1 in 8) echo 4 ;; 24 | 32) echo 8 ;; *) echo 16 ;; esac; }

# platform FILE P LAT_S BW_BPS TOPO LEAF OVERSUB: one host per rank, a route is host-up +
# host-down link (flat) or host-leaf-spine-leaf-host (fat tree, D-mod-k routing). The loopback is
# made free: our model charges nothing for a rank's copy to itself (SMPI's lr and rdb send one).
platform() {
    f=$1 p=$2 lat=$3 bw=$4 topo=$5 leaf=$6 over=$7
    if [ "$topo" = fat_tree ]; then
        topoattr=" topology=\"FAT_TREE\" topo_parameters=\"2;$leaf,$((p / leaf));1,$((leaf / over));1,1\""
    else
        topoattr=""
    fi
    cat > "$f" <<EOF
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1"><zone id="world" routing="Full">
  <cluster id="c" prefix="node-" radical="0-$((p - 1))" suffix="" speed="1Gf" bw="${bw}Bps" lat="${lat}s"
           sharing_policy="SPLITDUPLEX" loopback_bw="1e9GBps" loopback_lat="0"$topoattr/>
</zone></platform>
EOF
}

# traces DIR P ALGO: one trace per rank and the list smpirun -replay reads.
traces() {
    d=$1 p=$2 algo=$3
    mkdir -p "$d"
    awk -v d="$d" -v p="$p" -v steps="$steps" -v n="$n" -v c="$chunk" -v bcast="$([ "$algo" = bcast ] && echo 1 || echo 0)" 'BEGIN {
        for (r = 0; r < p; r++) {
            f = d "/rank" r ".txt"
            print r " init" > f
            for (s = 0; s < steps; s++) {
                print r " compute 1e8" > f
                for (o = 0; o < n; o += c) {
                    b = n - o < c ? n - o : c
                    if (bcast) print r " bcast " b " 0" > f
                    else print r " allreduce " b " 0" > f
                }
            }
            print r " finalize" > f
            close(f)
            print f > (d "/list")
        }
    }'
}

smpi_algo() {
    case $1 in
    ring) echo lr ;;
    recursive_doubling) echo rdb ;;
    rabenseifner) echo rab_rdb ;;
    tree) echo redbcast ;;
    bcast) echo lr ;;
    esac
}

table="$out/table.md"
{
    echo "| network | p | topology | algorithm (SMPI's) | SMPI comm/step (ms) | model (ms) | error | SMPI step (ms) | replay real s |"
    echo "|---|---|---|---|---|---|---|---|---|"
} > "$table"
fails=0 rows=0
t_all=$(date +%s)
for net in $nets; do
    set -- $("$cli" preset "$net")
    lat=$1 bw=$2
    for p in $ps; do
        leaf=$(leaf_of_p "$p")
        for topo in flat fat_tree fat_tree_o4; do
            case $topo in
            flat) mtopo=flat over=1 ;;
            fat_tree) mtopo=fat_tree over=1 ;;
            fat_tree_o4) mtopo=fat_tree over=4 ;;
            esac
            plat="$out/$net-$topo-$p.xml"
            hosts="$out/hosts-$p"
            platform "$plat" "$p" "$lat" "$bw" "$mtopo" "$leaf" "$over"
            awk -v p="$p" 'BEGIN { for (r = 0; r < p; r++) print "node-" r }' > "$hosts"
            for algo in $algos; do
                d="$out/traces-$p-$algo"
                [ -f "$d/list" ] || traces "$d" "$p" "$algo"
                log="$out/$net-$topo-$p-$algo.log"
                t0=$(date +%s.%N)
                smpirun -np "$p" -platform "$plat" -hostfile "$hosts" -replay "$d/list" \
                    --cfg=smpi/bw-factor:0:1 --cfg=smpi/lat-factor:0:1 --cfg=network/crosstraffic:0 \
                    --cfg=smpi/allreduce:"$(smpi_algo "$algo")" --cfg=smpi/reduce:binomial \
                    --cfg=smpi/bcast:binomial_tree --cfg=smpi/host-speed:1Gf >"$log" 2>&1 ||
                    { echo "smpi_check.sh: smpirun failed ($log)" >&2; tail -5 "$log" >&2; exit 1; }
                real=$(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
                t=$(sed -n 's/.*Simulation time \([0-9.e+-]*\).*/\1/p' "$log" | tail -1)
                [ -n "$t" ] || { echo "smpi_check.sh: no simulated time in $log" >&2; exit 1; }
                malgo=$algo
                [ "$algo" = ring ] && malgo=ring_smpi_lr
                m=$("$cli" "$malgo" "$mtopo" "$p" "$n" "$lat" "$bw" "$leaf" "$over" "$chunk")
                row=$(awk -v t="$t" -v s="$steps" -v m="$m" -v net="$net" -v p="$p" -v leaf="$leaf" \
                          -v over="$over" -v topo="$mtopo" -v algo="$algo" -v sa="$(smpi_algo "$algo")" -v real="$real" 'BEGIN {
                    c = (t - s * 0.1) / s
                    e = (c - m) / m * 100
                    tp = topo == "flat" ? "flat" : sprintf("fat tree, %d/leaf, %d:1", leaf, over)
                    if (algo == "bcast") sa = "binomial_tree"
                    printf "| %s | %d | %s | %s (%s) | %.3f | %.3f | %+.3f %% | %.3f | %s |%s\n", net, p, tp, algo, sa,
                           c * 1e3, m * 1e3, e, t / s * 1e3, real, (e > 1 || e < -1) ? " FAIL" : ""
                }')
                echo "$row" | tee -a "$table"
                rows=$((rows + 1))
                case $row in *FAIL) fails=$((fails + 1)) ;; esac
            done
        done
    done
done
echo "$rows rows, $fails outside 1 %, $(( $(date +%s) - t_all )) s (table: $table)"
[ "$fails" -eq 0 ]
