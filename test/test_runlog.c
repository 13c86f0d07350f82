/* test_runlog.c — the HDF5 run file (src/io/runlog.c): every value, dtype, dimension, units
 * attribute and root attribute read back through the HDF5 C API; refusal of an existing file
 * (byte-identical afterwards); overwrite; parent directories; HDF5's own error printing off; and
 * crash safety: children killed with SIGKILL after 3 evaluations and at random instants, whose
 * files must open read-only (no SWMR, no h5clear) and pass `h5dump -H`. The optional parts
 * (/ranks, /eval_local, the fixed arrays, root attribute servers) likewise, in their own tests
 * and in every other trial of the random-instant kill test. Resume from a checkpoint
 * (runlog_flush, runlog_rows_written, runlog_resume) of a closed and of a killed file, twice:
 * rows after the checkpoint dropped, the resumed rows following with none doubled or missing,
 * end-of-run attributes removed, resumes and resumed_at; refusals (message, file byte-identical);
 * and resumed writers killed at random instants, during the resume too. */
#define _GNU_SOURCE /* strptime, nftw */
#include "io/runlog.h"
#include "testutil.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- expected values: row k (0-based) of each table is a closed-form function of k ---- */
static long tr_step(long j) { return j + 1; }
static double tr_time(long j) { return 0.5 * (double)(j + 1); }
static double tr_loss(long j) { return 3.0 / (double)(j + 1); }
static double tr_alpha(long j) { return 0.1 * (double)(1 + j % 7); }
static double ev_epoch(long k) { return (double)(k + 1) / 3.0; }
static double ev_loss(long k) { return 1.0 / (double)(k + 2); }
/* Exact in binary, so that a fused multiply-add (-ffp-contract) in one place and not another
 * cannot change the last bit. */
static double ev_top1(long k) { return 0.875 - (double)k / 1024.0; }
static double ev_top5(long k) { return 0.5 - (double)k / 2048.0; }

static const char *CONFIG_TEXT = "# resolved experiment\nmethod = \"ssgd\"\np = 4\nalpha = 0.1  # α, µ = 0.9\n";
static const uint64_t SEED = 0xFEDCBA9876543210ULL;

static runlog_meta meta_for(const char *method) {
    runlog_meta m = {.method = method, .p = 4, .b = 128, .m = 2, .seed = SEED, .iterations = 5000, .config_text = CONFIG_TEXT,
                     .command_line = "dsgd-run --set seed=1 quick.cfg", .hostname = "testhost",
                     .device = "cuda tf32: GPU 1 of 4: NVIDIA H200 (sm_90, 139.8 GiB)"};
    return m;
}

/* The optional parts: RANKS /ranks columns, /eval_local, and the three fixed arrays below. */
enum { RANKS = 3, HIST_BINS = 8, DROPPED_ROWS = 50 };
static const runlog_array_spec ARRAYS[3] = {
    {"ps/staleness_histogram", HIST_BINS, 0, "gradients", "gradients applied with staleness k (last bin: k >= bins-1)", 0, 0},
    {"gossip/peers", RANKS, RANKS, "times", "times worker i chose peer j", 0, 0},
    {"backup/dropped", DROPPED_ROWS, 0, "gradients", "gradients dropped at each step (grows; never written here: 0 rows)", 0, 1},
};
static runlog_meta meta_full(const char *method) {
    runlog_meta m = meta_for(method);
    m.servers = 2;
    m.ranks = RANKS;
    m.eval_local = 1;
    m.arrays = ARRAYS;
    m.n_arrays = 3;
    return m;
}

/* /ranks row j (0-based), quantity q (0 step_time_s, 1 compute_s, 2 comm_s, 3 wait_s), worker
 * w: exact in binary, distinct for every (q, j, w). The row's step is tr_step(j). */
static double rk_val(int q, long j, int w) { return 1e6 * q + 4.0 * (double)j + 0.25 * w; }

static int write_ranks_row(runlog *r, long j) {
    double v[4][RANKS];
    for (int q = 0; q < 4; q++)
        for (int w = 0; w < RANKS; w++) v[q][w] = rk_val(q, j, w);
    return runlog_ranks(r, tr_step(j), v[0], v[1], v[2], v[3], v[0]);
}

/* Train rows [*nt, upto), each with its /ranks row. */
static int write_rows_ranks(runlog *r, long *nt, long upto) {
    for (; *nt < upto; (*nt)++)
        if (runlog_train(r, tr_step(*nt), tr_time(*nt), tr_loss(*nt), tr_alpha(*nt)) != 0 || write_ranks_row(r, *nt) != 0)
            return -1;
    return 0;
}

/* Version k of the fixed arrays 0 and 1 (element i, row-major); array 2 is never written. */
static long long arr_val(int a, long k, long i) { return 1000 * k + (a + 1) * 100 + i + 1; }
static int write_arrays(runlog *r, long k) {
    long long h[HIST_BINS], g[RANKS * RANKS];
    for (long i = 0; i < HIST_BINS; i++) h[i] = arr_val(0, k, i);
    for (long i = 0; i < RANKS * RANKS; i++) g[i] = arr_val(1, k, i);
    return runlog_array(r, 0, h) || runlog_array(r, 1, g) ? -1 : 0;
}

/* Write train rows [*nt, upto) then, if eval_k >= 0, eval row eval_k at the current step. */
static int write_rows(runlog *r, long *nt, long upto) {
    for (; *nt < upto; (*nt)++)
        if (runlog_train(r, tr_step(*nt), tr_time(*nt), tr_loss(*nt), tr_alpha(*nt)) != 0) return -1;
    return 0;
}
static int write_eval(runlog *r, long k, long nt) {
    return runlog_eval(r, nt, tr_time(nt - 1), ev_epoch(k), ev_loss(k), ev_top1(k), ev_top5(k));
}
/* /eval_local row k: the /eval values shifted by EL_SHIFT (exact), so a mix-up shows. */
static const double EL_SHIFT = 0.125;
static int write_eval_local(runlog *r, long k, long nt) {
    return runlog_eval_local(r, nt, tr_time(nt - 1), ev_epoch(k), ev_loss(k) + EL_SHIFT, ev_top1(k) + EL_SHIFT,
                             ev_top5(k) + EL_SHIFT);
}

/* ---- temporary directories ---- */
static void make_tmpdir(char *dir, size_t n) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, n, "%s/test_runlog.XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp(%s): %s", dir, strerror(errno));
}
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int count_entries(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
    return system(cmd) == 0 ? 1 : 0;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "fopen(%s): %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    ck_assert(buf != NULL);
    ck_assert_int_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* ---- reading back through the HDF5 C API ---- */
static hid_t open_ro(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "H5Fopen(%s) read-only failed", path);
    return f;
}

static hsize_t ds_len(hid_t f, const char *name) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "H5Dopen2(%s)", name);
    hid_t s = H5Dget_space(d);
    ck_assert_int_eq(H5Sget_simple_extent_ndims(s), 1);
    hsize_t dims, maxd;
    ck_assert_int_ge(H5Sget_simple_extent_dims(s, &dims, &maxd), 0);
    ck_assert_msg(maxd == H5S_UNLIMITED, "%s: max dims not unlimited", name);
    H5Sclose(s);
    H5Dclose(d);
    return dims;
}

/* Read all of a 1-D dataset as int64 or double (n = its length). */
static void *ds_read(hid_t f, const char *name, int is_i64, hsize_t *n) {
    *n = ds_len(f, name);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    void *buf = malloc((*n ? *n : 1) * 8);
    ck_assert(buf != NULL);
    if (*n) ck_assert_msg(H5Dread(d, is_i64 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "H5Dread(%s)", name);
    H5Dclose(d);
    return buf;
}

/* A string attribute: variable-length, or fixed-size (status, its STATUS_LEN-byte slot). */
static char *attr_str(hid_t obj, const char *name) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "attribute %s missing", name);
    hid_t ft = H5Aget_type(a);
    ck_assert_msg(ft >= 0 && H5Tget_class(ft) == H5T_STRING, "attribute %s is not a string", name);
    char *copy;
    if (H5Tis_variable_str(ft) > 0) {
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, H5T_CSET_UTF8);
        char *s = NULL;
        ck_assert_msg(H5Aread(a, t, &s) >= 0, "H5Aread(%s)", name);
        copy = strdup(s ? s : "");
        H5free_memory(s);
        H5Tclose(t);
    } else {
        size_t n = H5Tget_size(ft);
        copy = calloc(n + 1, 1);
        ck_assert_msg(copy && H5Aread(a, ft, copy) >= 0, "H5Aread(%s)", name);
    }
    H5Tclose(ft);
    H5Aclose(a);
    return copy;
}

static void assert_attr_str(hid_t obj, const char *name, const char *want);
/* The status slot: a fixed-size UTF-8 string of 512 bytes (written in place on a full disk),
 * holding want ("" until the run ends). */
static void assert_status(hid_t f, const char *want) {
    hid_t a = H5Aopen(f, "status", H5P_DEFAULT);
    ck_assert_msg(a >= 0, "no status attribute");
    hid_t t = H5Aget_type(a);
    ck_assert_msg(H5Tis_variable_str(t) == 0 && H5Tget_size(t) == 512 && H5Tget_cset(t) == H5T_CSET_UTF8,
                  "status is not the fixed-size 512-byte UTF-8 slot");
    H5Tclose(t);
    H5Aclose(a);
    assert_attr_str(f, "status", want);
}

static void assert_attr_str(hid_t obj, const char *name, const char *want) {
    char *s = attr_str(obj, name);
    ck_assert_msg(strcmp(s, want) == 0, "attribute %s = \"%s\", expected \"%s\"", name, s, want);
    free(s);
}

/* Scalar numeric attribute with a check of its stored type. */
static void attr_num(hid_t obj, const char *name, hid_t want_ftype, hid_t mtype, void *out) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "attribute %s missing", name);
    hid_t t = H5Aget_type(a);
    ck_assert_msg(H5Tequal(t, want_ftype) > 0, "attribute %s has the wrong type", name);
    ck_assert_msg(H5Aread(a, mtype, out) >= 0, "H5Aread(%s)", name);
    H5Tclose(t);
    H5Aclose(a);
}

static void assert_column_meta(hid_t f, const char *name, const char *units, int is_i64, hsize_t chunk) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "H5Dopen2(%s)", name);
    hid_t t = H5Dget_type(d);
    ck_assert_msg(H5Tequal(t, is_i64 ? H5T_STD_I64LE : H5T_IEEE_F64LE) > 0, "%s has the wrong dtype", name);
    H5Tclose(t);
    hid_t dcpl = H5Dget_create_plist(d);
    ck_assert_int_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
    hsize_t c = 0;
    ck_assert_int_eq(H5Pget_chunk(dcpl, 1, &c), 1);
    ck_assert_msg(c == chunk, "%s chunk %llu, expected %llu", name, (unsigned long long)c, (unsigned long long)chunk);
    H5Pclose(dcpl);
    assert_attr_str(d, "units", units);
    char *desc = attr_str(d, "description");
    ck_assert_msg(strlen(desc) > 10, "%s: description too short", name);
    free(desc);
    H5Dclose(d);
}

