/* LMDB image stores in MMEditing's layout (mmcv's LmdbBackend, MMEditing's
 * make_lmdb): a folder NAME.lmdb with LMDB's data.mdb and lock.mdb, one
 * value per image (its PNG file's bytes) under the image's name without
 * extension, and meta_info.txt listing "name.png (h,w,c) level" per image.
 * The reader is the SR datasets' (data_internal.h); the writer is
 * duet_lmdb_write_folder (duet/data.h). Debian's liblmdb. */
#include "data/data_internal.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct duet__lmdb {
    MDB_env *env;
    MDB_dbi dbi;
    char *path;
};

/* LMDB maps data.mdb and reads its pages in place: a file cut short (a
 * copy that did not finish, a full disk) gives SIGBUS on the first read
 * past its end, not an error. So before mapping, the file's size is checked
 * against the pages its newest meta page says are in use: pages 0 and 1
 * are meta pages (a 16-byte page header, then MDB_meta: magic 0xBEEFC0DE,
 * version, address, mapsize, two MDB_db records of 48 bytes whose first
 * holds the page size, the last page number and the transaction id; all
 * little-endian on the 64-bit machines duet runs on). */
static uint64_t le_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* The main database's B-tree, page by page, as liblmdb would follow it: it
 * trusts the file, so a page whose node offsets, child pages or value pages
 * point past the file reads outside the map (SIGBUS, found by
 * fuzz/fuzz_lmdb.c). Every branch and leaf page is read once (a few hundred
 * for DIV2K's 32k sub-images; the images themselves, in overflow pages,
 * only have their bounds checked). Page layout (64-bit): pgno (8), pad (2),
 * flags (2), lower (2), upper (2) or an overflow page's count (4), then
 * lower's worth of 16-bit node offsets; a node: data size or child page
 * (lo 2, hi 2, flags 2), key size (2), key, data. Returns false when a page
 * is not what its parent says. */
enum { PAGEHDR = 16, NODEHDR = 8, P_BRANCH = 1, P_LEAF = 2, P_OVERFLOW = 4, F_BIGDATA = 1 };

typedef struct lmdb_walk {
    int fd;
    uint32_t psize;
    uint64_t last, pages_left;
    unsigned char *page;
} lmdb_walk;

static bool read_page(lmdb_walk *w, uint64_t pgno) {
    if (pgno < 2 || pgno > w->last || w->pages_left == 0) return false;
    w->pages_left--;
    return pread(w->fd, w->page, w->psize, (off_t)(pgno * w->psize)) == (ssize_t)w->psize &&
           le_u64(w->page) == pgno;
}

static bool walk_page(lmdb_walk *w, uint64_t pgno, int depth) {
    if (depth > 64 || !read_page(w, pgno)) return false;
    const unsigned char *pg = w->page;
    const uint16_t flags = le_u16(pg + 10), lower = le_u16(pg + 12), upper = le_u16(pg + 14);
    const bool branch = (flags & (P_BRANCH | P_LEAF)) == P_BRANCH;
    if (!branch && (flags & (P_BRANCH | P_LEAF | 0x20 | 0x40)) != P_LEAF) return false;
    if (lower < PAGEHDR || lower > upper || upper > w->psize || (lower & 1) != 0) return false;
    const int n = (lower - PAGEHDR) / 2;
    if (branch && n < 1) return false;
    /* The children are walked after this page's checks: the buffer is reused. */
    uint64_t *kids = branch ? malloc((size_t)n * sizeof *kids) : NULL;
    if (branch && kids == NULL) return false;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        const uint16_t at = le_u16(pg + PAGEHDR + 2 * i);
        if (at < upper || (uint32_t)at + NODEHDR > w->psize) {
            ok = false;
            break;
        }
        const unsigned char *node = pg + at;
        const uint32_t lo = le_u16(node), hi = le_u16(node + 2), nflags = le_u16(node + 4);
        const uint32_t ksize = le_u16(node + 6);
        if (branch) {
            ok = (uint32_t)at + NODEHDR + ksize <= w->psize;
            kids[i] = (uint64_t)lo | (uint64_t)hi << 16 | (uint64_t)nflags << 32;
            continue;
        }
        const uint32_t dsize = lo | hi << 16;
        if (nflags & ~F_BIGDATA) { /* sub-databases, duplicates: not MMEditing's layout */
            ok = false;
        } else if (nflags & F_BIGDATA) {
            ok = (uint32_t)at + NODEHDR + ksize + 8 <= w->psize;
            if (ok) { /* the value's overflow pages, without their bytes */
                const uint64_t first = le_u64(node + NODEHDR + ksize);
                unsigned char head[PAGEHDR];
                uint32_t count = 0;
                ok = first >= 2 && first <= w->last &&
                     pread(w->fd, head, PAGEHDR, (off_t)(first * w->psize)) == PAGEHDR &&
                     le_u64(head) == first && (le_u16(head + 10) & P_OVERFLOW) != 0;
                if (ok) count = le_u32(head + 12);
                ok = ok && count >= 1 && count - 1 <= w->last - first &&
                     (uint64_t)dsize + PAGEHDR <= (uint64_t)count * w->psize;
            }
        } else {
            ok = (uint64_t)at + NODEHDR + ksize + dsize <= w->psize;
        }
    }
    for (int i = 0; i < n && ok && branch; i++) ok = walk_page(w, kids[i], depth + 1);
    free(kids);
    return ok;
}

