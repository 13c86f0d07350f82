#!/bin/sh
# check-deps.sh — stop the build with the Debian package to install when a library or tool
# is missing (pkg-config names for libconfig, hdf5, zlib, libjpeg, libpng, check; a header probe for
# oneDNN >= 3.0 with the Makefile's ONEDNN_CFLAGS: build/onednn from PyPI, or make ONEDNN_ROOT=...).
fail=0
need() { echo "dsgd-run: missing $1 — install the Debian package $2 (apt-get install $2, or: make deps)"; fail=1; }
command -v pkg-config >/dev/null 2>&1 || { need pkg-config pkg-config; exit 1; }
command -v mpicc >/dev/null 2>&1 || need "mpicc (MPICH)" "libmpich-dev"
pkg-config --exists libconfig || need "libconfig (pkg-config libconfig)" libconfig-dev
pkg-config --exists hdf5 || need "HDF5 (pkg-config hdf5)" libhdf5-dev
pkg-config --exists zlib || need "zlib (pkg-config zlib)" zlib1g-dev
pkg-config --exists libjpeg || need "libjpeg-turbo (pkg-config libjpeg)" libjpeg62-turbo-dev
pkg-config --exists libpng || need "libpng (pkg-config libpng)" libpng-dev
pkg-config --exists check || need "Check (pkg-config check)" check
if ! printf '#include <oneapi/dnnl/dnnl.h>\n#if DNNL_VERSION_MAJOR < 3\n#error oneDNN 2\n#endif\n' |
    cc $ONEDNN_CFLAGS -E -x c - >/dev/null 2>&1; then
    echo "dsgd-run: no oneDNN >= 3.0 headers with $ONEDNN_CFLAGS (Debian's libdnnl-dev is 2.6: build with the default"
    echo "  build/onednn, fetched by tools/get_onednn.py, or make ONEDNN_ROOT=/path/to/onednn-3.x)"
    fail=1
fi
exit $fail