/* Every /train row present must hold its closed-form values; lengths must be n_lo..n_hi. */
static hsize_t check_train(hid_t f, hsize_t n_lo, hsize_t n_hi) {
    const char *names[4] = {"/train/step", "/train/time_s", "/train/loss", "/train/alpha"};
    hsize_t nmin = (hsize_t)-1;
    for (int c = 0; c < 4; c++) {
        hsize_t n;
        void *buf = ds_read(f, names[c], c == 0, &n);
        ck_assert_msg(n >= n_lo && n <= n_hi, "%s has %llu rows, expected %llu..%llu", names[c], (unsigned long long)n,
                      (unsigned long long)n_lo, (unsigned long long)n_hi);
        for (hsize_t j = 0; j < n; j++) {
            if (c == 0) ck_assert_msg(((int64_t *)buf)[j] == tr_step((long)j), "%s[%llu]", names[c], (unsigned long long)j);
            else {
                double want = c == 1 ? tr_time((long)j) : c == 2 ? tr_loss((long)j) : tr_alpha((long)j);
                ck_assert_msg(((double *)buf)[j] == want, "%s[%llu] = %.17g, expected %.17g", names[c], (unsigned long long)j,
                              ((double *)buf)[j], want);
            }
        }
        free(buf);
        if (n < nmin) nmin = n;
    }
    return nmin;
}

/* Same for /eval (local = 0) or /eval_local (local = 1, values of write_eval_local), where
 * eval k was written after train_per_eval*(k+1) train rows. */
static hsize_t check_eval_group(hid_t f, int local, hsize_t n_lo, hsize_t n_hi, long train_per_eval) {
    const char *cols[6] = {"step", "time_s", "epoch", "loss", "top1_error", "top5_error"};
    char names[6][64];
    hsize_t nmin = (hsize_t)-1;
    for (int c = 0; c < 6; c++) {
        snprintf(names[c], sizeof names[c], "%s/%s", local ? "/eval_local" : "/eval", cols[c]);
        hsize_t n;
        void *buf = ds_read(f, names[c], c == 0, &n);
        ck_assert_msg(n >= n_lo && n <= n_hi, "%s has %llu rows, expected %llu..%llu", names[c], (unsigned long long)n,
                      (unsigned long long)n_lo, (unsigned long long)n_hi);
        for (hsize_t k = 0; k < n; k++) {
            long nt = train_per_eval * (long)(k + 1);
            if (c == 0) {
                ck_assert_msg(((int64_t *)buf)[k] == nt, "%s[%llu]", names[c], (unsigned long long)k);
                continue;
            }
            double want = c == 1 ? tr_time(nt - 1) : c == 2 ? ev_epoch((long)k) : c == 3 ? ev_loss((long)k)
                        : c == 4 ? ev_top1((long)k) : ev_top5((long)k);
            if (local && c >= 3) want += EL_SHIFT;
            ck_assert_msg(((double *)buf)[k] == want, "%s[%llu] = %.17g, expected %.17g", names[c], (unsigned long long)k,
                          ((double *)buf)[k], want);
        }
        free(buf);
        if (n < nmin) nmin = n;
    }
    return nmin;
}
static hsize_t check_eval(hid_t f, hsize_t n_lo, hsize_t n_hi, long train_per_eval) {
    return check_eval_group(f, 0, n_lo, n_hi, train_per_eval);
}

/* Read a 2-D dataset of ncols fixed columns and unlimited rows as doubles (n = its rows). */
static double *ds_read2(hid_t f, const char *name, hsize_t ncols, hsize_t *n) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "H5Dopen2(%s)", name);
    hid_t s = H5Dget_space(d);
    ck_assert_msg(H5Sget_simple_extent_ndims(s) == 2, "%s is not 2-D", name);
    hsize_t dims[2], maxd[2];
    ck_assert_int_ge(H5Sget_simple_extent_dims(s, dims, maxd), 0);
    ck_assert_msg(maxd[0] == H5S_UNLIMITED && dims[1] == ncols && maxd[1] == ncols, "%s: shape [%llu, %llu], max [%llu, %llu]", name,
                  (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)maxd[0], (unsigned long long)maxd[1]);
    *n = dims[0];
    double *buf = malloc((dims[0] ? dims[0] : 1) * ncols * sizeof *buf);
    ck_assert(buf != NULL);
    if (dims[0]) ck_assert_msg(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "H5Dread(%s)", name);
    H5Sclose(s);
    H5Dclose(d);
    return buf;
}

/* Every /ranks row present holds write_ranks_row's values; lengths n_lo..n_hi; returns the shortest. */
static hsize_t check_ranks(hid_t f, hsize_t n_lo, hsize_t n_hi) {
    const char *names[4] = {"/ranks/step_time_s", "/ranks/compute_s", "/ranks/comm_s", "/ranks/wait_s"};
    hsize_t n;
    int64_t *step = ds_read(f, "/ranks/step", 1, &n);
    ck_assert_msg(n >= n_lo && n <= n_hi, "/ranks/step has %llu rows, expected %llu..%llu", (unsigned long long)n,
                  (unsigned long long)n_lo, (unsigned long long)n_hi);
    for (hsize_t j = 0; j < n; j++) ck_assert_msg(step[j] == tr_step((long)j), "/ranks/step[%llu]", (unsigned long long)j);
    free(step);
    hsize_t nmin = n;
    for (int q = 0; q < 4; q++) {
        double *v = ds_read2(f, names[q], RANKS, &n);
        ck_assert_msg(n >= n_lo && n <= n_hi, "%s has %llu rows, expected %llu..%llu", names[q], (unsigned long long)n,
                      (unsigned long long)n_lo, (unsigned long long)n_hi);
        for (hsize_t j = 0; j < n; j++)
            for (int w = 0; w < RANKS; w++)
                ck_assert_msg(v[j * RANKS + (hsize_t)w] == rk_val(q, (long)j, w), "%s[%llu, %d] = %.17g, expected %.17g", names[q],
                              (unsigned long long)j, w, v[j * RANKS + (hsize_t)w], rk_val(q, (long)j, w));
        free(v);
        if (n < nmin) nmin = n;
    }
    return nmin;
}

/* Fixed array a (0 or 1 of ARRAYS) has its shape; element i holds version k_i of it, with
 * k_lo <= k_i <= k_hi (k_i = -1: still the zero fill). Returns the lowest version found. */
static long check_array(hid_t f, int a, long k_lo, long k_hi) {
    char name[64];
    snprintf(name, sizeof name, "/%s", ARRAYS[a].name);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "H5Dopen2(%s)", name);
    hid_t s = H5Dget_space(d);
    hsize_t dims[2] = {0, 0}, maxd[2] = {0, 0};
    int nd = H5Sget_simple_extent_ndims(s);
    ck_assert_int_eq(nd, ARRAYS[a].cols ? 2 : 1);
    H5Sget_simple_extent_dims(s, dims, maxd);
    ck_assert_msg(dims[0] == (hsize_t)ARRAYS[a].rows && maxd[0] == dims[0], "%s: %llu rows", name, (unsigned long long)dims[0]);
    if (nd == 2) ck_assert_msg(dims[1] == (hsize_t)ARRAYS[a].cols && maxd[1] == dims[1], "%s: %llu cols", name, (unsigned long long)dims[1]);
    H5Sclose(s);
    long n = ARRAYS[a].rows * (ARRAYS[a].cols ? ARRAYS[a].cols : 1);
    long long *v = malloc((size_t)n * sizeof *v);
    ck_assert(v != NULL);
    ck_assert_msg(H5Dread(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0, "H5Dread(%s)", name);
    H5Dclose(d);
    long kmin = k_hi;
    for (long i = 0; i < n; i++) {
        long k = v[i] == 0 ? -1 : (long)((v[i] - 1) / 1000);
        ck_assert_msg((k == -1 || v[i] == arr_val(a, k, i)) && k >= k_lo && k <= k_hi, "%s[%ld] = %lld, expected a version in %ld..%ld",
                      name, i, v[i], k_lo, k_hi);
        if (k < kmin) kmin = k;
    }
    free(v);
    return kmin;
}

/* h5dump of the whole file, data included (not only the header). */
static int h5dump_data_ok(const char *path) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "h5dump '%s' >/dev/null 2>&1", path);
    return system(cmd) == 0;
}

static int h5dump_ok(const char *path) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "h5dump -H '%s' >/dev/null 2>&1", path);
    return system(cmd) == 0;
}

static void require_h5dump(void) {
    ck_assert_msg(system("command -v h5dump >/dev/null 2>&1") == 0, "h5dump not found: install the Debian package hdf5-tools");
}

/* ================================================================================================ */

/* N train rows (2.4 buffers) and M eval rows (more than one 64-row chunk), staged final attributes,
 * then every value, dtype, chunk, units attribute and root attribute read back. */
START_TEST(test_roundtrip) {
    enum { M = 70, PER = 35, N = M * PER + 10 }; /* 2460 train rows, 10 after the last eval */
    char dir[256], path[512];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    char err[ERRLEN] = "";
    runlog_meta meta = meta_for("ssgd");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    for (long k = 0; k < M; k++) {
        ck_assert_msg(write_rows(r, &nt, PER * (k + 1)) == 0, "%s", runlog_error(r));
        ck_assert_msg(write_eval(r, k, nt) == 0, "%s", runlog_error(r));
    }
    ck_assert_msg(write_rows(r, &nt, N) == 0, "%s", runlog_error(r));
    ck_assert_int_eq(runlog_set_attr_double(r, "images_per_s", 1234.5), 0);
    ck_assert_int_eq(runlog_set_attr_string(r, "status", "diverged"), 0);
    ck_assert_int_eq(runlog_set_attr_string(r, "status", "completed"), 0); /* the later value wins */
    ck_assert_int_eq(runlog_close(r), 0);
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);

    hid_t f = open_ro(path);
    ck_assert_int_eq(check_train(f, N, N), N);
    ck_assert_int_eq(check_eval(f, M, M, PER), M);
    const char *tn[4] = {"/train/step", "/train/time_s", "/train/loss", "/train/alpha"};
    const char *tu[4] = {"iterations", "s", "nats", "1"};
    for (int c = 0; c < 4; c++) assert_column_meta(f, tn[c], tu[c], c == 0, 1024);
    const char *en[6] = {"/eval/step", "/eval/time_s", "/eval/epoch", "/eval/loss", "/eval/top1_error", "/eval/top5_error"};
    const char *eu[6] = {"iterations", "s", "epochs", "nats", "fraction", "fraction"};
    for (int c = 0; c < 6; c++) assert_column_meta(f, en[c], eu[c], c == 0, 64);

    assert_attr_str(f, "method", "ssgd");
    int32_t i32;
    attr_num(f, "p", H5T_STD_I32LE, H5T_NATIVE_INT32, &i32);
    ck_assert_int_eq(i32, 4);
    attr_num(f, "b", H5T_STD_I32LE, H5T_NATIVE_INT32, &i32);
    ck_assert_int_eq(i32, 128);
    attr_num(f, "m", H5T_STD_I32LE, H5T_NATIVE_INT32, &i32);
    ck_assert_int_eq(i32, 2);
    uint64_t seed = 0;
    attr_num(f, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed);
    ck_assert_msg(seed == SEED, "seed %llx", (unsigned long long)seed);
    int64_t iters = 0;
    attr_num(f, "iterations", H5T_STD_I64LE, H5T_NATIVE_INT64, &iters);
    ck_assert_int_eq(iters, 5000);
    assert_attr_str(f, "config", CONFIG_TEXT);
    assert_attr_str(f, "command_line", "dsgd-run --set seed=1 quick.cfg");
    assert_attr_str(f, "hostname", "testhost");
    assert_attr_str(f, "device", "cuda tf32: GPU 1 of 4: NVIDIA H200 (sm_90, 139.8 GiB)");
    assert_attr_str(f, "dsgd_version", DSGD_VERSION);
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    char h5v[32];
    snprintf(h5v, sizeof h5v, "%u.%u.%u", maj, min, rel);
    assert_attr_str(f, "hdf5_version", h5v);
    char *created = attr_str(f, "created");
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    ck_assert_msg(end && *end == '\0' && tm.tm_year >= 124, "created = \"%s\" is not ISO-8601 UTC", created);
    free(created);
    double ips = 0;
    attr_num(f, "images_per_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &ips);
    ck_assert(ips == 1234.5);
    assert_status(f, "completed");
    ck_assert_int_ge(H5Fclose(f), 0);
    require_h5dump();
    ck_assert(h5dump_ok(path));
    rm_rf(dir);
}
END_TEST

