/* The command line, `duet train | test | infer | info`, as a library call
 * (duet_cli_main, duet/runner.h): tools/duet.c is main() calling it, and a
 * program that registers its own models, networks, losses or datasets
 * (duet/registry.h) calls it the same way to get the same commands for
 * them. Nothing here but argument parsing; the work is duet_runner_train /
 * _test / _infer, which also print the results and their errors. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duet/train.h"

#define EXIT_USAGE 2

static const char main_usage[] =
    "usage: duet <command> [options]\n"
    "\n"
    "Trains and runs the models of a config (MMEditing's SRGAN, ESRGAN,\n"
    "Pix2Pix, CycleGAN, BasicRestorer, GLInpaintor, TwoStageInpaintor,\n"
    "DeepFillv1Inpaintor, and any model the program registered)\n"
    "with data parallelism over MPI. Every command runs as one process, or as\n"
    "many under `mpirun -n N duet ...` (or Slurm's srun).\n"
    "\n"
    "commands:\n"
    "  train   train a model from a config file\n"
    "  test    PSNR/SSIM of a checkpoint on the validation set, next to bicubic\n"
    "  infer   upscale (translate, inpaint) images with a checkpoint\n"
    "  export  write a checkpoint's generator as an ONNX model\n"
    "  plot    draw a work dir's loss and metric curves into a PNG\n"
    "  prepare make DIV2K's sub-images and annotation file (docs/div2k.md)\n"
    "  info    version, CPU features, kernel path, library versions, threads\n"
    "\n"
    "`duet <command> --help` describes each one; `duet --version` prints the version.\n";

static const char train_usage[] =
    "usage: duet train CONFIG [--work-dir DIR] [--resume[=CKPT]] [--dry-run]\n"
    "                         [--set KEY=VALUE]...\n"
    "\n"
    "Trains the model of CONFIG (a libconfig file, see configs/, or an MMEditing\n"
    "0.x .py config, converted by scripts/convert-config.py without running it;\n"
    "DUET_PYTHON names the Python, DUET_SCRIPTS the scripts folder) for total_iters\n"
    "iterations: logs every log_config.interval iterations (also to\n"
    "WORK_DIR/log.jsonl), evaluates every evaluation.interval and writes\n"
    "WORK_DIR/iter_N.safetensors and latest.safetensors every\n"
    "checkpoint_config.interval.\n"
    "\n"
    "options:\n"
    "  --work-dir DIR     where logs, checkpoints and images go (default: the\n"
    "                     config's work_dir)\n"
    "  --resume           continue from WORK_DIR/latest.safetensors: weights,\n"
    "                     optimizers, schedule, data order and RNG (on the same\n"
    "                     number of processes the result is bitwise the same)\n"
    "  --resume=CKPT      continue from CKPT (also `--resume CKPT.safetensors`,\n"
    "                     and MMEditing's `--resume-from CKPT`)\n"
    "  --set KEY=VALUE    override a config key, e.g. --set total_iters=100 or\n"
    "                     --set model.generator.num_blocks=8 (repeatable; VALUE in\n"
    "                     libconfig syntax: 1e-4, true, \"text\", [1, 2])\n"
    "  --cfg-options KEY=VALUE ...  mmcv's spelling of --set, several at once\n"
    "  --dry-run          check everything a run needs (every config key, the\n"
    "                     model, optimizers, load_from, the --resume checkpoint,\n"
    "                     one sample of each data set, the work dir), print what\n"
    "                     the run would do, and write nothing; with problems,\n"
    "                     name them all (unknown keys, bad values, absent files\n"
    "                     and folders) in one run and exit non-zero\n"
    "  -h, --help         this text\n"
    "\n"
    "Stopping and hangs (docs/reliability.md): on SIGTERM, SIGINT or SIGUSR1 every\n"
    "process stops at the next iteration boundary, a checkpoint is written and duet\n"
    "exits with status 75 (continue with --resume); a second signal stops at once.\n"
    "Under mpirun send SIGUSR1 (forwarded to the ranks), or give SIGTERM a grace\n"
    "with OMPI_MCA_odls_base_sigkill_timeout=60. A\n"
    "collective that makes no progress for dist.timeout seconds (default 600;\n"
    "DUET_TIMEOUT in the environment overrides it) aborts the job with status 76,\n"
    "naming the operation and the processes that did not take part.\n"
    "\n"
    "example:\n"
    "  mpirun -n 2 --oversubscribe duet train configs/msrresnet_x4_tiny.cfg\n";

static const char test_usage[] =
    "usage: duet test CONFIG CKPT [--out DIR] [--json] [--set KEY=VALUE]...\n"
    "\n"
    "Evaluates the generator of checkpoint CKPT on the config's validation set\n"
    "(data.val): mean PSNR and SSIM over its images (with test_cfg's\n"
    "crop_border), next to MATLAB bicubic upscaling of the same inputs. An\n"
    "inpaintor reports test_cfg's l1, psnr and ssim of the filled images next\n"
    "to the same numbers for the masked input itself (JSON keys <name>_input).\n"
    "\n"
    "options:\n"
    "  --out DIR          also save each output as DIR/<name>.png (not the\n"
    "                     validation folder itself: refused)\n"
    "  --json             print one JSON object {\"PSNR\", \"SSIM\", \"PSNR_bicubic\",\n"
    "                     \"SSIM_bicubic\", \"images\"} instead of the table\n"
    "  --set KEY=VALUE    override a config key (repeatable; or --cfg-options)\n"
    "  -h, --help         this text\n";

static const char infer_usage[] =
    "usage: duet infer CONFIG CKPT IMAGE... --out DIR [--tile N [--tile-pad P]]\n"
    "                  [--mask MASK] [--set KEY=VALUE]...\n"
    "\n"
    "Upscales each IMAGE (PNG or JPEG) with the generator of checkpoint CKPT and\n"
    "writes DIR/<name>.png. Under mpirun the images are shared out between the\n"
    "processes. Outputs never replace an input or each other: before anything is\n"
    "written, the run is refused when an output would be one of the IMAGEs, when\n"
    "two IMAGEs have one name (a.png and a.jpg), or when an output path is a\n"
    "symlink. Each output is written to a temporary file and renamed into place.\n"
    "\n"
    "Image-to-image models (Pix2Pix, CycleGAN) translate each IMAGE, which is the\n"
    "model's input alone (Pix2Pix: the A half of a pair, or B with direction b2a):\n"
    "it goes through the steps of data.val.pipeline for that key (Resize,\n"
    "Normalize to [-1, 1], ...) and the output is mapped back from [-1, 1] to\n"
    "[0, 255], so that infer writes what `duet test --out` writes.\n"
    "\n"
    "Inpaintors (GLInpaintor, TwoStageInpaintor, DeepFillv1Inpaintor) fill the\n"
    "hole that --mask MASK (a PNG or JPEG, nonzero = hole; the same mask for\n"
    "every IMAGE) cuts into each IMAGE: the image goes through\n"
    "data.val.pipeline (LoadMask reads MASK whatever its mode; as in MMEditing\n"
    "the pipeline's Crop and Resize change the image, not the mask, so MASK\n"
    "has the size the pipeline gives the image), and\n"
    "DIR/<name>.png is the generator's output in the hole and the image around\n"
    "it.\n"
    "\n"
    "options:\n"
    "  --out DIR          output folder, created when missing (required)\n"
    "  --tile N           super-resolution: run the generator on N x N input tiles\n"
    "                     (N >= 8; memory bounded by a tile, not the image), with a\n"
    "                     progress bar on a terminal\n"
    "  --tile-pad P       input pixels of context around each tile (default: the\n"
    "                     generator's receptive radius, measured: then the result\n"
    "                     equals the whole-image output up to float rounding)\n"
    "  --mask MASK        inpaintors: the hole to fill (required for them, refused\n"
    "                     for other models)\n"
    "  --set KEY=VALUE    override a config key (repeatable; or --cfg-options)\n"
    "  -h, --help         this text\n";

static const char export_usage[] =
    "usage: duet export CONFIG CKPT OUT.onnx [--part NAME] [--opset N]\n"
    "                   [--set KEY=VALUE]...\n"
    "\n"
    "Writes the generator of checkpoint CKPT (the config's model) as an ONNX\n"
    "model mapping the network's input \"input\" (N, C, H, W; any batch and\n"
    "size) to \"output\": what duet infer computes between its pre- and\n"
    "post-processing (SR: RGB in [0, 1] in, x scale out; Pix2Pix, CycleGAN:\n"
    "RGB in [-1, 1] in and out, as data.val.pipeline normalises). For\n"
    "onnxruntime, TensorRT and the like. MSRResNet, RRDBNet, UnetGenerator\n"
    "and ResnetGenerator generators.\n"
    "\n"
    "options:\n"
    "  --part NAME        the network to write (default: generator_ema when the\n"
    "                     checkpoint has an EMA copy; for CycleGAN the generator\n"
    "                     duet infer runs: generators.a (A to B), or generators.b\n"
    "                     with test_direction b2a; else generator)\n"
    "  --opset N          the ONNX opset, 13 to 18 (default 17)\n"
    "  --set KEY=VALUE    override a config key (repeatable; or --cfg-options)\n"
    "  -h, --help         this text\n";

static const char plot_usage[] =
    "usage: duet plot WORK_DIR [--out FILE.png] [--keys KEY,KEY...]\n"
    "\n"
    "Draws the curves of WORK_DIR/log.jsonl into a PNG, one panel per training\n"
    "value (losses) and evaluation metric (PSNR, SSIM, ...), against the\n"
    "iteration: the newest training in the work dir and the runs that resumed\n"
    "it. Prints one line per curve (points, iterations, range). No Python needed.\n"
    "\n"
    "options:\n"
    "  --out FILE.png     where the picture goes (default WORK_DIR/curves.png)\n"
    "  --keys K1,K2       only these curves, e.g. --keys loss_pix,PSNR\n"
    "  -h, --help         this text\n";

enum { OPT_WORK_DIR = 1, OPT_RESUME = 2, OPT_OUT = 4, OPT_JSON = 8, OPT_DRY_RUN = 16, OPT_TILE = 32,
       OPT_PART = 64, OPT_OPSET = 128, OPT_MASK = 256 };

static int usage_error(const char *usage, const char *msg, const char *arg) {
    fprintf(stderr, "duet: %s%s\n\n%s", msg, arg, usage);
    return EXIT_USAGE;
}

/* The candidate closest to `word` (at most 2 edits, or a third of its
 * length), or NULL: for "did you mean" after a typo. */
