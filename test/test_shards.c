/* test_shards.c — the shard files (src/data/shards.c): a pack written with shard_write and
 * shards_write_index is read back by shards_open / shards_read byte for byte, with the labels,
 * sizes and source indices given; and each kind of bad pack is refused with EXIT_BADINPUT and a
 * message naming the file: missing or empty directory, no index, a shard of another format
 * version, a truncated shard, a shard missing from the directory, counts that disagree with the
 * index, train and val with different classes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shards.h"
#include "testutil.h"
#include "util/util.h"

static char tmpdir[256];
static const char *const classes[3] = {"n01", "n02", "n03"};

/* Sample bytes of (shard k, sample i): a length and content that identify them. */
static size_t sample_len(int k, int i) { return (size_t)(17 + 13 * i + 101 * k); }
static uint8_t sample_byte(int k, int i, size_t j) { return (uint8_t)(7 * k + 3 * i + j); }

/* Shard k of split (K shards) with n samples at dir/<name>, classes cls. */
static void make_shard(const char *dir, const char *split, int k, int K, int n, const char *const *cls, int n_cls) {
    uint64_t off[16] = {0};
    int16_t label[16];
    uint16_t h[16], w[16];
    int32_t src[16], skipped[1] = {99};
    uint8_t jpeg[4096];
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < sample_len(k, i); j++) jpeg[off[i] + j] = sample_byte(k, i, j);
        off[i + 1] = off[i] + sample_len(k, i);
        label[i] = (int16_t)((i + k) % n_cls), h[i] = (uint16_t)(10 + i), w[i] = (uint16_t)(20 + k), src[i] = 100 * k + i;
    }
    shard_meta m = {.split = split, .shard = k, .n_shards = K, .max_side = 480, .quality = 90, .subsampling = "4:2:0",
                    .interp = "bicubic", .seed = 7, .n_classes = n_cls, .classes = cls};
    char name[64], path[512], err[ERRLEN];
    shard_name(name, sizeof name, split, k, K);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_msg(shard_write(path, &m, n, jpeg, off, label, h, w, src, 1, skipped, err, sizeof err) == 0, "%s", err);
}

/* A pack in dir: train 2 shards (3 + 4 samples), val 1 shard (2 samples); val's classes vcls. */
static void make_pack(const char *dir, const char *const *vcls) {
    mkdir(dir, 0777);
    make_shard(dir, "train", 0, 2, 3, classes, 3);
    make_shard(dir, "train", 1, 2, 4, classes, 3);
    make_shard(dir, "val", 0, 1, 2, vcls, 3);
    int64_t tn[2] = {3, 4}, ts[2] = {1, 1}, vn[1] = {2}, vs[1] = {1};
    uint64_t tb[2] = {0, 0}, vb[1] = {0};
    const char *src[3] = {"n01/a.JPEG", "n02/b.JPEG", "n03/ç.JPEG"};
    shards_index_split sp[2] = {{"train", 2, tn, ts, tb, 3, src}, {"val", 1, vn, vs, vb, 3, src}};
    shard_meta m = {.max_side = 480, .quality = 90, .subsampling = "4:2:0", .interp = "bicubic", .seed = 7, .n_classes = 3,
                    .classes = classes};
    char path[512], err[ERRLEN];
    snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX);
    ck_assert_msg(shards_write_index(path, &m, sp, 2, err, sizeof err) == 0, "%s", err);
}

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dsgd-test-shards.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *pack_dir(const char *name) {
    static char buf[4][512];
    static int slot;
    slot = (slot + 1) % 4;
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", tmpdir, name);
    return buf[slot];
}

START_TEST(test_round_trip) {
    const char *dir = pack_dir("p");
    make_pack(dir, classes);
    shards *t, *v;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&t, dir, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open(&v, dir, "val", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shards_count(t), 7);
    ck_assert_int_eq(shards_n_shards(t), 2);
    ck_assert_int_eq(shards_count(v), 2);
    ck_assert_int_eq(shards_skipped(t), 2);
    ck_assert_int_eq(shards_n_classes(t), 3);
    ck_assert_int_eq(shards_max_side(t), 480);
    ck_assert_str_eq(shards_class_name(t, 2), "n03");
    ck_assert_int_eq(shards_same_classes(t, v, err, sizeof err), 0);
    ck_assert_uint_eq(shards_max_nbytes(t), sample_len(1, 3));
    uint8_t buf[4096];
    for (int64_t g = 0; g < 7; g++) {
        const int k = g < 3 ? 0 : 1, i = (int)(g < 3 ? g : g - 3);
        ck_assert_uint_eq(shards_nbytes(t, g), sample_len(k, i));
        ck_assert_int_eq(shards_label(t, g), (i + k) % 3);
        ck_assert_int_eq(shards_height(t, g), 10 + i);
        ck_assert_int_eq(shards_width(t, g), 20 + k);
        ck_assert_int_eq(shards_source_index(t, g), 100 * k + i);
        ck_assert_ptr_nonnull(strstr(shards_file(t, g), k ? "train-00001-of-00002.h5" : "train-00000-of-00002.h5"));
        memset(buf, 0, sizeof buf);
        ck_assert_msg(shards_read(t, g, buf, err, sizeof err) == 0, "%s", err);
        for (size_t j = 0; j < sample_len(k, i); j++) ck_assert_uint_eq(buf[j], sample_byte(k, i, j));
    }
    /* The sample bytes are not JPEGs: shards_verify names the first shard and sample. */
    int64_t checked = -1;
    ck_assert_int_eq(shards_verify(t, 2, &checked, err, sizeof err), EXIT_BADINPUT);
    ck_assert_int_eq(checked, 0);
    ck_assert_msg(strstr(err, "train-00000-of-00002.h5: sample 0 (source 0): not a decodable JPEG"), "%s", err);
    shards_close(t), shards_close(v);

    /* The same shards given as a list. */
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/train-00001-of-00002.h5", dir);
    snprintf(b, sizeof b, "%s/train-00000-of-00002.h5", dir);
    const char *list[2] = {a, b};
    ck_assert_msg(shards_open_files(&t, list, 2, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shards_count(t), 7);
    ck_assert_int_eq(shards_source_index(t, 0), 100);
    ck_assert_msg(shards_read(t, 6, buf, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(buf[0], sample_byte(0, 2, 0));
    shards_close(t);

    /* A val shard among train shards. */
    snprintf(b, sizeof b, "%s/val-00000-of-00001.h5", dir);
    ck_assert_int_eq(shards_open_files(&t, list, 2, err, sizeof err), EXIT_BADINPUT);
    ck_assert_ptr_nonnull(strstr(err, "val-00000-of-00001.h5"));
    ck_assert_ptr_nonnull(strstr(err, "split 'val' where 'train' was expected"));
}
END_TEST

/* Open file descriptors of this process (/proc/self/fd; its own directory fd counted each time). */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* P5: what rank 0 read (shards_pack) makes on another rank (shards_unpack) the same set — counts,
 * classes, per-sample arrays, fingerprint, bytes — without opening any file until a read, and
 * then only the shard read from; a file missing or cut short there is named at its first read. */
START_TEST(test_pack_unpack_lazy) {
    const char *dir = pack_dir("p");
    make_pack(dir, classes);
    shards *t, *u;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&t, dir, "train", err, sizeof err) == 0, "%s", err);
    size_t len = 0;
    void *buf = shards_pack(t, &len);
    ck_assert_uint_gt(len, 7 * 22);
    const int before = open_fds();
    ck_assert_msg(shards_unpack(&u, buf, len, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(open_fds(), before); /* no file opened */
    ck_assert_int_eq(shards_count(u), 7);
    ck_assert_int_eq(shards_n_shards(u), 2);
    ck_assert_int_eq(shards_skipped(u), 2);
    ck_assert_int_eq(shards_n_classes(u), 3);
    ck_assert_int_eq(shards_max_side(u), 480);
    ck_assert_str_eq(shards_class_name(u, 1), "n02");
    ck_assert_uint_eq(shards_max_nbytes(u), shards_max_nbytes(t));
    ck_assert_int_eq(shards_same_classes(t, u, err, sizeof err), 0);
    ck_assert(shards_fingerprint(u) == shards_fingerprint(t));
    uint8_t b[4096];
    for (int64_t g = 0; g < 7; g++) {
        ck_assert_str_eq(shards_file(u, g), shards_file(t, g));
        ck_assert_int_eq(shards_label(u, g), shards_label(t, g));
        ck_assert_int_eq(shards_source_index(u, g), shards_source_index(t, g));
    }
    /* sample 4 is in shard 1: that file is opened, shard 0's is not */
    ck_assert_msg(shards_read(u, 4, b, err, sizeof err) == 0, "%s", err);
    for (size_t j = 0; j < sample_len(1, 1); j++) ck_assert_uint_eq(b[j], sample_byte(1, 1, j));
    ck_assert_int_eq(open_fds(), before + 1);
    ck_assert_msg(shards_read(u, 6, b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(open_fds(), before + 1); /* kept open */
    ck_assert_msg(shards_read(u, 0, b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(open_fds(), before + 2);
    shards_close(u);
    ck_assert_int_eq(open_fds(), before);
    /* a malformed buffer is refused */
    ck_assert_int_eq(shards_unpack(&u, buf, len - 1, err, sizeof err), EXIT_BADINPUT);
    ck_assert_ptr_null(u);
    ck_assert_msg(strstr(err, "malformed"), "%s", err);
    /* this node's copy: shard 0 missing, shard 1 cut short — named at the first read */
    char p0[600], p1[600];
    snprintf(p0, sizeof p0, "%s/train-00000-of-00002.h5", dir);
    snprintf(p1, sizeof p1, "%s/train-00001-of-00002.h5", dir);
    ck_assert_msg(shards_unpack(&u, buf, len, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(unlink(p0), 0);
    ck_assert_int_eq(truncate(p1, 100), 0); /* before its samples end */
    ck_assert_int_eq(shards_read(u, 0, b, err, sizeof err), EXIT_RUNTIME);
    ck_assert_msg(strstr(err, p0) && strstr(err, "No such file"), "%s", err);
    ck_assert_int_eq(shards_read(u, 6, b, err, sizeof err), EXIT_RUNTIME);
    ck_assert_msg(strstr(err, p1) && strstr(err, "truncated"), "%s", err);
    shards_close(u), shards_close(t);
    free(buf);
}
END_TEST

/* Expect shards_open(dir, split) to fail with EXIT_BADINPUT and err holding both needles. */
static void expect_refused(const char *dir, const char *split, const char *needle1, const char *needle2) {
    shards *s = NULL;
    char err[ERRLEN] = "";
    ck_assert_int_eq(shards_open(&s, dir, split, err, sizeof err), EXIT_BADINPUT);
    ck_assert_ptr_null(s);
    printf("refused as expected: %s\n", err);
    ck_assert_msg(strstr(err, needle1) != NULL, "'%s' not in: %s", needle1, err);
    if (needle2) ck_assert_msg(strstr(err, needle2) != NULL, "'%s' not in: %s", needle2, err);
}

START_TEST(test_missing_and_empty) {
    expect_refused(pack_dir("nothing"), "train", pack_dir("nothing"), "No such file");
    const char *e = pack_dir("empty");
    mkdir(e, 0777);
    expect_refused(e, "train", e, "no index.h5");
    const char *p = pack_dir("p");
    make_pack(p, classes);
    expect_refused(p, "test", "no split 'test'", "train,val");
    /* A listed shard is gone. */
    char path[600];
    snprintf(path, sizeof path, "%s/train-00001-of-00002.h5", p);
    ck_assert_int_eq(unlink(path), 0);
    expect_refused(p, "train", path, "No such file");
}
END_TEST

START_TEST(test_other_version) {
    const char *p = pack_dir("p");
    make_pack(p, classes);
    char path[600];
    snprintf(path, sizeof path, "%s/train-00001-of-00002.h5", p);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    long long v = 99;
    ck_assert(H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
    H5Aclose(a), H5Fclose(f);
    expect_refused(p, "train", path, "format version 99, but this dsgd-run reads version 1");
    /* The val shards are untouched: val still opens. */
    shards *s;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&s, p, "val", err, sizeof err) == 0, "%s", err);
    shards_close(s);
}
END_TEST

START_TEST(test_foreign_file) {
    const char *p = pack_dir("p");
    make_pack(p, classes);
    char path[600];
    snprintf(path, sizeof path, "%s/train-00000-of-00002.h5", p);
    FILE *f = fopen(path, "w");
    fputs("not hdf5\n", f);
    fclose(f);
    expect_refused(p, "train", path, "not an HDF5 file");
}
END_TEST

START_TEST(test_truncated) {
    const char *p = pack_dir("p");
    make_pack(p, classes);
    char path[600];
    snprintf(path, sizeof path, "%s/train-00001-of-00002.h5", p);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    /* Cut the last bytes only (the tail of the metadata), then half the file. */
    ck_assert_int_eq(truncate(path, sb.st_size - 100), 0);
    expect_refused(p, "train", path, "truncated");
    ck_assert_int_eq(truncate(path, sb.st_size / 2), 0);
    expect_refused(p, "train", path, "truncated");
}
END_TEST

START_TEST(test_counts_disagree_with_index) {
    const char *p = pack_dir("p");
    make_pack(p, classes);
    char path[600];
    snprintf(path, sizeof path, "%s/train-00001-of-00002.h5", p);
    ck_assert_int_eq(unlink(path), 0);
    make_shard(p, "train", 1, 2, 5, classes, 3); /* 5 samples where the index says 4 */
    expect_refused(p, "train", path, "holds 5 samples but");
}
END_TEST

START_TEST(test_classes_differ) {
    const char *p = pack_dir("p");
    static const char *const other[3] = {"n01", "n02", "n04"};
    make_pack(p, other); /* val shard with n04 where the index says n03 */
    expect_refused(p, "val", "class 2 is 'n03'", "'n04'");
    /* Two packs: train of one, val of another. */
    const char *q = pack_dir("q");
    mkdir(q, 0777);
    make_shard(q, "val", 0, 1, 2, other, 3);
    char a[600], err[ERRLEN];
    snprintf(a, sizeof a, "%s/val-00000-of-00001.h5", q);
    const char *list[1] = {a};
    shards *t, *v;
    ck_assert_msg(shards_open(&t, p, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open_files(&v, list, 1, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shards_same_classes(t, v, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "class 2 is 'n03' in train") && strstr(err, "'n04' in val"), "%s", err);
    shards_close(t), shards_close(v);
}
END_TEST

/* h5py, as a user would read a shard (skipped where python3-h5py is absent). */
START_TEST(test_h5py_reads_it) {
    if (system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) {
        printf("SKIPPED: h5py check (no python3-h5py)\n");
        return;
    }
    const char *p = pack_dir("p");
    make_pack(p, classes);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import h5py,sys; f=h5py.File(sys.argv[1],'r'); o=f['offset'][:]; "
             "b=f['jpeg'][o[2]:o[3]].tobytes(); assert len(b)==%zu and b[0]==%d, (len(b), b[0]); "
             "assert [c.decode() for c in f['classes'][:]]==['n01','n02','n03']; assert f.attrs['format_version']==1; "
             "assert f['jpeg'].id.get_offset() is not None\" %s/train-00001-of-00002.h5",
             sample_len(1, 2), sample_byte(1, 2, 0), p);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("shards");
    TCase *tc = tcase_create("shards");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_pack_unpack_lazy);
    tcase_add_test(tc, test_missing_and_empty);
    tcase_add_test(tc, test_other_version);
    tcase_add_test(tc, test_foreign_file);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_counts_disagree_with_index);
    tcase_add_test(tc, test_classes_differ);
    tcase_add_test(tc, test_h5py_reads_it);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(suite()); }