/* Fewer rows than the buffer and no evaluation: runlog_close writes them; no final attributes. */
START_TEST(test_close_writes_buffer) {
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_for("easgd");
    meta.hostname = NULL; /* runlog asks gethostname */
    meta.command_line = NULL;
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    ck_assert_int_eq(write_rows(r, &nt, 10), 0);
    ck_assert_int_eq(runlog_close(r), 0);
    hid_t f = open_ro(path);
    ck_assert_int_eq(check_train(f, 10, 10), 10);
    ck_assert_int_eq(check_eval(f, 0, 0, 1), 0);
    char host[256] = "";
    gethostname(host, sizeof host);
    assert_attr_str(f, "hostname", host);
    assert_attr_str(f, "command_line", "");
    assert_status(f, "");
    H5Fclose(f);
    rm_rf(dir);
}
END_TEST

/* An existing file is refused with the documented message and left byte-identical, for an
 * earlier run file and for an arbitrary file; nothing else is left in the directory. */
START_TEST(test_existing_refused) {
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_for("ssgd");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    long nt = 0;
    ck_assert_int_eq(write_rows(r, &nt, 5), 0);
    ck_assert_int_eq(write_eval(r, 0, nt), 0);
    ck_assert_int_eq(runlog_close(r), 0);

    size_t n0, n1;
    char *before = slurp(path, &n0);
    runlog_meta other = meta_for("gossip");
    err[0] = '\0';
    ck_assert(runlog_create(path, 0, &other, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, path) != NULL, "message lacks the path: %s", err);
    ck_assert_msg(strstr(err, "already exists") != NULL, "message: %s", err);
    ck_assert_msg(strstr(err, "use --set overwrite=true to replace it or choose another output") != NULL, "message: %s", err);
    char *after = slurp(path, &n1);
    ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0, "the earlier run file changed");
    free(before);
    free(after);
    ck_assert_msg(count_entries(dir), "files left next to %s", path);

    /* Not an HDF5 file at all: refused just the same. */
    char txt[600];
    snprintf(txt, sizeof txt, "%s/notes.txt", dir);
    FILE *fp = fopen(txt, "w");
    fputs("precious\n", fp);
    fclose(fp);
    ck_assert(runlog_create(txt, 0, &other, err, sizeof err) == NULL);
    ck_assert(strstr(err, "already exists") != NULL);
    char *t = slurp(txt, &n0);
    ck_assert(n0 == 9 && memcmp(t, "precious\n", 9) == 0);
    free(t);
    rm_rf(dir);
}
END_TEST

START_TEST(test_overwrite_replaces) {
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta old = meta_for("old");
    runlog *r = runlog_create(path, 0, &old, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    long nt = 0;
    for (long k = 0; k < 5; k++) {
        ck_assert_int_eq(write_rows(r, &nt, 3 * (k + 1)), 0);
        ck_assert_int_eq(write_eval(r, k, nt), 0);
    }
    ck_assert_int_eq(runlog_close(r), 0);

    runlog_meta neu = meta_for("new");
    r = runlog_create(path, 1, &neu, err, sizeof err);
    ck_assert_msg(r != NULL, "overwrite refused: %s", err);
    nt = 0;
    for (long k = 0; k < 2; k++) {
        ck_assert_int_eq(write_rows(r, &nt, 4 * (k + 1)), 0);
        ck_assert_int_eq(write_eval(r, k, nt), 0);
    }
    ck_assert_int_eq(runlog_close(r), 0);
    hid_t f = open_ro(path);
    assert_attr_str(f, "method", "new");
    ck_assert_int_eq(check_eval(f, 2, 2, 4), 2);
    ck_assert_int_eq(check_train(f, 8, 8), 8);
    H5Fclose(f);
    ck_assert_msg(count_entries(dir), "files left next to %s", path);
    rm_rf(dir);
}
END_TEST

START_TEST(test_concurrent_overwrite_detected) {
    /* Run A writes path; run B starts on the same output with overwrite and replaces it. A must
     * fail at close (its results are gone) and must not touch B's file; B closes fine. */
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta ma = meta_for("a"), mb = meta_for("b");
    runlog *a = runlog_create(path, 0, &ma, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    long na = 0, nb = 0;
    ck_assert_int_eq(write_rows(a, &na, 3), 0);
    ck_assert_int_eq(write_eval(a, 0, na), 0);
    runlog *b = runlog_create(path, 1, &mb, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(write_rows(b, &nb, 4), 0);
    ck_assert_int_eq(write_eval(b, 0, nb), 0);
    runlog_set_attr_string(a, "status", "completed");
    ck_assert_int_eq(runlog_close(a), -1);
    ck_assert_int_eq(runlog_close(b), 0);
    hid_t f = open_ro(path);
    assert_attr_str(f, "method", "b");
    assert_status(f, "");
    H5Fclose(f);
    rm_rf(dir);
}
END_TEST

START_TEST(test_parent_dirs) {
    char dir[256], path[512], bad[600], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/a/b/c/run.h5", dir);
    runlog_meta meta = meta_for("ssgd");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_int_eq(runlog_close(r), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    /* A parent that is a regular file is reported as such. */
    snprintf(bad, sizeof bad, "%s/a/b/c/run.h5/x/run.h5", dir);
    ck_assert(runlog_create(bad, 0, &meta, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "not a directory") != NULL, "message: %s", err);
    rm_rf(dir);
}
END_TEST

/* A failure yields one concise message naming what failed and the path, and HDF5 prints
 * nothing itself (its automatic error stack is off). /proc refuses new files even to root. */
START_TEST(test_hdf5_error_message) {
    char err[ERRLEN] = "";
    runlog_meta meta = meta_for("ssgd");
    char errfile[] = "/tmp/test_runlog_stderr.XXXXXX";
    int fd = mkstemp(errfile);
    ck_assert(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    runlog *r = runlog_create("/proc/runlog-test.h5", 0, &meta, err, sizeof err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    struct stat st;
    fstat(fd, &st);
    close(fd);
    unlink(errfile);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "/proc/") != NULL && strstr(err, "cannot create the new run file") != NULL, "message: %s", err);
    ck_assert_msg(st.st_size == 0, "HDF5 printed %lld bytes to stderr", (long long)st.st_size);
    ck_assert_int_eq(runlog_close(NULL), 0);
    ck_assert_int_eq(runlog_train(NULL, 1, 0, 0, 0), -1);
    ck_assert_int_eq(runlog_eval(NULL, 1, 0, 0, 0, 0, 0), -1);
}
END_TEST

/* Parent side of a kill test: close the write end of the child's progress pipe; in a trial
 * (trial >= 0) kill the child with SIGKILL at a random instant within 1.1 times the undisturbed
 * run's seconds *t_full, else let it finish and measure *t_full from t0; reap it (a failure is a
 * test failure) and read the progress bytes it wrote into buf (at most n). Returns the count. */
static ssize_t reap_child(pid_t pid, int trial, unsigned *seed, double *t_full, double t0, int pfd[2], char *buf, size_t n) {
    close(pfd[1]);
    if (trial >= 0) {
        double delay = *t_full * 1.1 * rand_r(seed) / (double)RAND_MAX;
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (trial < 0) {
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "undisturbed child failed");
        *t_full = wall_time() - t0;
    } else {
        ck_assert_msg(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0), "child failed (status %d)", status);
    }
    ssize_t got = 0, k;
    while ((k = read(pfd[0], buf + got, n - (size_t)got)) > 0) got += k;
    close(pfd[0]);
    return got;
}

/* The required kill test: 3 evaluations, then train rows without one, then SIGKILL. */
START_TEST(test_kill_after_three_evals) {
    enum { PER = 500 }; /* 3 x 500 rows cross the 1024-row buffer once */
    require_h5dump();
    char dir[256], path[512];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        char err[ERRLEN];
        runlog_meta meta = meta_for("ssgd");
        runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
        if (!r) { fprintf(stderr, "child: %s\n", err); _exit(3); }
        long nt = 0;
        for (long k = 0; k < 3; k++)
            if (write_rows(r, &nt, PER * (k + 1)) || write_eval(r, k, nt)) { fprintf(stderr, "child: %s\n", runlog_error(r)); _exit(3); }
        if (write_rows(r, &nt, 3 * PER + 300)) _exit(3);
        runlog_set_attr_string(r, "status", "never written");
        raise(SIGKILL);
        _exit(4);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child did not die by SIGKILL (status %d)", status);
    hid_t f = open_ro(path);
    ck_assert_int_eq(check_eval(f, 3, 3, PER), 3);
    ck_assert_int_eq(check_train(f, 3 * PER, 3 * PER), 3 * PER); /* the 300 buffered rows died with it */
    assert_attr_str(f, "method", "ssgd");
    assert_status(f, "");
    H5Fclose(f);
    ck_assert_msg(h5dump_ok(path), "h5dump -H %s failed", path);
    rm_rf(dir);
}
END_TEST

/* Dtype, chunk shape [256, RANKS], units, description and `columns` of a 2-D /ranks dataset. */
static void assert_ranks_meta(hid_t f, const char *name) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "H5Dopen2(%s)", name);
    hid_t t = H5Dget_type(d);
    ck_assert_msg(H5Tequal(t, H5T_IEEE_F64LE) > 0, "%s has the wrong dtype", name);
    H5Tclose(t);
    hid_t dcpl = H5Dget_create_plist(d);
    ck_assert_int_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
    hsize_t c[2] = {0, 0};
    ck_assert_int_eq(H5Pget_chunk(dcpl, 2, c), 2);
    ck_assert_msg(c[0] == 256 && c[1] == RANKS, "%s chunk [%llu, %llu]", name, (unsigned long long)c[0], (unsigned long long)c[1]);
    H5Pclose(dcpl);
    assert_attr_str(d, "units", "s");
    assert_attr_str(d, "columns", "worker rank 0..2");
    char *desc = attr_str(d, "description");
    ck_assert_msg(strlen(desc) > 10, "%s: description too short", name);
    free(desc);
    H5Dclose(d);
}

/* /ranks over 2.6 buffers, /eval_local, the fixed arrays rewritten at every evaluation and one
 * never written, root attribute servers: every value, shape, dtype, chunk and attribute back. */
START_TEST(test_ranks_eval_local_arrays) {
    enum { M = 5, PER = 130, N = M * PER + 20 }; /* 670 /ranks rows (buffer 256), 20 after the last eval */
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_full("ps");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    for (long k = 0; k < M; k++) {
        ck_assert_msg(write_rows_ranks(r, &nt, PER * (k + 1)) == 0, "%s", runlog_error(r));
        ck_assert_msg(write_arrays(r, k) == 0, "%s", runlog_error(r));
        ck_assert_msg(write_eval_local(r, k, nt) == 0, "%s", runlog_error(r));
        ck_assert_msg(write_eval(r, k, nt) == 0, "%s", runlog_error(r));
    }
    ck_assert_msg(write_rows_ranks(r, &nt, N) == 0, "%s", runlog_error(r));
    ck_assert_int_eq(runlog_set_attr_string(r, "status", "completed"), 0);
    ck_assert_int_eq(runlog_close(r), 0);
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);

    hid_t f = open_ro(path);
    ck_assert_int_eq(check_train(f, N, N), N);
    ck_assert_int_eq(check_eval(f, M, M, PER), M);
    ck_assert_int_eq(check_eval_group(f, 1, M, M, PER), M);
    ck_assert_int_eq(check_ranks(f, N, N), N);
    ck_assert_int_eq(check_array(f, 0, M - 1, M - 1), M - 1);
    ck_assert_int_eq(check_array(f, 1, M - 1, M - 1), M - 1);

    assert_column_meta(f, "/ranks/step", "iterations", 1, 256);
    const char *rn[4] = {"/ranks/step_time_s", "/ranks/compute_s", "/ranks/comm_s", "/ranks/wait_s"};
    for (int q = 0; q < 4; q++) assert_ranks_meta(f, rn[q]);
    const char *en[6] = {"/eval_local/step", "/eval_local/time_s", "/eval_local/epoch", "/eval_local/loss",
                         "/eval_local/top1_error", "/eval_local/top5_error"};
    const char *eu[6] = {"iterations", "s", "epochs", "nats", "fraction", "fraction"};
    for (int c = 0; c < 6; c++) assert_column_meta(f, en[c], eu[c], c == 0, 64);

    /* The fixed arrays: int64, fixed shape, the spec's attributes; the unwritten one all zeros. */
    for (int a = 0; a < 3; a++) {
        char name[64];
        snprintf(name, sizeof name, "/%s", ARRAYS[a].name);
        hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
        ck_assert_msg(d >= 0, "H5Dopen2(%s)", name);
        hid_t t = H5Dget_type(d);
        ck_assert_msg(H5Tequal(t, H5T_STD_I64LE) > 0, "%s has the wrong dtype", name);
        H5Tclose(t);
        assert_attr_str(d, "units", ARRAYS[a].units);
        assert_attr_str(d, "description", ARRAYS[a].description);
        if (a == 2) {
            hid_t s = H5Dget_space(d);
            hsize_t dims = 0, maxd = 0;
            ck_assert_int_eq(H5Sget_simple_extent_ndims(s), 1);
            H5Sget_simple_extent_dims(s, &dims, &maxd);
            ck_assert_msg(dims == 0 && maxd == H5S_UNLIMITED, "%s: %llu rows", name, (unsigned long long)dims); /* grows */
            H5Sclose(s);
        }
        H5Dclose(d);
    }
    int32_t servers = -1;
    attr_num(f, "servers", H5T_STD_I32LE, H5T_NATIVE_INT32, &servers);
    ck_assert_int_eq(servers, 2);
    assert_status(f, "completed");
    ck_assert_int_ge(H5Fclose(f), 0);
    require_h5dump();
    ck_assert(h5dump_ok(path));
    ck_assert(h5dump_data_ok(path));
    rm_rf(dir);
}
END_TEST

