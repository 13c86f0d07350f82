/* util.c — see util.h. */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mkdirs(const char *dir, const char *for_what, char *err, size_t errlen) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        seterr(err, errlen, "cannot create directory %.80s... for %s: path too long", dir, for_what);
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        const char c = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            seterr(err, errlen, "cannot create directory %s for %s: %s", buf, for_what, strerror(errno));
            return -1;
        }
        struct stat st;
        if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
            seterr(err, errlen, "cannot create %s: %s exists and is not a directory", for_what, buf);
            return -1;
        }
        *p = c;
        if (c == '\0') break;
    }
    return 0;
}

static int die_rank = -1;

void die_set_rank(int rank) { die_rank = rank; }

void die(const char *file, int line, const char *fmt, ...) {
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    if (die_rank >= 0)
        fprintf(stderr, "dsgd-run: rank %d on %s: internal error at %s:%d: ", die_rank, host, file, line);
    else
        fprintf(stderr, "dsgd-run: on %s: internal error at %s:%d: ", host, file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* Not a bug but a size the machine cannot give (a huge b): said, and exit status 1, not abort. */
static void out_of_memory(size_t nbytes, const char *file, int line) __attribute__((noreturn));
static void out_of_memory(size_t nbytes, const char *file, int line) {
    fprintf(stderr, "dsgd-run: out of memory: %.3g GiB could not be allocated (%s:%d); lower b or eval.batch, or run fewer ranks "
                    "per node\n", (double)nbytes / 1073741824.0, file, line);
    exit(EXIT_RUNTIME);
}

void *xmalloc_(size_t nbytes, const char *file, int line) {
    void *p = malloc(nbytes ? nbytes : 1);
    if (!p) out_of_memory(nbytes, file, line);
    return p;
}

void *xcalloc_(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) out_of_memory(n * size, file, line);
    return p;
}

void *xgrow_(void *p, size_t *cap, size_t need, size_t elem, const char *file, int line) {
    if (elem == 0) die(file, line, "xgrow: element size 0");
    if (need <= *cap) return p;
    if (need > SIZE_MAX / elem) {
        fprintf(stderr, "dsgd-run: out of memory: %zu elements of %zu bytes exceed the address space (%s:%d)\n", need, elem,
                file, line);
        exit(EXIT_RUNTIME);
    }
    size_t n = *cap ? *cap : 4096;
    while (n < need) n = n <= SIZE_MAX / 2 / elem ? n * 2 : need; /* past half the address space: need itself */
    if (n > SIZE_MAX / elem) n = need; /* a first 4096 of a huge elem */
    void *q = realloc(p, n * elem);
    if (!q) {
        fprintf(stderr, "dsgd-run: out of memory: %.3g GiB could not be allocated (%s:%d)\n", (double)(n * elem) / 1073741824.0,
                file, line);
        exit(EXIT_RUNTIME);
    }
    *cap = n;
    return q;
}

int seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return EXIT_BADINPUT;
}

double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t seed_mix(uint64_t a, uint64_t b) {
    uint64_t x = splitmix64(&a) ^ b;
    return splitmix64(&x);
}

void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

uint64_t rng_below(rng_t *r, uint64_t n) {
    __uint128_t m = (__uint128_t)rng_u64(r) * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t t = -n % n;
        while (l < t) {
            m = (__uint128_t)rng_u64(r) * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double rng_normal(rng_t *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(cv, mu, &ts);
}