static const char *closest(const char *word, const char *const *candidates, size_t n) {
    const char *best = NULL;
    size_t best_d = strlen(word) / 3 > 2 ? strlen(word) / 3 : 2;
    for (size_t i = 0; i < n; i++) {
        size_t d = duet__edit_distance(word, candidates[i]);
        if (d > 0 && d <= best_d) {
            best = candidates[i];
            best_d = d;
        }
    }
    return best;
}

/* "unknown X 'word'" with the closest known one, then the usage. */
static int unknown_error(const char *usage, const char *what, const char *word,
                         const char *const *known, size_t n) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(word, "="), word);
    const char *alt = closest(name, known, n);
    fprintf(stderr, "duet: unknown %s '%s'%s%s%s\n\n%s", what, word,
            alt != NULL ? " (did you mean '" : "", alt != NULL ? alt : "",
            alt != NULL ? "'?)" : "", usage);
    return EXIT_USAGE;
}

/* Matches "--name" and "--name=...". */
static bool is_option(const char *a, const char *name) {
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

/* The value of "--name=value" or "--name value" (advancing *i); NULL when
 * missing. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (a[n] == '=') return a + n + 1;
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Parses argv (after the command name) into o, the positional arguments into
 * pos (room for argc) and --set values into sets (room for argc). Returns -1
 * to go on, else the exit code (0 after --help). */
static int parse(int argc, char **argv, const char *usage, unsigned allowed,
                 duet_runner_opts *o, const char **pos, int *npos, const char **sets,
                 bool *json, const char **part) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return EXIT_SUCCESS;
        } else if (is_option(a, "--set")) {
            const char *v = option_value(argc, argv, &i, "--set");
            if (v == NULL || strchr(v, '=') == NULL || v[0] == '=')
                return usage_error(usage, "--set needs KEY=VALUE, got ", v ? v : "nothing");
            sets[o->nsets++] = v;
        } else if (is_option(a, "--cfg-options")) {
            /* mmcv's spelling: --cfg-options KEY=VALUE [KEY=VALUE ...] */
            int before = (int)o->nsets;
            if (a[strlen("--cfg-options")] == '=') sets[o->nsets++] = a + strlen("--cfg-options=");
            while (i + 1 < argc && argv[i + 1][0] != '-' && strchr(argv[i + 1], '=') != NULL &&
                   argv[i + 1][0] != '=')
                sets[o->nsets++] = argv[++i];
            if ((int)o->nsets == before || strchr(sets[o->nsets - 1], '=') == NULL)
                return usage_error(usage, "--cfg-options needs KEY=VALUE ...", "");
        } else if ((allowed & OPT_WORK_DIR) && is_option(a, "--work-dir")) {
            if ((o->work_dir = option_value(argc, argv, &i, "--work-dir")) == NULL)
                return usage_error(usage, "--work-dir needs a folder", "");
        } else if ((allowed & OPT_RESUME) && is_option(a, "--resume-from")) {
            /* MMEditing's tools/train.py spelling of --resume=PATH. */
            o->resume = true;
            if ((o->resume_from = option_value(argc, argv, &i, "--resume-from")) == NULL)
                return usage_error(usage, "--resume-from needs a checkpoint", "");
        } else if ((allowed & OPT_RESUME) && is_option(a, "--resume")) {
            o->resume = true;
            if (a[strlen("--resume")] == '=')
                o->resume_from = a + strlen("--resume=");
            else if (i + 1 < argc && ends_with(argv[i + 1], ".safetensors"))
                o->resume_from = argv[++i];
        } else if ((allowed & OPT_OUT) && is_option(a, "--out")) {
            if ((o->out_dir = option_value(argc, argv, &i, "--out")) == NULL)
                return usage_error(usage, "--out needs a folder", "");
        } else if ((allowed & OPT_JSON) && strcmp(a, "--json") == 0) {
            *json = true;
        } else if ((allowed & OPT_PART) && is_option(a, "--part")) {
            if ((*part = option_value(argc, argv, &i, "--part")) == NULL)
                return usage_error(usage, "--part needs a part name", "");
        } else if ((allowed & OPT_OPSET) && is_option(a, "--opset")) {
            const char *v = option_value(argc, argv, &i, "--opset");
            char *end = NULL;
            long n = v != NULL ? strtol(v, &end, 10) : 0;
            if (v == NULL || end == v || *end != '\0' || n < 13 || n > 18)
                return usage_error(usage, "--opset needs an ONNX opset from 13 to 18, got ",
                                   v != NULL ? v : "nothing");
            o->onnx_opset = (int)n;
        } else if ((allowed & OPT_MASK) && is_option(a, "--mask")) {
            if ((o->mask = option_value(argc, argv, &i, "--mask")) == NULL)
                return usage_error(usage, "--mask needs a mask image", "");
        } else if ((allowed & OPT_DRY_RUN) && strcmp(a, "--dry-run") == 0) {
            o->dry_run = true;
        } else if ((allowed & OPT_TILE) && (is_option(a, "--tile") || is_option(a, "--tile-pad"))) {
            const bool pad = is_option(a, "--tile-pad");
            const char *name = pad ? "--tile-pad" : "--tile";
            const char *v = option_value(argc, argv, &i, name);
            char *end = NULL;
            long long n = v != NULL ? strtoll(v, &end, 10) : 0;
            /* A tile under 8 px repeats its context for every few pixels:
             * --tile 1 took 76 s on a 64 x 48 image (issue 35). */
            if (v == NULL || end == v || *end != '\0' || n < (pad ? 0 : 8) || n > 1000000)
                return usage_error(usage, pad ? "--tile-pad needs a number of pixels >= 0, got "
                                              : "--tile needs a tile size of at least 8 pixels "
                                                "(a smaller one recomputes its context for "
                                                "every few pixels), got ",
                                   v != NULL ? v : "nothing");
            if (pad)
                o->tile_pad = n;
            else
                o->tile = n;
        } else if (a[0] == '-' && a[1] != '\0') {
            const char *known[16];
            size_t n = 0;
            known[n++] = "--set";
            known[n++] = "--cfg-options";
            known[n++] = "--help";
            if (allowed & OPT_WORK_DIR) known[n++] = "--work-dir";
            if (allowed & OPT_RESUME) known[n++] = "--resume", known[n++] = "--resume-from";
            if (allowed & OPT_OUT) known[n++] = "--out";
            if (allowed & OPT_JSON) known[n++] = "--json";
            if (allowed & OPT_DRY_RUN) known[n++] = "--dry-run";
            if (allowed & OPT_TILE) known[n++] = "--tile", known[n++] = "--tile-pad";
            if (allowed & OPT_PART) known[n++] = "--part";
            if (allowed & OPT_OPSET) known[n++] = "--opset";
            if (allowed & OPT_MASK) known[n++] = "--mask";
            return unknown_error(usage, "option", a, known, n);
        } else {
            pos[(*npos)++] = a;
        }
    }
    o->sets = sets;
    return -1;
}

