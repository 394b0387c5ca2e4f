/* `duet plot` (plot.c): the curves of a run's log drawn with duet's own
 * rasteriser, for the runner's duet_runner_plot (duet/runner.h says what
 * it draws and reports). */
#ifndef DUET_OUTPUTS_PLOT_H
#define DUET_OUTPUTS_PLOT_H

#include <stddef.h>
#include <stdio.h>

int duet__plot(const char *work_dir, const char *out_png, const char *const *keys, size_t nkeys,
               FILE *report);

#endif
