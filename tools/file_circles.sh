#!/bin/sh
# file_circles.sh — which source files of src/ call each other (issue 24's "pairs of files that
# call each other"), read from the object files with nm.
#
#   sh tools/file_circles.sh [OBJDIR]      OBJDIR: the objects of src/ (default build/src, as
#                                          `make dsgd-run` leaves them)
#   sh tools/file_circles.sh -v [OBJDIR]   also every arrow: A -> B  name name ...
#   sh tools/file_circles.sh -i [OBJDIR]   also count includes (the review's attribution, below)
#   (options may be combined: -v -i; run from the repository root: -i reads src/)
#
# Output: one line per pair of files that each take a name from the other,
#   pair  src/config/config.c <-> src/config/config_print.c  (A takes: x y; B takes: z)
# then one line per circle (a set of two or more files each reachable from every other by
# arrows; a circle of three, A -> B -> C -> A, has no pair but is still one circle), and the two
# counts last:  pairs N  circles M.  Exit status 0 (the counts are the measure, not a verdict).
#
# How a name is attributed: `nm --defined-only` of each .o gives the global names it defines;
# `nm -u` of each .o the names it takes from elsewhere. A -> B when A takes a name that B defines.
# So a header counts as part of the .c file that defines what it declares (config_keys.h's
# functions are config_keys.c's), whichever header a caller includes. Only functions and objects
# (variables, tables) count: nm sees no types, macros or enums, and a static inline function of a
# header is compiled into each user, so the review's "types taken from config_internal.h" arrows
# (architecture-review.md §2) are not counted here. Names from outside src/ (libc, MPI, HDF5,
# oneDNN, cuda/) are ignored.
# With -i, an include counts too, as architecture-review.md §2 counts it: A -> B also when A
# includes B's header, whether or not A uses anything of it (types, macros, enums included); the
# header of B is dir/B.h or dir/B_internal.h beside dir/B.c (so config_keys.h is config_keys.c's,
# runlog_internal.h runlog.c's); a header with no such .c (method.h, layout.h) belongs to no
# file. A header that also declares another file's functions (checkpoint.h: checkpoint_signal.c's
# too) is counted as its namesake's only, so -i can show a pair that nm does not. The name shown
# for such an arrow is "#include:<header>".
set -eu
verbose=0 includes=0
while [ $# -gt 0 ]; do
    case $1 in
    -v) verbose=1 ;;
    -i) includes=1 ;;
    *) break ;;
    esac
    shift
done
objdir=${1:-build/src}
[ -d "$objdir" ] || { echo "file_circles.sh: no directory $objdir (run make dsgd-run first)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/file_circles.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

find "$objdir" -name '*.o' | sort > "$tmp/objs"
[ -s "$tmp/objs" ] || { echo "file_circles.sh: no .o under $objdir" >&2; exit 1; }
# def: NAME FILE (global definitions); use: FILE NAME (undefined references). FILE is the source
# path: OBJDIR/config/config.o -> src/config/config.c.
while read -r o; do
    f=src/${o#"$objdir"/}; f=${f%.o}.c
    [ -f "$f" ] || [ "$objdir" != build/src ] || continue # a stale object of a removed source
    nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 && $2 ~ /^[A-Z]$/ { print $3, f }' >> "$tmp/def"
    nm -u "$o" | awk -v f="$f" '{ print f, $NF }' >> "$tmp/use"
    [ "$includes" = 1 ] || continue
    [ -f "$f" ] || { echo "file_circles.sh: -i: no $f (run from the repository root)" >&2; exit 1; }
    dir=${f%/*}
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
        if [ -f "$dir/$h" ]; then hp=$dir/$h; elif [ -f "src/$h" ]; then hp=src/$h; else continue; fi
        owner=${hp%_internal.h}; owner=${owner%.h}.c
        [ -f "$owner" ] && [ "$owner" != "$f" ] || continue
        echo "#include:${hp#src/} $owner" >> "$tmp/def"
        echo "$f #include:${hp#src/}" >> "$tmp/use"
    done
done < "$tmp/objs"

awk -v verbose="$verbose" '
    FNR == NR { owner[$1] = $2; next }
    {
        b = owner[$2]
        if (b == "" || b == $1) next
        if (!((($1) SUBSEP b) in names)) { nf[$1]++; to[$1, nf[$1]] = b }
        names[$1, b] = names[$1, b] (names[$1, b] == "" ? "" : " ") $2
        file[$1] = 1; file[b] = 1
    }
    END {
        n = 0
        for (f in file) list[++n] = f
        # sort the files (insertion sort: a few dozen)
        for (i = 2; i <= n; i++) { v = list[i]; for (j = i - 1; j >= 1 && list[j] > v; j--) list[j + 1] = list[j]; list[j + 1] = v }
        if (verbose)
            for (i = 1; i <= n; i++) for (j = 1; j <= n; j++)
                if ((list[i], list[j]) in names) print "arrow", list[i], "->", list[j], " ", names[list[i], list[j]]
        pairs = 0
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
            a = list[i]; b = list[j]
            if (((a, b) in names) && ((b, a) in names)) {
                pairs++
                print "pair", a, "<->", b, " (" a " takes: " names[a, b] "; " b " takes: " names[b, a] ")"
            }
        }
        # reachability (Floyd-Warshall over a few dozen files), then the circles
        for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) reach[i, j] = ((list[i], list[j]) in names)
        for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if (reach[i, k]) for (j = 1; j <= n; j++) if (reach[k, j]) reach[i, j] = 1
        circles = 0
        for (i = 1; i <= n; i++) {
            if (done[i]) continue
            line = list[i]; m = 1
            for (j = i + 1; j <= n; j++) if (reach[i, j] && reach[j, i]) { line = line " " list[j]; done[j] = 1; m++ }
            if (m > 1) { circles++; print "circle", line }
        }
        print "pairs", pairs, " circles", circles
    }' "$tmp/def" "$tmp/use"