/* `duet test`'s answer: one JSON object, or a table next to bicubic, of the
 * metrics model.test_cfg.metrics names (none for a translation model, whose
 * outputs are the answer; bicubic only where the data is super-resolution,
 * the masked input where it is inpainting). */
static void print_test_result(const duet_runner_opts *o, const duet_test_result *r, bool json) {
    const duet_log_vars *m = &r->metrics, *b = &r->metrics_bicubic, *in = &r->metrics_input;
    if (json) {
        printf("{");
        for (int i = 0; i < m->count; i++) printf("\"%s\": %.4f, ", m->names[i], m->values[i]);
        for (int i = 0; i < b->count; i++)
            printf("\"%s_bicubic\": %.4f, ", b->names[i], b->values[i]);
        for (int i = 0; i < in->count; i++)
            printf("\"%s_input\": %.4f, ", in->names[i], in->values[i]);
        printf("\"images\": %" PRId64 "}\n", r->images);
    } else {
        printf("duet test: %s on %" PRId64 " validation images (crop_border %d)\n",
               o->checkpoint, r->images, r->crop_border);
        if (m->count > 0) {
            printf("         ");
            for (int i = 0; i < m->count; i++) printf(" %9s", m->names[i]);
            printf("\n  model  ");
            for (int i = 0; i < m->count; i++) printf(" %9.4f", m->values[i]);
            printf("\n");
        }
        if (b->count > 0) {
            printf("  bicubic");
            for (int i = 0; i < b->count; i++) printf(" %9.4f", b->values[i]);
            printf("\n");
        }
        if (in->count > 0) {
            printf("  input  ");
            for (int i = 0; i < in->count; i++) printf(" %9.4f", in->values[i]);
            printf("   (the masked input itself)\n");
        }
        if (o->out_dir != NULL) printf("outputs: %s/\n", o->out_dir);
    }
    fflush(stdout);
}

