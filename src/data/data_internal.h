/* Private to src/data/: the folder listing the SR datasets and the data
 * preparation tools share. */
#ifndef DUET_DATA_INTERNAL_H
#define DUET_DATA_INTERNAL_H

#include "duet/data.h"

/* The image file names (*.png, *.jpg, *.jpeg, any case; regular files) of
 * `dir`, sorted by strcmp; DUET_ENOTFOUND for none or a missing folder.
 * Free with duet__free_names. */
int duet__list_images(const char *dir, char ***out, int64_t *count);
void duet__free_names(char **names, int64_t n);

/* Threads for a pool of per-image workers: `requested` (<= 0: the cores
 * this process may run on), never more than those cores (libgomp fails
 * with a crash, not a status, when asked for a million). */
int duet__worker_threads(int requested);
/* Removes a folder an unfinished build made under a temporary name: its
 * entries (files only: the builds make no subfolders), then the folder. */
void duet__remove_build_dir(const char *dir);

/* A PNG's width and height from its IHDR, without decoding it (prepare.c). */
int duet__png_size(const char *path, int64_t *w, int64_t *h);

/* A read-only LMDB image store (lmdb.c), MMEditing's layout: the value of
 * key "0001_s001" is that image's PNG file. Any thread may call
 * duet__lmdb_get at once. Errors name the path (and the key). */
typedef struct duet__lmdb duet__lmdb;
int duet__lmdb_open(const char *path, duet__lmdb **out);
/* DUET_EFORMAT naming the sizes when PATH/data.mdb is shorter than the
 * pages its newest meta page lists (a truncated copy would SIGBUS on the
 * first read through the map), or has no valid meta page; duet__lmdb_open
 * calls it before mapping. */
int duet__lmdb_check_size(const char *path);
/* The value of `key` copied into *bytes (malloc'd; NULL bytes: only check
 * that the key is there); DUET_ENOTFOUND naming key and path without it. */
int duet__lmdb_get(duet__lmdb *db, const char *key, void **bytes, size_t *nbytes);
const char *duet__lmdb_path(const duet__lmdb *db);
void duet__lmdb_close(duet__lmdb *db);

#endif