/* Without ranks, eval_local and arrays, the file has no /ranks, no /eval_local and nothing but
 * /train and /eval below the root; the calls for the missing parts fail with a message that
 * names them and leave the run file usable. Bad indices and missing data are refused too. */
START_TEST(test_optional_parts_absent) {
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_for("ssgd");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    double v[RANKS] = {1, 2, 3};
    long long a[HIST_BINS] = {0};
    ck_assert_int_eq(runlog_ranks(r, 1, v, v, v, v, v), -1);
    ck_assert_msg(strstr(runlog_error(r), "/ranks") != NULL, "message: %s", runlog_error(r));
    ck_assert_int_eq(runlog_eval_local(r, 1, 0, 0, 0, 0, 0), -1);
    ck_assert_msg(strstr(runlog_error(r), "/eval_local") != NULL, "message: %s", runlog_error(r));
    ck_assert_int_eq(runlog_array(r, 0, a), -1);
    ck_assert_msg(strstr(runlog_error(r), "fixed array 0") != NULL, "message: %s", runlog_error(r));
    long nt = 0;
    ck_assert_msg(write_rows(r, &nt, 5) == 0 && write_eval(r, 0, nt) == 0, "%s", runlog_error(r));
    ck_assert_int_eq(runlog_close(r), 0);
    hid_t f = open_ro(path);
    ck_assert_int_eq(H5Lexists(f, "/ranks", H5P_DEFAULT), 0);
    ck_assert_int_eq(H5Lexists(f, "/eval_local", H5P_DEFAULT), 0);
    H5G_info_t gi;
    ck_assert_int_ge(H5Gget_info(f, &gi), 0);
    ck_assert_msg(gi.nlinks == 2, "%llu objects below the root, expected /train and /eval", (unsigned long long)gi.nlinks);
    int32_t servers = -1;
    attr_num(f, "servers", H5T_STD_I32LE, H5T_NATIVE_INT32, &servers);
    ck_assert_int_eq(servers, 0);
    ck_assert_int_eq(check_eval(f, 1, 1, 5), 1);
    H5Fclose(f);

    /* With every part: out-of-range indices and NULL data are refused, the file stays usable. */
    snprintf(path, sizeof path, "%s/full.h5", dir);
    meta = meta_full("ps");
    r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    ck_assert_int_eq(runlog_array(r, 3, a), -1);
    ck_assert_msg(strstr(runlog_error(r), "no fixed array 3") != NULL, "message: %s", runlog_error(r));
    ck_assert_int_eq(runlog_array(r, -1, a), -1);
    ck_assert_int_eq(runlog_array(r, 0, NULL), -1);
    ck_assert_msg(strstr(runlog_error(r), "ps/staleness_histogram") != NULL, "message: %s", runlog_error(r));
    ck_assert_int_eq(runlog_ranks(r, 1, v, v, NULL, v, v), -1);
    ck_assert_msg(strstr(runlog_error(r), "comm_s") != NULL, "message: %s", runlog_error(r));
    nt = 0;
    ck_assert_msg(write_rows_ranks(r, &nt, 4) == 0 && write_eval_local(r, 0, nt) == 0 && write_eval(r, 0, nt) == 0, "%s",
                  runlog_error(r));
    ck_assert_int_eq(runlog_close(r), 0);
    f = open_ro(path);
    ck_assert_int_eq(check_ranks(f, 4, 4), 4);
    ck_assert_int_eq(check_eval_group(f, 1, 1, 1, 4), 1);
    ck_assert_int_eq(check_array(f, 0, -1, -1), -1); /* never written: zeros */
    H5Fclose(f);

    ck_assert_int_eq(runlog_ranks(NULL, 1, v, v, v, v, v), -1);
    ck_assert_int_eq(runlog_eval_local(NULL, 1, 0, 0, 0, 0, 0), -1);
    ck_assert_int_eq(runlog_array(NULL, 0, a), -1);
    rm_rf(dir);
}
END_TEST

/* Unusable layouts are refused by runlog_create with a message naming the problem, and leave
 * nothing behind: bad array names and shapes, negative ranks, a name used twice. */
START_TEST(test_bad_layout_refused) {
    char dir[256], path[512], err[ERRLEN];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    struct {
        runlog_array_spec spec[2];
        int n;
        const char *want;
    } cases[] = {
        {{{"", 4, 0, "1", "d", 0, 0}}, 1, "name"},
        {{{"/ps/h", 4, 0, "1", "d", 0, 0}}, 1, "/ps/h"},
        {{{"ps/", 4, 0, "1", "d", 0, 0}}, 1, "ps/"},
        {{{"ps//h", 4, 0, "1", "d", 0, 0}}, 1, "ps//h"},
        {{{"eval/h", 4, 0, "1", "d", 0, 0}}, 1, "/eval"},
        {{{"ranks", 4, 0, "1", "d", 0, 0}}, 1, "/ranks"},
        {{{"ps/h", 0, 0, "1", "d", 0, 0}}, 1, "rows = 0"},
        {{{"ps/h", 4, -1, "1", "d", 0, 0}}, 1, "cols = -1"},
        {{{"ps/h", 4, 0, "1", "d", 0, 0}, {"ps/h", 2, 0, "1", "d", 0, 0}}, 2, "/ps/h"}, /* HDF5 refuses the second */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        runlog_meta meta = meta_full("ps");
        meta.arrays = cases[i].spec;
        meta.n_arrays = cases[i].n;
        err[0] = '\0';
        ck_assert_msg(runlog_create(path, 0, &meta, err, sizeof err) == NULL, "case %zu accepted", i);
        ck_assert_msg(strstr(err, cases[i].want) != NULL, "case %zu: message lacks \"%s\": %s", i, cases[i].want, err);
    }
    runlog_meta meta = meta_for("ssgd");
    meta.ranks = -1;
    ck_assert(runlog_create(path, 0, &meta, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "ranks = -1") != NULL, "message: %s", err);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    ck_assert_msg(system(cmd) == 0, "files left in %s", dir);
    rm_rf(dir);
}
END_TEST

/* Killed after 3 evaluations: /ranks holds exactly the rows written before the last flush (the
 * buffered ones die), /eval_local its 3 rows (or 4: a row appended after the flush may reach
 * the disk), the arrays their version from before the last flush; h5dump reads it all. */
START_TEST(test_kill_after_flush_new_parts) {
    enum { PER = 300 }; /* 900 /ranks rows: the 256-row buffer fills 3 times */
    require_h5dump();
    char dir[256], path[512];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        char err[ERRLEN];
        runlog_meta meta = meta_full("gossip");
        runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
        if (!r) { fprintf(stderr, "child: %s\n", err); _exit(3); }
        long nt = 0;
        for (long k = 0; k < 3; k++)
            if (write_rows_ranks(r, &nt, PER * (k + 1)) || write_arrays(r, k) || write_eval_local(r, k, nt) || write_eval(r, k, nt)) {
                fprintf(stderr, "child: %s\n", runlog_error(r));
                _exit(3);
            }
        if (write_rows_ranks(r, &nt, 3 * PER + 200) || write_eval_local(r, 3, nt)) _exit(3);
        raise(SIGKILL);
        _exit(4);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child did not die by SIGKILL (status %d)", status);
    ck_assert_msg(h5dump_ok(path), "h5dump -H %s failed", path);
    ck_assert_msg(h5dump_data_ok(path), "h5dump %s failed", path);
    hid_t f = open_ro(path);
    ck_assert_int_eq(check_eval(f, 3, 3, PER), 3);
    ck_assert_int_eq(check_ranks(f, 3 * PER, 3 * PER), 3 * PER);
    check_eval_group(f, 1, 3, 4, PER);
    ck_assert_int_eq(check_array(f, 0, 2, 2), 2);
    ck_assert_int_eq(check_array(f, 1, 2, 2), 2);
    int32_t servers = -1;
    attr_num(f, "servers", H5T_STD_I32LE, H5T_NATIVE_INT32, &servers);
    ck_assert_int_eq(servers, 2);
    H5Fclose(f);
    rm_rf(dir);
}
END_TEST

/* Kill at random instants: during create, appends, flushes and close. Whatever the instant, the
 * file is absent only if no evaluation had completed; otherwise h5dump reads it, every completed
 * evaluation is there (plus at most the one in flight), and every row present is correct.
 * Every other trial (and the timing run) also writes /ranks rows, /eval_local rows and the fixed
 * arrays (meta_full), checked the same way. RUNLOG_KILL_TRIALS=n sets the number of kills (default 60, about a second). */
