/* Validation for the evaluation hook and `duet test`: every rank evaluates
 * its share of the validation images (image i on rank i % world, each image
 * counted once), the sums are reduced, and rank 0 saves a grid of input |
 * output | ground truth. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "outputs/grid.h"
#include "runner/runner_internal.h"

int duet__save_tensor_png(const duet_tensor *t, const char *dir, const char *name) {
    char *path = duet__output_path(dir, name);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    duet_image *img = NULL;
    int rc = duet_image_from_tensor(t, 0, &img);
    if (rc == DUET_OK) rc = duet_image_save_png(img, path);
    duet_image_destroy(img);
    free(path);
    return rc;
}

static double metric(const duet_log_vars *lv, const char *name) {
    double v = 0;
    return duet_log_vars_get(lv, name, &v) ? v : 0.0;
}

/* One image: model output (and its metrics), bicubic metrics, grid row. The
 * dataset's sample goes to val_step as it is (a batch of one, named
 * tensors); the bicubic numbers and the grid need its "lq" and "gt". */
/* sums: [0] images, [1 + k] the model's metric k of test_cfg, [1 + NM + k]
 * the baseline's: bicubic upscaling (super-resolution samples) or the
 * masked input itself (inpainting samples); [1 + 2 NM] images with a
 * bicubic comparison, [2 + 2 NM] with a masked-input one. */
#define NM DUET_MAX_METRICS
#define NSUMS (3 + 2 * NM)

/* Translation data ("img_a" / "img_b", no "lq" / "gt") is normalised to
 * [-1, 1], and so are the outputs of the models that take it: MMEditing's
 * Pix2Pix and CycleGAN save their pictures with tensor2img(min_max=(-1, 1)),
 * and so does duet. New tensor (x + 1) / 2. */
int duet__from_signed(const duet_tensor *t, duet_tensor **out) {
    DUET_TRY(duet_tensor_create(t->ndim, t->shape, out));
    for (int64_t i = 0; i < t->numel; i++) (*out)->data[i] = (t->data[i] + 1.0f) * 0.5f;
    return DUET_OK;
}

/* Channels 0 and 2 of an (N, 3, H, W) tensor swapped in place when the
 * batch's meta says its images are BGR (the inpainting data's
 * "channel_order"): the PNG writer takes RGB. */
void duet__to_rgb_for_png(const duet_batch *b, duet_tensor *t) {
    const char *order = duet_batch_meta_get(b, "channel_order", 0);
    if (order == NULL || strcmp(order, "bgr") != 0 || t->ndim != 4 || t->shape[1] != 3) return;
    const int64_t plane = t->shape[2] * t->shape[3];
    for (int64_t n = 0; n < t->shape[0]; n++) {
        float *p = t->data + n * 3 * plane;
        for (int64_t i = 0; i < plane; i++) {
            float v = p[i];
            p[i] = p[2 * plane + i];
            p[2 * plane + i] = v;
        }
    }
}

/* The picture's row for data on [-1, 1]: translation's img_a | output |
 * img_b, inpainting's masked_img | output | gt_img, in RGB. */
/* A translation's metrics (when test_cfg names them): output against the
 * target of the test direction, both mapped from [-1, 1] to [0, 1]. */
static int translation_metrics(const duet_test_cfg *tc, const duet_tensor *out,
                               const duet_tensor *target, duet_log_vars *lv) {
    duet_tensor *o = NULL, *t = NULL;
    int rc = duet__from_signed(out, &o);
    if (rc == DUET_OK) rc = duet__from_signed(target, &t);
    if (rc == DUET_OK) rc = duet_evaluate(tc, o, t, lv);
    duet_tensor_release(o);
    duet_tensor_release(t);
    return rc;
}

static int signed_row(duet_image **row, const duet_batch *b_meta, const duet_tensor *a,
                      const duet_tensor *out, const duet_tensor *b) {
    duet_tensor *u[3] = {NULL, NULL, NULL};
    int rc = duet__from_signed(a, &u[0]);
    if (rc == DUET_OK) rc = duet__from_signed(out, &u[1]);
    if (rc == DUET_OK) rc = duet__from_signed(b, &u[2]);
    for (int k = 0; k < 3 && rc == DUET_OK; k++) duet__to_rgb_for_png(b_meta, u[k]);
    if (rc == DUET_OK) rc = duet__grid_row(u[0], u[1], u[2], 0, 4, row);
    for (int k = 0; k < 3; k++) duet_tensor_release(u[k]);
    return rc;
}

