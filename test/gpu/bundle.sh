#!/bin/bash
# bundle.sh — build the GPU check's binaries here (Debian 12, with MPICH, oneDNN, HDF5,
# libconfig, Check and the CUDA toolkit + cuDNN) and pack them, with every shared library they
# need that a bare GPU machine lacks, into one directory that test/gpu/run.sh --bundle runs from.
# The GPU machine has the NVIDIA driver, CUDA, cuDNN, cuBLAS and PyTorch, but no MPI, oneDNN,
# HDF5, libconfig or Check, and no network.
#
#   test/gpu/bundle.sh [OUTDIR] [--cpu] [--no-build] [--xz | --no-xz]   OUTDIR default: .gpu-bundle
#
#   --cpu     build the CPU-only dsgd-run (plain `make`) and bundle what exists: tries the bundle
#             logic where the GPU backend is not built (the test/gpu binaries are then absent; the
#             test programs over test/gpu/mock, and dsgd-run over it as test/dsgd-run-mock, where
#             make check has built them, stand in for them in a simulated run.sh)
#   --no-build  bundle what an earlier build left (./dsgd-run, build/test/gpu/*, build/bench_gpu)
#   --xz      always pack bin/, lib/ and test/ into OUTDIR/payload.tar.xz (run.sh unpacks it to
#             /tmp); --no-xz never; default: only when the directory would exceed 40 MiB
#
# Environment: CUDA_ARCH (default 90: the H200), BUNDLE_OPT (default "-O3 -march=x86-64-v3":
# any AVX2 x86-64 host, not just this one's -march=native), JOBS (make -j, default nproc).
# The build starts from `make clean`, so that every object has BUNDLE_OPT.
#
# OUTDIR holds:
#   bin/       dsgd-run, mpiexec.hydra, hydra_pmi_proxy (MPICH's launcher and its proxy)
#   test/      test_gpu_ops, test_gpu_model, test_gpu_device, test_gpu_comm, test_gpu_overlap,
#              bench_gpu (--cpu: the test programs over test/gpu/mock, and dsgd-run-mock)
#   lib/       every library ldd resolves for those, except glibc's own (libc, libm, libpthread,
#              libdl, librt, libresolv, ld-linux, ...), libgcc_s and the CUDA / NVIDIA libraries
#              (libcudart, libcudnn*, libcublas*, libcuda, libnccl, ...: the GPU machine's own);
#              lib/ucx/ UCX's shared-memory transport module (MPICH here is ch4:ucx)
#   lib/fallback/{stdc++,gomp}/  libstdc++ and libgomp: run.sh adds each only if the machine's
#              own is missing or too old
#   data/      the first 10000 training and 2000 test images and labels of Fashion-MNIST
#              (test/gpu/make_data.sh), fmnist_short.cfg: the short run's experiment
#   MANIFEST.txt   what was built, from which commit, with which flags, every file and size,
#              the newest glibc symbol version the binaries need
# Copies are stripped (libraries --strip-unneeded, executables --strip-debug). Prints the size.
#
# The GPU call (issue 23: one call of test/gpu/run.sh in a ~15-minute GPU allocation, machine
# start and transfers included):
#   before it, here, with no GPU and no hurry:
#     test/gpu/bundle.sh                          # ~10-20 min on 2 cores (make clean; CUDA_ARCH=90)
#     GPUCHECK_SIMULATE=1 test/gpu/run.sh /tmp/sim --bundle .gpu-bundle   # needs --cpu's bundle:
#         test/gpu/bundle.sh /tmp/cpu-bundle --cpu, then --bundle /tmp/cpu-bundle (steps a-g on the
#         CPU, the test programs those over test/gpu/mock; PyTorch, if absent, says SKIP; exit 0
#         expected: ~150 s on 2 shared cores, test/gpu/README.md)
#     du -sh .gpu-bundle                          # must leave room in the carry limit (64 MiB in all)
#   the call itself: the repository as checked out plus .gpu-bundle/ (git-ignored, so it must be
#   carried by name), a time limit of the budget + 40 s, the results under the folder that comes
#   back:
#     carry:    [".gpu-bundle"]
#     command:  test/gpu/run.sh "$OUT/gpu" --bundle .gpu-bundle --budget 380
#     timeout:  420 s (budget + 40: run.sh stops starting steps at the budget and, cut by SIGTERM,
#               prints summary.md; the throughput table is on stdout as soon as step d ends)
#   Time: steps a-f are estimated at 176-331 s of the 365 that --budget 380 leaves them (step d
#   bounded by its programs' budgets, 90 + 35 s; test/gpu/README.md, "Time budget", has the
#   arithmetic per step and row); g gets the rest.
#   Order of the call (run.sh): a. machine and bundle set-up, b. test_gpu_ops (fp32, tf32, bf16),
#   c. one short run, d. the throughput table (dsgd-run's base rows and switch rows, PyTorch's
#   fp32/tf32/bf16 NCHW and channels_last), e. NCCL, f. the JPEG run, g. the rest as time allows.
#   One call only: a second full one does not fit the allocation.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
outdir=.gpu-bundle
cuda=1
build=1
xz=auto
for arg in "$@"; do
    case $arg in
    --cpu) cuda=0 ;;
    --no-build) build=0 ;;
    --xz) xz=yes ;;
    --no-xz) xz=no ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "bundle.sh: unknown option $arg" >&2; exit 2 ;;
    *) outdir=$arg ;;
    esac
