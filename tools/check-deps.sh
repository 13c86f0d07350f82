#!/bin/sh
# check-deps.sh — stop the build, saying what to set or install, when CC cannot build dsgd-run.
# Run by the Makefile (build/.deps-ok, build/.check-ok) with what it found for each library
# (its knobs, pkg-config, the module environment, h5cc: docs/build.md, `make show-deps`):
#   CC                    the compiler (an MPI wrapper: mpicc, cc on Cray, mpiicx, mpicc.openmpi)
#   ONEDNN_CFLAGS         -I of oneDNN >= 3.0 (build/onednn from PyPI, or make ONEDNN_ROOT=...)
#   <LIB>_CFLAGS, <LIB>_LIBS, <LIB>_FROM   for LIB in LIBCONFIG HDF5 ZLIB LIBJPEG LIBPNG (CHECK)
#
#   sh tools/check-deps.sh          what the binary needs: CC compiles and links MPI_Init, each
#                                   library's probe compiles, links and starts, oneDNN's headers
#   sh tools/check-deps.sh --check  Check (the unit tests: make check and build/test/* only)
#
# Each probe is a small program calling one function of the library, compiled and linked with CC
# and the flags found; a failure prints the compiler's last lines and what to do, both with
# modules (the variable to set) and on Debian (the package). A library probe that links but does
# not start without LD_LIBRARY_PATH is a warning: the binary would need the same environment on
# the compute nodes (docs/build.md, "Run-time library paths"). Exit 1 if anything is missing.
set -u
CC=${CC:-mpicc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsgd-deps.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

say() { echo "dsgd-run: $*" >&2; }
# The compiler's last lines after a failed probe, indented.
tail_log() { tail -n 4 "$tmp/$1.log" | sed 's/^/    | /' >&2; }

# probe NAME SOURCE FLAGS...: compile and link SOURCE (C text) into $tmp/NAME with CC and FLAGS.
probe() {
    name=$1 src=$2
    shift 2
    printf '%s\n' "$src" > "$tmp/$name.c"
    # CC may be a command with arguments (e.g. "ccache mpicc"): split it as make does.
    # shellcheck disable=SC2086
    $CC -o "$tmp/$name" "$tmp/$name.c" "$@" > "$tmp/$name.log" 2>&1
}

cc_cmd=${CC%% *}
if ! command -v "$cc_cmd" > /dev/null 2>&1; then
    say "CC=$CC: no command $cc_cmd on PATH."
    say "  CC must be a C compiler that compiles and links MPI programs: make CC=mpicc (MPICH, Open MPI),"
    say "  CC=cc (Cray), CC=mpiicx (Intel MPI), CC=mpicc.openmpi (Open MPI beside MPICH on Debian)."
    say "  With modules: module load <compiler> <mpi> first (e.g. module load gcc openmpi)."
    say "  On Debian: apt-get install libmpich-dev (or: make deps)."
    exit 1
fi

if [ "${1:-}" = --check ]; then
    # shellcheck disable=SC2086
    if ! probe check '#include <check.h>
int main(void) { Suite *s = suite_create("probe"); return s == NULL; }' ${CHECK_CFLAGS:-} ${CHECK_LIBS:--lcheck}; then
        say "Check (the unit-test library, needed by make check and the test programs, not by dsgd-run)"
        say "  does not compile and link with CC=$CC and: ${CHECK_CFLAGS:-} ${CHECK_LIBS:-}"
        say "  (from ${CHECK_FROM:-nowhere}):"
        tail_log check
        say "  With modules or a build of your own: make CHECK_ROOT=<prefix with include/check.h>."
        say "  On Debian: apt-get install check (or: make deps)."
        exit 1
    fi
    exit 0
fi

# MPI: CC itself must compile and link an MPI program (no mpicc on PATH is needed).
if ! probe mpi '#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); MPI_Finalize(); return 0; }'; then
    say "CC=$CC does not compile and link an MPI program (MPI_Init):"
    tail_log mpi
    say "  CC must be a C compiler that links MPI: make CC=mpicc (MPICH, Open MPI), CC=cc (Cray),"
    say "  CC=mpiicx (Intel MPI), CC=mpicc.openmpi (Open MPI beside MPICH on Debian)."
    say "  With modules: module load <compiler> <mpi> first (e.g. module load gcc openmpi)."
    say "  On Debian: apt-get install libmpich-dev (or: make deps)."
    fail=1
fi

# lib VAR NAME PC HEADER DEBIAN MODULE-VARIABLES SOURCE
lib() {
    var=$1 name=$2 pc=$3 header=$4 deb=$5 modvars=$6 src=$7
    eval "cflags=\${${var}_CFLAGS:-} libs=\${${var}_LIBS:-} from=\${${var}_FROM:-nowhere}"
    # shellcheck disable=SC2154,SC2086
    if ! probe "$var" "$src" $cflags $libs; then
        say "$name does not compile and link with CC=$CC and: $cflags $libs"
        say "  (from $from):"
        tail_log "$var"
        say "  With modules: module load <its module>, then make ${var}_ROOT=<its prefix, with include/$header"
        say "  and lib/> (\`module show\` names it; read from the environment too: ${var}_ROOT, $modvars)."
        [ "$var" = HDF5 ] && say "  Or put HDF5's compiler wrapper h5cc on PATH (its -show gives the paths)."
        say "  On Debian: apt-get install $deb (or: make deps); pkg-config $pc then finds it."
        fail=1
        return
    fi
    # Links; does it start without LD_LIBRARY_PATH, as on a compute node without the modules?
    if ! env -u LD_LIBRARY_PATH "$tmp/$var" > "$tmp/$var.run" 2>&1; then
        say "warning: $name links (flags from $from) but a program using it does not start without"
        say "  LD_LIBRARY_PATH: $(head -n 1 "$tmp/$var.run")"
        say "  dsgd-run will need the same LD_LIBRARY_PATH (or modules) in its jobs; or build with"
        say "  ${var}_ROOT=<prefix> so that its lib/ gets a RUNPATH entry (docs/build.md)."
    fi
}
lib LIBCONFIG libconfig libconfig libconfig.h libconfig-dev "LIBCONFIG_DIR, EBROOTLIBCONFIG" '#include <libconfig.h>
int main(void) { config_t c; config_init(&c); config_destroy(&c); return 0; }'
lib HDF5 HDF5 hdf5 hdf5.h libhdf5-dev "HDF5_DIR, HDF5_HOME, EBROOTHDF5" '#include <hdf5.h>
int main(void) { return H5open() < 0; }'
lib ZLIB zlib zlib zlib.h zlib1g-dev "ZLIB_DIR, EBROOTZLIB" '#include <zlib.h>
int main(void) { return zlibVersion() == 0; }'
lib LIBJPEG libjpeg-turbo libjpeg jpeglib.h libjpeg62-turbo-dev "LIBJPEG_DIR, JPEG_ROOT, EBROOTLIBJPEGMINTURBO" '#include <stdio.h>
#include <jpeglib.h>
int main(void) { struct jpeg_error_mgr e; return jpeg_std_error(&e) == NULL; }'
lib LIBPNG libpng libpng png.h libpng-dev "LIBPNG_DIR, PNG_ROOT, EBROOTLIBPNG" '#include <png.h>
int main(void) { return png_access_version_number() == 0; }'

if ! printf '#include <oneapi/dnnl/dnnl.h>\n#if DNNL_VERSION_MAJOR < 3\n#error oneDNN 2\n#endif\n' |
    $CC ${ONEDNN_CFLAGS:-} -E -x c - > /dev/null 2>&1; then
    say "no oneDNN >= 3.0 headers with ${ONEDNN_CFLAGS:-} (Debian's libdnnl-dev is 2.6: build with the default"
    say "  build/onednn, fetched by tools/get_onednn.py, or make ONEDNN_ROOT=/path/to/onednn-3.x)"
    fail=1
fi
exit $fail
