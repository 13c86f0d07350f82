/* mock_cuda.c — the few CUDA runtime, cuDNN and cuBLAS entry points cuda/model*.cu, device.cu and
 * the GPU tests call directly, on host memory, so that those files (host code only: every kernel
 * and library call is behind cuda/layers.h) run on a machine without a GPU, over the CPU layers of
 * mock_layers.c. A wiring test of model*.cu, not of the GPU: see test/gpu/mock/README.md.
 *
 * "Device" memory is host memory the mock knows about: cudaMalloc fills it with NaN bytes (as
 * uninitialised device memory is garbage), cudaMemcpy* checks that each side of a copy is the
 * kind of memory its direction says, and cudaMemGetInfo reports a fixed total minus what is
 * allocated, so a test sees allocations made after create.
 *
 * Streams and events. A stream made by cudaStreamCreate (the model's compute stream: gpu_ctx_init)
 * and the legacy stream run their work at once, as the CPU layers do. A stream made by
 * cudaStreamCreateWithFlags (the copy streams of the overlap) defers it: copies, memsets, event
 * records and waits queue up and run only when something depends on them — cudaStreamWaitEvent
 * from the compute stream, cudaEventSynchronize, cudaStreamSynchronize, cudaDeviceSynchronize, or
 * cudaEventQuery, which answers cudaErrorNotReady to two queries in three of a pending event before
 * running the queue up to it. So a host that reads a copy's destination before asking whether the
 * copy is done, or compute work that does not wait for a copy it needs, sees stale data, and the
 * host's polling loops go through the partial states a real GPU shows them. A copy reads its
 * source when it runs, not when it is enqueued, as on a GPU. mock_cuda_objects() counts device
 * and pinned allocations, streams and events made so far (a test checks that steps make none).
 *
 * The last error. As the CUDA runtime does, every call here that returns an error — among them
 * cudaErrorNotReady from cudaEventQuery and cudaStreamQuery, which are not failures — also records
 * it as the thread's last error, which cudaGetLastError returns and clears (cudaPeekAtLastError
 * returns without clearing). The launch stand-ins (mock_layers.c, and gpucomm.cu's scale kernel
 * over the mock) check it as CUDA_CHECK(cudaGetLastError()) does after a real kernel launch, so a
 * poll that leaves "not ready" behind stops the next launch here as it would on a GPU.
 * cudaStreamQuery answers cudaErrorNotReady to two queries in three, as cudaEventQuery does for a
 * pending event, whatever the stream (the compute stream's work ran at once, but a real GPU would
 * often still be busy: an NCCL all-reduce on it, gpucomm.cu).
 *
 * Stream capture (CUDA graphs, DSGD_GPU_GRAPH=1: cuda/model.cu). cudaStreamBeginCapture on the
 * compute stream makes what is enqueued there a recording instead of work: asynchronous copies
 * and memsets, mock_stream_launch's kernels and the layer stand-ins' calls (mock_capture.h) are
 * appended to the graph; cudaStreamEndCapture returns it, cudaGraphInstantiate copies it and
 * cudaGraphLaunch runs the copy's operations in order on the data there at launch time. What CUDA
 * refuses during a capture dies here, naming it: a synchronisation of the stream or the device, a
 * query, a synchronous copy or memset (the legacy stream), an allocation or free, an event recorded
 * on or waited for by the capturing stream (the model keeps its events outside the graph), a
 * copy between device memory and host memory that is not pinned (a memcpy node needs page-locked
 * memory). Capture on a copy stream, and a graph launched on one, are not modelled (they die). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "mock_capture.h"
#include "util/util.h"

#define MOCK_TOTAL ((size_t)64 << 30)
#define MOCK_MAX_ALLOCS 8192

typedef struct {
    char *p;
    size_t n;
} dev_alloc;

static dev_alloc allocs[MOCK_MAX_ALLOCS];
static dev_alloc pinned[MOCK_MAX_ALLOCS]; /* cudaHostAlloc'd */
static int n_pinned;
static int n_capturing; /* streams being captured */

