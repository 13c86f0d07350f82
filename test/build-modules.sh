#!/bin/sh
# build-modules.sh — make check-build: dsgd-run built the way a cluster user with modules and
# without root builds it (issue 22, B1/B2), in a copy of the tree on this Debian machine:
#   - no root: the build runs as user nobody (setpriv) in a copy it owns (as another user than
#     root: as that user);
#   - the compiler is named cc (a wrapper script that calls mpicc.mpich, like Cray's cc) and no
#     mpicc, mpicxx or h5cc is on PATH (PATH is a directory of links to /usr/bin without them);
#   - Check is absent and HDF5 has no pkg-config entry (PKG_CONFIG_LIBDIR: the system's .pc
#     files without check.pc and hdf5*.pc), so HDF5 comes from HDF5_ROOT: a module-like prefix
#     (include/ -> Debian's HDF5 headers, lib/ with a copy of libhdf5_serial.so.103);
#   - no LD_LIBRARY_PATH (env -i), nothing downloaded (oneDNN: this tree's build/onednn through
#     ONEDNN_ROOT, or $ONEDNN_PREFIX).
# Plain `make -j2 dsgd-run` (no CC given) must build; then ./dsgd-run --version, --check on
# configs/quickstart.cfg and a 1-rank linear-model run must work, ldd must resolve libhdf5 from the
# HDF5_ROOT copy through the binary's RUNPATH. Also: a test program (Check) refused with a
# message naming CHECK_ROOT; HDF5 found through h5cc -show when h5cc is on PATH; no HDF5 at all
# and a CC that does not link MPI each stopped with a message naming what to set.
# Exit 1 if anything fails. docs/build.md, docs/testing.md.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
onednn=$(readlink -f "${ONEDNN_PREFIX:-$root/build/onednn}")
[ -f "$onednn/include/oneapi/dnnl/dnnl.h" ] || {
    echo "build-modules.sh: no oneDNN at $onednn (run make once, or set ONEDNN_PREFIX)" >&2; exit 1; }
mpicc_real=$(command -v mpicc.mpich) || { echo "build-modules.sh: no mpicc.mpich (libmpich-dev)" >&2; exit 1; }
start=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsgd-build-modules.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
status=0
ok() { echo "ok: $*"; }
bad() { echo "FAILED: $*"; status=1; }

# PATH: links to every command of /usr/bin (and /usr/sbin) but the MPI and HDF5 compiler
# wrappers and cc; cc is a wrapper script calling MPICH's mpicc.
mkdir -p "$tmp/bin" "$tmp/h5bin" "$tmp/pc" "$tmp/hdf5/lib" "$tmp/home" "$tmp/t"
for d in /usr/sbin /usr/bin; do
    for f in "$d"/*; do
        b=${f##*/}
        case $b in mpicc*|mpicxx*|mpic++*|mpiCC*|mpif77*|mpif90*|mpifort*|h5cc|h5pcc|h5c++|h5fc|cc) continue ;; esac
        [ -e "$tmp/bin/$b" ] || ln -s "$f" "$tmp/bin/$b"
    done
done
printf '#!/bin/sh\n# cc: a C compiler that links MPI (as Cray'"'"'s cc does)\nexec %s "$@"\n' "$mpicc_real" > "$tmp/bin/cc"
chmod 755 "$tmp/bin/cc"
ln -s "$(command -v h5cc)" "$tmp/h5bin/h5cc"
# pkg-config: the system's entries without Check and HDF5.
for d in $(pkg-config --variable pc_path pkg-config | tr : ' '); do
    for f in "$d"/*.pc; do
        [ -e "$f" ] || continue
        b=${f##*/}
        case $b in check.pc|hdf5*.pc) continue ;; esac
        [ -e "$tmp/pc/$b" ] || ln -s "$f" "$tmp/pc/$b"
    done
done
# HDF5 as a module's prefix: headers linked, the shared library copied (so that ldd shows where
# the RUNPATH, not the system's default paths, found it).
h5lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libhdf5_serial.so)
ln -s /usr/include/hdf5/serial "$tmp/hdf5/include"
cp "$h5lib" "$tmp/hdf5/lib/"
ln -s "${h5lib##*/}" "$tmp/hdf5/lib/libhdf5_serial.so.103"
ln -s "${h5lib##*/}" "$tmp/hdf5/lib/libhdf5.so"