/* The runner has printed its error already (once per job). */
static int finish(int rc) {
    duet_comm_finalize();
    if (rc == DUET_ESTOPPED) return DUET_EXIT_STOPPED;
    if (rc == DUET_ETIMEOUT) return DUET_EXIT_TIMEOUT;
    return rc == DUET_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}

static const char prepare_usage[] =
    "usage: duet prepare div2k DATA_ROOT [--scales 2,3,4] [--crop-size 480] [--step 240]\n"
    "                          [--thresh-size 0] [--compression-level 3] [--threads N]\n"
    "                          [--lmdb | --lmdb-only]\n"
    "\n"
    "MMEditing's DIV2K preparation (tools/data/super-resolution/div2k/\n"
    "preprocess_div2k_dataset.py): cuts DATA_ROOT/DIV2K_train_HR and\n"
    "DATA_ROOT/DIV2K_train_LR_bicubic/X<s> into overlapping sub-images\n"
    "(DIV2K_train_HR_sub, DIV2K_train_LR_bicubic/X<s>_sub; 0001_s001.png, ...)\n"
    "with crop size, step and threshold divided by s for the LR folders, and\n"
    "writes DATA_ROOT/meta_info_DIV2K800sub_GT.txt, the annotation file of\n"
    "MMEditing's SRAnnotationDataset. With --lmdb, also MMEditing's LMDBs\n"
    "(make_lmdb_for_div2k: DIV2K_train_HR_sub.lmdb, DIV2K_train_LR_bicubic_X<s>_sub.lmdb,\n"
    "keys without .png, PNG level 1, meta_info.txt inside) for SRLmdbDataset.\n"
    "See docs/div2k.md.\n"
    "\n"
    "options (MMEditing's defaults):\n"
    "  --scales 2,3,4          the LR folders to cut\n"
    "  --crop-size 480         sub-image side in HR pixels\n"
    "  --step 240              sliding window step\n"
    "  --thresh-size 0         a last row/column is added when more is left over\n"
    "  --compression-level 3   PNG compression (0..9)\n"
    "  --threads N             images at once (default: the cores)\n"
    "  --lmdb                  also make the LMDBs (MMEditing's --make-lmdb)\n"
    "  --lmdb-only             only the LMDBs, from _sub folders made before\n";

