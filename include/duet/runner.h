/* duet/runner.h — the commands behind `duet train | test | infer | info`.
 */
#ifndef DUET_RUNNER_H
#define DUET_RUNNER_H

#include <stdio.h>

#include "duet/data.h"
#include "duet/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runner -----------------------------------------------------------------
 * The commands behind `duet train | test | infer` (tools/duet.c only parses
 * arguments). Each runs as one process or as every rank of an MPI job
 * (mpirun / srun); MPI is initialised when needed and left initialised (the
 * program calls duet_comm_finalize() before it exits).
 *
 * Errors: a function prints its error once on stderr ("duet: error: ...",
 * from the lowest failing rank) and returns its status (also in
 * duet_last_error()). An error that happens on some ranks only once
 * training runs (a bad image, a NaN loss, a failed write) cannot be agreed
 * on without leaving the others blocked in a collective: it is printed with
 * its rank and the whole job is aborted (MPI_Abort), leaving the last good
 * checkpoint intact.
 *
 * Usage:
 *
 *   duet_runner_opts o = duet_runner_opts_default();
 *   o.config = "configs/msrresnet_x4_tiny.cfg";
 *   const char *sets[] = {"total_iters=2"};    // as `--set total_iters=2`
 *   o.sets = sets;
 *   o.nsets = 1;
 *   int rc = duet_runner_train(&o);            // a failure's message is printed
 *   duet_comm_finalize();
 *   DUET_TRY(rc);
 */
/* The `duet` command line as a call: argc and argv as main() gets them
 * (argv[0] the program, argv[1] the command: train, test, infer, info,
 * --help or --version), parsed and run exactly as `duet` does, usage
 * errors and results printed, MPI finalized when duet initialised it.
 * Returns the exit status (0, 1, 2 usage, DUET_EXIT_STOPPED,
 * DUET_EXIT_TIMEOUT). A program that registers its own types
 * (duet/registry.h) gets `train | test | infer | info` for configs that
 * name them (examples/custom_model.c):
 *
 *   int main(int argc, char **argv) {
 *       if (duet_registry_register_model("ToyGAN", build_toy_gan) != DUET_OK) return 1;
 *       return duet_cli_main(argc, argv);   // ./toy train toy.cfg --work-dir w
 *   }
 */
int duet_cli_main(int argc, char **argv);

/* Exit statuses of `duet` (and of the whole job under mpirun / srun):
 * 0 done, 1 error, 2 usage; DUET_EXIT_STOPPED: stopped by SIGTERM, SIGINT or SIGUSR1
 * at an iteration boundary with a checkpoint written (continue with
 * --resume; duet_runner_train returned DUET_ESTOPPED); DUET_EXIT_TIMEOUT: a
 * collective made no progress for dist.timeout seconds (a stalled or dead
 * rank) and the job was aborted. */
#define DUET_EXIT_STOPPED 75 /* sysexits' EX_TEMPFAIL: try again */
#define DUET_EXIT_TIMEOUT 76 /* sysexits' EX_PROTOCOL: a peer failed us */

typedef struct duet_runner_opts {
    const char *config;             /* libconfig file (required) */
    const char *const *sets;        /* nsets "a.b=value" overrides, in order */
    size_t nsets;
    const char *work_dir;           /* train: NULL = the config's work_dir */
    bool resume;                    /* train: continue a run */
    const char *resume_from;        /* train: checkpoint; NULL = WORK_DIR/latest.safetensors */
    const char *checkpoint;         /* test, infer: weights to use (required) */
    const char *out_dir;            /* test: optional, infer: required; created */
    const char *const *images;      /* infer: nimages PNG/JPEG files */
    size_t nimages;
    /* infer: run the generator tile by tile (tile x tile input pixels, 0:
     * the whole image at once) with tile_pad pixels of context around each
     * tile (< 0: the generator's receptive radius, measured, which makes
     * the result equal to the whole-image one); super-resolution models. */
    int64_t tile, tile_pad;
    int onnx_opset;                 /* export: the ONNX opset, 13..18 (0: 17) */
    const char *mask;               /* infer: an inpaintor's hole (nonzero pixels) */
    bool quiet;                     /* print nothing on stdout (tests) */
    /* train: leave the stop-signal handlers (SIGTERM, SIGINT, SIGUSR1) and
     * the ignored SIGPIPE in place when duet_runner_train returns, so that
     * a signal during the rest of the process (MPI_Finalize) is recorded,
     * not fatal. The CLI sets it; a library caller usually wants its own
     * handlers back (the default). */
    bool keep_signal_handlers;
    /* train: check the config (every key, the model and wrapper build,
     * optimizers, load_from and a --resume checkpoint, the data folders and
     * one sample of each set, the work dir) and print what a run would do;
     * writes nothing, not even the work dir's lock. */
    bool dry_run;
} duet_runner_opts;
duet_runner_opts duet_runner_opts_default(void);

