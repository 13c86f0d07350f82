/* mock_capture.h — stream capture in the mock (mock_cuda.c, mock_layers.c): a layer stand-in
 * called on a stream that is being captured (cudaStreamBeginCapture) runs nothing; it hands its
 * arguments to mock_capture_call, which appends the call to the graph being captured, and
 * cudaGraphLaunch replays it (replay(id, args): the stand-in called again with the same
 * arguments, on the data there at launch time), as a kernel node of a CUDA graph does. */
#ifndef DSGD_MOCK_CAPTURE_H
#define DSGD_MOCK_CAPTURE_H

#include <cuda_runtime_api.h>

#define MOCK_CAPTURE_ARGS 12

typedef union {
    void *p;
    long long i;
    unsigned long long u;
    double d;
} mock_arg;

/* 1 if s is being captured. */
int mock_capturing(cudaStream_t s);
/* Append replay(id, a[0..n)) to the graph s is capturing (n <= MOCK_CAPTURE_ARGS). */
void mock_capture_call(cudaStream_t s, void (*replay)(int id, const mock_arg *a), int id, const mock_arg *a, int n);
/* cudaGraphLaunch calls so far (test_gpu_model counts the graph path's steps). */
long mock_cuda_graph_launches(void);

#endif
