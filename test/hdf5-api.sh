#!/bin/sh
# hdf5-api.sh — dsgd-run uses only HDF5's public API, and none of it that HDF5 1.12 or 1.14
# removed or changed (issue 13, item 2). Checked without those versions installed:
#  1. No file driver of our own: nothing in src/ names an H5FD symbol (H5FD_class_t changed in
#     1.13.2).
#  2. Nothing deprecated: every C file that includes hdf5.h or calls an H5 function (src/, tools/,
#     test/, headers included) compiles against
#     a copy of the installed headers configured as an HDF5 built with
#     --disable-deprecated-symbols and its own API as the default (H5_NO_DEPRECATED_SYMBOLS
#     defined, H5_USE_18_API_DEFAULT removed): the deprecated functions are what 1.12 / 1.14 /
#     2.0 drop or hide.
#  3. No function whose signature a later version changed: HDF5 versions such functions by name
#     (src/H5vers.txt of HDF5's sources; the ones revised after 1.10 are listed below, from the
#     develop branch of 2025, which also names 2.0's). A call to any of them by its unversioned
#     name would compile to another signature under 1.12/1.14; none may appear (nor the
#     re-versioned parameter types H5O_info_t, H5O_iterate_t, H5L_info_t, H5L_iterate_t).
# Exit 1 with the offending lines.
set -eu
cd "$(dirname "$0")/.."
status=0
CC=${CC:-mpicc}
H5INC=$(pkg-config --cflags-only-I hdf5 2>/dev/null | sed 's/-I//g' | awk '{print $1}')
[ -n "$H5INC" ] || H5INC=/usr/include/hdf5/serial
[ -f "$H5INC/H5pubconf.h" ] || { echo "hdf5-api.sh: no H5pubconf.h under $H5INC" >&2; exit 1; }

# 1
if grep -rn "H5FD" src/; then echo "FAILED: src/ names H5FD symbols (a file driver of its own?)"; status=1; fi

# 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$H5INC"/. "$tmp"/
sed -i 's|^#define H5_USE_18_API_DEFAULT 1|/* #undef H5_USE_18_API_DEFAULT */|; s|^#define H5_USE_16_API_DEFAULT 1|/* #undef H5_USE_16_API_DEFAULT */|; s|^/\* #undef H5_NO_DEPRECATED_SYMBOLS \*/|#define H5_NO_DEPRECATED_SYMBOLS 1|' "$tmp/H5pubconf.h"
grep -q "^#define H5_NO_DEPRECATED_SYMBOLS 1" "$tmp/H5pubconf.h" || { echo "hdf5-api.sh: could not configure $tmp/H5pubconf.h"; exit 1; }
n=0
for f in $(grep -lE '#include <hdf5.h>|\<H5[A-Z][A-Za-z0-9_]*\(' src/*/*.c src/*.c tools/*.c test/*.c test/*.h 2>/dev/null); do
    n=$((n + 1))
    if ! $CC -fsyntax-only -std=gnu11 -Werror=implicit-function-declaration -I"$tmp" -Isrc -Icuda -Itest \
         ${ONEDNN_CFLAGS:--Ibuild/onednn/include} $(pkg-config --cflags check 2>/dev/null) "$f" 2>"$tmp/err"; then
        echo "FAILED: $f uses what HDF5 without deprecated symbols lacks:"; grep -E "error" "$tmp/err" | head -5; status=1
    fi
done

# 3 (HDF5 src/H5vers.txt: FUNCTION / TYPEDEF lines revised in v112 or v200)
changed='H5Lget_info H5Lget_info_by_idx H5Literate H5Literate_by_name H5Lvisit H5Lvisit_by_name H5Oget_info
H5Oget_info_by_name H5Oget_info_by_idx H5Ovisit H5Ovisit_by_name H5Pencode H5Sencode H5Dread_chunk
H5Iregister_type H5Tdecode H5O_info_t H5O_iterate_t H5L_info_t H5L_iterate_t'
# the code without its comments (gcc -fpreprocessed: comments removed, nothing expanded)
for f in src/*/*.c src/*/*.h src/*.c tools/*.c test/*.c test/*.h; do
    if [ -f "$f" ]; then echo "# $f"; gcc -fpreprocessed -dD -E -P "$f" 2>/dev/null || true; fi
done > "$tmp/code"
for fn in $changed; do
    if grep -nw "$fn" "$tmp/code"; then echo "FAILED: $fn changed its signature after HDF5 1.10"; status=1; fi
done

[ $status -eq 0 ] && echo "hdf5-api: no H5FD in src/; $n files compile without HDF5's deprecated symbols; none of the $(echo $changed | wc -w) functions/types revised after 1.10 is used"
exit $status
