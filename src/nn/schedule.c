/* LR schedules by iteration, as MMEditing's lr_config with by_epoch=False
 * (mmcv's StepLrUpdaterHook and CosineRestartLrUpdaterHook, MMEditing's
 * LinearLrUpdaterHook, and mmcv's warmup that any of them takes). */
#include "duet/nn.h"

#include <inttypes.h>
#include <math.h>

duet_lr_schedule duet_lr_schedule_default(void) {
    duet_lr_schedule s = {0};
    s.policy = DUET_LR_FIXED;
    s.gamma = 0.1f;
    s.min_lr = 0.0f;
    s.min_lr_ratio = -1.0f;
    s.interval = 1;
    s.warmup = DUET_LR_WARMUP_NONE;
    s.warmup_ratio = 0.1f;
    return s;
}

int duet_lr_schedule_check(const duet_lr_schedule *s) {
    if (s->nsteps < 0 || s->nsteps > DUET_LR_MAX_STEPS)
        return duet__error(DUET_ECONFIG, "lr schedule: %d steps; between 0 and %d allowed",
                           s->nsteps, DUET_LR_MAX_STEPS);
    if (s->warmup != DUET_LR_WARMUP_NONE && s->warmup_iters < 1)
        return duet__error(DUET_ECONFIG, "lr schedule: a warmup needs warmup_iters >= 1 (got %"
                           PRId64 ")", s->warmup_iters);
    if (s->warmup != DUET_LR_WARMUP_NONE && !(s->warmup_ratio > 0.0f && s->warmup_ratio <= 1.0f))
        return duet__error(DUET_ECONFIG, "lr schedule: warmup_ratio must be in (0, 1] (got %g)",
                           (double)s->warmup_ratio);
    switch (s->policy) {
    case DUET_LR_LINEAR:
        if (s->interval < 1)
            return duet__error(DUET_ECONFIG, "lr schedule Linear: interval must be >= 1 (got %"
                               PRId64 ")", s->interval);
        if (s->start < 0 || s->start > s->max_iters)
            return duet__error(DUET_ECONFIG, "lr schedule Linear: start = %" PRId64 " must lie in "
                               "0..total_iters (%" PRId64 ")", s->start, s->max_iters);
        /* MMEditing divides by (max_iters - start) // interval. */
        if (s->start < s->max_iters && (s->max_iters - s->start) / s->interval == 0)
            return duet__error(DUET_ECONFIG, "lr schedule Linear: interval = %" PRId64 " is longer "
                               "than total_iters - start = %" PRId64 " (MMEditing divides by "
                               "zero there)", s->interval, s->max_iters - s->start);
        return DUET_OK;
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

/* mmcv's get_regular_lr: the policy's lr before any warmup, in double as
 * Python computes it. */
static double regular_lr(const duet_lr_schedule *s, double base_lr, int64_t iter) {
    switch (s->policy) {
    case DUET_LR_FIXED: return base_lr;
    case DUET_LR_STEP: {
        /* mmcv: exp = index of the first milestone > iter (all of them when
         * none is), i.e. the number of milestones <= iter; a single int
         * step (step_every) is iter // step. min_lr is the floor. */
        int64_t k = 0;
        if (s->step_every > 0) k = iter / s->step_every;
        else
            while (k < s->nsteps && s->steps[k] <= iter) k++;
        double lr = base_lr * pow((double)s->gamma, (double)k);
        return lr > (double)s->min_lr ? lr : (double)s->min_lr;
    }
    case DUET_LR_LINEAR: {
        if (s->max_iters == s->start) return base_lr;
        int64_t done = iter > s->start ? iter - s->start : 0;
        double factor = (double)(done / s->interval) /
                        (double)((s->max_iters - s->start) / s->interval);
        return base_lr + ((double)s->target_lr - base_lr) * factor;
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
        double end = s->min_lr_ratio >= 0.0f ? base_lr * (double)s->min_lr_ratio
                                             : (double)s->min_lr;
        return annealing_cos(base_lr, end, alpha, s->restart_weights[idx]);
    }
    }
    return base_lr;
}

float duet_lr_at(const duet_lr_schedule *s, float base_lr, int64_t iter) {
    if (duet_lr_schedule_check(s) != DUET_OK) return base_lr;
    double lr = regular_lr(s, (double)base_lr, iter);
    if (s->warmup == DUET_LR_WARMUP_NONE || iter >= s->warmup_iters) return (float)lr;
    /* mmcv's get_warmup_lr(cur_iters) on the regular lr. */
    double t = (double)iter / (double)s->warmup_iters, ratio = (double)s->warmup_ratio;
    switch (s->warmup) {
    case DUET_LR_WARMUP_CONSTANT: return (float)(lr * ratio);
    case DUET_LR_WARMUP_LINEAR: return (float)(lr * (1.0 - (1.0 - t) * (1.0 - ratio)));
    case DUET_LR_WARMUP_EXP: return (float)(lr * pow(ratio, 1.0 - t));
    case DUET_LR_WARMUP_NONE: break;
    }
    return (float)lr;
}