done
cd "$root"
case $outdir in /*) ;; *) outdir=$root/$outdir ;; esac

die() { echo "bundle.sh: $*" >&2; exit 1; }
say() { echo "bundle.sh: $*"; }

# Refuse to wipe a directory that is not an earlier bundle.
if [ -e "$outdir" ]; then
    if [ -f "$outdir/MANIFEST.txt" ] || [ -z "$(ls -A "$outdir")" ]; then
        rm -rf "$outdir"
    else
        die "$outdir exists and is not a bundle (no MANIFEST.txt); remove it or choose another OUTDIR"
    fi
fi

# ---- 1. build ----------------------------------------------------------------------------
opt=${BUNDLE_OPT:--O3 -march=x86-64-v3}
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc)}
if [ $build = 0 ]; then
    opt="(--no-build: as built before)"
    [ -x dsgd-run ] || die "--no-build: no ./dsgd-run"
else
    say "building with OPT='$opt'$([ $cuda = 1 ] && echo " CUDA=1 CUDA_ARCH='$arch'") (make clean first)"
    make clean > /dev/null
    if [ $cuda = 1 ]; then
        make -j"$jobs" CUDA=1 CUDA_ARCH="$arch" OPT="$opt" dsgd-run gpu-tests
    else
        make -j"$jobs" OPT="$opt" dsgd-run
    fi
fi

# ---- 2. what goes in ---------------------------------------------------------------------
mkdir -p "$outdir"/{bin,test,lib/ucx,lib/fallback/stdc++,lib/fallback/gomp,data}
tests=()
for t in build/test/gpu/test_gpu_ops build/test/gpu/test_gpu_model build/test/gpu/test_gpu_device build/bench_gpu; do
    if [ -x "$t" ]; then
        tests+=("$t")
    elif [ $cuda = 1 ]; then
        die "$t was not built by 'make CUDA=1 gpu-tests'"
    else
        say "(--cpu) $t not built: left out"
    fi
done
# --cpu: the test programs built over test/gpu/mock (make check builds them) stand in for the GPU
# ones, so that a simulated run.sh (GPUCHECK_SIMULATE=1) runs its test steps too; with them
# dsgd-run over the mock, which test_gpu_overlap runs, as test/dsgd-run-mock.
if [ $cuda = 0 ]; then
    for t in build/mock/test_gpu_ops build/mock/test_gpu_model build/mock/test_gpu_device build/mock/test_gpu_comm \
        build/mock/test_gpu_overlap build/mock/dsgd-run; do
        if [ -x "$t" ]; then tests+=("$t"); else say "(--cpu) $t not built (make check builds it): left out"; fi
    done
fi
if [ -d build/test/gpu ]; then # any other GPU test the Makefile builds
    for t in build/test/gpu/*; do
        [ -f "$t" ] && [ -x "$t" ] || continue
        case " ${tests[*]} " in *" $t "*) ;; *) tests+=("$t") ;; esac
    done
fi

mpiexec_path=$(command -v mpiexec) || die "no mpiexec on PATH"
mpiexec_real=$(readlink -f "$mpiexec_path")
"$mpiexec_real" --version 2>&1 | grep HYDRA > /dev/null || die "$mpiexec_path -> $mpiexec_real is not MPICH's Hydra"
proxy=$(dirname "$mpiexec_real")/hydra_pmi_proxy
[ -x "$proxy" ] || die "no $proxy beside $mpiexec_real"

cp dsgd-run "$outdir/bin/"
cp "$mpiexec_real" "$outdir/bin/mpiexec.hydra"
cp "$proxy" "$outdir/bin/hydra_pmi_proxy"
for t in ${tests[@]+"${tests[@]}"}; do
    case $t in
    build/mock/dsgd-run) cp "$t" "$outdir/test/dsgd-run-mock" ;;
    *) cp "$t" "$outdir/test/" ;;
    esac
done

# ---- 3. libraries ------------------------------------------------------------------------
# Left to the GPU machine: glibc's libraries, libgcc_s, and the CUDA / NVIDIA stack.
system_lib() {
    case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | \
        librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnsl.so.* | libBrokenLocale.so.* | \
        libthread_db.so.* | libgcc_s.so.*) return 0 ;;
    libcuda.so* | libcudart.so* | libcudnn*.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libnvidia-*.so* | \
        libnvrtc*.so* | libnvJitLink.so* | libcufft*.so* | libcurand.so* | libcusolver*.so* | libcusparse*.so* | \
        libcupti.so* | libnvToolsExt.so*) return 0 ;;
    esac
    return 1
}

declare -A seen=()
missing=()
add_libs_of() { # every library ldd resolves for ELF file $1
    local line name path
    while IFS= read -r line; do
        case $line in
        *"=> not found"*)
            name=$(awk '{print $1}' <<< "$line")
            system_lib "$name" || missing+=("$name (needed by $1)")
            ;;
        *"=> /"*)
            name=$(awk '{print $1}' <<< "$line")
            path=$(awk '{print $3}' <<< "$line")
            system_lib "$name" && continue
            [ -n "${seen[$name]:-}" ] && continue
            seen[$name]=$path
            case $name in
            libstdc++.so.*) cp -L "$path" "$outdir/lib/fallback/stdc++/$name" ;;
            libgomp.so.*) cp -L "$path" "$outdir/lib/fallback/gomp/$name" ;;
            *) cp -L "$path" "$outdir/lib/$name" ;;
            esac
            ;;
        esac
    done < <(ldd "$1")
}
for f in "$outdir"/bin/* "$outdir"/test/*; do
    [ -f "$f" ] && add_libs_of "$f"
done
# UCX opens its transports at run time from <dir of libucs>/ucx: the shared-memory one (cma)
# is enough on one node. Its own dependencies are UCX's, already in lib/.
if [ -n "${seen[libucs.so.0]:-}" ]; then
    ucxdir=$(dirname "$(readlink -f "${seen[libucs.so.0]}")")/ucx
    mod=$ucxdir/libuct_cma.so.0
    if [ -e "$mod" ]; then
        cp -L "$mod" "$outdir/lib/ucx/"
        add_libs_of "$mod"
    fi
fi
[ ${#missing[@]} -eq 0 ] || die "ldd finds no: ${missing[*]}"

# What the binaries say here, where there is no GPU (warnings only: the GPU machine decides).
say "dsgd-run --version: $(./dsgd-run --version 2>&1 | tr '\n' ' ')"
if [ $cuda = 1 ] && ! ./dsgd-run --version 2>&1 | grep -i cuda > /dev/null; then
    say "WARNING: dsgd-run --version names no CUDA backend"
fi
for t in ${tests[@]+"${tests[@]}"}; do
    case $t in *bench_gpu | build/mock/*) continue ;; esac
    out=$(timeout 60 "$t" 2>&1) && st=0 || st=$?
    say "$t without a GPU: exit $st: $(printf '%s\n' "$out" | tail -n 1)"
    [ "$st" = 0 ] || say "WARNING: $t should skip (exit 0) where there is no GPU"
done

# ---- 4. strip ----------------------------------------------------------------------------
for f in "$outdir"/lib/*.so* "$outdir"/lib/ucx/*.so* "$outdir"/lib/fallback/*/*.so*; do
    [ -f "$f" ] && chmod u+w "$f" && strip --strip-unneeded "$f"