static void no_capture(const char *what) {
    if (n_capturing)
        DIE("mock: %s while a stream is being captured (CUDA refuses it: cudaErrorStreamCaptureUnsupported / Implicit)", what);
}

/* 1 if [p, p + n) lies inside one pinned host allocation. */
static int is_pinned(const void *p, size_t n) {
    const char *c = (const char *)p;
    for (int i = 0; i < n_pinned; i++)
        if (c >= pinned[i].p && c + n <= pinned[i].p + pinned[i].n) return 1;
    return 0;
}
static int n_allocs;
static size_t allocated;
static long n_objects; /* cudaMalloc, cudaHostAlloc, streams, events made */

long mock_cuda_objects(void) { return n_objects; }

/* cudaStreamSynchronize calls from the host (not the mock's own, as in cudaStreamDestroy):
 * test_gpu_model counts a step's host synchronisations with it (DSGD_GPU_SYNC). */
static long n_host_syncs;
long mock_cuda_host_syncs(void) { return n_host_syncs; }

/* The runtime's last error (one thread: the tests call the mock from one thread at a time). */
static cudaError_t last_error = cudaSuccess;

/* e, recorded as the last error when it is one. */
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

cudaError_t cudaGetLastError(void) {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    default: return "cudaError (mock)";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error (mock)";
    case cudaErrorNotReady: return "device not ready (mock)";
    default: return "error (mock)";
    }
}

/* Work done on the compute stream so far (launches, and its asynchronous copies and memsets):
 * an event recorded there remembers the count, and a side stream that waits on the event is
 * ordered after that much of it (mock_stream_launch checks). */
static unsigned long compute_work;

void mock_launch_check(const char *what) {
    compute_work++;
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        DIE("mock: CUDA cudaGetLastError() failed in %s: %s (%s) — the error of an earlier call, left as the runtime's "
            "last error, stops this kernel launch's check (CUDA_CHECK(cudaGetLastError()))",
            what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* 1 if [p, p + nbytes) lies inside one mock device allocation. */
int mock_is_dev(const void *p, size_t nbytes) {
    const char *c = (const char *)p;
    for (int i = 0; i < n_allocs; i++)
        if (c >= allocs[i].p && c + nbytes <= allocs[i].p + allocs[i].n) return 1;
    return 0;
}

void mock_check_dev(const void *p, size_t nbytes, const char *what) {
    if (!p || !mock_is_dev(p, nbytes))
        DIE("mock: %s: %p (%zu bytes) is not inside one device allocation", what, p, nbytes);
}

cudaError_t cudaMalloc(void **p, size_t n) {
    no_capture("cudaMalloc");
    if (n_allocs >= MOCK_MAX_ALLOCS) DIE("mock: too many allocations");
    void *q = NULL;
    if (posix_memalign(&q, 256, n ? n : 1)) return ret(cudaErrorMemoryAllocation);
    memset(q, 0xff, n); /* NaN: uninitialised device memory is garbage */
    allocs[n_allocs++] = (dev_alloc){(char *)q, n};
    n_objects++;
    allocated += n;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    no_capture("cudaFree");
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].p == p) {
            allocated -= allocs[i].n;
            allocs[i] = allocs[--n_allocs];
            free(p);
            return cudaSuccess;
        }
    DIE("mock: cudaFree(%p): not a device allocation", p);
}

static cudaError_t do_memset(void *p, int v, size_t n) {
    mock_check_dev(p, n, "cudaMemset");
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
    no_capture("cudaMemset (synchronous)");
    return do_memset(p, v, n);
}