START_TEST(test_kill_at_random_instants) {
    enum { E = 80, PER = 40 };
    const char *env = getenv("RUNLOG_KILL_TRIALS"); /* more for a stress run */
    const int TRIALS = env && atoi(env) > 0 ? atoi(env) : 60;
    require_h5dump();
    char dir[256];
    make_tmpdir(dir, sizeof dir);
    unsigned seed = 12345;

    /* Time one undisturbed child to spread the kills over its whole life. */
    double t_full = 0;
    int opened = 0, at_close = 0;
    for (int trial = -1; trial < TRIALS; trial++) {
        char path[512];
        snprintf(path, sizeof path, "%s/run%d.h5", dir, trial + 1);
        int full = trial % 2 != 0;
        int pfd[2];
        ck_assert_int_eq(pipe(pfd), 0);
        fflush(NULL);
        double t0 = wall_time();
        pid_t pid = fork();
        ck_assert(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            char err[ERRLEN];
            runlog_meta meta = full ? meta_full("ssgd") : meta_for("ssgd");
            runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
            if (!r) { fprintf(stderr, "child: %s\n", err); _exit(3); }
            long nt = 0;
            for (long k = 0; k < E; k++) {
                int rc = full ? write_rows_ranks(r, &nt, PER * (k + 1)) || write_arrays(r, k) || write_eval_local(r, k, nt)
                              : write_rows(r, &nt, PER * (k + 1));
                if (rc || write_eval(r, k, nt)) { fprintf(stderr, "child: %s\n", runlog_error(r)); _exit(3); }
                if (write(pfd[1], "e", 1) != 1) _exit(3);
            }
            runlog_set_attr_double(r, "images_per_s", 99.5);
            if (runlog_close(r) != 0) _exit(3);
            if (write(pfd[1], "c", 1) != 1) _exit(3);
            _exit(0);
        }
        char buf[E + 2];
        const ssize_t got = reap_child(pid, trial, &seed, &t_full, t0, pfd, buf, sizeof buf);
        long done = 0;
        int closed = 0;
        for (ssize_t i = 0; i < got; i++) done += buf[i] == 'e', closed |= buf[i] == 'c';

        struct stat st;
        if (stat(path, &st) != 0) {
            ck_assert_msg(done == 0, "trial %d: no file after %ld completed evaluations", trial, done);
            continue;
        }
        opened++;
        ck_assert_msg(h5dump_ok(path), "trial %d: h5dump -H %s failed (%ld evaluations done)", trial, path, done);
        hid_t f = open_ro(path);
        hsize_t hi = closed ? E : (hsize_t)(done < E ? done + 1 : E);
        hsize_t ne = check_eval(f, (hsize_t)done, hi, PER);
        ck_assert_msg(ne >= (hsize_t)done, "trial %d: %llu complete eval rows, %ld evaluations done", trial, (unsigned long long)ne, done);
        check_train(f, (hsize_t)(PER * done), (hsize_t)(PER * E));
        if (full) {
            /* /eval_local row k and array version k are written after evaluation k-1 reported. */
            hsize_t nr = check_ranks(f, (hsize_t)(closed ? PER * E : PER * done), (hsize_t)(PER * E));
            ck_assert_msg(nr >= (hsize_t)(PER * done), "trial %d: %llu complete /ranks rows", trial, (unsigned long long)nr);
            hsize_t nl = check_eval_group(f, 1, (hsize_t)done, hi, PER);
            ck_assert_msg(nl >= (hsize_t)done, "trial %d: %llu complete /eval_local rows", trial, (unsigned long long)nl);
            long k_lo = closed ? E - 1 : done - 1, k_hi = done < E ? done : E - 1;
            for (int a = 0; a < 2; a++) check_array(f, a, k_lo, k_hi);
        }
        htri_t has = H5Aexists(f, "images_per_s");
        ck_assert(has >= 0);
        if (closed) ck_assert_msg(has > 0, "trial %d: closed without the final attribute", trial);
        if (done == E && !closed) at_close++;
        H5Fclose(f);
    }
    fprintf(stderr, "test_kill_at_random_instants: %d kills over %.0f ms runs, %d left a file, %d during close\n", TRIALS,
            1e3 * t_full, opened - 1, at_close);
    rm_rf(dir);
}
END_TEST

/* ================================ resume from a checkpoint ================================ */

/* What a run cut off after its checkpoint logs (the rows runlog_resume must drop): train and,
 * with ranks, /ranks rows for steps from+1..from+n, then (with eval) an /eval_local and an /eval
 * row at step from+n, which flushes them all. Every value is -1, which no check accepts. */
static int write_cutoff(runlog *r, long from, long n, int with_ranks, int with_eval) {
    double v[RANKS] = {-1, -1, -1};
    for (long j = from; j < from + n; j++)
        if (runlog_train(r, tr_step(j), -1, -1, -1) != 0 || (with_ranks && runlog_ranks(r, tr_step(j), v, v, v, v, NULL) != 0)) return -1;
    if (!with_eval) return 0;
    if (with_ranks && runlog_eval_local(r, from + n, -1, -1, -1, -1, -1) != 0) return -1;
    return runlog_eval(r, from + n, -1, -1, -1, -1, -1);
}

static void copy_path(const char *src, const char *dst) {
    size_t n;
    char *buf = slurp(src, &n);
    FILE *f = fopen(dst, "wb");
    ck_assert_msg(f != NULL, "fopen(%s): %s", dst, strerror(errno));
    ck_assert_int_eq(fwrite(buf, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(buf);
}

/* No hidden temporary (.<name>.new/.final/.resume.*) left in dir. */
static int no_temporaries(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep '^\\.')\"", dir);
    return system(cmd) == 0;
}

/* Root attribute resumes == n, and resumed_at holds n lines, line i being
 * "step <steps[i]> at <ISO-8601 UTC> (<notes[i]>)" (no " (...)" for a NULL note). */
static void check_resumes(hid_t f, int n, const long *steps, const char *const *notes) {
    int64_t resumes = -1;
    attr_num(f, "resumes", H5T_STD_I64LE, H5T_NATIVE_INT64, &resumes);
    ck_assert_msg(resumes == n, "resumes = %lld, expected %d", (long long)resumes, n);
    char *all = attr_str(f, "resumed_at");
    char *line = all;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(line != NULL, "resumed_at has %d lines, expected %d", i, n);
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char head[64];
        snprintf(head, sizeof head, "step %ld at ", steps[i]);
        ck_assert_msg(strncmp(line, head, strlen(head)) == 0, "resumed_at line %d = \"%s\", expected \"%s...\"", i, line, head);
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *rest = strptime(line + strlen(head), "%Y-%m-%dT%H:%M:%SZ", &tm);
        ck_assert_msg(rest && tm.tm_year >= 124, "resumed_at line %d = \"%s\": no ISO-8601 UTC time", i, line);
        char tail[256] = "";
        if (notes[i]) snprintf(tail, sizeof tail, " (%s)", notes[i]);
        ck_assert_msg(strcmp(rest, tail) == 0, "resumed_at line %d ends \"%s\", expected \"%s\"", i, rest, tail);
        line = nl ? nl + 1 : NULL;
    }
    ck_assert_msg(line == NULL, "resumed_at has more than %d lines: \"%s\"", n, all);
    free(all);
}

/* A run checkpoints after 3 evaluations and 50 more rows (runlog_flush, runlog_rows_written),
 * logs rows, an evaluation and array values past the checkpoint, stages end-of-run attributes
 * (a custom one too) and closes. The resume drops the cut-off rows and attributes, keeps the
 * arrays, and the resumed run's rows follow: the file is exactly that of one uninterrupted run. */
