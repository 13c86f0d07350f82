/* alloccount.h — counts heap allocations in a test program, to assert that a code path (the
 * training step) allocates nothing. Include in exactly one file of a test program: it defines
 * the malloc family, which interposes on glibc's. While alloc_armed is set it counts calls, the
 * largest request and the bytes still outstanding (usable sizes, frees subtracted). */
#ifndef DSGD_ALLOCCOUNT_H
#define DSGD_ALLOCCOUNT_H

#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
extern size_t malloc_usable_size(void *);

static volatile int alloc_armed;
static long alloc_count, alloc_outstanding;
static size_t alloc_largest;

static inline void *counted(void *p, size_t n) {
    if (alloc_armed && p) {
        __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&alloc_outstanding, (long)malloc_usable_size(p), __ATOMIC_RELAXED);
        size_t cur = __atomic_load_n(&alloc_largest, __ATOMIC_RELAXED);
        while (n > cur && !__atomic_compare_exchange_n(&alloc_largest, &cur, n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    return p;
}
static inline void uncounted(void *p) {
    if (alloc_armed && p) __atomic_sub_fetch(&alloc_outstanding, (long)malloc_usable_size(p), __ATOMIC_RELAXED);
}
void *malloc(size_t n) { return counted(__libc_malloc(n), n); }
void *calloc(size_t n, size_t s) { return counted(__libc_calloc(n, s), n * s); }
void *realloc(void *p, size_t n) {
    uncounted(p);
    return counted(__libc_realloc(p, n), n);
}
void free(void *p) {
    uncounted(p);
    __libc_free(p);
}
void *memalign(size_t a, size_t n) { return counted(__libc_memalign(a, n), n); }
void *aligned_alloc(size_t a, size_t n) { return counted(__libc_memalign(a, n), n); }
int posix_memalign(void **p, size_t a, size_t n) {
    *p = counted(__libc_memalign(a, n), n);
    return *p ? 0 : ENOMEM;
}

#endif