int duet__lmdb_check_size(const char *dir) {
    char *path = duet__path_join(dir, "data.mdb");
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    int rc = DUET_OK;
    FILE *f = NULL;
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        rc = duet__error(errno == ENOENT ? DUET_ENOTFOUND : DUET_EIO, "cannot open LMDB %s: %s: "
                         "%s", dir, path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = duet__error(DUET_EFORMAT, "cannot open LMDB %s: %s is not a regular file", dir, path);
        goto done;
    }
    if ((f = fopen(path, "rb")) == NULL) {
        rc = duet__error(DUET_EIO, "cannot open LMDB %s: %s: %s", dir, path, strerror(errno));
        goto done;
    }
    enum { META = 16, HEAD = META + 136 };
    /* liblmdb reads the second meta page at the first one's page size and
     * then pages at the newest meta's: both must agree, and every root and
     * the last page must lie inside the file. */
    unsigned char m[2][HEAD];
    uint64_t best_txn = 0, need = 0;
    uint32_t psize = 0;
    bool any = false, bad = false;
    int best = 0;
    if (fread(m[0], 1, HEAD, f) == HEAD) psize = le_u32(m[0] + META + 24);
    const bool psize_ok = psize >= 512 && psize <= (1u << 20) && (psize & (psize - 1)) == 0;
    for (int k = 0; k < 2 && psize_ok; k++) {
        if (k == 1 && (fseeko(f, (off_t)psize, SEEK_SET) != 0 || fread(m[1], 1, HEAD, f) != HEAD))
            break;
        const unsigned char *meta = m[k] + META;
        if (le_u32(meta) != 0xBEEFC0DEu) continue;
        if (le_u32(meta + 24) != psize) bad = true;
        uint64_t last = le_u64(meta + 120), txn = le_u64(meta + 128);
        /* The roots of the free and main databases (P_INVALID: empty). */
        for (int d = 0; d < 2; d++) {
            uint64_t root = le_u64(meta + 24 + 48 * d + 40);
            if (root != UINT64_MAX && root > last) bad = true;
        }
        if (!any || txn > best_txn) {
            any = true;
            best = k;
            best_txn = txn;
            need = last < UINT64_MAX / psize - 1 ? (last + 1) * psize : UINT64_MAX;
        }
    }
    if (any && !bad && (uint64_t)sb.st_size >= need) {
        /* The main database's root in the newest meta page (P_INVALID: empty). */
        const unsigned char *meta = m[best] + META;
        const uint64_t root = le_u64(meta + 24 + 48 + 40);
        lmdb_walk w = {fileno(f), psize, le_u64(meta + 120), le_u64(meta + 120) + 1,
                       malloc(psize)};
        if (w.page == NULL) {
            rc = duet__error(DUET_ENOMEM, "LMDB %s: out of memory", dir);
            goto done;
        }
        if (root != UINT64_MAX && !walk_page(&w, root, 0)) bad = true;
        free(w.page);
    }
    if (!any || bad)
        rc = duet__error(DUET_EFORMAT, "cannot open LMDB %s: %s has no valid meta page (%lld "
                         "bytes; not an LMDB, or a damaged one: make it again with duet prepare "
                         "div2k --lmdb)", dir, path, (long long)sb.st_size);
    else if ((uint64_t)sb.st_size < need)
        rc = duet__error(DUET_EFORMAT, "cannot open LMDB %s: %s is %lld bytes, but its pages "
                         "need %llu (cut short: a copy that did not finish, or a full disk); "
                         "make it again with duet prepare div2k --lmdb", dir, path,
                         (long long)sb.st_size, (unsigned long long)need);
done:
    if (f != NULL) fclose(f);
    free(path);
    return rc;
}