# The copy of the tree (tracked and new files, no build outputs), owned by the building user.
mkdir -p "$tmp/src"
if [ -d "$root/.git" ] || [ -f "$root/.git" ]; then
    (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 tar cf -) | (cd "$tmp/src" && tar xf -)
else
    (cd "$root" && tar cf - --exclude=./build --exclude=./dsgd-run --exclude=./runs --exclude=./plots .) | (cd "$tmp/src" && tar xf -)
fi
if [ "$(id -u)" = 0 ]; then
    chown -R nobody:nogroup "$tmp/src" "$tmp/home" "$tmp/t"
    as_user="setpriv --reuid=nobody --regid=nogroup --clear-groups"
    who="nobody"
else
    as_user=""
    who=$(id -un)
fi
# in_env PATH-PREFIX COMMAND...: COMMAND in the copy as the unprivileged user, in a clean
# environment (no LD_LIBRARY_PATH, no root's variables), with the module-like settings.
in_env() {
    p=$1; shift
    # shellcheck disable=SC2086
    (cd "$tmp/src" && $as_user env -i PATH="$p$tmp/bin" HOME="$tmp/home" TMPDIR="$tmp/t" LANG=C \
        PKG_CONFIG_LIBDIR="$tmp/pc" "$@")
}
echo "build-modules.sh: building as $who in $tmp/src: CC unset (cc on PATH, no mpicc), no check.pc, no hdf5.pc, HDF5_ROOT=$tmp/hdf5"

# The setting is what it claims to be.
if in_env "" sh -c 'command -v mpicc || command -v h5cc || pkg-config --exists check || pkg-config --exists hdf5' > /dev/null 2>&1; then
    bad "the build's environment still has mpicc, h5cc, check.pc or hdf5.pc"
fi
[ "$(in_env "" id -u)" != 0 ] || bad "the build's environment runs as root"

# 1. Plain make, as a module user would type it (HDF5_ROOT as `module load hdf5` sets it).
log="$tmp/make.log"
if in_env "" HDF5_ROOT="$tmp/hdf5" make --no-print-directory -j2 ONEDNN_ROOT="$onednn" dsgd-run > "$log" 2>&1; then
    ok "make -j2 dsgd-run as $who with cc, without mpicc, Check and hdf5.pc ($(($(date +%s) - start)) s so far)"
else
    bad "make -j2 dsgd-run:"; tail -20 "$log"
    exit 1
fi
grep -q -- '-march=x86-64-v3' "$log" && ok "default OPT has -march=x86-64-v3" || bad "no -march=x86-64-v3 in the build's commands"
grep -q -- "-Wl,-rpath,$tmp/hdf5/lib" "$log" && ok "the link line has HDF5_ROOT's lib as rpath" || bad "no -Wl,-rpath,$tmp/hdf5/lib on the link line"
bin="$tmp/src/dsgd-run"
runpath=$(readelf -d "$bin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
case ":$runpath:" in
    *":$tmp/hdf5/lib:"*) ok "RUNPATH $runpath" ;;
    *) bad "RUNPATH '$runpath' lacks $tmp/hdf5/lib" ;;
esac
lddout=$(env -u LD_LIBRARY_PATH ldd "$bin")
if printf '%s\n' "$lddout" | grep -q 'not found'; then
    bad "ldd: $(printf '%s\n' "$lddout" | grep 'not found' | tr '\n' ' ')"
elif printf '%s\n' "$lddout" | grep -q "libhdf5_serial.so.103 => $tmp/hdf5/lib/"; then
    ok "ldd resolves every library; $(printf '%s\n' "$lddout" | grep -o 'libhdf5_serial.so.103 => [^ ]*')"
else
    bad "ldd does not take libhdf5 from $tmp/hdf5/lib: $(printf '%s\n' "$lddout" | grep hdf5)"
fi

