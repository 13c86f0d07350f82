#!/bin/sh
# run-isa.sh TEST... — run the given test binaries (the layer and model tests) once per
# ONEDNN_MAX_CPU_ISA cap of test/isa-levels.sh, through run-tests.sh (same timeouts). The
# uncapped run is make check's ordinary one. Each binary prints the ISA it ran on.
dir=$(dirname "$0")
status=0
for level in $(sh "$dir/isa-levels.sh"); do
    echo "== ONEDNN_MAX_CPU_ISA=$level"
    ONEDNN_MAX_CPU_ISA=$level sh "$dir/run-tests.sh" "$@" || status=1
done
exit $status