/* Bytes this process may still take: the kernel's MemAvailable, or less
 * under `ulimit -v` / `ulimit -d`. 0 when unknown. */
static uint64_t memory_available(void) {
    uint64_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f != NULL) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (uint64_t)kb * 1024;
        fclose(f);
    }
    const int limits[2] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(limits[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            (avail == 0 || (uint64_t)rl.rlim_cur < avail))
            avail = (uint64_t)rl.rlim_cur;
    }
    return avail;
}

/* Peak bytes a forward over the top-left side x side crop of x allocates. */
static int probe_forward(duet__run *r, const duet_tensor *x, int64_t side, double *bytes) {
    const int64_t c = x->shape[x->ndim - 3], h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
    duet_tensor *crop = NULL, *y = NULL;
    DUET_TRY(duet_tensor_create(4, (int64_t[]){1, c, side, side}, &crop));
    for (int64_t k = 0; k < c; k++)
        for (int64_t i = 0; i < side; i++)
            memcpy(crop->data + (k * side + i) * side, x->data + (k * h + i) * w,
                   (size_t)side * sizeof(float));
    size_t base = 0, peak = 0, live = 0;
    duet_alloc_reset_peak();
    duet_alloc_stats(&base, &peak); /* live before the forward, the crop included */
    int rc = duet_model_forward(r->model, crop, &y);
    duet_alloc_stats(&live, &peak);
    duet_tensor_release(y);
    duet_tensor_release(crop);
    *bytes = peak > base ? (double)(peak - base) : 0;
    return rc;
}

/* Below this many input pixels a forward is not worth probing (the probes
 * would cost up to 2% of it): it fits wherever duet runs at all. */
#define PROBE_ABOVE_PIXELS (512 * 512)

int duet__check_forward_memory(duet__run *r, const duet_tensor *x, const char *path) {
    const int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1], s1 = 32, s2 = 64;
    if (h * w <= PROBE_ABOVE_PIXELS) return DUET_OK;
    double b1 = 0, b2 = 0;
    DUET_TRY(probe_forward(r, x, s1, &b1));
    DUET_TRY(probe_forward(r, x, s2, &b2));
    double per_pixel = b2 > b1 ? (b2 - b1) / (double)(s2 * s2 - s1 * s1) : b2 / (double)(s2 * s2);
    double need = b2 + per_pixel * (double)(h * w - s2 * s2);
    uint64_t avail = memory_available();
    if (avail == 0 || need <= 0.8 * (double)avail) return DUET_OK;
    /* Under --tile x is one tile with its context: a smaller tile is the remedy. */
    const bool tiled = r->tile > 0;
    return duet__error(DUET_ENOMEM, "%s: %lld x %lld pixels: the forward over %s would need "
                       "about %.1f GB (%.0f bytes per input pixel, measured on %lld and %lld "
                       "pixel squares), more than the %.1f GB this process may use: %s", path,
                       (long long)w, (long long)h, tiled ? "it" : "the whole image", need / 1e9,
                       per_pixel, (long long)s1, (long long)s2, (double)avail / 1e9,
                       tiled ? "give a smaller --tile"
                             : "give duet infer --tile 512 (a super-resolution model), crop or "
                               "downscale the image, or run it on a machine with more memory");
}