/* What `duet test` measures: means over the validation images (each image
 * counted once over all ranks). */
typedef struct duet_test_result {
    int64_t images;
    int crop_border;                   /* pixels ignored at each edge */
    int rank;                          /* this process's rank (print on 0) */
    double psnr, ssim;                 /* the model (0 when test_cfg does not name it) */
    double psnr_bicubic, ssim_bicubic; /* MATLAB bicubic upscaling of the inputs */
    /* The metrics model.test_cfg.metrics names (default PSNR, SSIM), no
     * others, in its order: the model, and bicubic upscaling. */
    duet_log_vars metrics, metrics_bicubic;
    /* Inpainting: the same metrics of the masked input itself (the hole
     * left as the pipeline blanks it) against gt_img. */
    duet_log_vars metrics_input;
} duet_test_result;

/* `duet info`: version, CPU and its features, cores, the kernel path
 * (GEMM library and ISA), oneDNN / OpenBLAS / MPI library versions, threads
 * and the environment variables that change them, like
 * torch.__config__.show(). DUET_EIO when f cannot be written. */
int duet_info_print(FILE *f);

/* Trains the config's model for total_iters iterations with its hooks (LR
 * schedule, logging, evaluation, checkpoints); see docs/pipeline.md. */
int duet_runner_train(const duet_runner_opts *opts);
/* Evaluates opts->checkpoint on data.val next to bicubic. Prints nothing:
 * *result holds the means, the same on every rank (result->rank says which
 * rank this is, so that a caller prints once). */
int duet_runner_test(const duet_runner_opts *opts, duet_test_result *result);
/* Upscales opts->images into opts->out_dir/<name>.png. */
int duet_runner_infer(const duet_runner_opts *opts);
/* `duet export`: the generator of opts->checkpoint (built from
 * opts->config; `part` names it, NULL: generator_ema when the model keeps
 * one, for CycleGAN the generator of its test direction, else generator) written to out_path as
 * an ONNX model (opset opts->onnx_opset, 0: 17),
 * input "input" (N, C, H, W) to "output"; a module type the exporter does
 * not know is refused naming it. Prints a line on success. */
int duet_runner_export(const duet_runner_opts *opts, const char *part, const char *out_path);
/* `duet prepare div2k ROOT`: MMEditing's DIV2K preparation under ROOT
 * (DIV2K_train_HR and DIV2K_train_LR_bicubic/X<s> for each of `scales` in,
 * DIV2K_train_HR_sub, DIV2K_train_LR_bicubic/X<s>_sub with crop, step and
 * thresh divided by s, and meta_info_DIV2K800sub_GT.txt out), a line per
 * folder on `report`. An output folder that exists is an error. With
 * `lmdb` DUET_PREPARE_LMDB (after the sub-images) or DUET_PREPARE_LMDB_ONLY
 * (from sub-image folders made before), also MMEditing's LMDBs
 * (duet_lmdb_write_folder): ROOT/DIV2K_train_HR_sub.lmdb and
 * ROOT/DIV2K_train_LR_bicubic_X<s>_sub.lmdb, for SRLmdbDataset. */
enum { DUET_PREPARE_NO_LMDB = 0, DUET_PREPARE_LMDB = 1, DUET_PREPARE_LMDB_ONLY = 2 };
int duet_runner_prepare_div2k(const char *root, const int *scales, int nscales,
                              const duet_subimage_opts *o, int lmdb, FILE *report);
/* `duet plot`: the curves of work_dir/log.jsonl (each training value and
 * evaluation metric of the newest training and the runs that resumed it;
 * only `keys` when nkeys > 0) drawn into out_png (NULL:
 * work_dir/curves.png), one panel each, and a line per curve on `report`
 * (points, iterations, value range). DUET_ENOTFOUND naming the keys there
 * are when a key has no values, or when the log has no records yet. */
int duet_runner_plot(const char *work_dir, const char *out_png, const char *const *keys,
                     size_t nkeys, FILE *report);

#ifdef __cplusplus
}
#endif
#endif