static int prepare_cmd(int argc, char **argv) {
    if (argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(prepare_usage, stdout);
        return EXIT_SUCCESS;
    }
    if (argc < 2 || strcmp(argv[0], "div2k") != 0)
        return usage_error(prepare_usage, "give: prepare div2k DATA_ROOT", "");
    const char *root = argv[1];
    int scales[8] = {2, 3, 4}, nscales = 3;
    duet_subimage_opts o = {.crop_size = 480, .step = 240, .thresh_size = 0,
                            .compression_level = 3, .threads = 0};
    int lmdb = DUET_PREPARE_NO_LMDB;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        static const char *const known[] = {"--scales", "--crop-size", "--step", "--thresh-size",
                                            "--compression-level", "--threads", "--lmdb",
                                            "--lmdb-only"};
        if (strcmp(a, "--lmdb") == 0 || strcmp(a, "--lmdb-only") == 0) {
            lmdb = strcmp(a, "--lmdb") == 0 ? DUET_PREPARE_LMDB : DUET_PREPARE_LMDB_ONLY;
            continue;
        }
        int which = -1;
        for (int k = 0; k < 6; k++)
            if (is_option(a, known[k])) which = k;
        if (which < 0) return unknown_error(prepare_usage, "option", a, known, 8);
        const char *v = option_value(argc, argv, &i, known[which]);
        if (v == NULL) return usage_error(prepare_usage, "missing value for ", known[which]);
        if (which == 0) {
            nscales = 0;
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL;
                 t = strtok_r(NULL, ",", &save)) {
                char *end = NULL;
                long s = strtol(t, &end, 10);
                if (*end != '\0' || s < 1 || s > 8 || nscales == 8)
                    return usage_error(prepare_usage, "--scales wants factors 1..8 like 2,3,4, got ", v);
                scales[nscales++] = (int)s;
            }
            continue;
        }
        char *end = NULL;
        long long n = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || n < 0 || n > 1000000)
            return usage_error(prepare_usage, "not a number: ", v);
        if (which == 1) o.crop_size = n;
        if (which == 2) o.step = n;
        if (which == 3) o.thresh_size = n;
        if (which == 4) o.compression_level = (int)n;
        if (which == 5) o.threads = (int)n;
    }
    int rc = duet_runner_prepare_div2k(root, scales, nscales, &o, lmdb, stdout);
    if (rc != DUET_OK) fprintf(stderr, "duet: error: %s\n", duet_last_error());
    return rc == DUET_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* duet plot WORK_DIR [--out F] [--keys a,b]. */