static int eval_one(duet__run *r, int64_t index, const char *out_dir, bool bicubic,
                    duet_image **row, const char **labels, double sums[NSUMS]) {
    const duet_test_cfg *tc = &r->test_cfg;
    duet_batch batch = {0};
    DUET_TRY(duet_dataset_get_item(r->val_set, index, r->seed, 0, &batch));
    duet_tensor *lq = duet_batch_tensor_get(&batch, "lq"), *gt = duet_batch_tensor_get(&batch, "gt");
    duet_tensor *img_a = duet_batch_tensor_get(&batch, "img_a");
    duet_tensor *img_b = duet_batch_tensor_get(&batch, "img_b");
    const bool sr = lq != NULL && gt != NULL;
    const bool translation = !sr && img_a != NULL && img_b != NULL;
    duet_tensor *masked = duet_batch_tensor_get(&batch, "masked_img");
    duet_tensor *gt_img = duet_batch_tensor_get(&batch, "gt_img");
    const bool inpainting = !sr && !translation && masked != NULL && gt_img != NULL &&
                            duet_batch_tensor_get(&batch, "mask") != NULL;
    duet_tensor *bic = NULL, *saved = NULL;
    duet_val_output vo = {0};
    const char *name = duet_batch_meta_get(&batch, "gt_path", 0);
    if (name == NULL) name = duet_batch_meta_get(&batch, "gt_img_path", 0);
    if (name == NULL) name = duet_dataset_name(r->val_set, index);
    if (name == NULL) name = "image";
    int rc = DUET_OK;
    if ((bicubic || row != NULL) && !sr && !translation && !inpainting)
        rc = duet__error(DUET_ENOTFOUND, "the validation sample has neither 'lq' and 'gt' "
                         "tensors (super-resolution), nor 'img_a' and 'img_b' (translation), "
                         "nor 'masked_img', 'mask' and 'gt_img' (inpainting), which the "
                         "bicubic numbers and the evaluation picture compare");
    if (rc == DUET_OK && sr) rc = duet__check_forward_memory(r, lq, name);
    /* The test direction's real A (the input) and real B (the target):
     * MMEditing's real_a / real_b, img_b and img_a under b2a. */
    const duet_tensor *real_a = r->eval_b2a ? img_b : img_a, *real_b = r->eval_b2a ? img_a : img_b;
    if (rc == DUET_OK) rc = duet_model_val_step(r->model, &batch, &vo);
    if (rc == DUET_OK && translation && tc->nmetrics > 0)
        rc = translation_metrics(tc, vo.output, real_b, &vo.metrics);
    if (rc == DUET_OK) {
        sums[0] += 1;
        for (int k = 0; k < tc->nmetrics; k++) sums[1 + k] += metric(&vo.metrics, tc->metrics[k]);
    }
    if (rc == DUET_OK && bicubic && sr) {
        duet_log_vars bl;
        duet_log_vars_clear(&bl);
        rc = duet_imresize_tensor(lq, (double)duet_dataset_scale(r->val_set), &bic);
        if (rc == DUET_OK) rc = duet_evaluate(tc, bic, gt, &bl);
        for (int k = 0; k < tc->nmetrics; k++) sums[1 + NM + k] += metric(&bl, tc->metrics[k]);
        sums[1 + 2 * NM] += 1;
    }
    if (rc == DUET_OK && bicubic && inpainting) {
        duet_log_vars il;
        duet_log_vars_clear(&il);
        duet_tensor *mask = duet_batch_tensor_get(&batch, "mask");
        rc = duet_inpainting_evaluate(tc->metrics, tc->nmetrics, masked, masked, gt_img, mask,
                                      &il);
        for (int k = 0; k < tc->nmetrics; k++) sums[1 + NM + k] += metric(&il, tc->metrics[k]);
        sums[2 + 2 * NM] += 1;
    }
    if (rc == DUET_OK && out_dir != NULL) {
        if (translation || inpainting) rc = duet__from_signed(vo.output, &saved);
        if (rc == DUET_OK && saved != NULL) duet__to_rgb_for_png(&batch, saved);
        if (rc == DUET_OK) rc = duet__save_tensor_png(saved ? saved : vo.output, out_dir, name);
    }
    if (rc == DUET_OK && row != NULL) {
        /* Column titles, as MMEditing's translation pictures read: real A |
         * fake B | real B in the test direction's terms. */
        static const char *const sr_l[3] = {"input", "output", "gt"};
        static const char *const inp_l[3] = {"masked", "output", "gt"};
        static const char *const a2b_l[3] = {"real A", "fake B", "real B"};
        static const char *const b2a_l[3] = {"real B", "fake A", "real A"};
        const char *const *l = translation ? (r->eval_b2a ? b2a_l : a2b_l)
                               : inpainting ? inp_l
                                            : sr_l;
        for (int k = 0; k < 3; k++) labels[k] = l[k];
        rc = translation  ? signed_row(row, &batch, real_a, vo.output, real_b)
             : inpainting ? signed_row(row, &batch, masked, vo.output, gt_img)
                          : duet__grid_row(lq, vo.output, gt, 0, 4, row);
    }
    if (rc != DUET_OK) duet__error_context(rc, "validation image %s", name);
    duet_val_output_clear(&vo);
    duet_tensor_release(bic);
    duet_tensor_release(saved);
    duet_batch_clear(&batch);
    return rc;
}

/* Rows 0..n-1 of the grid to rank 0: row i was made by rank i % world and
 * is broadcast from there (a handful of small images, so collectives over
 * the comm are simpler than point-to-point and cost nothing that shows). */
