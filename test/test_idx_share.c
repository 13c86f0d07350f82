/* test_idx_share.c — one copy of the IDX sets per node (src/run/setup.c data_idx_share): the
 * batches and evaluation samples a rank gets from the node's shared copy are bitwise those it
 * gets from its own copy, as every rank had before.
 *
 * Without MPI (as make check starts it): (1) dataset_block_write + dataset_view round trip on the
 * Fashion-MNIST test subset (build/test-data: 10,000 training and 2,000 validation images):
 * same n, c, h, w, classes, pixels and labels, and the loader's mean/std, batches over three
 * epoch boundaries and evaluation samples bit for bit; then (2) the same program under
 * `timeout mpiexec -n 3` (DSGD_TEST_IDX_SHARE_CHILD=1): every rank loads its own copy, node
 * rank 0 shares its block with comm_node_share, and each rank compares what it reads through
 * the shared window with its own copy as in (1), checks that the window is not its own memory
 * (rank 0 too: the window is a copy), that a write to it faults (a forked child writing to it
 * dies of SIGSEGV), and the ranks agree on the verdict. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "data/idx.h"
#include "data/loader.h"
#include "util/util.h"

#define DIR "build/test-data"
enum { P = 3, B = 16 };

static int g_fail;
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            g_fail++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

static void load(dataset *train, dataset *val) {
    char err[1024];
    if (dataset_load(train, DIR "/train-images", DIR "/train-labels", 0, err, sizeof err) ||
        dataset_load(val, DIR "/val-images", DIR "/val-labels", train->n_classes, err, sizeof err)) {
        fprintf(stderr, "%s (run from the repository root after `make " DIR "/val-labels`)\n", err);
        exit(1);
    }
}

/* a (own copy) and s (a view of the block) hold the same set. */
static void same_set(const dataset *a, const dataset *s, const char *what) {
    CHECK(s->borrowed == 1 && a->borrowed == 0, "%s: borrowed %d / %d", what, s->borrowed, a->borrowed);
    CHECK(a->n == s->n && a->c == s->c && a->h == s->h && a->w == s->w && a->n_classes == s->n_classes,
          "%s: %d %d %d %d %d vs %d %d %d %d %d", what, a->n, a->c, a->h, a->w, a->n_classes, s->n, s->c, s->h, s->w,
          s->n_classes);
    CHECK(s->x != a->x && s->y != a->y, "%s: the view is the own copy", what);
    if (a->n != s->n) return;
    CHECK(memcmp(a->x, s->x, (size_t)a->n * a->c * a->h * a->w) == 0, "%s: pixels differ", what);
    CHECK(memcmp(a->y, s->y, (size_t)a->n) == 0, "%s: labels differ", what);
}

/* The loader on train (own) and strain (shared) at this rank of P: the same mean/std and, bit for
 * bit, the same batches at steps across three epoch boundaries and the same evaluation slice. */
static void same_batches(const dataset *train, const dataset *val, const dataset *strain, const dataset *sval, int rank) {
    loader la, lb;
    char err[1024];
    if (loader_init(&la, train, P, rank, B, 42, err, sizeof err) || loader_init(&lb, strain, P, rank, B, 42, err, sizeof err)) {
        CHECK(0, "loader_init: %s", err);
        return;
    }
    CHECK(memcmp(la.mean, lb.mean, sizeof la.mean) == 0 && memcmp(la.std, lb.std, sizeof la.std) == 0, "mean/std differ");
    const size_t sample = (size_t)train->c * train->h * train->w;
    const int ne = val->n / P + 1;
    float *xa = xmalloc((size_t)ne * sample * sizeof(float)), *xb = xmalloc((size_t)ne * sample * sizeof(float));
    int *ya = xmalloc((size_t)ne * sizeof(int)), *yb = xmalloc((size_t)ne * sizeof(int));
    const long S = la.steps_per_epoch;
    const long steps[] = {0, 1, S - 1, S, S + 1, 2 * S + 7, 3 * S - 1, 3 * S};
    long compared = 0;
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        memset(xa, 0, B * sample * sizeof(float)), memset(xb, 0xff, B * sample * sizeof(float));
        CHECK(loader_batch(&la, steps[k], xa, ya) == 0 && loader_batch(&lb, steps[k], xb, yb) == 0, "loader_batch");
        CHECK(memcmp(xa, xb, B * sample * sizeof(float)) == 0, "step %ld: batch differs", steps[k]);
        CHECK(memcmp(ya, yb, B * sizeof(int)) == 0, "step %ld: labels differ", steps[k]);
        compared++;
    }
    int begin, end;
    eval_slice(val->n, P, rank, &begin, &end);
    memset(xb, 0xff, (size_t)(end - begin) * sample * sizeof(float));
    CHECK(loader_eval(&la, val, begin, end - begin, xa, ya) == 0 && loader_eval(&lb, sval, begin, end - begin, xb, yb) == 0,
          "loader_eval");
    CHECK(memcmp(xa, xb, (size_t)(end - begin) * sample * sizeof(float)) == 0, "evaluation samples differ");
    CHECK(memcmp(ya, yb, (size_t)(end - begin) * sizeof(int)) == 0, "evaluation labels differ");
    CHECK(compared == 8 && S == train->n / (P * B), "steps %ld, S %ld", compared, S);
    free(xa), free(xb), free(ya), free(yb);
    loader_free(&la), loader_free(&lb);
}

