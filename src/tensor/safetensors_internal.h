/* Internal safetensors helpers shared with the train layer's checkpoints. */
#ifndef DUET_SAFETENSORS_INTERNAL_H
#define DUET_SAFETENSORS_INTERNAL_H

#include "duet/tensor.h"

/* A view of `st` without the entries whose names start with `prefix` (the
 * metadata is kept), sharing st's data: st must outlive the view. Lets a
 * strict state-dict load ignore a checkpoint's "optimizer." entries. Free
 * with duet_st_destroy. */
int duet__st_view_without(const duet_st *st, const char *prefix, duet_st **out);

/* The path the file was loaded from (borrowed), for messages. */
const char *duet__st_path(const duet_st *st);

#endif
