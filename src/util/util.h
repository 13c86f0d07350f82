/* util.h — error checking, logging, timing and deterministic random numbers shared by every
 * module of dsgd-run. Nothing here knows about MPI (see src/comm/comm.h) or oneDNN. */
#ifndef DSGD_UTIL_H
#define DSGD_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSGD_VERSION "0.1.0"

/* Exit status of dsgd-run, all of them: 0 success, 1 runtime failure (non-finite loss, I/O error
 * during training, library failure), 2 bad input (experiment file, command line, data files,
 * output path) detected before training starts, 3 a run stopped by SIGTERM / SIGINT / SIGHUP
 * after writing its checkpoint (src/train/checkpoint.h). */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_BADINPUT = 2, EXIT_INTERRUPTED = 3 };

/* Size of the error-message buffers passed around as (char *err, size_t errlen). */
#define ERRLEN 1024

/* Print "dsgd-run: rank R on HOST: internal error at file:line: <message>" to stderr ("dsgd-run:
 * on HOST: ..." before MPI_Init or without MPI) and abort the process (for programming errors
 * only, never for user input, which is reported through error strings). */
void die(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
#define DIE(...) die(__FILE__, __LINE__, __VA_ARGS__)
/* The MPI rank die names: comm_init_thread (src/comm/comm.h) sets it once MPI is initialised;
 * -1 (the default) names none. */
void die_set_rank(int rank);

/* malloc/calloc that on failure say how much could not be allocated (and where) and exit with
 * status 1 (EXIT_RUNTIME): a size the machine cannot give, not a bug. */
void *xmalloc_(size_t nbytes, const char *file, int line);
void *xcalloc_(size_t n, size_t size, const char *file, int line);
#define xmalloc(n) xmalloc_((n), __FILE__, __LINE__)
#define xcalloc(n, s) xcalloc_((n), (s), __FILE__, __LINE__)

/* The doubling grower of a growing array: p (NULL, or from malloc/realloc/xgrow) holds *cap
 * elements of elem >= 1 bytes. Returns p itself when need <= *cap; otherwise p reallocated to the
 * first of *cap·2, *cap·4, ... (4096, 8192, ... from *cap = 0) that holds need elements (need
 * itself where doubling would pass SIZE_MAX bytes), with *cap set to it: the old content kept, the
 * new part uninitialised, amortised O(1) per element appended. Usage:
 * `v = xgrow(v, &cap, n + 1, sizeof *v);`. A size the machine cannot give (need·elem beyond
 * size_t, or realloc failing) is said with the caller's file:line and exits with status 1
 * (EXIT_RUNTIME), as xmalloc. */
void *xgrow_(void *p, size_t *cap, size_t need, size_t elem, const char *file, int line);
#define xgrow(p, cap, need, elem) xgrow_((p), (cap), (need), (elem), __FILE__, __LINE__)

/* snprintf into an error buffer; returns EXIT_BADINPUT so callers can `return seterr(...)`. */
int seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* mkdir -p dir (mode 0777 before the umask). for_what names what the directory is for in the
 * messages: "cannot create directory <d> for <for_what>: <strerror>" or "cannot create
 * <for_what>: <d> exists and is not a directory". Returns 0 or -1 with err filled. */
int mkdirs(const char *dir, const char *for_what, char *err, size_t errlen);

/* Monotonic wall clock in seconds (CLOCK_MONOTONIC). */
double wall_time(void);

/* Deterministic RNG: splitmix64 seeding + xoshiro256** generation. Same stream on every
 * platform for the same seed; used for He initialisation and the per-epoch permutation. */
typedef struct { uint64_t s[4]; } rng_t;
void rng_seed(rng_t *r, uint64_t seed);
uint64_t rng_u64(rng_t *r);
/* Uniform in [0, 1) with 53 random bits. */
double rng_uniform(rng_t *r);
/* Uniform integer in [0, n), unbiased (Lemire's method), n >= 1. */
uint64_t rng_below(rng_t *r, uint64_t n);
/* Standard normal N(0, 1) (Box–Muller, no cached second value so the stream is stateless). */
double rng_normal(rng_t *r);
/* Mix several 64-bit words into one seed (e.g. (seed, epoch) -> permutation seed). */
uint64_t seed_mix(uint64_t a, uint64_t b);

/* Wait on cv (mu held) for at most s seconds: pthread_cond_timedwait with a CLOCK_REALTIME
 * deadline s from now. A wake-up, a timeout and a spurious return look the same to the caller. */
void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double s);

#ifdef __cplusplus
}
#endif

#endif