int duet__lmdb_open(const char *path, duet__lmdb **out) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return duet__error(errno == ENOENT ? DUET_ENOTFOUND : DUET_EIO, "cannot open LMDB %s: %s",
                           path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return duet__error(DUET_EFORMAT, "LMDB %s is not a folder (want NAME.lmdb/ with "
                           "data.mdb, as MMEditing's make_lmdb writes it)", path);
    DUET_TRY(duet__lmdb_check_size(path));
    duet__lmdb *db = calloc(1, sizeof *db);
    if (db == NULL || (db->path = duet__strdup(path)) == NULL) {
        free(db);
        return duet__error(DUET_ENOMEM, "opening LMDB %s: out of memory", path);
    }
    /* As mmcv's LmdbBackend: read-only, no lock file writes, no readahead;
     * MDB_NOTLS so that any thread may run a read transaction. */
    int e = mdb_env_create(&db->env);
    if (e == 0) e = mdb_env_open(db->env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NORDAHEAD | MDB_NOTLS,
                                 0644);
    MDB_txn *txn = NULL;
    if (e == 0) e = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    if (e == 0) e = mdb_dbi_open(txn, NULL, 0, &db->dbi);
    if (txn != NULL) mdb_txn_abort(txn);
    if (e != 0) {
        int rc = duet__error(e == ENOENT ? DUET_ENOTFOUND : DUET_EFORMAT,
                             "cannot open LMDB %s: %s (not an LMDB folder, or a damaged one: "
                             "make it again with duet prepare div2k --lmdb)", path,
                             mdb_strerror(e));
        duet__lmdb_close(db);
        return rc;
    }
    *out = db;
    return DUET_OK;
}

void duet__lmdb_close(duet__lmdb *db) {
    if (db == NULL) return;
    if (db->env != NULL) mdb_env_close(db->env);
    free(db->path);
    free(db);
}

const char *duet__lmdb_path(const duet__lmdb *db) { return db->path; }

int duet__lmdb_get(duet__lmdb *db, const char *key, void **bytes, size_t *nbytes) {
    if (bytes != NULL) *bytes = NULL;
    if (nbytes != NULL) *nbytes = 0;
    MDB_txn *txn = NULL;
    int e = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    MDB_val k = {strlen(key), (void *)key}, v = {0, NULL};
    if (e == 0) e = mdb_get(txn, db->dbi, &k, &v);
    int rc = DUET_OK;
    if (e == MDB_NOTFOUND)
        rc = duet__error(DUET_ENOTFOUND, "LMDB %s has no key \"%s\"", db->path, key);
    else if (e != 0)
        rc = duet__error(DUET_EFORMAT, "LMDB %s, key \"%s\": %s (a damaged LMDB? make it again "
                         "with duet prepare div2k --lmdb)", db->path, key, mdb_strerror(e));
    else if (bytes != NULL) {
        *bytes = malloc(v.mv_size ? v.mv_size : 1);
        if (*bytes == NULL) rc = duet__error(DUET_ENOMEM, "LMDB %s: out of memory", db->path);
        else {
            memcpy(*bytes, v.mv_data, v.mv_size);
            *nbytes = v.mv_size;
        }
    }
    if (txn != NULL) mdb_txn_abort(txn);
    return rc;
}