static cudaError_t do_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        mock_check_dev(dst, n, "cudaMemcpy host to device: destination");
        if (mock_is_dev(src, n)) DIE("mock: cudaMemcpy host to device from device memory");
        break;
    case cudaMemcpyDeviceToHost:
        mock_check_dev(src, n, "cudaMemcpy device to host: source");
        if (mock_is_dev(dst, n)) DIE("mock: cudaMemcpy device to host into device memory");
        break;
    case cudaMemcpyDeviceToDevice:
        mock_check_dev(src, n, "cudaMemcpy device to device: source");
        mock_check_dev(dst, n, "cudaMemcpy device to device: destination");
        break;
    default: DIE("mock: cudaMemcpy kind %d", (int)kind);
    }
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    no_capture("cudaMemcpy (synchronous)");
    return do_memcpy(dst, src, n, kind);
}


cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    no_capture("cudaHostAlloc");
    n_objects++;
    *p = calloc(1, n ? n : 1);
    if (*p && n_pinned < MOCK_MAX_ALLOCS) pinned[n_pinned++] = (dev_alloc){(char *)*p, n};
    return ret(*p ? cudaSuccess : cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void *p) {
    no_capture("cudaFreeHost");
    for (int i = 0; i < n_pinned; i++)
        if (pinned[i].p == p) {
            pinned[i] = pinned[--n_pinned];
            break;
        }
    free(p);
    return cudaSuccess;
}

/* Devices: 1, or MOCK_CUDA_DEVICES (read at every call; a test of the device choice sets it),
 * all sharing the one host memory. */
static int current_dev;

static int n_devices(void) {
    const char *v = getenv("MOCK_CUDA_DEVICES");
    const int n = v ? atoi(v) : 1;
    return n >= 1 ? n : 1;
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = n_devices();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    *d = current_dev;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= n_devices()) return ret(cudaErrorInvalidDevice);
    current_dev = d;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
    if (d < 0 || d >= n_devices()) return ret(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "0000:%02x:00.0", d);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    (void)d;
    /* compute capability 9.0, as cudaGetDeviceProperties says; 4 multiprocessors */
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrComputeCapabilityMinor ? 0 : 4;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    (void)d;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "mock GPU (host memory, CPU layers)");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = MOCK_TOTAL;
    return cudaSuccess;
}

/* ---- streams and events ---- */

enum { OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_HOST };

typedef struct {
    int kind;
    void *dst;
    const void *src;
    size_t n;
    int value;                  /* OP_SET */
    enum cudaMemcpyKind dir;    /* OP_COPY */
    struct CUevent_st *ev;      /* OP_RECORD */
    struct CUstream_st *on;     /* OP_WAIT: run `on` up to operation number `upto` */
    unsigned long upto;
    void (*fn)(void *);         /* OP_HOST: fn(arg) */
    void *arg;
} mock_op;

#define MOCK_QUEUE 4096
#define MOCK_MAX_STREAMS 64

/* One operation of a captured graph: OP_COPY, OP_SET, OP_HOST as in mock_op, or OP_CALL, a layer
 * stand-in's call (mock_capture.h). */
enum { OP_CALL = OP_HOST + 1 };

typedef struct {
    mock_op op;
    void (*replay)(int id, const mock_arg *a);
    int id;
    mock_arg a[MOCK_CAPTURE_ARGS];
} graph_op;

struct CUgraph_st {
    graph_op *ops;
    int n, cap;
};

struct CUgraphExec_st {
    graph_op *ops;
    int n;
};

struct CUstream_st {
    int deferred;
    struct CUgraph_st *capture; /* the graph being captured (cudaStreamBeginCapture), or NULL */
    mock_op q[MOCK_QUEUE];
    unsigned long enqueued, done; /* operations numbered 1, 2, ...; q holds (done, enqueued] */
    unsigned long compute_after;  /* work enqueued from now on follows this much compute work */
};

struct CUevent_st {
    struct CUstream_st *s;      /* stream of the last record (NULL: never recorded, or immediate) */
    unsigned long seq;          /* the record's operation number in s */
    unsigned long work;         /* recorded on an immediate stream: compute_work then */
};