START_TEST(test_resume_after_close) {
    enum { PER = 130, K1 = 3, X = 50, K2 = 6, N = K2 * PER + 20 };
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_full("ps");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    for (long k = 0; k < K1; k++)
        ck_assert_msg(write_rows_ranks(r, &nt, PER * (k + 1)) == 0 && write_arrays(r, k) == 0 && write_eval_local(r, k, nt) == 0 &&
                      write_eval(r, k, nt) == 0, "%s", runlog_error(r));
    ck_assert_msg(write_rows_ranks(r, &nt, K1 * PER + X) == 0, "%s", runlog_error(r));
    runlog_rows keep;
    runlog_rows_written(r, &keep);
    ck_assert_msg(keep.train == K1 * PER && keep.ranks == K1 * PER, "before the flush: %ld, %ld", keep.train, keep.ranks);
    ck_assert_msg(runlog_flush(r) == 0, "%s", runlog_error(r));
    runlog_rows_written(r, &keep);
    ck_assert_int_eq(keep.train, K1 * PER + X);
    ck_assert_int_eq(keep.eval, K1);
    ck_assert_int_eq(keep.eval_local, K1);
    ck_assert_int_eq(keep.ranks, K1 * PER + X);
    /* The part of the run that the resume undoes. */
    ck_assert_msg(write_cutoff(r, nt, 300, 1, 1) == 0 && write_arrays(r, 99) == 0 && write_cutoff(r, nt + 300, 40, 1, 0) == 0, "%s",
                  runlog_error(r));
    ck_assert_int_eq(runlog_set_attr_string(r, "status", "stopped: run-file write error"), 0);
    ck_assert_int_eq(runlog_set_attr_double(r, "images_per_s", 1.5), 0);
    ck_assert_int_eq(runlog_set_attr_double(r, "steps_completed", 1000), 0);
    ck_assert_int_eq(runlog_set_attr_string(r, "my_final", "gone after a resume"), 0);
    ck_assert_int_eq(runlog_set_attr_string(r, "method", "x"), -1); /* runlog's own: never staged */
    ck_assert_msg(strstr(runlog_error(r), "method") != NULL, "message: %s", runlog_error(r));
    ck_assert_int_eq(runlog_set_attr_double(r, "resumes", 7), -1);
    ck_assert_int_eq(runlog_close(r), 0);
    hid_t f = open_ro(path);
    assert_attr_str(f, "final_attributes", "status\nimages_per_s\nsteps_completed\nmy_final");
    ck_assert_int_eq(H5Aexists(f, "resumes"), 0);
    ck_assert_int_eq(ds_len(f, "/train/step"), K1 * PER + X + 340);
    H5Fclose(f);

    runlog_rows none;
    runlog_rows_written(NULL, &none);
    ck_assert(none.train == 0 && none.eval == 0 && none.eval_local == 0 && none.ranks == 0);
    ck_assert_int_eq(runlog_flush(NULL), -1);

    const char *note = "dsgd-run --resume ckpt/step440.bin on testhost";
    r = runlog_resume(path, &meta, &keep, note, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_resume: %s", err);
    runlog_rows now;
    runlog_rows_written(r, &now);
    ck_assert(memcmp(&now, &keep, sizeof now) == 0);
    /* Published at once: the checkpoint's rows, the arrays as they were, no end-of-run attributes. */
    const long step1[1] = {tr_step(K1 * PER + X - 1)};
    const char *notes1[1] = {note};
    f = open_ro(path);
    ck_assert_int_eq(check_train(f, K1 * PER + X, K1 * PER + X), K1 * PER + X);
    ck_assert_int_eq(check_eval(f, K1, K1, PER), K1);
    ck_assert_int_eq(check_eval_group(f, 1, K1, K1, PER), K1);
    ck_assert_int_eq(check_ranks(f, K1 * PER + X, K1 * PER + X), K1 * PER + X);
    ck_assert_int_eq(check_array(f, 0, 99, 99), 99);
    ck_assert_int_eq(check_array(f, 1, 99, 99), 99);
    const char *gone[] = {"images_per_s", "steps_completed", "my_final", "final_attributes", "train_time_s"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        ck_assert_msg(H5Aexists(f, gone[i]) == 0, "attribute %s still there after the resume", gone[i]);
    assert_status(f, ""); /* the slot stays, emptied */
    assert_attr_str(f, "method", "ps");
    assert_attr_str(f, "config", CONFIG_TEXT);
    check_resumes(f, 1, step1, notes1);
    H5Fclose(f);
    ck_assert_msg(h5dump_ok(path), "h5dump -H %s failed", path);

    for (long k = K1; k < K2; k++)
        ck_assert_msg(write_rows_ranks(r, &nt, PER * (k + 1)) == 0 && write_arrays(r, k) == 0 && write_eval_local(r, k, nt) == 0 &&
                      write_eval(r, k, nt) == 0, "%s", runlog_error(r));
    ck_assert_msg(write_rows_ranks(r, &nt, N) == 0, "%s", runlog_error(r));
    ck_assert_int_eq(runlog_set_attr_string(r, "status", "completed"), 0);
    ck_assert_int_eq(runlog_close(r), 0);
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);

    f = open_ro(path);
    ck_assert_int_eq(check_train(f, N, N), N); /* /train/step is 1..N: nothing doubled, nothing missing */
    ck_assert_int_eq(check_eval(f, K2, K2, PER), K2);
    ck_assert_int_eq(check_eval_group(f, 1, K2, K2, PER), K2);
    ck_assert_int_eq(check_ranks(f, N, N), N);
    ck_assert_int_eq(check_array(f, 0, K2 - 1, K2 - 1), K2 - 1);
    ck_assert_int_eq(check_array(f, 1, K2 - 1, K2 - 1), K2 - 1);
    assert_status(f, "completed");
    assert_attr_str(f, "final_attributes", "status");
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        if (strcmp(gone[i], "final_attributes") != 0)
            ck_assert_msg(H5Aexists(f, gone[i]) == 0, "attribute %s came back", gone[i]);
    check_resumes(f, 1, step1, notes1);
    assert_column_meta(f, "/train/step", "iterations", 1, 1024);
    assert_column_meta(f, "/eval/top1_error", "fraction", 0, 64);
    assert_ranks_meta(f, "/ranks/wait_s");
    H5Fclose(f);
    require_h5dump();
    ck_assert_msg(h5dump_ok(path) && h5dump_data_ok(path), "h5dump %s failed", path);
    rm_rf(dir);
}
END_TEST

/* A child writer checkpoints (runlog_flush after train rows with no evaluation), logs and
 * flushes an evaluation past it, and is killed. A second child resumes that file, checkpoints,
 * and is killed too: its file opens with h5dump and holds exactly the checkpoint's rows. Then
 * the twice-killed file is resumed again (resumes == 2) and the run finished: one run's rows. */
static void child_send_rows(int fd, runlog *r) {
    runlog_rows rows;
    runlog_rows_written(r, &rows);
    if (write(fd, &rows, sizeof rows) != (ssize_t)sizeof rows) _exit(3);
}
static void read_rows(int fd, runlog_rows *rows) {
    ck_assert_msg(read(fd, rows, sizeof *rows) == (ssize_t)sizeof *rows, "no checkpoint row counts from the child");
}
static void wait_killed(pid_t pid) {
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child did not die by SIGKILL (status %d)", status);
}

START_TEST(test_resume_after_kill) {
    enum { PER = 300, X = 100, K3 = 7, N = K3 * PER + 10 };
    require_h5dump();
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_full("gossip");
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) { /* evaluations 0..2, a checkpoint X rows later, then past it */
        close(pfd[0]);
        runlog *w = runlog_create(path, 0, &meta, err, sizeof err);
        if (!w) { fprintf(stderr, "child: %s\n", err); _exit(3); }
        long n = 0;
        for (long k = 0; k < 3; k++)
            if (write_rows_ranks(w, &n, PER * (k + 1)) || write_arrays(w, k) || write_eval_local(w, k, n) || write_eval(w, k, n)) _exit(3);
        if (write_rows_ranks(w, &n, 3 * PER + X) || runlog_flush(w)) _exit(3);
        child_send_rows(pfd[1], w);
        if (write_cutoff(w, n, 200, 1, 1) || write_cutoff(w, n + 200, 150, 1, 0)) _exit(3);
        runlog_set_attr_string(w, "status", "never written");
        raise(SIGKILL);
        _exit(4);
    }
    close(pfd[1]);
    runlog_rows keep1, keep2;
    read_rows(pfd[0], &keep1);
    close(pfd[0]);
    wait_killed(pid);
    ck_assert_int_eq(keep1.train, 3 * PER + X);
    ck_assert_int_eq(keep1.ranks, 3 * PER + X);
    ck_assert_int_eq(keep1.eval, 3);
    ck_assert_int_eq(keep1.eval_local, 3);
    hid_t f = open_ro(path);
    ck_assert_int_eq(ds_len(f, "/eval/step"), 4); /* the cut-off evaluation was flushed */
    H5Fclose(f);

    ck_assert_int_eq(pipe(pfd), 0);
    fflush(NULL);
    pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) { /* resume, evaluations 3 and 4, a checkpoint, then unflushed rows */
        close(pfd[0]);
        runlog *w = runlog_resume(path, &meta, &keep1, "first", err, sizeof err);
        if (!w) { fprintf(stderr, "child: %s\n", err); _exit(3); }
        long n = keep1.train;
        for (long k = 3; k < 5; k++)
            if (write_rows_ranks(w, &n, PER * (k + 1)) || write_arrays(w, k) || write_eval_local(w, k, n) || write_eval(w, k, n)) _exit(3);
        if (runlog_flush(w)) _exit(3);
        child_send_rows(pfd[1], w);
        if (write_cutoff(w, n, 150, 1, 0)) _exit(3);
        raise(SIGKILL);
        _exit(4);
    }
    close(pfd[1]);
    read_rows(pfd[0], &keep2);
    close(pfd[0]);
    wait_killed(pid);
    ck_assert_int_eq(keep2.train, 5 * PER);
    ck_assert_int_eq(keep2.eval, 5);
    ck_assert_msg(h5dump_ok(path) && h5dump_data_ok(path), "h5dump %s failed after the resumed writer was killed", path);
    const long steps[2] = {3 * PER + X, 5 * PER};
    const char *notes[2] = {"first", NULL};
    f = open_ro(path);
    ck_assert_int_eq(check_train(f, 5 * PER, 5 * PER), 5 * PER);
    ck_assert_int_eq(check_eval(f, 5, 5, PER), 5);
    ck_assert_int_eq(check_eval_group(f, 1, 5, 5, PER), 5);
    ck_assert_int_eq(check_ranks(f, 5 * PER, 5 * PER), 5 * PER);
    ck_assert_int_eq(check_array(f, 0, 4, 4), 4);
    assert_status(f, "");
    check_resumes(f, 1, steps, notes);
    H5Fclose(f);

    runlog *r = runlog_resume(path, &meta, &keep2, NULL, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_resume: %s", err);
    long nt = keep2.train;
    for (long k = 5; k < K3; k++)
        ck_assert_msg(write_rows_ranks(r, &nt, PER * (k + 1)) == 0 && write_arrays(r, k) == 0 && write_eval_local(r, k, nt) == 0 &&
                      write_eval(r, k, nt) == 0, "%s", runlog_error(r));
    ck_assert_msg(write_rows_ranks(r, &nt, N) == 0, "%s", runlog_error(r));
    ck_assert_int_eq(runlog_set_attr_string(r, "status", "completed"), 0);
    ck_assert_int_eq(runlog_close(r), 0);
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);
    f = open_ro(path);
    ck_assert_int_eq(check_train(f, N, N), N);
    ck_assert_int_eq(check_eval(f, K3, K3, PER), K3);
    ck_assert_int_eq(check_eval_group(f, 1, K3, K3, PER), K3);
    ck_assert_int_eq(check_ranks(f, N, N), N);
    ck_assert_int_eq(check_array(f, 1, K3 - 1, K3 - 1), K3 - 1);
    assert_status(f, "completed");
    check_resumes(f, 2, steps, notes);
    H5Fclose(f);
    ck_assert_msg(h5dump_ok(path) && h5dump_data_ok(path), "h5dump %s failed", path);
    rm_rf(dir);
}
END_TEST

