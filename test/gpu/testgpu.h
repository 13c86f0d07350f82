/* testgpu.h — shared by the GPU test programs (test/gpu/test_*.c). */
#ifndef DSGD_TESTGPU_H
#define DSGD_TESTGPU_H

#include <stdlib.h>
#include <string.h>

/* DSGD_REQUIRE_GPU set (and not "0"): the run is meant for a GPU machine, so finding no usable GPU
 * (no device, or a CUDA runtime that cannot start: driver older than the runtime, no driver in a
 * container) is a failure, not a skip. Without it a GPU machine whose CUDA cannot initialise would
 * print "skipped" and pass, and a one-shot GPU check would report success having tested nothing. */
static inline int gpu_required(void) {
    const char *v = getenv("DSGD_REQUIRE_GPU");
    return v && *v && strcmp(v, "0") != 0;
}

#endif