static struct CUstream_st *streams[MOCK_MAX_STREAMS];
static int n_streams;
static unsigned long n_queries;

static void run_op(mock_op *o);

/* Run stream s's queued operations up to number upto. */
static void run_to(struct CUstream_st *s, unsigned long upto) {
    while (s && s->done < upto && s->done < s->enqueued) {
        mock_op o = s->q[s->done % MOCK_QUEUE];
        s->done++;
        run_op(&o);
    }
}

static void run_op(mock_op *o) {
    switch (o->kind) {
    case OP_COPY: do_memcpy(o->dst, o->src, o->n, o->dir); break;
    case OP_SET: do_memset(o->dst, o->value, o->n); break;
    case OP_RECORD: break; /* the event's seq is this operation's number: complete once done */
    case OP_WAIT: run_to(o->on, o->upto); break;
    case OP_HOST: o->fn(o->arg); break;
    }
}

/* 1 if s queues its work (a copy stream) rather than running it at once. */
static int deferred(cudaStream_t s) { return s && s->deferred; }

static void enqueue(cudaStream_t s, mock_op o) {
    if (s->enqueued - s->done >= MOCK_QUEUE) DIE("mock: more than %d operations queued on a stream", MOCK_QUEUE);
    s->q[s->enqueued % MOCK_QUEUE] = o;
    s->enqueued++;
}