static int plot_cmd(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    char *keys_arg = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(plot_usage, stdout);
            return EXIT_SUCCESS;
        } else if (is_option(a, "--out")) {
            if ((out = option_value(argc, argv, &i, "--out")) == NULL)
                return usage_error(plot_usage, "--out needs a file", "");
        } else if (is_option(a, "--keys")) {
            const char *v = option_value(argc, argv, &i, "--keys");
            if (v == NULL || v[0] == '\0')
                return usage_error(plot_usage, "--keys needs KEY,KEY...", "");
            free(keys_arg);
            keys_arg = duet__strdup(v);
        } else if (a[0] == '-' && a[1] != '\0') {
            static const char *const known[] = {"--out", "--keys", "--help"};
            free(keys_arg);
            return unknown_error(plot_usage, "option", a, known, 3);
        } else if (dir == NULL) {
            dir = a;
        } else {
            free(keys_arg);
            return usage_error(plot_usage, "plot takes one WORK_DIR, got another: ", a);
        }
    }
    if (dir == NULL) {
        free(keys_arg);
        return usage_error(plot_usage, "missing WORK_DIR", "");
    }
    const char *keys[64];
    size_t nkeys = 0;
    for (char *save = NULL, *k = keys_arg ? strtok_r(keys_arg, ",", &save) : NULL;
         k != NULL && nkeys < 64; k = strtok_r(NULL, ",", &save))
        keys[nkeys++] = k;
    int rc = duet_runner_plot(dir, out, keys, nkeys, stdout);
    if (rc != DUET_OK) fprintf(stderr, "duet: error: %s\n", duet_last_error());
    free(keys_arg);
    return rc == DUET_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}

