/* LR schedules by iteration, as MMEditing's lr_config with by_epoch=False
 * (mmcv's StepLrUpdaterHook and CosineRestartLrUpdaterHook). */
#include "duet/nn.h"

#include <inttypes.h>
#include <math.h>

duet_lr_schedule duet_lr_schedule_default(void) {
    duet_lr_schedule s = {0};
    s.policy = DUET_LR_FIXED;
    s.gamma = 0.1f;
    s.min_lr = 0.0f;
    return s;
}

int duet_lr_schedule_check(const duet_lr_schedule *s) {
    if (s->nsteps < 0 || s->nsteps > DUET_LR_MAX_STEPS)
        return duet__error(DUET_ECONFIG, "lr schedule: %d steps; between 0 and %d allowed",
                           s->nsteps, DUET_LR_MAX_STEPS);
    switch (s->policy) {
    case DUET_LR_FIXED: return DUET_OK;
    case DUET_LR_STEP:
        for (int i = 0; i < s->nsteps; i++)
            if (s->steps[i] < 0 || (i > 0 && s->steps[i] < s->steps[i - 1]))
                return duet__error(DUET_ECONFIG, "lr schedule Step: milestones must be "
                                   "non-negative and ascending (milestone %d is %" PRId64 ")", i,
                                   s->steps[i]);
        return DUET_OK;
    case DUET_LR_COSINE_RESTART:
        if (s->nsteps < 1)
            return duet__error(DUET_ECONFIG, "lr schedule CosineRestart: no periods given");
        for (int i = 0; i < s->nsteps; i++)
            if (s->steps[i] < 1)
                return duet__error(DUET_ECONFIG, "lr schedule CosineRestart: period %d is %" PRId64
                                   "; periods must be positive", i, s->steps[i]);
        return DUET_OK;
    }
    return duet__error(DUET_ECONFIG, "lr schedule: unknown policy %d", (int)s->policy);
}

/* mmcv's annealing_cos: from weight*start + (1-weight)*end down to end as
 * factor goes from 0 to 1. */
static double annealing_cos(double start, double end, double factor, double weight) {
    return end + 0.5 * weight * (start - end) * (cos(M_PI * factor) + 1.0);
}

float duet_lr_at(const duet_lr_schedule *s, float base_lr, int64_t iter) {
    if (duet_lr_schedule_check(s) != DUET_OK) return base_lr;
    switch (s->policy) {
    case DUET_LR_FIXED: return base_lr;
    case DUET_LR_STEP: {
        /* mmcv: exp = index of the first milestone > iter (all of them when
         * none is), i.e. the number of milestones <= iter. */
        int k = 0;
        while (k < s->nsteps && s->steps[k] <= iter) k++;
        return (float)((double)base_lr * pow((double)s->gamma, (double)k));
    }
    case DUET_LR_COSINE_RESTART: {
        /* get_position_from_periods: the first cumulative period > iter.
         * mmcv raises past the last period; duet stays at its end (min_lr). */
        int64_t cum = 0, nearest_restart = 0;
        int idx = s->nsteps - 1;
        for (int i = 0; i < s->nsteps; i++) {
            if (iter < cum + s->steps[i]) {
                idx = i;
                break;
            }
            cum += s->steps[i];
        }
        nearest_restart = 0;
        for (int i = 0; i < idx; i++) nearest_restart += s->steps[i];
        double alpha = (double)(iter - nearest_restart) / (double)s->steps[idx];
        if (alpha > 1.0) alpha = 1.0;
        return (float)annealing_cos(base_lr, s->min_lr, alpha, s->restart_weights[idx]);
    }
    }
    return base_lr;
}
