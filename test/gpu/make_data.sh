#!/bin/bash
# make_data.sh — a truncated copy of an IDX data set (MNIST / Fashion-MNIST format) for the GPU
# check's short training runs (test/gpu/run.sh) and for make check's linear-model tests
# (build/test-data, docs/testing.md): the first N_TRAIN training and N_VAL validation images and
# labels, re-written as valid IDX files (the item count in each header is changed to the new
# count; the other dimensions and the bytes of the kept items are unchanged).
#
#   test/gpu/make_data.sh [--raw] OUTDIR [N_TRAIN [N_VAL [CONFIG]]]   defaults: 10000 2000 configs/quickstart.cfg
#
# The source files are the data.* keys of CONFIG. Writes OUTDIR/{train,val}-{images,labels}.gz
# (names fixed so that run.sh and test/gpu/fmnist_short.cfg find them), gzipped; with --raw
# uncompressed, without the .gz (read without inflating: make check's many short runs), and
# checks each file's decompressed size. Needs bash, gzip, od, head, tail. Exit 0, or 1 with the
# reason.
set -eu

ext=.gz
if [ "${1:-}" = --raw ]; then ext=; shift; fi
outdir=${1:?usage: make_data.sh [--raw] OUTDIR [N_TRAIN [N_VAL [CONFIG]]]}
n_train=${2:-10000}
n_val=${3:-2000}
here=$(cd "$(dirname "$0")" && pwd)
cfg=${4:-$here/../../configs/quickstart.cfg}

die() { echo "make_data.sh: $*" >&2; exit 1; }

# The quoted value of KEY (e.g. train_images) in the experiment file.
cfg_path() {
    local v
    v=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$cfg" | head -n 1)
    [ -n "$v" ] || die "$cfg: no key $1"
    printf '%s\n' "$v"
}

# The first 4 + 4*ndim... bytes of a gzipped IDX file as decimal numbers, one per line.
header_bytes() {
    # head closes the pipe early: gzip's SIGPIPE is expected, so no pipefail here.
    (set +o pipefail; gzip -dc "$1" | head -c "$2" | od -An -tu1 -v) | tr -s ' \n' '\n' | sed '/^$/d'
}

# 32-bit big-endian integer from 4 decimal bytes.
be32() { echo $(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 )); }

# printf escape (octal) of a 32-bit big-endian integer.
be32_esc() {
    local v=$1
    printf '\\%03o\\%03o\\%03o\\%03o' $(( (v >> 24) & 255 )) $(( (v >> 16) & 255 )) $(( (v >> 8) & 255 )) $(( v & 255 ))
}

# truncate SRC.gz N DST.gz
truncate_idx() {
    local src=$1 n=$2 dst=$3
    [ -r "$src" ] || die "cannot read $src"
    local -a b
    mapfile -t b < <(header_bytes "$src" 4)
    [ "${#b[@]}" -eq 4 ] && [ "${b[0]}" -eq 0 ] && [ "${b[1]}" -eq 0 ] && [ "${b[2]}" -eq 8 ] ||
        die "$src: not an unsigned-byte IDX file (magic ${b[*]:-none})"
    local ndim=${b[3]} hl
    [ "$ndim" -ge 1 ] && [ "$ndim" -le 4 ] || die "$src: IDX with $ndim dimensions"
    hl=$(( 4 + 4 * ndim ))
    mapfile -t b < <(header_bytes "$src" "$hl")
    [ "${#b[@]}" -eq "$hl" ] || die "$src: truncated header"
    local count rec=1 i esc
    count=$(be32 "${b[4]}" "${b[5]}" "${b[6]}" "${b[7]}")
    [ "$n" -le "$count" ] || die "$src holds $count items, fewer than the $n asked for"
    esc="\\000\\000\\010$(printf '\\%03o' "$ndim")$(be32_esc "$n")"
    for (( i = 1; i < ndim; i++ )); do
        local d
        d=$(be32 "${b[$((4 + 4 * i))]}" "${b[$((5 + 4 * i))]}" "${b[$((6 + 4 * i))]}" "${b[$((7 + 4 * i))]}")
        rec=$(( rec * d ))
        esc="$esc$(be32_esc "$d")"
    done
    (
        set +o pipefail
        { printf "$esc"; gzip -dc "$src" | tail -c +$(( hl + 1 )) | head -c $(( n * rec )); } |
            if [ -n "$ext" ]; then gzip -9n; else cat; fi > "$dst.tmp"
    )
    local want=$(( hl + n * rec )) got
    got=$(gzip -dcf "$dst.tmp" | wc -c)
    [ "$got" -eq "$want" ] || die "$dst: $got bytes after decompression, expected $want"
    mv "$dst.tmp" "$dst"
    echo "make_data.sh: $dst: $n of $count items ($rec bytes each), $(wc -c < "$dst") bytes${ext:+ gzipped}"
}

mkdir -p "$outdir"

truncate_idx "$(cfg_path train_images)" "$n_train" "$outdir/train-images$ext"
truncate_idx "$(cfg_path train_labels)" "$n_train" "$outdir/train-labels$ext"
truncate_idx "$(cfg_path val_images)" "$n_val" "$outdir/val-images$ext"
truncate_idx "$(cfg_path val_labels)" "$n_val" "$outdir/val-labels$ext"