static int run(const char *cmd, int argc, char **argv) {
    duet_runner_opts o = duet_runner_opts_default();
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int npos = 0, rc = EXIT_FAILURE;
    bool json = false;
    const char *part = NULL;
    if (pos == NULL || sets == NULL) {
        fprintf(stderr, "duet: out of memory\n");
        goto done;
    }
    if (strcmp(cmd, "train") == 0) {
        rc = parse(argc, argv, train_usage, OPT_WORK_DIR | OPT_RESUME | OPT_DRY_RUN, &o, pos, &npos, sets,
                   &json, &part);
        if (rc >= 0) goto done;
        if (npos != 1) {
            rc = usage_error(train_usage, npos ? "train takes one CONFIG" : "missing CONFIG",
                             "");
            goto done;
        }
        o.config = pos[0];
        o.keep_signal_handlers = true; /* until the process exits */
        rc = finish(duet_runner_train(&o));
    } else if (strcmp(cmd, "test") == 0) {
        rc = parse(argc, argv, test_usage, OPT_OUT | OPT_JSON, &o, pos, &npos, sets, &json, &part);
        /* stdout is the JSON object alone: the log's info lines go to stderr. */
        if (json) duet_log_set_stdout(false);
        if (rc >= 0) goto done;
        if (npos != 2) {
            rc = usage_error(test_usage, "test takes CONFIG and CKPT", "");
            goto done;
        }
        o.config = pos[0];
        o.checkpoint = pos[1];
        duet_test_result res;
        int trc = duet_runner_test(&o, &res);
        if (trc == DUET_OK && res.rank == 0) print_test_result(&o, &res, json);
        rc = finish(trc);
    } else if (strcmp(cmd, "infer") == 0) {
        rc = parse(argc, argv, infer_usage, OPT_OUT | OPT_TILE | OPT_MASK, &o, pos, &npos, sets,
                   &json, &part);
        if (rc >= 0) goto done;
        if (npos < 3) {
            rc = usage_error(infer_usage, "infer takes CONFIG, CKPT and at least one IMAGE", "");
            goto done;
        }
        if (o.out_dir == NULL) {
            rc = usage_error(infer_usage, "infer needs --out DIR", "");
            goto done;
        }
        if (o.tile_pad >= 0 && o.tile == 0) {
            rc = usage_error(infer_usage, "--tile-pad needs --tile N", "");
            goto done;
        }
        o.config = pos[0];
        o.checkpoint = pos[1];
        o.images = pos + 2;
        o.nimages = (size_t)(npos - 2);
        rc = finish(duet_runner_infer(&o));
    } else if (strcmp(cmd, "export") == 0) {
        rc = parse(argc, argv, export_usage, OPT_PART | OPT_OPSET, &o, pos, &npos, sets, &json,
                   &part);
        if (rc >= 0) goto done;
        if (npos != 3) {
            rc = usage_error(export_usage, "export takes CONFIG, CKPT and OUT.onnx", "");
            goto done;
        }
        o.config = pos[0];
        o.checkpoint = pos[1];
        rc = finish(duet_runner_export(&o, part, pos[2]));
    } else {
        static const char *const commands[] = {"train", "test",    "infer", "export",
                                               "plot",  "prepare", "info",  "help"};
        rc = unknown_error(main_usage, "command", cmd, commands, 8);
    }
done:
    free(pos);
    free(sets);
    return rc;
}

int duet_cli_main(int argc, char **argv) {
    if (argc < 2) {
        fputs(main_usage, stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(main_usage, stdout);
        return EXIT_SUCCESS;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("duet %s (git %s)\n", DUET_VERSION_STRING, duet_git_describe());
        return EXIT_SUCCESS;
    }
    if (strcmp(argv[1], "info") == 0) {
        if (argc > 2) return usage_error(main_usage, "info takes no arguments", "");
        return duet_info_print(stdout) == DUET_OK ? EXIT_SUCCESS : EXIT_FAILURE;
    }
    if (strcmp(argv[1], "plot") == 0) return plot_cmd(argc - 2, argv + 2);
    if (strcmp(argv[1], "prepare") == 0) return prepare_cmd(argc - 2, argv + 2);
    return run(argv[1], argc - 2, argv + 2);
}