# 2. The binary runs without LD_LIBRARY_PATH (and without the module environment).
ver=$(in_env "" ./dsgd-run --version 2>&1) || bad "dsgd-run --version: $ver"
printf '%s\n' "$ver" | grep -q "run file: HDF5 1\." && ok "dsgd-run --version: $(printf '%s\n' "$ver" | sed -n 's/^ *run file: //p')" ||
    bad "dsgd-run --version: $ver"
if out=$(in_env "" timeout -k 5 120 ./dsgd-run --check --set 'output="runs/check.h5"' configs/quickstart.cfg 2>&1); then
    ok "dsgd-run --check configs/quickstart.cfg"
else
    bad "dsgd-run --check configs/quickstart.cfg: $(printf '%s\n' "$out" | tail -5)"
fi
if out=$(in_env "" timeout -k 5 180 mpiexec.mpich -n 1 ./dsgd-run --set p=1 --set iterations=40 --set eval.every=20 \
        --set 'output="runs/linear1.h5"' configs/linear.cfg 2>&1) &&
   st=$(in_env "" ./dsgd-run --status runs/linear1.h5 2>&1); then
    ok "1-rank linear run, 40 iterations: $(printf '%s\n' "$st" | head -1)"
else
    bad "1-rank linear run: $(printf '%s\n' "$out" | tail -5) ${st:-}"
fi

# 3. Check only for the test programs: refused with a message naming CHECK_ROOT.
if out=$(in_env "" HDF5_ROOT="$tmp/hdf5" make --no-print-directory ONEDNN_ROOT="$onednn" build/test/test_config 2>&1); then
    bad "build/test/test_config built without Check"
elif printf '%s\n' "$out" | grep -q "Check (the unit-test library" && printf '%s\n' "$out" | grep -q CHECK_ROOT; then
    ok "a test program without Check: refused, naming CHECK_ROOT and the Debian package"
else
    bad "build/test/test_config without Check: $(printf '%s\n' "$out" | tail -5)"
fi

# 4. HDF5 from h5cc -show when there is neither HDF5_ROOT nor hdf5.pc; neither: a message.
out=$(in_env "$tmp/h5bin:" make --no-print-directory ONEDNN_ROOT="$onednn" show-deps 2>&1) || true
if printf '%s\n' "$out" | grep -q "^HDF5: *$tmp/h5bin/h5cc -show" &&
   in_env "$tmp/h5bin:" make --no-print-directory ONEDNN_ROOT="$onednn" -B build/.deps-ok > "$tmp/h5cc.log" 2>&1; then
    ok "HDF5 from h5cc -show: $(printf '%s\n' "$out" | sed -n '/^HDF5:/{n;p}' | sed 's/^ *//'); probes link"
else
    bad "HDF5 from h5cc: $(printf '%s\n' "$out" | grep -A2 '^HDF5') $(tail -5 "$tmp/h5cc.log" 2>/dev/null)"
fi
if out=$(in_env "" make --no-print-directory ONEDNN_ROOT="$onednn" -B build/.deps-ok 2>&1); then
    bad "no HDF5 (no HDF5_ROOT, hdf5.pc or h5cc) accepted"
elif printf '%s\n' "$out" | grep -q "HDF5 does not compile and link" && printf '%s\n' "$out" | grep -q "make HDF5_ROOT="; then
    ok "no HDF5: stopped, naming HDF5_ROOT"
else
    bad "no HDF5: $(printf '%s\n' "$out" | tail -5)"
fi
# 5. A CC that does not link MPI (gcc): stopped, naming the wrappers to use.
if out=$(in_env "" HDF5_ROOT="$tmp/hdf5" make --no-print-directory CC=gcc ONEDNN_ROOT="$onednn" -B build/.deps-ok 2>&1); then
    bad "CC=gcc (no MPI) accepted"
elif printf '%s\n' "$out" | grep -q "CC=gcc does not compile and link an MPI program" && printf '%s\n' "$out" | grep -q "CC=mpiicx"; then
    ok "CC=gcc: stopped, naming the MPI compiler wrappers"
else
    bad "CC=gcc: $(printf '%s\n' "$out" | tail -5)"
fi

echo "build-modules.sh: $(($(date +%s) - start)) s"
exit $status
