/* TensorBoard event files (the outputs layer, for the runner): scalars as
 * MMEditing's TensorboardLoggerHook logs them, readable by TensorBoard.
 *
 *   duet__tb *tb = NULL;
 *   DUET_TRY(duet__tb_open("work_dirs/x/tf_logs", &tb));
 *   DUET_TRY(duet__tb_scalar(tb, "train/loss_pix", 100, 0.0231f));
 *   duet__tb_close(tb);
 */
#ifndef DUET_RUNNER_TENSORBOARD_H
#define DUET_RUNNER_TENSORBOARD_H

#include <stdint.h>

#include "duet/base.h"

typedef struct duet__tb duet__tb;

/* Creates `dir` when missing and a new events.out.tfevents.<seconds>.<host>
 * .<pid> file in it (never through a link), holding the version event.
 * Free with duet__tb_close (NULL ok). */
int duet__tb_open(const char *dir, duet__tb **out);
/* One scalar event (tag, step, value) with the current wall time; flushed.
 * NULL tb: nothing. */
int duet__tb_scalar(duet__tb *tb, const char *tag, int64_t step, float value);
/* One image event: `png` (n bytes) is a whole PNG file, RGB, whose size is
 * read from its header; TensorBoard's Images tab shows it under `tag`.
 * DUET_EFORMAT when the bytes are not a PNG. NULL tb: nothing. */
int duet__tb_png(duet__tb *tb, const char *tag, int64_t step, const unsigned char *png, size_t n);
/* The file's path (borrowed). */
const char *duet__tb_path(const duet__tb *tb);
void duet__tb_close(duet__tb *tb);

#endif
