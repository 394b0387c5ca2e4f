/* Evaluation pictures (the outputs layer, for the runner): a PNG grid whose rows read
 * input | output | ground truth, the input enlarged by nearest neighbour so
 * that its pixels show. */
#ifndef DUET_TRAIN_GRID_H
#define DUET_TRAIN_GRID_H

#include "duet/data.h"

/* One row from sample n of lq (N, 3, h, w), output and gt (N, 3, H, W), all
 * in [0, 1]: three H x W panels with `gap` black columns between them. H and
 * W must be multiples of h and w with the same factor. Free *out with
 * duet_image_destroy. */
int duet__grid_row(const duet_tensor *lq, const duet_tensor *output, const duet_tensor *gt,
                   int64_t n, int gap, duet_image **out);
/* Rows stacked top to bottom, left-aligned, `gap` black rows between them
 * and black to the right of rows narrower than the widest. */
int duet__grid_stack(duet_image *const *rows, int nrows, int gap, duet_image **out);

/* duet__grid_stack under a strip with the three columns' titles (black
 * on white, at the left of each third of the first row). */
int duet__grid_stack_labelled(duet_image *const *rows, int nrows, int gap,
                              const char *const labels[3], duet_image **out);
#endif