/* ---- writing ---------------------------------------------------------------- */

typedef struct encoded {
    uint8_t *bytes;
    size_t n;
    int64_t h, w, c;
} encoded;

/* Image i of the folder decoded and encoded again as PNG at `level`
 * (MMEditing's make_lmdb re-encodes with cv2.imencode, level 1). */
static int encode_one(const char *dir, const char *name, int level, encoded *e) {
    char *path = duet__path_join(dir, name);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    duet_image *img = NULL;
    int rc = duet_image_load(path, &img);
    if (rc == DUET_OK) rc = duet_image_encode_png(img, level, path, &e->bytes, &e->n);
    if (rc == DUET_OK) {
        e->h = img->height;
        e->w = img->width;
        e->c = img->channels;
    }
    duet_image_destroy(img);
    free(path);
    return rc;
}

static int mdb_fail(const char *path, const char *what, int e) {
    return duet__error(DUET_EIO, "cannot write LMDB %s: %s: %s", path, what, mdb_strerror(e));
}

int duet_lmdb_write_folder(const char *dir, const char *lmdb_path, const duet_lmdb_opts *o,
                           int64_t *count) {
    *count = 0;
    size_t len = strlen(lmdb_path);
    if (len < 5 || strcmp(lmdb_path + len - 5, ".lmdb") != 0)
        return duet__error(DUET_EINVAL, "LMDB path %s must end with .lmdb (as MMEditing's "
                           "make_lmdb and SRLmdbDataset want)", lmdb_path);
    if (o->compression_level < 0 || o->compression_level > 9)
        return duet__error(DUET_EINVAL, "LMDB %s: compression level %d is not in [0, 9]",
                           lmdb_path, o->compression_level);
    char **names = NULL;
    int64_t n = 0;
    DUET_TRY(duet__list_images(dir, &names, &n));
    int rc = DUET_OK;
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        const char *dot = strrchr(names[i], '.');
        if (dot == NULL || strcmp(dot, ".png") != 0)
            rc = duet__error(DUET_EUNSUPPORTED, "LMDB: %s/%s is not a .png (MMEditing's keys are "
                             "the names before .png)", dir, names[i]);
    }
    /* The map is address space, not disk: room for every image as raw
     * RGBA pixels (a PNG of them is never much larger) plus LMDB's pages,
     * from the sizes in the files' headers. */
    size_t map = (size_t)64 << 20;
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        char *path = duet__path_join(dir, names[i]);
        int64_t w = 0, h = 0;
        rc = path == NULL ? duet__error(DUET_ENOMEM, "out of memory") : duet__png_size(path, &w, &h);
        free(path);
        map += (size_t)(w * h * 4) + (size_t)(w * h * 4) / 8 + 16384;
    }
    /* Built under a temporary name beside it and renamed at the end, so a
     * failed or interrupted run never leaves a partial LMDB under the name
     * a dataset reads. */
    struct stat sb;
    if (rc == DUET_OK && lstat(lmdb_path, &sb) == 0)
        rc = duet__error(DUET_ESTATE, "cannot make LMDB %s: %s (it exists already: remove it to "
                         "make it anew, as MMEditing's make_lmdb asks)", lmdb_path,
                         strerror(EEXIST));
    char *build = rc == DUET_OK ? duet__safe_temp_name(lmdb_path) : NULL;
    if (rc == DUET_OK && build == NULL) rc = duet__error(DUET_ENOMEM, "out of memory");
    if (rc == DUET_OK && mkdir(build, 0755) != 0)
        rc = duet__error(DUET_EIO, "cannot make LMDB %s: cannot make %s: %s", lmdb_path, build,
                         strerror(errno));
    if (rc != DUET_OK) {
        free(build);
        duet__free_names(names, n);
        return rc;
    }
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi = 0;
    char *meta_path = duet__path_join(build, "meta_info.txt");
    FILE *meta = meta_path != NULL ? fopen(meta_path, "w") : NULL;
    if (meta == NULL)
        rc = duet__error(DUET_EIO, "cannot write %s: %s", meta_path ? meta_path : lmdb_path,
                         meta_path ? strerror(errno) : "out of memory");
    int e = 0;
    const int64_t chunk = 64;
    encoded *batch = calloc((size_t)chunk, sizeof *batch);
    if (rc == DUET_OK && batch == NULL) rc = duet__error(DUET_ENOMEM, "out of memory");
    const int threads = duet__worker_threads(o->threads);
    for (int64_t at = 0; at < n && rc == DUET_OK; at += chunk) {
        const int64_t m = n - at < chunk ? n - at : chunk;
        int brc = DUET_OK;
        char *worker_msg = NULL; /* duet_last_error is per thread: carried here */
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int64_t j = 0; j < m; j++) {
            int r = encode_one(dir, names[at + j], o->compression_level, &batch[j]);
            if (r != DUET_OK) {
#pragma omp critical(duet_lmdb_encode)
                if (brc == DUET_OK) {
                    brc = r;
                    worker_msg = duet__strdup(duet_last_error());
                }
            }
        }
        rc = brc;
        if (rc != DUET_OK)
            duet__error(rc, "%s", worker_msg != NULL && worker_msg[0] != '\0'
                                      ? worker_msg : "LMDB: an image failed (out of memory)");
        free(worker_msg);
        if (rc == DUET_OK && env == NULL) {
            if ((e = mdb_env_create(&env)) != 0 || (e = mdb_env_set_mapsize(env, map)) != 0 ||
                (e = mdb_env_open(env, build, 0, 0644)) != 0)
                rc = mdb_fail(lmdb_path, "open", e);
        }
        if (rc == DUET_OK && (e = mdb_txn_begin(env, NULL, 0, &txn)) != 0)
            rc = mdb_fail(lmdb_path, "begin", e);
        if (rc == DUET_OK && (e = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0)
            rc = mdb_fail(lmdb_path, "open the database", e);
        for (int64_t j = 0; j < m && rc == DUET_OK; j++) {
            const char *name = names[at + j];
            size_t stem = (size_t)(strrchr(name, '.') - name);
            MDB_val k = {stem, (void *)name}, v = {batch[j].n, batch[j].bytes};
            if ((e = mdb_put(txn, dbi, &k, &v, 0)) != 0) rc = mdb_fail(lmdb_path, name, e);
            else if (fprintf(meta, "%.*s.png (%lld,%lld,%lld) %d\n", (int)stem, name,
                             (long long)batch[j].h, (long long)batch[j].w, (long long)batch[j].c,
                             o->compression_level) < 0)
                rc = duet__error(DUET_EIO, "cannot write %s", meta_path);
        }
        if (txn != NULL) {
            if (rc == DUET_OK) {
                if ((e = mdb_txn_commit(txn)) != 0) rc = mdb_fail(lmdb_path, "commit", e);
            } else {
                mdb_txn_abort(txn);
            }
            txn = NULL;
        }
        for (int64_t j = 0; j < m; j++) {
            free(batch[j].bytes);
            batch[j] = (encoded){NULL, 0, 0, 0, 0};
        }
        if (o->progress != NULL) o->progress(o->progress_ctx, at + m, n);
    }
    free(batch);
    if (env != NULL) mdb_env_close(env);
    if (meta != NULL && fclose(meta) != 0 && rc == DUET_OK)
        rc = duet__error(DUET_EIO, "cannot write %s: %s", meta_path, strerror(errno));
    if (rc == DUET_OK && rename(build, lmdb_path) != 0)
        rc = duet__error(DUET_EIO, "cannot make LMDB %s: cannot rename %s to it: %s", lmdb_path,
                         build, strerror(errno));
    if (rc != DUET_OK) duet__remove_build_dir(build);
    free(build);
    free(meta_path);
    duet__free_names(names, n);
    if (rc == DUET_OK) *count = n;
    return rc;
}