/* Refusals: each names its reason, leaves the run file byte-identical and no temporary behind. */
START_TEST(test_resume_refused) {
    enum { PER = 20 };
    char dir[256], path[512], other[600], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_full("ps");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    for (long k = 0; k < 2; k++)
        ck_assert_msg(write_rows_ranks(r, &nt, PER * (k + 1)) == 0 && write_eval_local(r, k, nt) == 0 && write_eval(r, k, nt) == 0,
                      "%s", runlog_error(r));
    ck_assert_int_eq(runlog_flush(r), 0);
    runlog_rows keep;
    runlog_rows_written(r, &keep);
    runlog_set_attr_string(r, "status", "completed");
    ck_assert_int_eq(runlog_close(r), 0);
    size_t n0;
    char *before = slurp(path, &n0);
#define ASSERT_UNTOUCHED()                                                                           \
    do {                                                                                             \
        size_t n1;                                                                                   \
        char *after = slurp(path, &n1);                                                              \
        ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0, "the run file changed");           \
        free(after);                                                                                 \
        ck_assert_msg(no_temporaries(dir), "temporary files left in %s", dir);                       \
    } while (0)

    /* No file, a directory, not HDF5, HDF5 but not a run file. */
    snprintf(other, sizeof other, "%s/missing.h5", dir);
    ck_assert(runlog_resume(other, &meta, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "cannot resume") && strstr(err, other) && strstr(err, "No such file"), "message: %s", err);
    ck_assert(runlog_resume(dir, &meta, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "not a regular file") != NULL, "message: %s", err);
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    FILE *fp = fopen(other, "w");
    fputs("precious\n", fp);
    fclose(fp);
    ck_assert(runlog_resume(other, &meta, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "not a dsgd-run run file") != NULL, "message: %s", err);
    size_t nt0;
    char *t = slurp(other, &nt0);
    ck_assert(nt0 == 9 && memcmp(t, "precious\n", 9) == 0);
    free(t);
    snprintf(other, sizeof other, "%s/plain.h5", dir);
    hid_t pf = H5Fcreate(other, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(pf >= 0);
    H5Fclose(pf);
    ck_assert(runlog_resume(other, &meta, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "not a dsgd-run run file (no root attribute dsgd_version)") != NULL, "message: %s", err);
    /* The HDF5 1.10 format (superblock version 3) of the earlier SWMR writer: refused by name. */
    char v3[600];
    snprintf(v3, sizeof v3, "%s/v3.h5", dir);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    pf = H5Fcreate(v3, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    ck_assert(pf >= 0);
    H5Fclose(pf);
    H5Pclose(fapl);
    ck_assert(runlog_resume(v3, &meta, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "superblock version 3") != NULL && strstr(err, "earlier dsgd-run") != NULL, "message: %s", err);

    /* Another experiment's layout: the message names the attribute and both values. */
    static const runlog_array_spec peers4[3] = {
        {"ps/staleness_histogram", HIST_BINS, 0, "gradients", "d", 0, 0},
        {"gossip/peers", 4, 4, "times", "d", 0, 0},
        {"backup/dropped", DROPPED_ROWS, 0, "gradients", "d", 0, 1},
    };
    static const runlog_array_spec hist_f64[1] = {{"ps/staleness_histogram", HIST_BINS, 0, "gradients", "d", 1, 0}};
    static const runlog_array_spec missing[1] = {{"ps/other", 3, 0, "gradients", "d", 0, 0}};
    for (int c = 0; c < 12; c++) {
        runlog_meta m = meta_full("ps");
        const char *want = NULL;
        switch (c) {
        case 0: m.method = "allreduce"; want = "the run file has method ps, the experiment method allreduce"; break;
        case 1: m.p = 8; want = "the run file has p = 4, the experiment p = 8"; break;
        case 2: m.b = 64; want = "the run file has b = 128, the experiment b = 64"; break;
        case 3: m.m = 3; want = "the run file has m = 2, the experiment m = 3"; break;
        case 4: m.seed = 1; want = "the run file has seed = 18364758544493064720, the experiment seed = 1"; break;
        case 5: m.iterations = 6000; want = "the run file has iterations = 5000, the experiment iterations = 6000"; break;
        case 6: m.servers = 1; want = "the run file has servers = 2, the experiment servers = 1"; break;
        case 7: m.ranks = 4; want = "the run file has ranks = 3 (columns of /ranks/step_time_s), the experiment ranks = 4"; break;
        case 8: m.ranks = 0; want = "the run file has /ranks, the experiment none (ranks = 0)"; break;
        case 9: m.eval_local = 0; want = "the run file has /eval_local, the experiment none (eval_local = 0)"; break;
        case 10: m.arrays = peers4; want = "the run file has fixed array /gossip/peers of [3, 3] int64, the experiment [4, 4] int64"; break;
        case 11: m.arrays = hist_f64; m.n_arrays = 1;
            want = "the run file has fixed array /ps/staleness_histogram of [8] int64, the experiment [8] float64"; break;
        }
        runlog_rows k = keep;
        if (m.ranks == 0) k.ranks = 0;
        if (!m.eval_local) k.eval_local = 0;
        err[0] = '\0';
        ck_assert_msg(runlog_resume(path, &m, &k, NULL, err, sizeof err) == NULL, "case %d accepted", c);
        ck_assert_msg(strstr(err, want) != NULL && strstr(err, path) != NULL, "case %d: message lacks \"%s\": %s", c, want, err);
        ASSERT_UNTOUCHED();
    }
    runlog_meta m = meta_full("ps");
    m.arrays = missing;
    m.n_arrays = 1;
    ck_assert(runlog_resume(path, &m, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "the run file has no fixed array /ps/other") != NULL, "message: %s", err);
    m = meta_for("ps"); /* neither /ranks nor /eval_local nor arrays */
    m.servers = 2;
    ck_assert(runlog_resume(path, &m, &(runlog_rows){keep.train, keep.eval, 0, 0}, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "/eval_local") != NULL, "message: %s", err);
    ASSERT_UNTOUCHED();

    /* Fewer rows than the checkpoint's, group by group. */
    for (int g = 0; g < 4; g++) {
        runlog_rows k = keep;
        long *which[4] = {&k.train, &k.eval, &k.eval_local, &k.ranks};
        const char *gname[4] = {"/train", "/eval", "/eval_local", "/ranks"};
        long have = *which[g];
        *which[g] += 3;
        char want[1024];
        snprintf(want, sizeof want, "cannot resume %s: the run file has %ld %s rows but the checkpoint was taken after %ld: "
                 "it is not the file this checkpoint belongs to", path, have, gname[g], have + 3);
        ck_assert(runlog_resume(path, &meta, &k, NULL, err, sizeof err) == NULL);
        ck_assert_msg(strcmp(err, want) == 0, "message: %s\nexpected: %s", err, want);
        ASSERT_UNTOUCHED();
    }
    runlog_rows neg = keep;
    neg.eval = -1;
    ck_assert(runlog_resume(path, &meta, &neg, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "negative") != NULL, "message: %s", err);
    ck_assert(runlog_resume(path, &meta, NULL, NULL, err, sizeof err) == NULL);
    ASSERT_UNTOUCHED();
#undef ASSERT_UNTOUCHED
    free(before);
    rm_rf(dir);
}
END_TEST

/* A kill inside runlog_eval can leave one /eval column a row shorter than the others. The
 * checkpoint's count must be complete rows: one more is refused, the complete count resumes and
 * cuts every column to it. A checkpoint of no rows at all (step 0) resumes to an empty file. */
START_TEST(test_resume_uneven_columns) {
    enum { PER = 10 };
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_for("allreduce");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    for (long k = 0; k < 4; k++) ck_assert(write_rows(r, &nt, PER * (k + 1)) == 0 && write_eval(r, k, nt) == 0);
    ck_assert_int_eq(runlog_close(r), 0);
    /* The in-flight row of evaluation 3 reached every column but top5_error. */
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t d = H5Dopen2(f, "/eval/top5_error", H5P_DEFAULT);
    hsize_t three = 3;
    ck_assert(d >= 0 && H5Dset_extent(d, &three) >= 0);
    H5Dclose(d);
    H5Fclose(f);

    runlog_rows keep = {4 * PER, 4, 0, 0};
    ck_assert(runlog_resume(path, &meta, &keep, NULL, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "the run file has 3 /eval rows but the checkpoint was taken after 4") != NULL, "message: %s", err);
    keep.eval = 3;
    keep.train = 3 * PER;
    r = runlog_resume(path, &meta, &keep, "", err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_resume: %s", err);
    nt = 3 * PER;
    for (long k = 3; k < 5; k++) ck_assert(write_rows(r, &nt, PER * (k + 1)) == 0 && write_eval(r, k, nt) == 0);
    ck_assert_int_eq(runlog_close(r), 0);
    f = open_ro(path);
    ck_assert_int_eq(check_train(f, 5 * PER, 5 * PER), 5 * PER);
    ck_assert_int_eq(check_eval(f, 5, 5, PER), 5);
    const long steps[1] = {3 * PER};
    const char *notes[1] = {NULL}; /* an empty note: no " ()" */
    check_resumes(f, 1, steps, notes);
    H5Fclose(f);

    /* From step 0: no rows kept. */
    runlog_rows zero = {0, 0, 0, 0};
    r = runlog_resume(path, &meta, &zero, "from scratch", err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_resume: %s", err);
    nt = 0;
    ck_assert(write_rows(r, &nt, PER) == 0 && write_eval(r, 0, nt) == 0);
    ck_assert_int_eq(runlog_close(r), 0);
    f = open_ro(path);
    ck_assert_int_eq(check_train(f, PER, PER), PER);
    ck_assert_int_eq(check_eval(f, 1, 1, PER), 1);
    const long steps2[2] = {3 * PER, 0};
    const char *notes2[2] = {NULL, "from scratch"};
    check_resumes(f, 2, steps2, notes2);
    H5Fclose(f);
    require_h5dump();
    ck_assert(h5dump_data_ok(path));
    rm_rf(dir);
}
END_TEST

/* A resumed writer killed at random instants: during runlog_resume (copy, cut, rename), its
 * appends, flushes and close. Whatever the instant, the file at the path is the old one byte for
 * byte or the resumed one; h5dump reads it; the resumed one holds the checkpoint's rows, every
 * evaluation the resumed run completed (plus at most the one in flight), and none of the rows
 * the cut-off run logged after the checkpoint. RUNLOG_KILL_TRIALS=n sets the number of kills. */
START_TEST(test_resume_kill_at_random_instants) {
    enum { E0 = 10, E = 50, PER = 40, X = 15 };
    const char *env = getenv("RUNLOG_KILL_TRIALS");
    const int TRIALS = env && atoi(env) > 0 ? atoi(env) : 60;
    require_h5dump();
    char dir[256], base[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(base, sizeof base, "%s/base.h5", dir);
    runlog_meta meta = meta_full("ssgd");
    runlog *r = runlog_create(base, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    for (long k = 0; k < E0; k++)
        ck_assert(write_rows_ranks(r, &nt, PER * (k + 1)) == 0 && write_arrays(r, k) == 0 && write_eval_local(r, k, nt) == 0 &&
                  write_eval(r, k, nt) == 0);
    ck_assert(write_rows_ranks(r, &nt, E0 * PER + X) == 0 && runlog_flush(r) == 0);
    runlog_rows keep;
    runlog_rows_written(r, &keep);
    ck_assert(write_cutoff(r, nt, 2 * PER, 1, 1) == 0);
    runlog_set_attr_string(r, "status", "stopped: cut off");
    ck_assert_int_eq(runlog_close(r), 0);
    size_t nbase;
    char *base_bytes = slurp(base, &nbase);
    unsigned seed = 54321;

    double t_full = 0;
    int resumed = 0, old = 0;
    for (int trial = -1; trial < TRIALS; trial++) {
        char path[512];
        snprintf(path, sizeof path, "%s/run%d.h5", dir, trial + 1);
        copy_path(base, path);
        int pfd[2];
        ck_assert_int_eq(pipe(pfd), 0);
        fflush(NULL);
        double t0 = wall_time();
        pid_t pid = fork();
        ck_assert(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            runlog *w = runlog_resume(path, &meta, &keep, "kill test", err, sizeof err);
            if (!w) { fprintf(stderr, "child: %s\n", err); _exit(3); }
            if (write(pfd[1], "r", 1) != 1) _exit(3);
            long n = keep.train;
            for (long k = E0; k < E; k++) {
                if (write_rows_ranks(w, &n, PER * (k + 1)) || write_arrays(w, k) || write_eval_local(w, k, n) || write_eval(w, k, n)) {
                    fprintf(stderr, "child: %s\n", runlog_error(w));
                    _exit(3);
                }
                if (write(pfd[1], "e", 1) != 1) _exit(3);
            }
            runlog_set_attr_double(w, "images_per_s", 99.5);
            if (runlog_close(w) != 0) _exit(3);
            if (write(pfd[1], "c", 1) != 1) _exit(3);
            _exit(0);
        }
        char buf[E + 4];
        const ssize_t got = reap_child(pid, trial, &seed, &t_full, t0, pfd, buf, sizeof buf);
        long done = 0;
        int closed = 0, returned = 0;
        for (ssize_t i = 0; i < got; i++) done += buf[i] == 'e', closed |= buf[i] == 'c', returned |= buf[i] == 'r';

        ck_assert_msg(h5dump_ok(path), "trial %d: h5dump -H %s failed (resume %s, %ld evaluations done)", trial, path,
                      returned ? "returned" : "in progress", done);
        hid_t f = open_ro(path);
        htri_t is_resumed = H5Aexists(f, "resumes");
        ck_assert(is_resumed >= 0);
        if (!is_resumed) { /* killed inside runlog_resume, before its rename */
            ck_assert_msg(!returned, "trial %d: runlog_resume returned but the file is the old one", trial);
            H5Fclose(f);
            size_t n1;
            char *now = slurp(path, &n1);
            ck_assert_msg(n1 == nbase && memcmp(now, base_bytes, nbase) == 0, "trial %d: the old file changed", trial);
            free(now);
            old++;
            continue;
        }
        resumed++;
        assert_status(f, "");
        long e_done = E0 + done;
        hsize_t hi = closed ? E : (hsize_t)(e_done < E ? e_done + 1 : E);
        hsize_t ne = check_eval(f, (hsize_t)e_done, hi, PER);
        ck_assert_msg(ne >= (hsize_t)e_done, "trial %d: %llu complete eval rows, %ld evaluations done", trial, (unsigned long long)ne, e_done);
        hsize_t lo = (hsize_t)(PER * e_done > keep.train ? PER * e_done : keep.train);
        check_train(f, lo, (hsize_t)(PER * E));
        hsize_t nr = check_ranks(f, closed ? (hsize_t)(PER * E) : lo, (hsize_t)(PER * E));
        ck_assert_msg(nr >= lo, "trial %d: %llu complete /ranks rows", trial, (unsigned long long)nr);
        hsize_t nl = check_eval_group(f, 1, (hsize_t)e_done, hi, PER);
        ck_assert_msg(nl >= (hsize_t)e_done, "trial %d: %llu complete /eval_local rows", trial, (unsigned long long)nl);
        long k_lo = closed ? E - 1 : e_done - 1, k_hi = e_done < E ? e_done : E - 1;
        for (int a = 0; a < 2; a++) check_array(f, a, k_lo, k_hi);
        const long steps[1] = {tr_step(keep.train - 1)};
        const char *notes[1] = {"kill test"};
        check_resumes(f, 1, steps, notes);
        htri_t has = H5Aexists(f, "images_per_s");
        ck_assert(has >= 0);
        if (closed) ck_assert_msg(has > 0, "trial %d: closed without the final attribute", trial);
        H5Fclose(f);
    }
    fprintf(stderr, "test_resume_kill_at_random_instants: %d kills over %.0f ms runs, %d left the old file, %d the resumed one\n",
            TRIALS, 1e3 * t_full, old, resumed - 1);
    free(base_bytes);
    rm_rf(dir);
}
END_TEST

/* ================================ publication and write errors ============================ */

/* /train and /ranks rows reach the file without an evaluation once meta.publish_s have passed:
 * rows written before the bound are not yet there, the row that crosses it publishes them all. */
START_TEST(test_publish_between_evals) {
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_full("ps");
    meta.publish_s = 0.5;
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long nt = 0;
    ck_assert_int_eq(write_rows_ranks(r, &nt, 10), 0);
    hid_t f = open_ro(path); /* published at creation, before any row (the 10 rows took < 0.5 s) */
    ck_assert_int_eq(ds_len(f, "/train/step"), 0);
    assert_status(f, "");
    H5Fclose(f);
    /* A row every 0.1 s: the first one after the bound (0.5 s, or 100 times the cost of the
     * last publication if that is more) publishes every /train row so far. */
    const double t0 = wall_time();
    hsize_t n = 0;
    while (n == 0) {
        ck_assert_msg(wall_time() - t0 < 60, "nothing published in 60 s");
        usleep(100000);
        ck_assert_int_eq(write_rows_ranks(r, &nt, nt + 1), 0); /* its /train row publishes; its /ranks row waits */
        f = open_ro(path);
        n = ds_len(f, "/train/step");
        H5Fclose(f);
    }
    ck_assert_msg(wall_time() - t0 > 0.45, "published after %.2f s", wall_time() - t0);
    f = open_ro(path);
    ck_assert_int_eq(check_train(f, (hsize_t)nt, (hsize_t)nt), nt);
    ck_assert_int_eq(check_ranks(f, (hsize_t)nt - 1, (hsize_t)nt - 1), nt - 1);
    H5Fclose(f);
    ck_assert_int_eq(runlog_close(r), 0);
    f = open_ro(path);
    ck_assert_int_eq(check_ranks(f, (hsize_t)nt, (hsize_t)nt), nt);
    H5Fclose(f);
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);
    rm_rf(dir);
}
END_TEST

/* Growing method arrays are sized by what is written, not by their bound: iterations = 5e9
 * (backup's /backup/dropped, gossip's /gossip/potential) gives a small file holding exactly
 * the rows written; a fixed array takes only its own row count; a growing one at most its bound. */
START_TEST(test_growing_arrays_small) {
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    const long ITER = 5000000000L;
    const runlog_array_spec arrays[3] = {
        {"backup/dropped", ITER, 0, "gradients", "per step", 0, 1},
        {"gossip/potential", ITER / 10 + 2, 0, "1", "per evaluation", 1, 1},
        {"gossip/peers", 2, 2, "times", "fixed", 0, 0},
    };
    runlog_meta meta = meta_for("backup");
    meta.iterations = ITER;
    meta.arrays = arrays;
    meta.n_arrays = 3;
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    const long long dropped[5] = {0, 3, 1, 4, 1};
    const double phi[3] = {2.5, 0.25, 0.125};
    const long long peers[4] = {0, 7, 9, 0};
    ck_assert_int_eq(runlog_array_rows(r, 0, dropped, 2), 0);
    ck_assert_int_eq(runlog_flush(r), 0);
    hid_t f = open_ro(path);
    ck_assert_int_eq(ds_len(f, "/backup/dropped"), 2);
    ck_assert_int_eq(ds_len(f, "/gossip/potential"), 0);
    H5Fclose(f);
    ck_assert_int_eq(runlog_array_rows(r, 0, dropped, 5), 0); /* grows */
    ck_assert_int_eq(runlog_array_rows_f64(r, 1, phi, 3), 0);
    ck_assert_int_eq(runlog_array_rows(r, 2, peers, 1), -1); /* fixed: all 2 rows or nothing */
    ck_assert_msg(strstr(runlog_error(r), "/gossip/peers") != NULL, "message: %s", runlog_error(r));
    ck_assert_int_eq(runlog_array_rows(r, 0, dropped, -1), -1);
    ck_assert_int_eq(runlog_array_rows_f64(r, 0, phi, 1), -1); /* int64 array */
    ck_assert_int_eq(runlog_array(r, 2, peers), 0);
    ck_assert_int_eq(runlog_close(r), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_msg(st.st_size < 64 * 1024, "%s is %lld bytes", path, (long long)st.st_size);
    f = open_ro(path);
    hsize_t n;
    long long *d = ds_read(f, "/backup/dropped", 1, &n);
    ck_assert_int_eq(n, 5);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(d[i], dropped[i]);
    free(d);
    double *p = ds_read(f, "/gossip/potential", 0, &n);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < 3; i++) ck_assert(p[i] == phi[i]);
    free(p);
    H5Fclose(f);
    rm_rf(dir);
}
END_TEST

/* Write /train rows and publish them (runlog_flush) every 500 rows until a publication fails;
 * returns the rows of the last successful one. */
static long fill_until_failure(runlog *r, long max_rows) {
    long nt = 0, good = 0;
    while (nt < max_rows) {
        if (write_rows(r, &nt, nt + 500) != 0 || runlog_flush(r) != 0) return good;
        good = nt;
    }
    return -1;
}

/* A full file system (a 256 KiB tmpfs, mounted when running as root): the publication that does
 * not fit fails with ENOSPC and leaves the previous file; runlog_close returns -1 and records the
 * status in place, in the full file system. */
START_TEST(test_full_disk_status) {
    if (geteuid() != 0) {
        fprintf(stderr, "test_full_disk_status: SKIPPED (mounting a small tmpfs needs root)\n");
        return;
    }
    char dir[256], path[512], err[ERRLEN] = "";
    make_tmpdir(dir, sizeof dir);
    if (mount("tmpfs", dir, "tmpfs", 0, "size=256k") != 0) {
        fprintf(stderr, "test_full_disk_status: SKIPPED (mount -t tmpfs: %s)\n", strerror(errno));
        rm_rf(dir);
        return;
    }
    snprintf(path, sizeof path, "%s/run.h5", dir);
    runlog_meta meta = meta_for("gossip");
    runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
    ck_assert_msg(r != NULL, "runlog_create: %s", err);
    long good = fill_until_failure(r, 1000000);
    ck_assert_msg(good > 0, "no publication failed (or none succeeded): %ld", good);
    ck_assert_msg(strstr(runlog_error(r), "No space left on device") != NULL, "message: %s", runlog_error(r));
    long nt = good;
    ck_assert_int_eq(write_rows(r, &nt, good + 1), -1); /* no longer extended */
    runlog_set_attr_string(r, "status", "stopped: run-file write error");
    runlog_set_attr_double(r, "images_per_s", 1.0);
    ck_assert_int_eq(runlog_close(r), -1);
    hid_t f = open_ro(path);
    ck_assert_int_eq(check_train(f, (hsize_t)good, (hsize_t)good), good);
    char *status = attr_str(f, "status");
    ck_assert_msg(strncmp(status, "stopped: run-file write error: ", 31) == 0 && strstr(status, "No space left on device"),
                  "status \"%s\"", status);
    free(status);
    ck_assert_int_eq(H5Aexists(f, "images_per_s"), 0); /* only the status fits */
    H5Fclose(f);
    ck_assert(h5dump_ok(path) && h5dump_data_ok(path));
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);
    ck_assert_int_eq(umount(dir), 0);
    rm_rf(dir);
}
END_TEST

/* Any failed write ends the same way, never with a signal: a file-size limit (RLIMIT_FSIZE,
 * SIGXFSZ ignored as dsgd-run does) makes write() fail with EFBIG in a child writer, which
 * exits normally after runlog_close recorded the status. */
START_TEST(test_write_error_status) {
    char dir[256], path[512];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {128 * 1024, 128 * 1024};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
        char err[ERRLEN];
        runlog_meta meta = meta_for("allreduce");
        runlog *r = runlog_create(path, 0, &meta, err, sizeof err);
        if (!r) _exit(3);
        long good = fill_until_failure(r, 1000000);
        if (good <= 0 || !strstr(runlog_error(r), "File too large") || write(pfd[1], &good, sizeof good) != sizeof good) _exit(4);
        runlog_set_attr_string(r, "status", "completed"); /* the in-place status says what happened instead */
        _exit(runlog_close(r) == -1 ? 0 : 5);
    }
    close(pfd[1]);
    long good = 0;
    ck_assert_int_eq(read(pfd[0], &good, sizeof good), sizeof good);
    close(pfd[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    hid_t f = open_ro(path);
    ck_assert_int_eq(check_train(f, (hsize_t)good, (hsize_t)good), good);
    char *st = attr_str(f, "status");
    ck_assert_msg(strncmp(st, "stopped: run-file write error: ", 31) == 0 && strstr(st, "File too large"), "status \"%s\"", st);
    free(st);
    H5Fclose(f);
    ck_assert_msg(count_entries(dir), "temporary files left next to %s", path);
    rm_rf(dir);
}
END_TEST

static Suite *runlog_suite(void) {
    Suite *s = suite_create("runlog");
    TCase *tc = tcase_create("runlog");
    tcase_set_timeout(tc, 3600); /* the stress setting of RUNLOG_KILL_TRIALS needs it */
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_close_writes_buffer);
    tcase_add_test(tc, test_existing_refused);
    tcase_add_test(tc, test_overwrite_replaces);
    tcase_add_test(tc, test_concurrent_overwrite_detected);
    tcase_add_test(tc, test_parent_dirs);
    tcase_add_test(tc, test_hdf5_error_message);
    tcase_add_test(tc, test_kill_after_three_evals);
    tcase_add_test(tc, test_ranks_eval_local_arrays);
    tcase_add_test(tc, test_optional_parts_absent);
    tcase_add_test(tc, test_bad_layout_refused);
    tcase_add_test(tc, test_kill_after_flush_new_parts);
    tcase_add_test(tc, test_kill_at_random_instants);
    tcase_add_test(tc, test_resume_after_close);
    tcase_add_test(tc, test_resume_after_kill);
    tcase_add_test(tc, test_resume_refused);
    tcase_add_test(tc, test_resume_uneven_columns);
    tcase_add_test(tc, test_resume_kill_at_random_instants);
    tcase_add_test(tc, test_publish_between_evals);
    tcase_add_test(tc, test_growing_arrays_small);
    tcase_add_test(tc, test_full_disk_status);
    tcase_add_test(tc, test_write_error_status);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the read-back helpers report failures themselves */
    return run_suite(runlog_suite());
}