static cudaError_t new_stream(cudaStream_t *s, int defer) {
    if (n_streams >= MOCK_MAX_STREAMS) DIE("mock: more than %d streams", MOCK_MAX_STREAMS);
    struct CUstream_st *st = calloc(1, sizeof *st);
    if (!st) return ret(cudaErrorMemoryAllocation);
    st->deferred = defer;
    streams[n_streams++] = st;
    n_objects++;
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return new_stream(s, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    return new_stream(s, 1);
}

static void stream_sync(cudaStream_t s) {
    if (s) run_to(s, s->enqueued);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    no_capture("cudaStreamSynchronize");
    n_host_syncs++;
    stream_sync(s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return cudaSuccess;
    if (s->capture) DIE("mock: cudaStreamDestroy of a stream being captured");
    stream_sync(s);
    for (int i = 0; i < n_streams; i++)
        if (streams[i] == s) {
            streams[i] = streams[--n_streams];
            free(s);
            return cudaSuccess;
        }
    DIE("mock: cudaStreamDestroy(%p): not a stream", (void *)s);
}

cudaError_t cudaDeviceSynchronize(void) {
    no_capture("cudaDeviceSynchronize");
    n_host_syncs++;
    for (int i = 0; i < n_streams; i++) stream_sync(streams[i]);
    return cudaSuccess;
}

static void capture_op(cudaStream_t s, graph_op g);

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (mock_capturing(s)) {
        mock_check_dev(p, n, "cudaMemsetAsync (captured)");
        capture_op(s, (graph_op){.op = {.kind = OP_SET, .dst = p, .n = n, .value = v}});
        return cudaSuccess;
    }
    if (!deferred(s)) return compute_work++, do_memset(p, v, n);
    mock_check_dev(p, n, "cudaMemsetAsync");
    enqueue(s, (mock_op){.kind = OP_SET, .dst = p, .n = n, .value = v});
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (mock_capturing(s)) { /* a memcpy node: device memory and pinned host memory only */
        if (n == 0) return cudaSuccess;
        const int ok = kind == cudaMemcpyDeviceToDevice   ? mock_is_dev(dst, n) && mock_is_dev(src, n)
                       : kind == cudaMemcpyHostToDevice ? mock_is_dev(dst, n) && is_pinned(src, n)
                       : kind == cudaMemcpyDeviceToHost ? mock_is_dev(src, n) && is_pinned(dst, n)
                                                          : 0;
        if (!ok)
            DIE("mock: cudaMemcpyAsync (kind %d) %p <- %p (%zu bytes) captured into a graph: not device / pinned host memory "
                "as its direction says (a graph's memcpy node needs page-locked host memory)",
                (int)kind, dst, src, n);
        capture_op(s, (graph_op){.op = {.kind = OP_COPY, .dst = dst, .src = src, .n = n, .dir = kind}});
        return cudaSuccess;
    }
    if (!deferred(s)) return compute_work++, do_memcpy(dst, src, n, kind);
    if (n == 0) return cudaSuccess;
    /* The same checks as cudaMemcpy, now; the data moves when the stream runs. */
    if (kind == cudaMemcpyHostToDevice && (!mock_is_dev(dst, n) || mock_is_dev(src, n)))
        DIE("mock: cudaMemcpyAsync host to device: %p <- %p (%zu bytes) is not device <- host", dst, src, n);
    if (kind == cudaMemcpyDeviceToHost && (!mock_is_dev(src, n) || mock_is_dev(dst, n)))
        DIE("mock: cudaMemcpyAsync device to host: %p <- %p (%zu bytes) is not host <- device", dst, src, n);
    enqueue(s, (mock_op){.kind = OP_COPY, .dst = dst, .src = src, .n = n, .dir = kind});
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    n_objects++;
    return ret(*e ? cudaSuccess : cudaErrorMemoryAllocation);
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (mock_capturing(s))
        DIE("mock: cudaEventRecord on a stream being captured (an event node of the graph, invisible to the host and to "
            "other streams' waits outside it: not modelled; record it outside the capture)");
    if (!deferred(s)) { /* the stream's work so far is done */
        e->s = NULL, e->seq = 0, e->work = compute_work;
        return cudaSuccess;
    }
    enqueue(s, (mock_op){.kind = OP_RECORD, .ev = e});
    e->s = s, e->seq = s->enqueued;
    return cudaSuccess;
}

static int event_done(cudaEvent_t e) { return !e->s || e->s->done >= e->seq; }

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    no_capture("cudaEventSynchronize");
    run_to(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (event_done(e)) return cudaSuccess;
    if (n_queries++ % 3 != 2) return ret(cudaErrorNotReady);
    run_to(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (mock_capturing(s)) DIE("mock: cudaStreamQuery of a stream being captured (cudaErrorStreamCaptureUnsupported)");
    if (n_queries++ % 3 != 2) return ret(cudaErrorNotReady);
    if (s) run_to(s, s->enqueued);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    if (mock_capturing(s))
        DIE("mock: cudaStreamWaitEvent of a stream being captured on an event recorded outside the capture "
            "(cudaErrorStreamCaptureIsolation); wait before cudaStreamBeginCapture");
    if (deferred(s) && !e->s && e->work > s->compute_after) s->compute_after = e->work;
    if (event_done(e)) return cudaSuccess;
    if (!deferred(s)) run_to(e->s, e->seq); /* work on s runs at once: what it waits for runs first */
    else enqueue(s, (mock_op){.kind = OP_WAIT, .on = e->s, .upto = e->seq});
    return cudaSuccess;
}

/* fn(arg) as a kernel on s would run (for the mock NCCL's collectives, through gpucomm.cu's
 * mock_nccl_set_launcher): at once on an immediate stream (counted as compute work), queued on a
 * side stream. A kernel on a side stream reads and writes what the compute stream produced (an
 * all-reduce of gradient groups), so it must be ordered after all compute work enqueued before
 * it: a side stream that has not waited (cudaStreamWaitEvent) on an event recorded after that
 * work dies here, naming what — on a GPU it could run before the data is there. */
void mock_stream_launch(cudaStream_t s, void (*fn)(void *), void *arg, const char *what) {
    if (mock_capturing(s)) {
        capture_op(s, (graph_op){.op = {.kind = OP_HOST, .fn = fn, .arg = arg}});
        return;
    }
    if (!deferred(s)) {
        compute_work++;
        fn(arg);
        return;
    }
    if (s->compute_after < compute_work)
        DIE("mock: %s enqueued on a side stream that waits for %lu of the compute stream's %lu operations enqueued before "
            "it (a missing cudaStreamWaitEvent on an event recorded after them): on a GPU it may read its data before "
            "the compute stream has written it",
            what, s->compute_after, compute_work);
    enqueue(s, (mock_op){.kind = OP_HOST, .fn = fn, .arg = arg});
}

/* ---- stream capture and graphs (see the header) ---- */

static long n_graph_launches;
long mock_cuda_graph_launches(void) { return n_graph_launches; }

int mock_capturing(cudaStream_t s) { return s && s->capture; }

static void capture_op(cudaStream_t s, graph_op g) {
    struct CUgraph_st *gr = s->capture;
    if (gr->n == gr->cap) {
        gr->cap = gr->cap ? 2 * gr->cap : 64;
        gr->ops = realloc(gr->ops, (size_t)gr->cap * sizeof *gr->ops);
        if (!gr->ops) DIE("mock: out of memory capturing a graph");
    }
    gr->ops[gr->n++] = g;
}

void mock_capture_call(cudaStream_t s, void (*replay)(int id, const mock_arg *a), int id, const mock_arg *a, int n) {
    if (!mock_capturing(s)) DIE("mock: mock_capture_call on a stream not being captured");
    if (n > MOCK_CAPTURE_ARGS) DIE("mock: a captured call with %d arguments", n);
    graph_op g = {.op = {.kind = OP_CALL}, .replay = replay, .id = id};
    memcpy(g.a, a, (size_t)n * sizeof *a);
    capture_op(s, g);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    (void)mode;
    if (!s || deferred(s)) DIE("mock: cudaStreamBeginCapture on the legacy stream or a copy stream: not modelled");
    if (s->capture) DIE("mock: cudaStreamBeginCapture on a stream already being captured");
    s->capture = calloc(1, sizeof *s->capture);
    if (!s->capture) DIE("mock: out of memory");
    n_capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    if (!mock_capturing(s)) DIE("mock: cudaStreamEndCapture of a stream not being captured");
    *graph = s->capture;
    s->capture = NULL;
    n_capturing--;
    n_objects++;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
    *st = mock_capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    no_capture("cudaGraphInstantiate");
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x || (graph->n && !(x->ops = malloc((size_t)graph->n * sizeof *x->ops)))) DIE("mock: out of memory");
    if (graph->n) memcpy(x->ops, graph->ops, (size_t)graph->n * sizeof *x->ops);
    x->n = graph->n;
    n_objects++;
    *exec = x;
    return cudaSuccess;
}

/* The graph's operations in capture order, at once (the compute stream runs its work at once),
 * counted as compute work as the calls they replay are. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    no_capture("cudaGraphLaunch");
    if (!s || deferred(s)) DIE("mock: cudaGraphLaunch on the legacy stream or a copy stream: not modelled");
    n_graph_launches++;
    for (int i = 0; i < exec->n; i++) {
        graph_op *g = &exec->ops[i];
        switch (g->op.kind) {
        case OP_CALL: g->replay(g->id, g->a); break;
        case OP_HOST: compute_work++, g->op.fn(g->op.arg); break;
        default: compute_work++, run_op(&g->op); break;
        }
    }
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (graph) free(graph->ops), free(graph);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (exec) free(exec->ops), free(exec);
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    *v = 0;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *fr, size_t *total) {
    *fr = MOCK_TOTAL - allocated;
    *total = MOCK_TOTAL;
    return cudaSuccess;
}

size_t cudnnGetVersion(void) { return 0; }
const char *cudnnGetErrorString(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN error (mock)"; }
void cudnnGetLastErrorString(char *m, size_t n) {
    if (n) m[0] = '\0';
}

cublasStatus_t cublasGetProperty(libraryPropertyType t, int *v) {
    (void)t;
    *v = 0;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS error (mock)"; }
const char *cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }
