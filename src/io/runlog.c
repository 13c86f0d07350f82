/* runlog.c — the HDF5 run file written by rank 0 (runlog.h; layout in docs/output.md).
 *
 * CRASH SAFETY, AND WHY IT TAKES MORE THAN H5Fstart_swmr_write
 * The promise: a process killed by SIGKILL at any instant leaves at the output path a file that
 * plain h5dump and h5py open, holding every evaluation for which runlog_eval had returned.
 * SIGKILL loses what the process had not yet handed to the kernel, and can stop a pwrite()
 * between two pages of the page cache (Linux checks for a fatal signal between pages). So every
 * prefix of our sequence of writes, cut anywhere at a 4 KiB boundary, must be a readable file.
 * test_runlog's random-instant kill tests check exactly that. Six parts:
 *
 * 1. SWMR write mode (HDF5 1.10, libver bounds latest). After H5Fstart_swmr_write the metadata
 *    cache writes in flush-dependency order (raw chunks, chunk index, object header, superblock
 *    last), so every prefix of the write sequence is a consistent file. Every object and
 *    attribute except the final attributes is created before SWMR starts. (HDF5 1.10.8 does not
 *    refuse H5Acreate/H5Gcreate in SWMR mode, but only appends are ordered, so we never do that.)
 *
 * 2. Paged file-space aggregation (H5F_FSPACE_STRATEGY_PAGE, 4 KiB pages): no metadata block
 *    smaller than a page crosses a page boundary, so a kill never tears one. Without it, the
 *    kill test found object headers with bad checksums that straddled a 4 KiB boundary. Raw
 *    chunks may still be torn; that is harmless because a rewritten chunk repeats its earlier rows
 *    and new rows are not counted until the object header that extends the dataset is written.
 *
 * 3. A pass-through file driver over sec2 ("dsgd_runlog_sec2", mask_* below) that keeps the
 *    on-disk superblock acceptable to non-SWMR readers. HDF5 1.10 marks the file "open for
 *    write / SWMR write" in the superblock status flags and clears them only in H5Fclose. A killed
 *    writer leaves them set and every non-SWMR open (h5dump, h5py's default) fails with "file is
 *    already open for write (may use <h5clear file> to clear file consistency flags)". The
 *    driver clears the two bits (and recomputes the superblock checksum) in each superblock
 *    image on its way to disk. Non-SWMR readers also reject addresses beyond the end-of-
 *    allocation stored in the superblock, which SWMR only rewrites at the end of a flush, so
 *    after any write that extends past the stored value the driver rewrites that field too
 *    (after the data, before anything that points to it). Cost: the flags no longer keep a
 *    second writer out; runlog never opens a published file for writing (parts 5 and 6 write a
 *    private copy).
 *
 * 4. Publish by link. The file is built under a hidden temporary name beside the output
 *    (H5F_ACC_EXCL), switched to SWMR and flushed; only then is it linked to the output path.
 *    link() fails when the path exists, so a concurrent run can never truncate an earlier one,
 *    and the path never names a half-built file. With overwrite, rename() replaces the old file
 *    atomically. On file systems without hard links we fall back to check-then-rename.
 *
 * 5. Final attributes by copy-and-rename. runlog_set_attr_* only stages values. runlog_close
 *    writes the buffered rows, closes the SWMR file (clean superblock) and, when attributes were
 *    staged, copies the file to a temporary, adds them there in ordinary (non-SWMR) mode and
 *    renames the copy over the output. A kill during close leaves either the file without the
 *    final attributes or the final file, never a torn one (at worst a stray hidden temporary).
 *    Their names go into root attribute final_attributes (one per line) for part 6.
 *
 * 6. Resume by copy-and-rename (runlog_resume). A run restarted from a checkpoint continues its
 *    file, which is never opened for writing in place. It is first opened read-only and checked
 *    (a dsgd-run file, the experiment's layout, at least the checkpoint's rows in every column),
 *    so a refusal writes nothing. Then it is copied to a hidden temporary beside it
 *    (.<name>.resume.<pid>.<ns>), which is opened read-write in ordinary mode with the fapl of
 *    runlog_create (libver latest, the masking driver of part 3), checked again, and changed
 *    while no reader can see it: every extendible dataset is cut back to the checkpoint's rows
 *    (H5Dset_extent), the end-of-run attributes (part 5's list plus status, train_time_s,
 *    images_per_s, steps_completed) are deleted, resumes and resumed_at are written. Then, as
 *    for a new file (parts 1 and 4), H5Fstart_swmr_write, H5Fflush, and rename() over the run
 *    file. Until the rename the old file is intact; after it the path names a flushed SWMR file;
 *    a kill at any instant leaves one or the other (at worst a stray temporary). From then on the
 *    writes are the appends of a new file, so parts 1-3 hold unchanged: the copy keeps the
 *    file's paged aggregation (a file-creation property), and space freed by the cut is not
 *    referenced by the published file, so reusing it for new rows is like allocating new space.
 *    Both kinds of earlier file open with plain H5Fopen: a killed writer's superblock flags
 *    were masked on their way to disk (part 3), and a closed file is clean. rename() keeps the
 *    copy's inode, which runlog_close's "replaced by another run" check compares against.
 *
 * Optional parts, all created in build_layout like the rest: /eval_local (the columns of /eval,
 * appended at once by runlog_eval_local and flushed by the next runlog_eval), /ranks (step plus
 * 2-D [row, meta.ranks] datasets with fixed columns, chunks of 256 rows by all columns,
 * buffered like /train) and the fixed arrays of meta.arrays: contiguous int64 datasets whose
 * storage is allocated and zero-filled at creation (H5D_ALLOC_TIME_EARLY), so runlog_array's
 * H5Dwrite only overwrites raw data in place and never touches metadata in SWMR mode.
 *
 * Limits: the guarantee covers process death (SIGKILL, OOM killer, MPI abort), not power loss
 * or a kernel crash (no fsync). Datasets of a group are extended one after another, so a kill
 * inside runlog_eval may leave the in-flight row in some datasets of /eval (/ranks, ...) but not
 * others, and readers use the shortest length of the group. /train and /ranks rows after the
 * last completed runlog_eval may be lost; an /eval_local row or an array rewrite made after it
 * may or may not be in the file. A fixed array is rewritten in place, so a kill while its new
 * values are being written can leave some elements old and some new. Past about 8 million
 * /train rows (about 500 thousand /eval rows, 2 million /ranks rows) the chunk index grows
 * blocks larger than a page (4118 bytes, measured), which a kill could tear.
 *
 * Errors: every HDF5 and system call is checked. HDF5's automatic error printing is turned off
 * for the process (H5Eset_auto2); failures are reported as "<path>: HDF5 <call> failed for
 * <object>: <HDF5's own message>" through err (runlog_create) or runlog_error. */
#include "runlog.h"

#include "util/h5msg.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
    TRAIN_CHUNK = 1024, /* rows per chunk of a /train dataset */
    EVAL_CHUNK = 64,    /* rows per chunk of an /eval dataset */
    TRAIN_BUF = 1024,   /* /train rows buffered in memory before an append */
    RANKS_CHUNK = 256,  /* rows per chunk of a /ranks dataset (all meta.ranks columns in one chunk) */
    RANKS_BUF = 256,    /* /ranks rows buffered in memory before an append */
    MAX_RANKS = 1 << 20, /* most /ranks columns (bounds the buffer size computation) */
    PATHLEN = 4096,
    FILE_PAGE = 4096, /* HDF5 file-space page; divides every Linux page size */
};

/* ------------------------------------------------------------------------------------------ */
/* Pass-through driver that masks the superblock status flags (part 3 of the header comment).  */

/* Superblock versions 2 and 3 (HDF5 file format spec, "Superblock"): signature (8), version,
 * size of offsets O, size of lengths, status flags, then base address, extension address,
 * end-of-file (end of allocation) address and root object header address (O bytes each), then a
 * Jenkins lookup3 checksum of everything before it. */
#define SB_SIGNATURE "\211HDF\r\n\032\n"
#define SB_FLAGS_AT 11
#define SB_FLAGS_OPEN 0x05u /* H5F_SUPER_WRITE_ACCESS | H5F_SUPER_SWMR_WRITE_ACCESS */
#define SB_MAXLEN (12 + 4 * 8 + 4)
#define MASK_MAXADDR ((haddr_t)(((uint64_t)1 << 63) - 1)) /* as sec2 with a 64-bit off_t */

typedef struct {
    H5FD_t pub;                  /* filled in by the library; must come first */
    H5FD_t *inner;               /* the sec2 file that does the I/O */
    unsigned char sb[SB_MAXLEN]; /* the superblock as last written to disk (masked) */
    size_t sb_len;               /* 0 until the library has written a superblock */
    unsigned sb_o;               /* size of offsets in the superblock */
    haddr_t disk_eoa;            /* end-of-allocation address stored in the on-disk superblock */
} maskfd;

static hid_t mask_sec2_fapl = H5I_INVALID_HID;

/* Bob Jenkins' lookup3 hashlittle, byte-wise: the checksum HDF5 puts on its metadata
 * (H5_checksum_lookup3 with initval 0). Verified by the kill tests: h5dump reads our images. */
#define ROT32(x, k) (((x) << (k)) | ((x) >> (32 - (k))))
static uint32_t lookup3(const unsigned char *k, size_t length) {
    uint32_t a, b, c;
    a = b = c = 0xdeadbeefu + (uint32_t)length;
    while (length > 12) {
        a += k[0] + ((uint32_t)k[1] << 8) + ((uint32_t)k[2] << 16) + ((uint32_t)k[3] << 24);
        b += k[4] + ((uint32_t)k[5] << 8) + ((uint32_t)k[6] << 16) + ((uint32_t)k[7] << 24);
        c += k[8] + ((uint32_t)k[9] << 8) + ((uint32_t)k[10] << 16) + ((uint32_t)k[11] << 24);
        a -= c; a ^= ROT32(c, 4);  c += b;
        b -= a; b ^= ROT32(a, 6);  a += c;
        c -= b; c ^= ROT32(b, 8);  b += a;
        a -= c; a ^= ROT32(c, 16); c += b;
        b -= a; b ^= ROT32(a, 19); a += c;
        c -= b; c ^= ROT32(b, 4);  b += a;
        length -= 12;
        k += 12;
    }
    switch (length) { /* every case falls through */
    case 12: c += (uint32_t)k[11] << 24; /* fall through */
    case 11: c += (uint32_t)k[10] << 16; /* fall through */
    case 10: c += (uint32_t)k[9] << 8;   /* fall through */
    case 9:  c += k[8];                  /* fall through */
    case 8:  b += (uint32_t)k[7] << 24;  /* fall through */
    case 7:  b += (uint32_t)k[6] << 16;  /* fall through */
    case 6:  b += (uint32_t)k[5] << 8;   /* fall through */
    case 5:  b += k[4];                  /* fall through */
    case 4:  a += (uint32_t)k[3] << 24;  /* fall through */
    case 3:  a += (uint32_t)k[2] << 16;  /* fall through */
    case 2:  a += (uint32_t)k[1] << 8;   /* fall through */
    case 1:  a += k[0]; break;
    case 0:  return c;
    }
    c ^= b; c -= ROT32(b, 14);
    a ^= c; a -= ROT32(c, 11);
    b ^= a; b -= ROT32(a, 25);
    c ^= b; c -= ROT32(b, 16);
    a ^= c; a -= ROT32(c, 4);
    b ^= a; b -= ROT32(a, 14);
    c ^= b; c -= ROT32(b, 24);
    return c;
}

static haddr_t sb_get_eoa(const maskfd *m) {
    haddr_t v = 0;
    for (unsigned i = 0; i < m->sb_o; i++) v |= (haddr_t)m->sb[12 + 2 * m->sb_o + i] << (8 * i);
    return v;
}

/* Store eoa in the cached image, re-checksum it and write it at address 0. */
static herr_t sb_write(maskfd *m, hid_t dxpl, haddr_t eoa) {
    for (unsigned i = 0; i < m->sb_o; i++) m->sb[12 + 2 * m->sb_o + i] = (unsigned char)(eoa >> (8 * i));
    uint32_t sum = lookup3(m->sb, m->sb_len - 4);
    for (int i = 0; i < 4; i++) m->sb[m->sb_len - 4 + i] = (unsigned char)(sum >> (8 * i));
    if (H5FDwrite(m->inner, H5FD_MEM_SUPER, dxpl, 0, m->sb_len, m->sb) < 0) return -1;
    m->disk_eoa = eoa;
    return 0;
}

static H5FD_t *mask_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
    H5FD_t *inner = H5FDopen(name, flags, mask_sec2_fapl, maxaddr);
    if (!inner) return NULL;
    maskfd *m = xcalloc(1, sizeof *m);
    m->inner = inner;
    return &m->pub;
}

static herr_t mask_close(H5FD_t *f) {
    maskfd *m = (maskfd *)f;
    herr_t rc = H5FDclose(m->inner);
    free(m);
    return rc;
}

static int mask_cmp(const H5FD_t *a, const H5FD_t *b) {
    return H5FDcmp(((const maskfd *)a)->inner, ((const maskfd *)b)->inner);
}

/* Called with f == NULL for the driver's own features (H5F_open checks SWMR support that way). */
static herr_t mask_query(const H5FD_t *f, unsigned long *flags) {
    if (!f) return H5FDdriver_query(H5FD_SEC2, flags);
    return H5FDquery(((const maskfd *)f)->inner, flags) < 0 ? -1 : 0;
}

static haddr_t mask_get_eoa(const H5FD_t *f, H5FD_mem_t type) {
    return H5FDget_eoa(((const maskfd *)f)->inner, type);
}

static herr_t mask_set_eoa(H5FD_t *f, H5FD_mem_t type, haddr_t addr) {
    return H5FDset_eoa(((maskfd *)f)->inner, type, addr);
}

static haddr_t mask_get_eof(const H5FD_t *f, H5FD_mem_t type) {
    return H5FDget_eof(((const maskfd *)f)->inner, type);
}

static herr_t mask_get_handle(H5FD_t *f, hid_t fapl, void **handle) {
    return H5FDget_vfd_handle(((maskfd *)f)->inner, fapl, handle);
}

static herr_t mask_read(H5FD_t *f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf) {
    return H5FDread(((maskfd *)f)->inner, type, dxpl, addr, size, buf);
}

/* A write that starts with a superblock: write the rest first, make sure the file reaches the
 * end-of-allocation the superblock records, then write the superblock with the open flags
 * cleared. Any other write: forward it, then raise the stored end-of-allocation if the write
 * went past it. In both cases the superblock lands after the data it covers. */
static herr_t mask_write(H5FD_t *f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *vbuf) {
    maskfd *m = (maskfd *)f;
    const unsigned char *buf = vbuf;
    unsigned o = size >= 12 ? buf[9] : 0;
    size_t len = 12 + 4 * (size_t)o + 4;
    int is_sb = addr == 0 && size >= 12 && memcmp(buf, SB_SIGNATURE, 8) == 0 && buf[8] >= 2 &&
                (o == 2 || o == 4 || o == 8) && size >= len;
    if (!is_sb) {
        if (H5FDwrite(m->inner, type, dxpl, addr, size, buf) < 0) return -1;
        if (m->sb_len && addr + size > m->disk_eoa) return sb_write(m, dxpl, addr + size);
        return 0;
    }
    if (size > len && H5FDwrite(m->inner, type, dxpl, addr + len, size - len, buf + len) < 0) return -1;
    memcpy(m->sb, buf, len);
    m->sb_len = len;
    m->sb_o = o;
    m->sb[SB_FLAGS_AT] &= (unsigned char)~SB_FLAGS_OPEN;
    haddr_t eoa = sb_get_eoa(m);
    haddr_t eof = H5FDget_eof(m->inner, H5FD_MEM_SUPER);
    haddr_t alloc = H5FDget_eoa(m->inner, H5FD_MEM_SUPER);
    if (eof == HADDR_UNDEF || alloc == HADDR_UNDEF) return -1;
    if (eof < eoa && alloc > eof) { /* extend only: truncate sets the size to the allocation */
        if (H5FDtruncate(m->inner, dxpl, 0) < 0) return -1;
        if ((eof = H5FDget_eof(m->inner, H5FD_MEM_SUPER)) == HADDR_UNDEF) return -1;
    }
    /* Never record more than the file holds: a reader would call it truncated. */
    return sb_write(m, dxpl, eoa < eof ? eoa : eof);
}

static herr_t mask_flush(H5FD_t *f, hid_t dxpl, hbool_t closing) {
    return H5FDflush(((maskfd *)f)->inner, dxpl, closing);
}

static herr_t mask_truncate(H5FD_t *f, hid_t dxpl, hbool_t closing) {
    maskfd *m = (maskfd *)f;
    haddr_t alloc = H5FDget_eoa(m->inner, H5FD_MEM_SUPER);
    if (alloc == HADDR_UNDEF) return -1;
    if (m->sb_len && m->disk_eoa > alloc && sb_write(m, dxpl, alloc) < 0) return -1;
    return H5FDtruncate(m->inner, dxpl, closing);
}

static herr_t mask_lock(H5FD_t *f, hbool_t rw) { return H5FDlock(((maskfd *)f)->inner, rw); }
static herr_t mask_unlock(H5FD_t *f) { return H5FDunlock(((maskfd *)f)->inner); }

static const H5FD_class_t mask_class = {
    .name = "dsgd_runlog_sec2",
    .maxaddr = MASK_MAXADDR,
    .fc_degree = H5F_CLOSE_WEAK,
    .open = mask_open,
    .close = mask_close,
    .cmp = mask_cmp,
    .query = mask_query,
    .get_eoa = mask_get_eoa,
    .set_eoa = mask_set_eoa,
    .get_eof = mask_get_eof,
    .get_handle = mask_get_handle,
    .read = mask_read,
    .write = mask_write,
    .flush = mask_flush,
    .truncate = mask_truncate,
    .lock = mask_lock,
    .unlock = mask_unlock,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

/* The driver's id, registered on first use (and again if the library was closed since). */
static hid_t mask_driver(void) {
    static hid_t id = H5I_INVALID_HID;
    if (id >= 0 && H5Iis_valid(id) > 0 && H5Iis_valid(mask_sec2_fapl) > 0) return id;
    if ((mask_sec2_fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0) return H5I_INVALID_HID;
    if (H5Pset_fapl_sec2(mask_sec2_fapl) < 0) return H5I_INVALID_HID;
    id = H5FDregister(&mask_class);
    return id;
}

/* ------------------------------------------------------------------------------------------ */
/* Errors.                                                                                     */

/* Fill err with "<path>: HDF5 <call> failed for <object>: <HDF5's messages>"; returns -1. */
static int h5fail(char *err, size_t errlen, const char *path, const char *call, const char *object) {
    char detail[800];
    h5_message(detail, sizeof detail);
    seterr(err, errlen, "%s: HDF5 %s failed for %s: %s", path, call, object, detail);
    return -1;
}

/* Fill err with "<path>: <what>: <strerror(errno)>"; returns -1. */
static int syserr(char *err, size_t errlen, const char *path, const char *what) {
    seterr(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* The run file.                                                                               */

enum { T_STEP, T_TIME, T_LOSS, T_ALPHA, NTRAIN };
enum { E_STEP, E_TIME, E_EPOCH, E_LOSS, E_TOP1, E_TOP5, NEVAL };

typedef struct {
    const char *name, *units, *description;
} colspec;

static const colspec train_cols[NTRAIN] = {
    {"step", "iterations", "global iterations completed (1-based)"},
    {"time_s", "s", "training wall clock since training began, evaluation time excluded"},
    {"loss", "nats", "cross-entropy loss, mean over the nodes' minibatches and over the steps since the previous row"},
    {"alpha", "1", "learning rate (step size) alpha used at this step"},
};

static const colspec eval_cols[NEVAL] = {
    {"step", "iterations", "global iterations completed when the model was evaluated"},
    {"time_s", "s", "training wall clock since training began, evaluation time excluded"},
    {"epoch", "epochs", "step / steps per epoch, with floor(training set size / m) steps per epoch"},
    {"loss", "nats", "cross-entropy loss, mean over the whole validation set"},
    {"top1_error", "fraction", "fraction of the validation set whose label is not the top-1 prediction"},
    {"top5_error", "fraction", "fraction of the validation set whose label is not among the top-5 predictions"},
};

enum { R_STEP_TIME, R_COMPUTE, R_COMM, R_WAIT, R_DATA, NRANKS };

static const colspec ranks_step_col = {"step", "iterations", "global iterations completed when the row was logged"};

/* The 2-D [row, meta.ranks] datasets of /ranks: column j is worker j. */
static const colspec ranks_cols[NRANKS] = {
    {"step_time_s", "s", "each worker's mean wall-clock seconds per step over the steps since the previous row"},
    {"compute_s", "s", "each worker's mean seconds per step spent computing over the steps since the previous row"},
    {"comm_s", "s", "each worker's mean seconds per step spent in communication calls over the steps since the previous row"},
    {"wait_s", "s", "each worker's mean seconds per step spent waiting for other ranks over the steps since the previous row"},
    {"data_s", "s", "each worker's mean seconds per step spent getting its minibatch (waiting for the decode threads, or "
                    "assembling it) over the steps since the previous row; NaN where not measured"},
};

typedef struct {
    char *name;
    char *s; /* NULL for a double */
    double d;
} staged_attr;

/* Root attributes runlog writes itself: runlog_set_attr_* refuses them and runlog_resume never
 * removes them. final_attributes lists (one per line) the names runlog_close wrote from
 * runlog_set_attr_*, so that runlog_resume knows which attributes end a run. */
static const char *const own_attrs[] = {"method", "p", "b", "m", "seed", "iterations", "servers", "dsgd_version",
                                        "hdf5_version", "config", "command_line", "hostname", "created",
                                        "working_directory", "device", "resumes", "resumed_at", "final_attributes"};
/* The end-of-run attributes of the training code: removed by runlog_resume even from a file
 * without final_attributes. */
static const char *const usual_final_attrs[] = {"status", "train_time_s", "images_per_s", "steps_completed"};

static int is_own_attr(const char *name) {
    for (size_t i = 0; i < sizeof own_attrs / sizeof *own_attrs; i++)
        if (strcmp(name, own_attrs[i]) == 0) return 1;
    return 0;
}

/* One fixed-size int64 (or float64) dataset of meta.arrays. */
typedef struct {
    char *obj; /* "/" + spec name, for messages */
    hid_t ds;
    int f64;   /* float64, NaN-filled (else int64, zero-filled) */
} fixed_array;

struct runlog {
    hid_t file;
    hid_t train[NTRAIN], eval[NEVAL];
    hsize_t n_train, n_eval; /* rows written to the file */
    int nbuf;                /* rows waiting in the buffer */
    int64_t buf_step[TRAIN_BUF];
    double buf_time[TRAIN_BUF], buf_loss[TRAIN_BUF], buf_alpha[TRAIN_BUF];
    hid_t eval_local[NEVAL]; /* all invalid without meta.eval_local */
    int has_eval_local;
    hsize_t n_eval_local;
    int ranks;               /* columns of /ranks; 0: no /ranks group */
    hid_t ranks_step, ranks_ds[NRANKS];
    hsize_t n_ranks;         /* /ranks rows written to the file */
    int nrbuf;               /* /ranks rows waiting in the buffers */
    int64_t rbuf_step[RANKS_BUF];
    double *rbuf[NRANKS];    /* [RANKS_BUF][ranks] each, row-major, in one allocation at create */
    fixed_array *arrays;
    int n_arrays;
    staged_attr *attrs;
    int nattrs, capattrs;
    int failed; /* an append failed: the file is no longer extended */
    dev_t dev;  /* identity of the file this run writes, to notice if another run */
    ino_t ino;  /* replaced it at path (overwrite = true on the same output) */
    char path[PATHLEN];
    char err[ERRLEN];
};

/* Write a scalar attribute of file type ftype from buf (memory type mtype) on obj. */
static int attr_write(hid_t obj, const char *objname, const char *name, hid_t ftype, hid_t mtype,
                      const void *buf, const char *path, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof what, "attribute %s of %s", name, objname);
    hid_t space = H5Screate(H5S_SCALAR);
    if (space < 0) return h5fail(err, errlen, path, "H5Screate", what);
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0) { H5Sclose(space); return h5fail(err, errlen, path, "H5Aexists", what); }
    if (exists > 0 && H5Adelete(obj, name) < 0) { H5Sclose(space); return h5fail(err, errlen, path, "H5Adelete", what); }
    hid_t a = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(space);
    if (a < 0) return h5fail(err, errlen, path, "H5Acreate2", what);
    if (H5Awrite(a, mtype, buf) < 0) { H5Aclose(a); return h5fail(err, errlen, path, "H5Awrite", what); }
    if (H5Aclose(a) < 0) return h5fail(err, errlen, path, "H5Aclose", what);
    return 0;
}

/* Variable-length UTF-8 string attribute (h5py reads it as str). NULL is written as "". */
static int attr_string(hid_t obj, const char *objname, const char *name, const char *v, const char *path,
                       char *err, size_t errlen) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return h5fail(err, errlen, path, "H5Tcopy", "string type");
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return h5fail(err, errlen, path, "H5Tset_size/H5Tset_cset", "string type");
    }
    const char *s = v ? v : "";
    int rc = attr_write(obj, objname, name, t, t, &s, path, err, errlen);
    H5Tclose(t);
    return rc;
}

/* A chunked extendible dataset of 0 rows with its units and description attributes: 1-D when
 * cols == 0, else 2-D [rows, cols] with cols fixed and chunks of chunk rows by all cols. */
static hid_t make_column(hid_t group, const char *gname, const colspec *c, hid_t ftype, hsize_t chunk, hsize_t cols,
                         const char *path, char *err, size_t errlen) {
    char obj[64];
    snprintf(obj, sizeof obj, "%s/%s", gname, c->name);
    int rank = cols ? 2 : 1;
    hsize_t dims[2] = {0, cols}, maxdims[2] = {H5S_UNLIMITED, cols}, cdims[2] = {chunk, cols};
    hid_t space = H5Screate_simple(rank, dims, maxdims);
    if (space < 0) return h5fail(err, errlen, path, "H5Screate_simple", obj);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl < 0) { H5Sclose(space); return h5fail(err, errlen, path, "H5Pcreate", obj); }
    hid_t ds = H5I_INVALID_HID;
    if (H5Pset_chunk(dcpl, rank, cdims) < 0) h5fail(err, errlen, path, "H5Pset_chunk", obj);
    else if (H5Pset_obj_track_times(dcpl, 0) < 0) h5fail(err, errlen, path, "H5Pset_obj_track_times", obj);
    else if ((ds = H5Dcreate2(group, c->name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
        h5fail(err, errlen, path, "H5Dcreate2", obj);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (ds < 0) return H5I_INVALID_HID;
    if (attr_string(ds, obj, "units", c->units, path, err, errlen) < 0 ||
        attr_string(ds, obj, "description", c->description, path, err, errlen) < 0) {
        H5Dclose(ds);
        return H5I_INVALID_HID;
    }
    return ds;
}

/* Append n rows from buf (memory type mtype, row-major) to ds, which holds n0 rows: a 1-D
 * dataset when cols == 0, else a 2-D one of cols columns. */
static int append(runlog *r, hid_t ds, const char *obj, hid_t mtype, hsize_t n0, hsize_t n, hsize_t cols, const void *buf) {
    int rank = cols ? 2 : 1;
    hsize_t total[2] = {n0 + n, cols}, start[2] = {n0, 0}, count[2] = {n, cols};
    if (H5Dset_extent(ds, total) < 0) return h5fail(r->err, sizeof r->err, r->path, "H5Dset_extent", obj);
    hid_t fspace = H5Dget_space(ds);
    if (fspace < 0) return h5fail(r->err, sizeof r->err, r->path, "H5Dget_space", obj);
    hid_t mspace = H5Screate_simple(rank, count, NULL);
    if (mspace < 0) { H5Sclose(fspace); return h5fail(r->err, sizeof r->err, r->path, "H5Screate_simple", obj); }
    int rc = 0;
    if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
        rc = h5fail(r->err, sizeof r->err, r->path, "H5Sselect_hyperslab", obj);
    else if (H5Dwrite(ds, mtype, mspace, fspace, H5P_DEFAULT, buf) < 0)
        rc = h5fail(r->err, sizeof r->err, r->path, "H5Dwrite", obj);
    H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

/* Append the buffered /train rows. */
static int write_train(runlog *r) {
    if (r->nbuf == 0) return 0;
    const void *cols[NTRAIN] = {r->buf_step, r->buf_time, r->buf_loss, r->buf_alpha};
    for (int i = 0; i < NTRAIN; i++) {
        char obj[64];
        snprintf(obj, sizeof obj, "/train/%s", train_cols[i].name);
        hid_t mtype = i == T_STEP ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
        if (append(r, r->train[i], obj, mtype, r->n_train, (hsize_t)r->nbuf, 0, cols[i]) < 0) return -1;
    }
    r->n_train += (hsize_t)r->nbuf;
    r->nbuf = 0;
    return 0;
}

/* Append the buffered /ranks rows. */
static int write_ranks(runlog *r) {
    if (r->nrbuf == 0) return 0;
    if (append(r, r->ranks_step, "/ranks/step", H5T_NATIVE_INT64, r->n_ranks, (hsize_t)r->nrbuf, 0, r->rbuf_step) < 0)
        return -1;
    for (int q = 0; q < NRANKS; q++) {
        char obj[64];
        snprintf(obj, sizeof obj, "/ranks/%s", ranks_cols[q].name);
        if (append(r, r->ranks_ds[q], obj, H5T_NATIVE_DOUBLE, r->n_ranks, (hsize_t)r->nrbuf, (hsize_t)r->ranks, r->rbuf[q]) < 0)
            return -1;
    }
    r->n_ranks += (hsize_t)r->nrbuf;
    r->nrbuf = 0;
    return 0;
}

/* Write the buffered /train and /ranks rows (at an evaluation, at close). */
static int write_buffers(runlog *r) { return write_train(r) < 0 || write_ranks(r) < 0 ? -1 : 0; }

/* Append one row to the NEVAL columns ds of group gname (/eval or /eval_local), which hold n rows. */
static int append_eval_row(runlog *r, const hid_t *ds, const char *gname, hsize_t n, long step, double time_s, double epoch,
                           double loss, double top1_error, double top5_error) {
    int64_t s = step;
    const double v[NEVAL] = {0, time_s, epoch, loss, top1_error, top5_error};
    for (int i = 0; i < NEVAL; i++) {
        char obj[64];
        snprintf(obj, sizeof obj, "%s/%s", gname, eval_cols[i].name);
        int rc = i == E_STEP ? append(r, ds[i], obj, H5T_NATIVE_INT64, n, 1, 0, &s)
                             : append(r, ds[i], obj, H5T_NATIVE_DOUBLE, n, 1, 0, &v[i]);
        if (rc < 0) return -1;
    }
    return 0;
}

/* mkdir -p of the directory part of path. */
static int make_parents(const char *path, char *err, size_t errlen) {
    char dir[PATHLEN];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    return mkdirs(dir, path, err, errlen);
}

/* A hidden name next to path, unique to this process and moment: <dir>/.<base>.<tag>.<pid>.<ns>. */
static int temp_name(char *out, size_t outlen, const char *path, const char *tag) {
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int n = snprintf(out, outlen, "%.*s.%s.%s.%ld.%09ld", dirlen, path, base, tag, (long)getpid(), (long)ts.tv_nsec);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

static const char *already_exists_fmt = "%s already exists; use --set overwrite=true to replace it or choose another output";

/* Give the finished temporary file its final name: atomically replace with overwrite, else
 * link() (fails if path exists, so an earlier run is never replaced), else, where the file
 * system has no hard links, check-then-rename. */
static int publish(const char *tmp, const char *path, int overwrite, char *err, size_t errlen) {
    if (overwrite) return rename(tmp, path) == 0 ? 0 : syserr(err, errlen, path, "cannot rename the new run file into place");
    if (link(tmp, path) == 0) {
        unlink(tmp); /* published; a leftover hidden name would be harmless */
        return 0;
    }
    if (errno == EEXIST) {
        seterr(err, errlen, already_exists_fmt, path);
        return -1;
    }
    if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOSYS && errno != EMLINK)
        return syserr(err, errlen, path, "cannot link the new run file into place");
    struct stat st;
    if (lstat(path, &st) == 0) {
        seterr(err, errlen, already_exists_fmt, path);
        return -1;
    }
    return rename(tmp, path) == 0 ? 0 : syserr(err, errlen, path, "cannot rename the new run file into place");
}

/* Close every open handle of r (errors ignored: used on failure paths). */
static void close_handles(runlog *r) {
    for (int i = 0; i < NTRAIN; i++)
        if (r->train[i] >= 0) H5Dclose(r->train[i]), r->train[i] = H5I_INVALID_HID;
    for (int i = 0; i < NEVAL; i++)
        if (r->eval[i] >= 0) H5Dclose(r->eval[i]), r->eval[i] = H5I_INVALID_HID;
    for (int i = 0; i < NEVAL; i++)
        if (r->eval_local[i] >= 0) H5Dclose(r->eval_local[i]), r->eval_local[i] = H5I_INVALID_HID;
    if (r->ranks_step >= 0) H5Dclose(r->ranks_step), r->ranks_step = H5I_INVALID_HID;
    for (int q = 0; q < NRANKS; q++)
        if (r->ranks_ds[q] >= 0) H5Dclose(r->ranks_ds[q]), r->ranks_ds[q] = H5I_INVALID_HID;
    for (int i = 0; i < r->n_arrays; i++)
        if (r->arrays[i].ds >= 0) H5Dclose(r->arrays[i].ds), r->arrays[i].ds = H5I_INVALID_HID;
    if (r->file >= 0) H5Fclose(r->file), r->file = H5I_INVALID_HID;
}

static void free_runlog(runlog *r) {
    for (int i = 0; i < r->nattrs; i++) free(r->attrs[i].name), free(r->attrs[i].s);
    free(r->attrs);
    for (int i = 0; i < r->n_arrays; i++) free(r->arrays[i].obj);
    free(r->arrays);
    free(r->rbuf[0]); /* the one allocation behind every rbuf[q] */
    free(r);
}

/* A new runlog with every handle invalid: the /ranks buffers and the fixed-array table are
 * allocated here, once (meta already checked by check_meta). */
static runlog *new_runlog(const char *path, const runlog_meta *meta) {
    runlog *r = xcalloc(1, sizeof *r);
    r->file = H5I_INVALID_HID;
    for (int i = 0; i < NTRAIN; i++) r->train[i] = H5I_INVALID_HID;
    for (int i = 0; i < NEVAL; i++) r->eval[i] = r->eval_local[i] = H5I_INVALID_HID;
    r->ranks_step = H5I_INVALID_HID;
    for (int q = 0; q < NRANKS; q++) r->ranks_ds[q] = H5I_INVALID_HID;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->has_eval_local = meta->eval_local != 0;
    r->ranks = meta->ranks;
    if (r->ranks > 0) {
        size_t per = (size_t)RANKS_BUF * (size_t)r->ranks;
        double *mem = xmalloc((size_t)NRANKS * per * sizeof *mem);
        for (int q = 0; q < NRANKS; q++) r->rbuf[q] = mem + (size_t)q * per;
    }
    if (meta->n_arrays > 0) {
        r->arrays = xcalloc((size_t)meta->n_arrays, sizeof *r->arrays);
        r->n_arrays = meta->n_arrays;
        for (int i = 0; i < r->n_arrays; i++) {
            const char *name = meta->arrays[i].name;
            r->arrays[i].ds = H5I_INVALID_HID;
            r->arrays[i].f64 = meta->arrays[i].float64;
            r->arrays[i].obj = xmalloc(strlen(name) + 2);
            r->arrays[i].obj[0] = '/';
            strcpy(r->arrays[i].obj + 1, name);
        }
    }
    return r;
}

/* Check the parts of meta that shape the layout; err filled and -1 if one is unusable. */
static int check_meta(const runlog_meta *meta, const char *fn, const char *path, char *err, size_t errlen) {
    if (meta->servers < 0) return seterr(err, errlen, "%s: %s: servers = %d is negative", path, fn, meta->servers), -1;
    if (meta->ranks < 0 || meta->ranks > MAX_RANKS)
        return seterr(err, errlen, "%s: %s: ranks = %d is not in 0..%d", path, fn, meta->ranks, MAX_RANKS), -1;
    if (meta->n_arrays < 0 || (meta->n_arrays > 0 && !meta->arrays))
        return seterr(err, errlen, "%s: %s: %d fixed arrays%s", path, fn, meta->n_arrays,
                      meta->n_arrays < 0 ? " is negative" : " but no array specs"), -1;
    static const char *reserved[] = {"train", "eval", "eval_local", "ranks"};
    for (int i = 0; i < meta->n_arrays; i++) {
        const runlog_array_spec *a = &meta->arrays[i];
        const char *n = a->name;
        if (!n || !n[0] || n[0] == '/' || n[strlen(n) - 1] == '/' || strstr(n, "//"))
            return seterr(err, errlen, "%s: %s: fixed array %d has the name \"%s\" (want a path like "
                          "\"ps/staleness_histogram\": not empty, no leading, trailing or double '/')", path, fn, i, n ? n : "(null)"), -1;
        size_t first = strcspn(n, "/");
        for (size_t k = 0; k < sizeof reserved / sizeof *reserved; k++)
            if (strlen(reserved[k]) == first && strncmp(n, reserved[k], first) == 0)
                return seterr(err, errlen, "%s: %s: fixed array \"%s\" would be inside /%s, which runlog owns",
                              path, fn, n, reserved[k]), -1;
        if (a->rows < 1 || a->cols < 0 || a->rows > (1L << 40) / (a->cols ? a->cols : 1))
            return seterr(err, errlen, "%s: %s: fixed array %s has shape rows = %ld, cols = %ld "
                          "(want rows >= 1, cols >= 0 (0: 1-D), at most 2^40 elements)", path, fn, n, a->rows, a->cols), -1;
    }
    return 0;
}

/* The fixed-size, zero-filled int64 dataset of spec a (parent groups created): contiguous,
 * its storage allocated and filled now, so a later rewrite changes raw data only. */
static hid_t make_array(hid_t f, const runlog_array_spec *a, const char *obj, const char *path, char *err, size_t errlen) {
    hsize_t dims[2] = {(hsize_t)a->rows, (hsize_t)a->cols};
    hid_t space = H5Screate_simple(a->cols ? 2 : 1, dims, NULL);
    if (space < 0) return h5fail(err, errlen, path, "H5Screate_simple", obj);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = H5I_INVALID_HID;
    const int64_t zero = 0;
    const double nan_fill = NAN;
    if (dcpl < 0 || lcpl < 0) h5fail(err, errlen, path, "H5Pcreate", obj);
    else if (H5Pset_create_intermediate_group(lcpl, 1) < 0) h5fail(err, errlen, path, "H5Pset_create_intermediate_group", obj);
    else if (H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0) h5fail(err, errlen, path, "H5Pset_layout", obj);
    else if (H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0) h5fail(err, errlen, path, "H5Pset_alloc_time", obj);
    else if (H5Pset_fill_time(dcpl, H5D_FILL_TIME_ALLOC) < 0) h5fail(err, errlen, path, "H5Pset_fill_time", obj);
    else if (H5Pset_fill_value(dcpl, a->float64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, a->float64 ? (const void *)&nan_fill : (const void *)&zero) < 0)
        h5fail(err, errlen, path, "H5Pset_fill_value", obj);
    else if (H5Pset_obj_track_times(dcpl, 0) < 0) h5fail(err, errlen, path, "H5Pset_obj_track_times", obj);
    else if ((ds = H5Dcreate2(f, a->name, a->float64 ? H5T_IEEE_F64LE : H5T_STD_I64LE, space, lcpl, dcpl, H5P_DEFAULT)) < 0)
        h5fail(err, errlen, path, "H5Dcreate2", obj);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Sclose(space);
    if (ds < 0) return H5I_INVALID_HID;
    if (attr_string(ds, obj, "units", a->units, path, err, errlen) < 0 ||
        attr_string(ds, obj, "description", a->description, path, err, errlen) < 0) {
        H5Dclose(ds);
        return H5I_INVALID_HID;
    }
    return ds;
}

/* The current UTC time, ISO-8601 ("2025-01-31T12:00:00Z"), into buf; -1 if it cannot be read. */
static int utc_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || !gmtime_r(&now, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return -1;
    return 0;
}

/* Root attributes, groups and empty datasets of a new file (all created before SWMR starts). */
static int build_layout(runlog *r, hid_t f, const runlog_meta *meta, const char *path, char *err, size_t errlen) {
    unsigned maj, min, rel;
    if (H5get_libversion(&maj, &min, &rel) < 0) return h5fail(err, errlen, path, "H5get_libversion", "/");
    char h5ver[32], created[32], host[256];
    snprintf(h5ver, sizeof h5ver, "%u.%u.%u", maj, min, rel);
    if (utc_now(created, sizeof created) < 0) return syserr(err, errlen, path, "cannot read the UTC time");
    const char *hostname = meta->hostname;
    if (!hostname) {
        if (gethostname(host, sizeof host) != 0) return syserr(err, errlen, path, "gethostname");
        host[sizeof host - 1] = '\0';
        hostname = host;
    }
    int32_t p = meta->p, b = meta->b, m = meta->m;
    uint64_t seed = meta->seed;
    int64_t iterations = meta->iterations;
    int32_t servers = meta->servers;
    if (attr_string(f, "/", "method", meta->method, path, err, errlen) < 0 ||
        attr_write(f, "/", "p", H5T_STD_I32LE, H5T_NATIVE_INT32, &p, path, err, errlen) < 0 ||
        attr_write(f, "/", "b", H5T_STD_I32LE, H5T_NATIVE_INT32, &b, path, err, errlen) < 0 ||
        attr_write(f, "/", "m", H5T_STD_I32LE, H5T_NATIVE_INT32, &m, path, err, errlen) < 0 ||
        attr_write(f, "/", "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed, path, err, errlen) < 0 ||
        attr_write(f, "/", "iterations", H5T_STD_I64LE, H5T_NATIVE_INT64, &iterations, path, err, errlen) < 0 ||
        attr_write(f, "/", "servers", H5T_STD_I32LE, H5T_NATIVE_INT32, &servers, path, err, errlen) < 0 ||
        attr_string(f, "/", "dsgd_version", DSGD_VERSION, path, err, errlen) < 0 ||
        attr_string(f, "/", "hdf5_version", h5ver, path, err, errlen) < 0 ||
        attr_string(f, "/", "config", meta->config_text, path, err, errlen) < 0 ||
        attr_string(f, "/", "command_line", meta->command_line, path, err, errlen) < 0 ||
        attr_string(f, "/", "hostname", hostname, path, err, errlen) < 0 ||
        attr_string(f, "/", "created", created, path, err, errlen) < 0)
        return -1;
    /* Relative paths in config and command_line are relative to this directory. */
    char cwd[PATHLEN];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "(unknown: %s)", strerror(errno));
    if (attr_string(f, "/", "working_directory", cwd, path, err, errlen) < 0) return -1;
    if (meta->device && attr_string(f, "/", "device", meta->device, path, err, errlen) < 0) return -1;
    for (int i = 0; i < meta->n_attrs; i++) {
        const runlog_attr *a = &meta->attrs[i];
        if (is_own_attr(a->name)) return seterr(err, errlen, "%s: attribute %s is one runlog writes itself", path, a->name) ? -1 : -1;
        if (a->s ? attr_string(f, "/", a->name, a->s, path, err, errlen) < 0
                 : attr_write(f, "/", a->name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &a->i, path, err, errlen) < 0)
            return -1;
    }

    /* /train, /eval and, if asked for, /eval_local (the columns of /eval). */
    for (int g = 0; g < 3; g++) {
        if (g == 2 && !r->has_eval_local) break;
        const char *gname = g == 0 ? "/train" : g == 1 ? "/eval" : "/eval_local";
        hid_t grp = H5Gcreate2(f, gname, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (grp < 0) return h5fail(err, errlen, path, "H5Gcreate2", gname);
        int ncols = g == 0 ? NTRAIN : NEVAL;
        for (int i = 0; i < ncols; i++) {
            const colspec *c = g == 0 ? &train_cols[i] : &eval_cols[i];
            hid_t ftype = i == 0 ? H5T_STD_I64LE : H5T_IEEE_F64LE; /* column 0 is step in all */
            hid_t ds = make_column(grp, gname, c, ftype, g == 0 ? TRAIN_CHUNK : EVAL_CHUNK, 0, path, err, errlen);
            if (ds < 0) { H5Gclose(grp); return -1; }
            if (g == 0) r->train[i] = ds;
            else if (g == 1) r->eval[i] = ds;
            else r->eval_local[i] = ds;
        }
        if (H5Gclose(grp) < 0) return h5fail(err, errlen, path, "H5Gclose", gname);
    }

    /* /ranks: step, and the 2-D [row, ranks] timing datasets with a `columns` attribute. */
    if (r->ranks > 0) {
        hid_t grp = H5Gcreate2(f, "/ranks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (grp < 0) return h5fail(err, errlen, path, "H5Gcreate2", "/ranks");
        char columns[64];
        snprintf(columns, sizeof columns, "worker rank 0..%d", r->ranks - 1);
        r->ranks_step = make_column(grp, "/ranks", &ranks_step_col, H5T_STD_I64LE, RANKS_CHUNK, 0, path, err, errlen);
        if (r->ranks_step < 0) { H5Gclose(grp); return -1; }
        for (int q = 0; q < NRANKS; q++) {
            char obj[64];
            snprintf(obj, sizeof obj, "/ranks/%s", ranks_cols[q].name);
            r->ranks_ds[q] = make_column(grp, "/ranks", &ranks_cols[q], H5T_IEEE_F64LE, RANKS_CHUNK, (hsize_t)r->ranks, path, err, errlen);
            if (r->ranks_ds[q] < 0 || attr_string(r->ranks_ds[q], obj, "columns", columns, path, err, errlen) < 0) {
                H5Gclose(grp);
                return -1;
            }
        }
        if (H5Gclose(grp) < 0) return h5fail(err, errlen, path, "H5Gclose", "/ranks");
    }

    /* The method's fixed-size arrays, zero-filled. */
    for (int i = 0; i < r->n_arrays; i++)
        if ((r->arrays[i].ds = make_array(f, &meta->arrays[i], r->arrays[i].obj, path, err, errlen)) < 0) return -1;
    return 0;
}

runlog *runlog_create(const char *path, int overwrite, const runlog_meta *meta, char *err, size_t errlen) {
    if (!path || !path[0] || !meta) {
        seterr(err, errlen, "runlog_create: %s", !meta ? "no run metadata" : "empty output path");
        return NULL;
    }
    if (strlen(path) >= PATHLEN - 64) {
        seterr(err, errlen, "output path too long (%zu characters): %s", strlen(path), path);
        return NULL;
    }
    /* Our messages replace HDF5's stack dumps (see the header comment). */
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) {
        seterr(err, errlen, "%s: HDF5 H5Eset_auto2 failed", path);
        return NULL;
    }
    struct stat st;
    if (!overwrite && lstat(path, &st) == 0) {
        seterr(err, errlen, already_exists_fmt, path);
        return NULL;
    }
    if (check_meta(meta, "runlog_create", path, err, errlen) < 0) return NULL;
    if (make_parents(path, err, errlen) < 0) return NULL;

    runlog *r = new_runlog(path, meta);

    char tmp[PATHLEN];
    if (temp_name(tmp, sizeof tmp, path, "new") < 0) {
        seterr(err, errlen, "output path too long: %s", path);
        free_runlog(r);
        return NULL;
    }
    hid_t driver = mask_driver();
    if (driver < 0) {
        h5fail(err, errlen, path, "H5FDregister", "the run-file driver");
        free_runlog(r);
        return NULL;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) {
        h5fail(err, errlen, path, "H5Pcreate", "file access properties");
        free_runlog(r);
        return NULL;
    }
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fcpl < 0) {
        h5fail(err, errlen, path, "H5Pcreate", "file creation properties");
        H5Pclose(fapl);
        free_runlog(r);
        return NULL;
    }
    /* Paged aggregation: no metadata block smaller than FILE_PAGE crosses a FILE_PAGE boundary,
     * hence no kernel page boundary, where a killed pwrite can stop (part 2 of the header). */
    int created = 0;
    if (H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0)
        h5fail(err, errlen, path, "H5Pset_libver_bounds", "file access properties");
    else if (H5Pset_driver(fapl, driver, NULL) < 0)
        h5fail(err, errlen, path, "H5Pset_driver", "file access properties");
    else if (H5Pset_file_space_strategy(fcpl, H5F_FSPACE_STRATEGY_PAGE, 0, (hsize_t)1) < 0)
        h5fail(err, errlen, path, "H5Pset_file_space_strategy", "file creation properties");
    else if (H5Pset_file_space_page_size(fcpl, FILE_PAGE) < 0)
        h5fail(err, errlen, path, "H5Pset_file_space_page_size", "file creation properties");
    else if ((r->file = H5Fcreate(tmp, H5F_ACC_EXCL, fcpl, fapl)) < 0)
        h5fail(err, errlen, path, "H5Fcreate", tmp);
    else
        created = 1;
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (!created) goto fail;

    struct stat sb;
    if (stat(tmp, &sb) != 0) { syserr(err, errlen, tmp, "cannot stat the new run file"); goto fail; }
    r->dev = sb.st_dev;
    r->ino = sb.st_ino;
    if (build_layout(r, r->file, meta, path, err, errlen) < 0) goto fail;
    /* From here on only appends: SWMR orders every write so that any prefix is a valid file. */
    if (H5Fstart_swmr_write(r->file) < 0) { h5fail(err, errlen, path, "H5Fstart_swmr_write", "/"); goto fail; }
    if (H5Fflush(r->file, H5F_SCOPE_LOCAL) < 0) { h5fail(err, errlen, path, "H5Fflush", "/"); goto fail; }
    if (publish(tmp, path, overwrite, err, errlen) < 0) goto fail;
    return r;

fail:
    close_handles(r);
    if (created) unlink(tmp);
    free_runlog(r);
    return NULL;
}

int runlog_train(runlog *r, long step, double time_s, double loss, double alpha) {
    if (!r) return -1;
    if (r->failed) return -1;
    int i = r->nbuf++;
    r->buf_step[i] = step;
    r->buf_time[i] = time_s;
    r->buf_loss[i] = loss;
    r->buf_alpha[i] = alpha;
    if (r->nbuf == TRAIN_BUF && write_train(r) < 0) {
        r->failed = 1;
        return -1;
    }
    return 0;
}

int runlog_eval(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                double top5_error) {
    if (!r) return -1;
    if (r->failed) return -1;
    if (append_eval_row(r, r->eval, "/eval", r->n_eval, step, time_s, epoch, loss, top1_error, top5_error) < 0) {
        r->failed = 1;
        return -1;
    }
    r->n_eval++;
    return runlog_flush(r);
}

int runlog_flush(runlog *r) {
    if (!r) return -1;
    if (r->failed) return -1;
    if (write_buffers(r) < 0) { r->failed = 1; return -1; }
    if (H5Fflush(r->file, H5F_SCOPE_LOCAL) < 0) {
        r->failed = 1;
        return h5fail(r->err, sizeof r->err, r->path, "H5Fflush", "/");
    }
    return 0;
}

void runlog_rows_written(const runlog *r, runlog_rows *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!r) return;
    out->train = (long)r->n_train;
    out->eval = (long)r->n_eval;
    out->eval_local = r->has_eval_local ? (long)r->n_eval_local : 0;
    out->ranks = r->ranks > 0 ? (long)r->n_ranks : 0;
}

/* Appended at once (not buffered: one row per evaluation), flushed with the next runlog_eval
 * or at close. */
int runlog_eval_local(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                      double top5_error) {
    if (!r) return -1;
    if (r->failed) return -1;
    if (!r->has_eval_local) {
        seterr(r->err, sizeof r->err, "%s: runlog_eval_local: the file has no /eval_local (created without meta.eval_local)", r->path);
        return -1;
    }
    if (append_eval_row(r, r->eval_local, "/eval_local", r->n_eval_local, step, time_s, epoch, loss, top1_error, top5_error) < 0) {
        r->failed = 1;
        return -1;
    }
    r->n_eval_local++;
    return 0;
}

int runlog_ranks(runlog *r, long step, const double *step_time_s, const double *compute_s, const double *comm_s,
                 const double *wait_s, const double *data_s) {
    if (!r) return -1;
    if (r->failed) return -1;
    if (r->ranks == 0) {
        seterr(r->err, sizeof r->err, "%s: runlog_ranks: the file has no /ranks (created with meta.ranks = 0)", r->path);
        return -1;
    }
    const double *src[NRANKS] = {step_time_s, compute_s, comm_s, wait_s, data_s};
    for (int q = 0; q < R_DATA; q++)
        if (!src[q]) {
            seterr(r->err, sizeof r->err, "%s: runlog_ranks: no values for /ranks/%s", r->path, ranks_cols[q].name);
            return -1;
        }
    int i = r->nrbuf++;
    r->rbuf_step[i] = step;
    for (int q = 0; q < NRANKS; q++)
        if (src[q]) memcpy(r->rbuf[q] + (size_t)i * (size_t)r->ranks, src[q], (size_t)r->ranks * sizeof(double));
        else for (int k = 0; k < r->ranks; k++) r->rbuf[q][(size_t)i * (size_t)r->ranks + (size_t)k] = NAN;
    if (r->nrbuf == RANKS_BUF && write_ranks(r) < 0) {
        r->failed = 1;
        return -1;
    }
    return 0;
}

/* The dataset exists with its final size and allocated storage, so this H5Dwrite changes raw
 * data only (allowed in SWMR mode); it is on disk after the next H5Fflush. */
static int array_write(runlog *r, int index, const void *data, int f64);
int runlog_array(runlog *r, int index, const long long *data) { return array_write(r, index, data, 0); }
int runlog_array_f64(runlog *r, int index, const double *data) { return array_write(r, index, data, 1); }

static int array_write(runlog *r, int index, const void *data, int f64) {
    if (!r) return -1;
    if (r->failed) return -1;
    if (index < 0 || index >= r->n_arrays) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: no fixed array %d (the file has %d)", r->path, index, r->n_arrays);
        return -1;
    }
    if (!data) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: no data for %s", r->path, r->arrays[index].obj);
        return -1;
    }
    if (r->arrays[index].f64 != f64) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: %s holds %s", r->path, r->arrays[index].obj, f64 ? "int64" : "float64");
        return -1;
    }
    if (H5Dwrite(r->arrays[index].ds, f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        r->failed = 1;
        return h5fail(r->err, sizeof r->err, r->path, "H5Dwrite", r->arrays[index].obj);
    }
    return 0;
}

/* Stage a root attribute (replacing an earlier value of the same name). */
static int stage(runlog *r, const char *name, const char *s, double d) {
    if (!r) return -1;
    if (!name || !name[0]) {
        seterr(r->err, sizeof r->err, "%s: root attribute with an empty name", r->path);
        return -1;
    }
    if (is_own_attr(name)) {
        seterr(r->err, sizeof r->err, "%s: root attribute %s is written by runlog itself, not at the end of the run", r->path, name);
        return -1;
    }
    staged_attr *a = NULL;
    for (int i = 0; i < r->nattrs; i++)
        if (strcmp(r->attrs[i].name, name) == 0) a = &r->attrs[i];
    if (!a) {
        if (r->nattrs == r->capattrs) {
            int cap = r->capattrs ? 2 * r->capattrs : 8;
            staged_attr *na = realloc(r->attrs, (size_t)cap * sizeof *na);
            if (!na) DIE("out of memory staging attribute %s", name);
            r->attrs = na;
            r->capattrs = cap;
        }
        a = &r->attrs[r->nattrs++];
        a->name = xmalloc(strlen(name) + 1);
        strcpy(a->name, name);
    } else {
        free(a->s);
    }
    a->s = NULL;
    a->d = d;
    if (s) {
        a->s = xmalloc(strlen(s) + 1);
        strcpy(a->s, s);
    }
    return 0;
}