static int gather_rows(duet__run *r, duet_image **rows, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int owner = (int)(i % r->world);
        if (owner == 0) continue;
        int64_t hw[2] = {0, 0};
        if (r->rank == owner) {
            hw[0] = rows[i]->height;
            hw[1] = rows[i]->width;
        }
        DUET_TRY(duet_comm_bcast(r->comm, hw, 2, DUET_DTYPE_I64, owner));
        /* Every rank takes part; only rank 0 keeps what it received. */
        duet_image *img = rows[i];
        duet_image *scratch = NULL;
        if (r->rank != owner) {
            DUET_TRY(duet_image_create(hw[0], hw[1], 3, &scratch));
            img = scratch;
        }
        int rc = duet_comm_bcast(r->comm, img->data, (size_t)(hw[0] * hw[1] * 3), DUET_DTYPE_U8,
                                 owner);
        if (rc != DUET_OK) {
            duet_image_destroy(scratch);
            return duet__error_context(rc, "evaluation picture: row %lld from rank %d",
                                       (long long)i, owner);
        }
        if (r->rank == 0) rows[i] = scratch;
        else duet_image_destroy(scratch);
    }
    return DUET_OK;
}

int duet__run_evaluate(duet__run *r, const char *grid_path, const char *out_dir, bool bicubic,
                       duet__eval_result *res) {
    memset(res, 0, sizeof *res);
    int64_t n = duet_dataset_size(r->val_set);
    /* Rows for the first nrows images, each made by the rank that evaluates
     * the image and sent to rank 0, which writes the picture. */
    int64_t nrows = grid_path != NULL ? (r->eval_num_images < n ? r->eval_num_images : n) : 0;
    duet_image **rows = nrows > 0 ? calloc((size_t)nrows, sizeof *rows) : NULL;
    if (nrows > 0 && rows == NULL) return duet__error(DUET_ENOMEM, "evaluation: out of memory");
    double sums[NSUMS] = {0}; /* over images */
    const char *labels[3] = {"input", "output", "gt"};
    int rc = DUET_OK;
    if (out_dir != NULL) rc = duet__mkdirs(out_dir);
    for (int64_t i = r->rank; i < n && rc == DUET_OK; i += r->world)
        rc = eval_one(r, i, out_dir, bicubic, i < nrows ? &rows[i] : NULL, labels, sums);
    if (rc == DUET_OK && nrows > 0 && r->world > 1) rc = gather_rows(r, rows, nrows);
    if (rc == DUET_OK && nrows > 0 && r->rank == 0) {
        duet_image *grid = NULL;
        rc = duet__grid_stack_labelled(rows, (int)nrows, 4, labels, &grid);
        if (rc == DUET_OK) rc = duet_image_save_png(grid, grid_path);
        duet_image_destroy(grid);
    }
    for (int64_t i = 0; i < nrows; i++) duet_image_destroy(rows[i]);
    free(rows);
    DUET_TRY(rc);
    if (r->world > 1)
        DUET_TRY(duet_comm_allreduce(r->comm, sums, NSUMS, DUET_DTYPE_F64, DUET_REDUCE_SUM));
    res->images = (int64_t)sums[0];
    if (res->images == 0) return DUET_OK;
    /* The metrics test_cfg names, in its order, and no others. */
    const duet_test_cfg *tc = &r->test_cfg;
    for (int k = 0; k < tc->nmetrics; k++) {
        const double nb = sums[1 + 2 * NM], ni = sums[2 + 2 * NM];
        double m = sums[1 + k] / sums[0], b = nb > 0 ? sums[1 + NM + k] / nb : 0.0;
        DUET_TRY(duet_log_vars_set(&res->metrics, tc->metrics[k], m));
        if (bicubic && nb > 0)
            DUET_TRY(duet_log_vars_set(&res->metrics_bicubic, tc->metrics[k], b));
        if (bicubic && ni > 0)
            DUET_TRY(duet_log_vars_set(&res->metrics_input, tc->metrics[k],
                                       sums[1 + NM + k] / ni));
        if (strcmp(tc->metrics[k], "PSNR") == 0) res->psnr = m, res->psnr_bicubic = b;
        if (strcmp(tc->metrics[k], "SSIM") == 0) res->ssim = m, res->ssim_bicubic = b;
    }
    return DUET_OK;
}
