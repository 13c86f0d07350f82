#!/bin/sh
# isa-levels.sh — the ONEDNN_MAX_CPU_ISA caps below this CPU's best that make check runs the
# layer and model tests under, one per line (oneDNN "CPU Dispatcher Control"): AVX2 always
# (where the CPU has it), then each AVX-512 level the CPU offers short of its best. With the
# uncapped run, one machine checks the kernels that AVX2-only and AVX-512 cluster nodes run.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { for f in "$@"; do case " $flags " in *" $f "*) ;; *) return 1 ;; esac; done; }
levels=""
has avx2 && levels="AVX2"
has avx512f avx512bw avx512vl avx512dq && levels="$levels AVX512_CORE"
has avx512f avx512bw avx512vl avx512dq avx512_vnni && levels="$levels AVX512_CORE_VNNI"
has avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16 && levels="$levels AVX512_CORE_BF16"
has amx_tile amx_int8 amx_bf16 && levels="$levels AVX512_CORE_AMX"
# The best level is what the uncapped run uses already.
set -- $levels
[ $# -gt 0 ] && shift_last=$(($# - 1)) || exit 0
i=0
for l in "$@"; do
    [ $i -lt $shift_last ] && echo "$l"
    i=$((i + 1))
done