done
for f in "$outdir"/bin/* "$outdir"/test/*; do
    [ -f "$f" ] && chmod u+w "$f" && strip --strip-debug "$f"
done

# ---- 5. data and experiment -------------------------------------------------------------
"$here/make_data.sh" "$outdir/data" 10000 2000
cp "$here/fmnist_short.cfg" "$outdir/data/"

# ---- 6. manifest -------------------------------------------------------------------------
# The newest glibc symbol version needed (the fallback libstdc++ / libgomp apart: they are used
# only where the machine has none of its own).
newest_glibc() {
    for f in "$@"; do [ -f "$f" ] && objdump -T "$f" 2>/dev/null; done |
        grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u | tail -n 1 || true
}
glibc_need=$(newest_glibc "$outdir"/bin/* "$outdir"/test/* "$outdir"/lib/*.so* "$outdir"/lib/ucx/*.so*)
glibc_need_fb=$(newest_glibc "$outdir"/lib/fallback/*/*.so*)
glibcxx_need=$(for f in "$outdir"/bin/* "$outdir"/test/* "$outdir"/lib/*.so* "$outdir"/lib/ucx/*.so*; do
    [ -f "$f" ] && objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -t. -k3,3n -u | tail -n 1 || true)
{
    echo "dsgd-run GPU check bundle (test/gpu/bundle.sh; run with test/gpu/run.sh RESULTS --bundle DIR)"
    echo "built:        $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "commit:       $(git describe --always --dirty 2>/dev/null || echo '?') ($(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo '?'))"
    echo "backend:      $([ $cuda = 1 ] && echo "CUDA (make CUDA=1 CUDA_ARCH=$arch)" || echo "CPU only (--cpu)")"
    echo "OPT:          $opt"
    echo "compiler:     $(mpicc --version 2>&1 | sed -n 1p || true)"
    [ $cuda = 1 ] && echo "nvcc:         $( ("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version || nvcc --version) 2>/dev/null | tail -n 1 || true)"
    echo "glibc needed: ${glibc_need:-?}; ${glibc_need_fb:-?} with lib/fallback (this machine: $(getconf GNU_LIBC_VERSION))"
    echo "libstdc++ needed: ${glibcxx_need:-none}"
    echo "mpiexec:      $mpiexec_path -> $mpiexec_real"
    echo
    echo "files (bytes):"
    (cd "$outdir" && find . -type f ! -name MANIFEST.txt -printf '%s\t%P\n' | sort -k2)
    echo
    echo "library sources:"
    for k in "${!seen[@]}"; do printf '%s\t%s\n' "$k" "${seen[$k]}"; done | sort
} > "$outdir/MANIFEST.txt"
echo "glibc_need=${glibc_need:-}" > "$outdir/requires.txt"
echo "glibc_need_fallback=${glibc_need_fb:-}" >> "$outdir/requires.txt"
echo "glibcxx_need=${glibcxx_need:-}" >> "$outdir/requires.txt"

# ---- 7. size; pack if large ------------------------------------------------------------------
mib() { echo "$(( ($1 + 1048575) / 1048576 )) MiB"; }
size=$(du -sb "$outdir" | cut -f1)
limit=$(( 40 * 1048576 ))
if [ $xz = yes ] || { [ $xz = auto ] && [ "$size" -gt "$limit" ]; }; then
    say "directory $(mib "$size"): packing bin/ lib/ test/ into payload.tar.xz"
    tar -C "$outdir" -cf - bin lib test | xz -T0 -6 > "$outdir/payload.tar.xz"
    rm -rf "${outdir:?}"/bin "${outdir:?}"/lib "${outdir:?}"/test
    echo "payload.tar.xz: bin/ lib/ test/ packed (run.sh unpacks it to /tmp)" >> "$outdir/MANIFEST.txt"
fi
size=$(du -sb "$outdir" | cut -f1)
say "bundle $outdir: $(mib "$size") ($size bytes)"
du -sh "$outdir"/* | sed 's/^/  /'
[ "$size" -le $(( 45 * 1048576 )) ] || say "WARNING: over 45 MiB: the device tool carries at most 64 MiB with the working tree"