/* (1) without MPI: the block round trip. */
static void round_trip(void) {
    dataset train, val, st, sv;
    load(&train, &val);
    CHECK(train.n == 10000 && val.n == 2000 && train.h == 28 && train.w == 28 && train.n_classes == 10, "test data %d %d",
          train.n, val.n);
    CHECK(dataset_block_bytes(&train) == 64 + 10000 * 784 + 10000, "block bytes %zu", dataset_block_bytes(&train));
    void *bt = xmalloc(dataset_block_bytes(&train)), *bv = xmalloc(dataset_block_bytes(&val));
    dataset_block_write(&train, bt), dataset_block_write(&val, bv);
    dataset_view(&st, bt), dataset_view(&sv, bv);
    same_set(&train, &st, "train"), same_set(&val, &sv, "val");
    for (int r = 0; r < P; r++) same_batches(&train, &val, &st, &sv, r);
    dataset_free(&st); /* borrowed: leaves the block alone (free below would double-free otherwise) */
    CHECK(st.x == NULL && st.n == 0, "dataset_free of a view");
    free(bt), free(bv);
    dataset_free(&train), dataset_free(&val), dataset_free(&sv);
}

/* 1 if writing one byte at q kills a forked child with SIGSEGV. */
static int write_faults(const void *q) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        *(volatile uint8_t *)q = 1;
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSEGV;
}

/* (2) under mpiexec -n P: the node's shared copy. */
static int child(int argc, char **argv) {
    comm_init(&argc, &argv);
    const int rank = comm_rank(), lrank = comm_local_rank();
    if (comm_size() != P || comm_local_size() != P) {
        fprintf(stderr, "rank %d: world %d, node %d; want %d ranks on one node\n", rank, comm_size(), comm_local_size(), P);
        comm_abort(1);
    }
    dataset train, val, st, sv;
    load(&train, &val);
    dataset *own[2] = {&train, &val}, *shared[2] = {&st, &sv};
    for (int i = 0; i < 2; i++) {
        size_t n = lrank == 0 ? dataset_block_bytes(own[i]) : 0;
        void *block = lrank == 0 ? xmalloc(n) : NULL;
        if (block) dataset_block_write(own[i], block);
        const void *q = comm_node_share(block, &n, "node rank 0 (test)");
        CHECK(n == dataset_block_bytes(own[i]), "rank %d: %zu bytes shared", rank, n);
        CHECK(q != NULL && q != block, "rank %d: the shared copy is the caller's block", rank);
        if (block) memset(block, 0, n), free(block); /* the window is a copy: rank 0 may drop its block */
        dataset_view(shared[i], q);
    }
    /* one copy: every rank sees the same window (rank 0's data), not its own memory */
    same_set(&train, &st, "train"), same_set(&val, &sv, "val");
    same_batches(&train, &val, &st, &sv, rank);
    CHECK(write_faults(st.x + 12345), "rank %d: a write to the shared pixels does not fault", rank);
    int worst = comm_max_int(g_fail);
    if (rank == 0) printf("%s: %d rank(s), node-shared IDX sets equal to each rank's own copy bit for bit\n",
                          worst ? "FAIL" : "ok", P);
    dataset_free(&st), dataset_free(&sv), dataset_free(&train), dataset_free(&val);
    comm_finalize();
    return worst ? 1 : 0;
}

int main(int argc, char **argv) {
    if (getenv("DSGD_TEST_IDX_SHARE_CHILD")) return child(argc, argv);
    round_trip();
    printf("%s: block round trip (10,000 + 2,000 images, %d ranks' batches)\n", g_fail ? "FAIL" : "ok", P);
    if (g_fail) return 1;
    fflush(stdout);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "DSGD_TEST_IDX_SHARE_CHILD=1 timeout -k 5 120 mpiexec -n %d %s", P, argv[0]);
    const int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "FAIL: %s: status %d\n", cmd, rc);
        return 1;
    }
    return 0;
}