int runlog_set_attr_double(runlog *r, const char *name, double v) { return stage(r, name, NULL, v); }

int runlog_set_attr_string(runlog *r, const char *name, const char *v) { return stage(r, name, v ? v : "", 0); }

const char *runlog_error(const runlog *r) { return r ? r->err : "no run file"; }

/* Copy src to dst (a new file) byte for byte. */
static int copy_file(const char *src, const char *dst, char *err, size_t errlen) {
    int in = open(src, O_RDONLY);
    if (in < 0) return syserr(err, errlen, src, "cannot open for copying");
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (out < 0) { close(in); return syserr(err, errlen, dst, "cannot create"); }
    char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { rc = syserr(err, errlen, src, "read"); break; }
        if (n == 0) break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) { rc = syserr(err, errlen, dst, "write"); break; }
            off += w;
        }
        if (rc < 0) break;
    }
    close(in);
    if (close(out) != 0 && rc == 0) rc = syserr(err, errlen, dst, "close");
    return rc;
}

/* Add the staged attributes: copy the closed file, write them into the copy in ordinary mode,
 * rename the copy over the run file (part 5 of the header comment). */
static int write_final_attrs(runlog *r) {
    char tmp[PATHLEN];
    if (temp_name(tmp, sizeof tmp, r->path, "final") < 0) {
        seterr(r->err, sizeof r->err, "output path too long: %s", r->path);
        return -1;
    }
    if (copy_file(r->path, tmp, r->err, sizeof r->err) < 0) {
        unlink(tmp);
        return -1;
    }
    int rc = 0;
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) rc = h5fail(r->err, sizeof r->err, tmp, "H5Fopen", "the copy of the run file");
    size_t listlen = 1;
    for (int i = 0; rc == 0 && i < r->nattrs; i++) {
        const staged_attr *a = &r->attrs[i];
        rc = a->s ? attr_string(f, "/", a->name, a->s, r->path, r->err, sizeof r->err)
                  : attr_write(f, "/", a->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &a->d, r->path, r->err, sizeof r->err);
        listlen += strlen(a->name) + 1;
    }
    /* Their names, one per line: the attributes runlog_resume removes. */
    if (rc == 0) {
        char *list = xmalloc(listlen), *end = list;
        for (int i = 0; i < r->nattrs; i++) end += sprintf(end, "%s%s", i ? "\n" : "", r->attrs[i].name);
        *end = '\0';
        rc = attr_string(f, "/", "final_attributes", list, r->path, r->err, sizeof r->err);
        free(list);
    }
    if (f >= 0 && H5Fclose(f) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, tmp, "H5Fclose", "the copy of the run file");
    if (rc == 0 && rename(tmp, r->path) != 0) rc = syserr(r->err, sizeof r->err, r->path, "cannot rename the finished run file into place");
    if (rc != 0) unlink(tmp);
    return rc;
}

int runlog_close(runlog *r) {
    if (!r) return 0;
    int rc = r->failed ? -1 : 0; /* an earlier failure was already reported by its caller */
    if (rc == 0 && write_buffers(r) < 0) rc = -1;
    for (int i = 0; i < NTRAIN; i++)
        if (H5Dclose(r->train[i]) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", train_cols[i].name);
    for (int i = 0; i < NEVAL; i++)
        if (H5Dclose(r->eval[i]) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", eval_cols[i].name);
    for (int i = 0; i < NEVAL && r->has_eval_local; i++)
        if (H5Dclose(r->eval_local[i]) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", eval_cols[i].name);
    if (r->ranks > 0) {
        if (H5Dclose(r->ranks_step) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", "/ranks/step");
        for (int q = 0; q < NRANKS; q++)
            if (H5Dclose(r->ranks_ds[q]) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", ranks_cols[q].name);
    }
    for (int i = 0; i < r->n_arrays; i++)
        if (H5Dclose(r->arrays[i].ds) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", r->arrays[i].obj);
    if (H5Fclose(r->file) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Fclose", "/");
    /* Another run given the same output with overwrite = true may have replaced our file:
     * never finish (or report success for) a file that is not the one this run wrote. */
    struct stat sb;
    if (rc == 0 && (stat(r->path, &sb) != 0 || sb.st_dev != r->dev || sb.st_ino != r->ino)) {
        seterr(r->err, sizeof r->err, "%s was replaced by another run while this one was writing it "
               "(two runs with the same output and overwrite = true?): this run's results are lost", r->path);
        rc = -1;
    }
    if (rc == 0 && r->nattrs > 0) rc = write_final_attrs(r);
    /* r is freed below, so nobody could ask runlog_error: say it here. */
    if (rc != 0 && !r->failed) fprintf(stderr, "dsgd-run: error closing the run file: %s\n", r->err);
    free_runlog(r);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Resume from a checkpoint (part 6 of the header comment).                                    */

/* err = "cannot resume <path>: <why>"; returns -1. */
static int refuse(char *err, size_t errlen, const char *path, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int refuse(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char why[ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    seterr(err, errlen, "cannot resume %s: %s", path, why);
    return -1;
}

/* Does name (an absolute path in the file) exist? Checked component by component, as
 * H5Lexists requires. 1 yes, 0 no, -1 HDF5 failure. */
static htri_t obj_exists(hid_t f, const char *name) {
    char buf[PATHLEN];
    snprintf(buf, sizeof buf, "%s", name);
    for (char *p = buf + 1;;) {
        char *slash = strchr(p, '/');
        if (slash) *slash = '\0';
        htri_t e = H5Lexists(f, buf, H5P_DEFAULT);
        if (e <= 0 || !slash) return e;
        *slash = '/';
        p = slash + 1;
    }
}

/* Root attribute name of f, which must exist and be of class cls (its file type's class), else
 * the file is not one of ours. Returns the open attribute or -1 (err filled). */
static hid_t open_root_attr(hid_t f, const char *name, H5T_class_t cls, const char *path, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    htri_t e = H5Aexists(f, name);
    if (e < 0) return h5fail(err, errlen, path, "H5Aexists", what);
    if (e == 0) return refuse(err, errlen, path, "it is not a dsgd-run run file (no root attribute %s)", name);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) return h5fail(err, errlen, path, "H5Aopen", what);
    hid_t t = H5Aget_type(a);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (t >= 0) H5Tclose(t);
    if (c != cls) {
        H5Aclose(a);
        return refuse(err, errlen, path, "it is not a dsgd-run run file (root attribute %s is not %s)", name,
                      cls == H5T_STRING ? "a string" : "an integer");
    }
    return a;
}

/* Read string root attribute name into a new allocation (*out; free it). */
static int root_string(hid_t f, const char *name, char **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    hid_t a = open_root_attr(f, name, H5T_STRING, path, err, errlen);
    if (a < 0) return -1;
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    hid_t t = H5Tcopy(H5T_C_S1);
    char *s = NULL;
    int rc = 0;
    if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
        rc = h5fail(err, errlen, path, "H5Tcopy/H5Tset_size/H5Tset_cset", "string type");
    else if (H5Aread(a, t, &s) < 0)
        rc = h5fail(err, errlen, path, "H5Aread", what);
    if (rc == 0) {
        size_t n = s ? strlen(s) : 0;
        *out = xmalloc(n + 1);
        memcpy(*out, s ? s : "", n + 1);
    }
    if (s) H5free_memory(s);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* Read integer root attribute name as mtype (H5T_NATIVE_INT64 or _UINT64) into out. */
static int root_integer(hid_t f, const char *name, hid_t mtype, void *out, const char *path, char *err, size_t errlen) {
    hid_t a = open_root_attr(f, name, H5T_INTEGER, path, err, errlen);
    if (a < 0) return -1;
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    int rc = H5Aread(a, mtype, out) < 0 ? h5fail(err, errlen, path, "H5Aread", what) : 0;
    H5Aclose(a);
    return rc;
}

/* Open dataset obj of a run file: 1-D, or 2-D of cols columns (the /ranks timing datasets), with
 * unlimited rows. Its rows into *n. -1 with err filled if it is missing or shaped otherwise. */
static hid_t open_column(hid_t f, const char *obj, int cols, hsize_t *n, const char *path, char *err, size_t errlen) {
    htri_t e = obj_exists(f, obj);
    if (e < 0) return h5fail(err, errlen, path, "H5Lexists", obj);
    if (e == 0) return refuse(err, errlen, path, "it is not a dsgd-run run file (no dataset %s)", obj);
    hid_t ds = H5Dopen2(f, obj, H5P_DEFAULT);
    if (ds < 0) return h5fail(err, errlen, path, "H5Dopen2", obj);
    hid_t space = H5Dget_space(ds);
    if (space < 0) { H5Dclose(ds); return h5fail(err, errlen, path, "H5Dget_space", obj); }
    hsize_t dims[2] = {0, 0}, maxd[2] = {0, 0};
    int nd = H5Sget_simple_extent_ndims(space);
    int ok = nd == (cols ? 2 : 1) && H5Sget_simple_extent_dims(space, dims, maxd) >= 0 && maxd[0] == H5S_UNLIMITED;
    H5Sclose(space);
    H5Eclear2(H5E_DEFAULT);
    if (!ok) {
        H5Dclose(ds);
        return refuse(err, errlen, path, "it is not a dsgd-run run file (%s is not a %s dataset of unlimited rows)", obj,
                      cols ? "2-D" : "1-D");
    }
    if (cols && dims[1] != (hsize_t)cols) {
        H5Dclose(ds);
        return refuse(err, errlen, path, "the run file has ranks = %llu (columns of %s), the experiment ranks = %d",
                      (unsigned long long)dims[1], obj, cols);
    }
    *n = dims[0];
    return ds;
}

/* "[4, 4] int64" for a fixed array's shape and type. */
static void shape_text(char *buf, size_t n, int nd, const hsize_t *dims, int f64) {
    if (nd == 2) snprintf(buf, n, "[%llu, %llu] %s", (unsigned long long)dims[0], (unsigned long long)dims[1], f64 ? "float64" : "int64");
    else snprintf(buf, n, "[%llu] %s", (unsigned long long)dims[0], f64 ? "float64" : "int64");
}

/* Fixed array i of meta in the run file: same name, shape and type, else -1 with err filled. */
static hid_t open_array(hid_t f, const runlog_meta *meta, int i, const char *obj, const char *path, char *err, size_t errlen) {
    const runlog_array_spec *a = &meta->arrays[i];
    hsize_t want[2] = {(hsize_t)a->rows, (hsize_t)a->cols};
    char wants[96];
    shape_text(wants, sizeof wants, a->cols ? 2 : 1, want, a->float64);
    htri_t e = obj_exists(f, obj);
    if (e < 0) return h5fail(err, errlen, path, "H5Lexists", obj);
    if (e == 0) return refuse(err, errlen, path, "the run file has no fixed array %s, the experiment has one (%s)", obj, wants);
    hid_t ds = H5Dopen2(f, obj, H5P_DEFAULT);
    if (ds < 0) return h5fail(err, errlen, path, "H5Dopen2", obj);
    hid_t space = H5Dget_space(ds), t = H5Dget_type(ds);
    hsize_t dims[2] = {0, 0};
    int nd = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (nd == 1 || nd == 2) H5Sget_simple_extent_dims(space, dims, NULL);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    size_t size = t < 0 ? 0 : H5Tget_size(t);
    if (space >= 0) H5Sclose(space);
    if (t >= 0) H5Tclose(t);
    H5Eclear2(H5E_DEFAULT);
    int f64 = c == H5T_FLOAT;
    if ((c != H5T_FLOAT && c != H5T_INTEGER) || size != 8 || (nd != 1 && nd != 2)) {
        H5Dclose(ds);
        return refuse(err, errlen, path, "it is not a dsgd-run run file (%s is not a 1-D or 2-D int64 or float64 dataset)", obj);
    }
    if (nd != (a->cols ? 2 : 1) || dims[0] != want[0] || (nd == 2 && dims[1] != want[1]) || f64 != (a->float64 != 0)) {
        char has[96];
        shape_text(has, sizeof has, nd, dims, f64);
        H5Dclose(ds);
        return refuse(err, errlen, path, "the run file has fixed array %s of %s, the experiment %s", obj, has, wants);
    }
    return ds;
}

/* Check that r->file is a run file of meta's layout with at least keep complete rows in every
 * group, and open all its datasets into r. err: "cannot resume <path>: ..." for a file that is
 * not this experiment's, an HDF5 message for a failure. r->n_* are not touched. */
static int open_layout(runlog *r, const runlog_meta *meta, const runlog_rows *keep, char *err, size_t errlen) {
    hid_t f = r->file;
    const char *path = r->path;
    /* Is it ours, and this experiment's? */
    char *version = NULL, *method = NULL;
    if (root_string(f, "dsgd_version", &version, path, err, errlen) < 0) return -1;
    free(version);
    if (root_string(f, "method", &method, path, err, errlen) < 0) return -1;
    const char *want = meta->method ? meta->method : "";
    if (strcmp(method, want) != 0) {
        refuse(err, errlen, path, "the run file has method %s, the experiment method %s", method, want);
        free(method);
        return -1;
    }
    free(method);
    const struct { const char *name; long long v; } ints[] = {
        {"p", meta->p}, {"b", meta->b}, {"m", meta->m}, {"iterations", meta->iterations}, {"servers", meta->servers},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        int64_t v = 0;
        if (root_integer(f, ints[i].name, H5T_NATIVE_INT64, &v, path, err, errlen) < 0) return -1;
        if (v != ints[i].v)
            return refuse(err, errlen, path, "the run file has %s = %lld, the experiment %s = %lld", ints[i].name, (long long)v,
                          ints[i].name, ints[i].v);
    }
    uint64_t seed = 0;
    if (root_integer(f, "seed", H5T_NATIVE_UINT64, &seed, path, err, errlen) < 0) return -1;
    if (seed != meta->seed)
        return refuse(err, errlen, path, "the run file has seed = %llu, the experiment seed = %llu", (unsigned long long)seed,
                      meta->seed);

    /* The optional groups: present exactly when meta asks for them. */
    htri_t has_el = obj_exists(f, "/eval_local"), has_ranks = obj_exists(f, "/ranks");
    if (has_el < 0 || has_ranks < 0) return h5fail(err, errlen, path, "H5Lexists", has_el < 0 ? "/eval_local" : "/ranks");
    if ((has_el > 0) != r->has_eval_local)
        return refuse(err, errlen, path, has_el ? "the run file has /eval_local, the experiment none (eval_local = 0)"
                                                : "the run file has no /eval_local, the experiment eval_local = 1");
    if (has_ranks > 0 && r->ranks == 0) return refuse(err, errlen, path, "the run file has /ranks, the experiment none (ranks = 0)");
    if (has_ranks == 0 && r->ranks > 0)
        return refuse(err, errlen, path, "the run file has no /ranks, the experiment ranks = %d", r->ranks);

    /* Every column, with the complete rows of each group (its shortest column). */
    hsize_t rows[4] = {(hsize_t)-1, (hsize_t)-1, (hsize_t)-1, (hsize_t)-1}, n;
    char obj[64];
    for (int i = 0; i < NTRAIN; i++) {
        snprintf(obj, sizeof obj, "/train/%s", train_cols[i].name);
        if ((r->train[i] = open_column(f, obj, 0, &n, path, err, errlen)) < 0) return -1;
        if (n < rows[0]) rows[0] = n;
    }
    for (int g = 1; g <= 2; g++) {
        if (g == 2 && !r->has_eval_local) break;
        for (int i = 0; i < NEVAL; i++) {
            snprintf(obj, sizeof obj, "%s/%s", g == 1 ? "/eval" : "/eval_local", eval_cols[i].name);
            hid_t ds = open_column(f, obj, 0, &n, path, err, errlen);
            if (ds < 0) return -1;
            if (g == 1) r->eval[i] = ds;
            else r->eval_local[i] = ds;
            if (n < rows[g]) rows[g] = n;
        }
    }
    if (r->ranks > 0) {
        if ((r->ranks_step = open_column(f, "/ranks/step", 0, &n, path, err, errlen)) < 0) return -1;
        rows[3] = n;
        for (int q = 0; q < NRANKS; q++) {
            snprintf(obj, sizeof obj, "/ranks/%s", ranks_cols[q].name);
            if ((r->ranks_ds[q] = open_column(f, obj, r->ranks, &n, path, err, errlen)) < 0) return -1;
            if (n < rows[3]) rows[3] = n;
        }
    }
    for (int i = 0; i < r->n_arrays; i++)
        if ((r->arrays[i].ds = open_array(f, meta, i, r->arrays[i].obj, path, err, errlen)) < 0) return -1;

    /* The checkpoint's rows must all be there. */
    const long want_rows[4] = {keep->train, keep->eval, keep->eval_local, keep->ranks};
    const char *gname[4] = {"/train", "/eval", "/eval_local", "/ranks"};
    for (int g = 0; g < 4; g++) {
        hsize_t have = rows[g] == (hsize_t)-1 ? 0 : rows[g];
        if ((hsize_t)want_rows[g] > have)
            return refuse(err, errlen, path, "the run file has %llu %s rows but the checkpoint was taken after %ld: "
                          "it is not the file this checkpoint belongs to", (unsigned long long)have, gname[g], want_rows[g]);
    }
    return 0;
}

/* Element i of the 1-D int64 dataset ds into *v. */
static int read_step(runlog *r, hid_t ds, const char *obj, hsize_t i, int64_t *v, char *err, size_t errlen) {
    hsize_t one = 1;
    hid_t fspace = H5Dget_space(ds);
    if (fspace < 0) return h5fail(err, errlen, r->path, "H5Dget_space", obj);
    hid_t mspace = H5Screate_simple(1, &one, NULL);
    int rc = 0;
    if (mspace < 0) rc = h5fail(err, errlen, r->path, "H5Screate_simple", obj);
    else if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &i, NULL, &one, NULL) < 0)
        rc = h5fail(err, errlen, r->path, "H5Sselect_hyperslab", obj);
    else if (H5Dread(ds, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, v) < 0)
        rc = h5fail(err, errlen, r->path, "H5Dread", obj);
    if (mspace >= 0) H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

/* Cut every dataset of r->file back to keep rows, and find the largest step among the rows kept. */
static int cut_rows(runlog *r, const runlog_rows *keep, int64_t *last_step, char *err, size_t errlen) {
    *last_step = 0;
    struct { hid_t *ds; int n; const colspec *cols; const char *gname; long keep; hsize_t width; } groups[] = {
        {r->train, NTRAIN, train_cols, "/train", keep->train, 0},
        {r->eval, NEVAL, eval_cols, "/eval", keep->eval, 0},
        {r->eval_local, r->has_eval_local ? NEVAL : 0, eval_cols, "/eval_local", keep->eval_local, 0},
        {&r->ranks_step, r->ranks > 0 ? 1 : 0, &ranks_step_col, "/ranks", keep->ranks, 0},
        {r->ranks_ds, r->ranks > 0 ? NRANKS : 0, ranks_cols, "/ranks", keep->ranks, (hsize_t)r->ranks},
    };
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
        for (int i = 0; i < groups[g].n; i++) {
            char obj[64];
            snprintf(obj, sizeof obj, "%s/%s", groups[g].gname, groups[g].cols[i].name);
            if (i == 0 && groups[g].width == 0 && groups[g].keep > 0) { /* column 0 is step */
                int64_t s;
                if (read_step(r, groups[g].ds[0], obj, (hsize_t)groups[g].keep - 1, &s, err, errlen) < 0) return -1;
                if (s > *last_step) *last_step = s;
            }
            hsize_t dims[2] = {(hsize_t)groups[g].keep, groups[g].width};
            if (H5Dset_extent(groups[g].ds[i], dims) < 0) return h5fail(err, errlen, r->path, "H5Dset_extent", obj);
        }
    return 0;
}

/* Delete root attribute name of f if it is there. */
static int drop_root_attr(hid_t f, const char *name, const char *path, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    htri_t e = H5Aexists(f, name);
    if (e < 0) return h5fail(err, errlen, path, "H5Aexists", what);
    if (e > 0 && H5Adelete(f, name) < 0) return h5fail(err, errlen, path, "H5Adelete", what);
    return 0;
}

/* The root attributes of a resume: the earlier run's end-of-run attributes removed, resumes
 * incremented, "step <last_step> at <UTC time> (<note>)" appended to resumed_at. */
static int resume_attrs(runlog *r, int64_t last_step, const char *note, char *err, size_t errlen) {
    hid_t f = r->file;
    const char *path = r->path;
    for (size_t i = 0; i < sizeof usual_final_attrs / sizeof *usual_final_attrs; i++)
        if (drop_root_attr(f, usual_final_attrs[i], path, err, errlen) < 0) return -1;
    htri_t e = H5Aexists(f, "final_attributes");
    if (e < 0) return h5fail(err, errlen, path, "H5Aexists", "attribute final_attributes of /");
    if (e > 0) {
        char *list;
        if (root_string(f, "final_attributes", &list, path, err, errlen) < 0) return -1;
        int rc = 0;
        for (char *name = strtok(list, "\n"); name && rc == 0; name = strtok(NULL, "\n"))
            if (!is_own_attr(name)) rc = drop_root_attr(f, name, path, err, errlen);
        free(list);
        if (rc < 0 || drop_root_attr(f, "final_attributes", path, err, errlen) < 0) return -1;
    }

    int64_t resumes = 0;
    if ((e = H5Aexists(f, "resumes")) < 0) return h5fail(err, errlen, path, "H5Aexists", "attribute resumes of /");
    if (e > 0 && root_integer(f, "resumes", H5T_NATIVE_INT64, &resumes, path, err, errlen) < 0) return -1;
    resumes++;
    if (attr_write(f, "/", "resumes", H5T_STD_I64LE, H5T_NATIVE_INT64, &resumes, path, err, errlen) < 0) return -1;

    char when[32];
    if (utc_now(when, sizeof when) < 0) return syserr(err, errlen, path, "cannot read the UTC time");
    char *old = NULL;
    if ((e = H5Aexists(f, "resumed_at")) < 0) return h5fail(err, errlen, path, "H5Aexists", "attribute resumed_at of /");
    if (e > 0 && root_string(f, "resumed_at", &old, path, err, errlen) < 0) return -1;
    int has_note = note && note[0];
    size_t len = (old ? strlen(old) + 1 : 0) + 64 + (has_note ? strlen(note) + 3 : 0) + 1;
    char *lines = xmalloc(len);
    snprintf(lines, len, "%s%sstep %lld at %s%s%s%s", old ? old : "", old && old[0] ? "\n" : "", (long long)last_step, when,
             has_note ? " (" : "", has_note ? note : "", has_note ? ")" : "");
    free(old);
    int rc = attr_string(f, "/", "resumed_at", lines, path, err, errlen);
    free(lines);
    return rc;
}

runlog *runlog_resume(const char *path, const runlog_meta *meta, const runlog_rows *keep, const char *resume_note,
                      char *err, size_t errlen) {
    if (!path || !path[0] || !meta || !keep) {
        seterr(err, errlen, "runlog_resume: %s", !meta ? "no run metadata" : !keep ? "no checkpoint row counts" : "empty output path");
        return NULL;
    }
    if (strlen(path) >= PATHLEN - 64) {
        seterr(err, errlen, "output path too long (%zu characters): %s", strlen(path), path);
        return NULL;
    }
    if (keep->train < 0 || keep->eval < 0 || keep->eval_local < 0 || keep->ranks < 0) {
        refuse(err, errlen, path, "the checkpoint's row counts are negative (train %ld, eval %ld, eval_local %ld, ranks %ld)",
               keep->train, keep->eval, keep->eval_local, keep->ranks);
        return NULL;
    }
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) {
        seterr(err, errlen, "%s: HDF5 H5Eset_auto2 failed", path);
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        refuse(err, errlen, path, "%s", strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        refuse(err, errlen, path, "it is not a regular file");
        return NULL;
    }
    if (check_meta(meta, "runlog_resume", path, err, errlen) < 0) return NULL;
    hid_t driver = mask_driver();
    if (driver < 0) {
        h5fail(err, errlen, path, "H5FDregister", "the run-file driver");
        return NULL;
    }

    /* 1. Read-only: this experiment's file, with the checkpoint's rows? A refusal writes nothing. */
    runlog *r = new_runlog(path, meta);
    if ((r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        char why[ERRLEN];
        h5_message(why, sizeof why);
        refuse(err, errlen, path, "it is not a dsgd-run run file (HDF5 cannot open it: %s)", why);
        free_runlog(r);
        return NULL;
    }
    int ok = open_layout(r, meta, keep, err, errlen) == 0;
    close_handles(r);
    if (!ok) {
        free_runlog(r);
        return NULL;
    }

    /* 2. A copy beside it, opened as runlog_create opens a new file, checked again (it is what
     *    gets published), cut back to the checkpoint, its root attributes updated. */
    char tmp[PATHLEN];
    int copied = 0;
    if (temp_name(tmp, sizeof tmp, path, "resume") < 0) {
        seterr(err, errlen, "output path too long: %s", path);
        goto fail;
    }
    copied = 1; /* from here on, tmp may exist */
    if (copy_file(path, tmp, err, errlen) < 0) goto fail;
    struct stat sb;
    if (stat(tmp, &sb) != 0) { syserr(err, errlen, tmp, "cannot stat the copy of the run file"); goto fail; }
    r->dev = sb.st_dev; /* rename() keeps the inode: runlog_close's check sees this file */
    r->ino = sb.st_ino;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) { h5fail(err, errlen, path, "H5Pcreate", "file access properties"); goto fail; }
    if (H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0)
        h5fail(err, errlen, path, "H5Pset_libver_bounds", "file access properties");
    else if (H5Pset_driver(fapl, driver, NULL) < 0)
        h5fail(err, errlen, path, "H5Pset_driver", "file access properties");
    else if ((r->file = H5Fopen(tmp, H5F_ACC_RDWR, fapl)) < 0)
        h5fail(err, errlen, path, "H5Fopen", tmp);
    H5Pclose(fapl);
    if (r->file < 0) goto fail;
    int64_t last_step;
    if (open_layout(r, meta, keep, err, errlen) < 0 || cut_rows(r, keep, &last_step, err, errlen) < 0 ||
        resume_attrs(r, last_step, resume_note, err, errlen) < 0)
        goto fail;

    /* 3. As for a new file: SWMR, flush, then the rename publishes it in one step. */
    if (H5Fstart_swmr_write(r->file) < 0) { h5fail(err, errlen, path, "H5Fstart_swmr_write", "/"); goto fail; }
    if (H5Fflush(r->file, H5F_SCOPE_LOCAL) < 0) { h5fail(err, errlen, path, "H5Fflush", "/"); goto fail; }
    if (rename(tmp, path) != 0) { syserr(err, errlen, path, "cannot rename the resumed run file into place"); goto fail; }
    r->n_train = (hsize_t)keep->train;
    r->n_eval = (hsize_t)keep->eval;
    r->n_eval_local = (hsize_t)keep->eval_local;
    r->n_ranks = (hsize_t)keep->ranks;
    return r;

fail:
    close_handles(r);
    if (copied) unlink(tmp);
    free_runlog(r);
    return NULL;
}

void runlog_library_version(char *buf, size_t n) {
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    snprintf(buf, n, "HDF5 %u.%u.%u", maj, min, rel);
}
