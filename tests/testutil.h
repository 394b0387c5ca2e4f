/* Shared helpers for duet's cmocka tests: tensors from seeds, closeness
 * checks that print the index and both values, the finite-difference
 * gradient check, and access to the PyTorch reference files. */
#ifndef DUET_TESTUTIL_H
#define DUET_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "duet/duet.h"

/* Fails the test (with duet_last_error()) unless expr returns DUET_OK. */
#define TU_OK(expr)                                                             \
    do {                                                                        \
        int tu__rc = (expr);                                                    \
        if (tu__rc != DUET_OK)                                                  \
            fail_msg("%s returned %s: %s", #expr, duet_err_name(tu__rc),       \
                     duet_last_error());                                        \
    } while (0)

/* New tensor of the shape with N(0,1)*scale values; never NULL. */
duet_tensor *tu_randn(duet_rng *rng, int ndim, const int64_t *shape, float scale);
/* Uniform in [lo, hi). */
duet_tensor *tu_rand(duet_rng *rng, int ndim, const int64_t *shape, float lo, float hi);
duet_tensor *tu_zeros(int ndim, const int64_t *shape);

/* |got - want| <= atol + rtol*|want| elementwise; on failure prints `what`,
 * the first bad index, both values and the largest error. */
void tu_assert_close(const float *got, const float *want, int64_t n, double rtol, double atol,
                     const char *what);

/* An op under test: builds its output from the inputs (recorded on the tape
 * when inputs require grad). */
typedef int (*tu_op_fn)(void *ctx, duet_tensor *const *inputs, duet_tensor **out);

/* Central finite differences of L = sum(out * R) for a fixed random R,
 * against the gradients autograd gives, for every input with requires_grad
 * (up to max_per_input elements each, chosen at random). Fails the test on
 * |num - ana| > atol + rtol*|num|. eps is the perturbation (1e-2 suits
 * float32 for smooth ops). */
void tu_gradcheck(tu_op_fn fn, void *ctx, int n, duet_tensor *const *inputs, double eps,
                  double rtol, double atol, int max_per_input);

/* The reference directory (env DUET_REF_DIR); fails the test when unset. */
const char *tu_ref_dir(void);
/* Loads DUET_REF_DIR/<name>; fails the test loudly when missing. */
duet_st *tu_ref_load(const char *name);
/* A tensor from a reference file; fails when absent. */
duet_tensor *tu_ref_tensor(const duet_st *st, const char *name);
/* Loads a state of the reference ("<prefix><name>", e.g. "init.") into
 * root, strictly: every entry of root from the file, none of the file's
 * under prefix left over. */
void tu_ref_load_state(duet_module *root, const duet_st *st, const char *prefix);
/* Adds to b, under its own name, each of keys[0..n) that st holds (a
 * reference file's batch); returns how many it added. */
int tu_ref_batch(duet_batch *b, const duet_st *st, const char *const *keys, int n);
/* The factor on today's tolerance for the reference entry `key`: 1, unless
 * the file holds "f32err.<key>" (the `mmedit` references of
 * tests/ref/gen_mmedit_refs.py: MMEditing in float64, and PyTorch float32's
 * own largest distance from it, in units of the test's tolerances, over the
 * entries of key's kind in key's step: log<s>.*, grad<s>.* or step<s>.*)
 * above 1;
 * then 3 times that: where PyTorch float32 itself misses the tolerance
 * against the exact result, duet may be a few times as far as PyTorch is
 * (issue 19), and no further. Says so once per group. */
double tu_ref_allowance(const duet_st *st, const char *key);
/* A step's log values against the reference's "log<step>.<name>" for the
 * n names (the log holds exactly those): rtol 1e-4, atol 1e-7, times
 * tu_ref_allowance. */
void tu_ref_compare_log(const duet_st *st, const duet_log_vars *log, int step,
                        const char *const *names, int n);
/* tu_ref_compare_log over those of the nall names the reference holds for
 * this step (a model whose log keys depend on which parts stepped; at most
 * 32 names). */
void tu_ref_compare_log_present(const duet_st *st, const duet_log_vars *log, int step,
                                const char *const *all, int nall);
/* The gradients of each of the model's parts that the reference holds for
 * this step ("grad<step>.<part>.<name>", every parameter of the part, 1e-3
 * |want| + 1e-4 max|want| times tu_ref_allowance); a part without entries
 * is skipped (its optimizer did not step). Returns the parts compared. */
int tu_ref_compare_part_grads(duet_model *m, const duet_st *st, int step,
                              const char *const *parts, int nparts);
/* Every parameter's gradient against "grad<step>.<name>": 1e-3 |want| +
 * 1e-4 max|want|, times tu_ref_allowance. Returns the parameter count. */
size_t tu_ref_compare_grads(duet_module *root, const duet_st *st, int step);
/* The largest |x| of t's elements. */
double tu_max_abs(const duet_tensor *t);
/* Every state-dict entry of root after `step` steps against the reference
 * file's "step<step>.<name>": rtol 1e-4, atol 1e-6 (times
 * tu_ref_allowance), except elements whose reference gradient
 * ("grad<s>.<name>", s <= step) sat at float32 noise level in some step
 * (nonzero, below 3e-4 of the tensor's largest; or the whole gradient below
 * structural_zero, a structural zero such as a bias InstanceNorm cancels;
 * 0: none): Adam moves those by up to lr in a direction the noise sets, so
 * they may differ by 2.1 lr per step, and must stay fewer than 1 in 50
 * (see test_ref_srgan.c). */
void tu_ref_compare_state(duet_module *root, const duet_st *st, int step, double lr,
                          double structural_zero);
/* The same with another bound on the share of noise-level elements than 1
 * in 50 (a network whose gradients spread over more decades: the GL
 * generator's). */
void tu_ref_compare_state_noisy(duet_module *root, const duet_st *st, int step, double lr,
                                double structural_zero, double max_noisy);
/* Adam's moments after `step` steps against MMEditing's, for the optimizers
 * `names` of the set: the `mmedit` reference files (metadata "oracle")
 * hold "adam<step>.<optimizer>.<param>.exp_avg" and ".exp_avg_sq" from the
 * optimizer state of MMEditing's run, and every one of them must match; the
 * files of tests/ref/ref_*.py hold none, and there this does nothing. The
 * tolerances are the gradients' (1e-3 |want| + 1e-4 max|want|, at least
 * 6e-8: two float32 ulps of 0.25, test_ref_esrgan.c's floor) carried
 * through Adam's first step: exp_avg is linear in the gradients (floor
 * (1 - 0.9) 6e-8), exp_avg_sq quadratic (twice both; floor
 * (1 - 0.999) (6e-8)^2); times tu_ref_allowance. The floors matter only
 * for tensors at zero. A moment whose reference is all below 1e-10 (1e-20
 * squared) comes
 * from a structural zero (the gradient of a bias that InstanceNorm
 * cancels: 7e-16 in float64, up to 8e-7 in PyTorch float32), and is held
 * to test_ref_cyclegan.c's 1e-6 for such gradients (1e-12 squared). */
void tu_compare_adam_moments(const duet_optimizer_set *opts, const char *const *names, int n,
                             const duet_st *st, int step);
/* Over more steps than Adam's noise-level elements let the train-step
 * tests follow entry by entry (their union passes 2% of SRGAN's values by
 * step 6), issue 19's yardstick: after `step` steps, for each part of
 * `parts`, the distance of the model's state from MMEditing's float64 run,
 * |x - x64| / |x64 - init| over the part's floating entries, may be at most
 * 3 times PyTorch float32's own ("f32dist<step>.<part>" of the `mmedit`
 * reference files). Where it is not, the same distance without the
 * noise-decided elements on both sides ("f32qdist<step>.<part>", the
 * elements whose "noise.<name>" step is 1..step: whose first nonzero
 * float64 gradient lay below their tensor's float32 noise, the largest
 * |g32 - g64| PyTorch float32 made in that tensor's first update, so that
 * Adam's first update of them moved them by up to lr in a direction
 * float32's rounding chose; gen_mmedit_refs.py's noise_steps) may stand
 * in, only while they are at most TU_NOISE_CAP_ALL of the part's elements
 * and TU_NOISE_CAP_TENSOR of any one tensor's (GLInpaintor's
 * discriminators, the one test that needs it, leave out 26 of 550,305, 1
 * of 6,400 in their worst tensor); the line printed says how many were
 * left out. The files of tests/ref/ref_*.py have no such keys: nothing to
 * do there. */
#define TU_NOISE_CAP_ALL 1e-3
#define TU_NOISE_CAP_TENSOR 1e-2
void tu_compare_distance(duet_module *root, const duet_st *st, int step,
                         const char *const *parts, int nparts);
/* The same check without failing (for a test whose ranks must agree first,
 * tests/mmedit/test_mmedit_ddp.c): prints the same line; false, with the
 * reason in why, where a part is farther than 3 times PyTorch's. */
bool tu_distance_within(duet_module *root, const duet_st *st, int step,
                        const char *const *parts, int nparts, char *why, size_t why_size);
/* The fast float32 path's yardstick (issue 36: DUET_CONV=winograd, whose
 * 3x3 convolutions round 4-8 times as much as the direct ones): the same
 * distances as tu_distance_within, judged step by step per part with
 * room for a few kinks, the float64 run's ReLU or batch-norm inputs that
 * sit within float32's error of a corner and land on the other side (one
 * such flip in GL's discriminator moves its gradient 4.4e-2; issue 36).
 * Let d be duet's distance at a step and p PyTorch float32's. The step is
 * in band when d <= TU_KINK_BAND p. A step out of band is a jump when the
 * previous step was in band, or d grew more than TU_KINK_JUMP times since
 * it; PyTorch's own jumps are its steps (from the second, after a nonzero
 * distance) where p grew more than TU_KINK_JUMP times, over the file's
 * whole run. The gate fails where duet has jumped more often than PyTorch
 * float32 over its run plus one, or where d exceeds the cap, TU_KINK_CAP
 * times the farthest PyTorch float32 gets over its run (a kink sends a
 * GAN's two runs apart, and float32's own run goes as far in its later
 * steps). With Adam's bias correction planted one step off, every model
 * tried fails the cap (SRGAN at step 1: 0.474 against 0.0208). Keep one
 * tu_kink_gate (zeroed) over the run's steps; each call prints the step's
 * line and returns false with the reason in why. */
#define TU_KINK_BAND 10.0
#define TU_KINK_JUMP 4.0
#define TU_KINK_CAP 3.0
#define TU_KINK_MAX_PARTS 4
typedef struct tu_kink_gate {
    double prev[TU_KINK_MAX_PARTS], prev_torch[TU_KINK_MAX_PARTS];
    double torch_max[TU_KINK_MAX_PARTS];
    int jumps[TU_KINK_MAX_PARTS], torch_jumps[TU_KINK_MAX_PARTS];
    bool scanned; /* torch_max and torch_jumps read from the file */
} tu_kink_gate;
bool tu_distance_kink_gate(tu_kink_gate *g, duet_module *root, const duet_st *st, int step,
                           const char *const *parts, int nparts, char *why, size_t why_size);
/* The network checks against MMEditing's own modules (tests/mmedit/
 * test_ref_{gl_nets,deepfill_nets,deepfill_discs}.c): got (n values)
 * against st's entry `key` within rtol of each value plus rtol times the
 * entry's largest |value|. DUET_TEST_VERBOSE=1 prints each entry's scale
 * and largest error over scale; with DUET_TEST_NOFAIL too, nothing fails. */
void tu_ref_compare_scaled(const duet_st *st, const char *key, const float *got, int64_t n,
                           double rtol);
/* How many entries of st are named prefix... */
size_t tu_st_count_prefixed(const duet_st *st, const char *prefix);
/* Compares t's data with the reference entry `name` (shapes must agree). */
void tu_assert_ref(const duet_st *st, const char *name, const float *got, int64_t n,
                   double rtol, double atol);

/* One op against a PyTorch reference case NAME in st: loads NAME.in0 ..
 * in<n-1> (n <= TU_REF_MAX_IN; requires_grad where NAME.grad<i> exists),
 * runs op(ctx, inputs), compares shape and values with NAME.out,
 * backpropagates NAME.r and compares each NAME.grad<i> (inputs without one
 * must get no gradient). */
#define TU_REF_MAX_IN 4
typedef int (*tu_ref_op)(void *ctx, duet_tensor *const *in, duet_tensor **out);
void tu_ref_run_case(const duet_st *st, const char *name, int n, tu_ref_op op, void *ctx,
                     double rtol, double atol);

/* ---- files and folders (test fixtures) ---------------------------------- */

/* Makes a new folder $TMPDIR/<prefix>_XXXXXX (/tmp when TMPDIR is unset or
 * empty) and writes its path to buf; returns buf, or NULL when it cannot
 * (a cmocka setup then returns -1). */
char *tu_mkdtemp(char *buf, size_t size, const char *prefix);
/* A cmocka per-test fixture: a new temporary folder $TMPDIR/duet_test_XXXXXX
 * (*state points to the tu_tmpdir), removed with all it holds afterwards:
 * TU_TMPDIR_TEST(test_x) in the test list, and in test_x:
 *   tu_tmpdir *fx = *state;  ... fx->dir ... */
typedef struct tu_tmpdir {
    char dir[256];
} tu_tmpdir;
int tu_tmpdir_setup(void **state);
int tu_tmpdir_teardown(void **state);
#define TU_TMPDIR_TEST(f) cmocka_unit_test_setup_teardown(f, tu_tmpdir_setup, tu_tmpdir_teardown)
/* A cmocka group setup / teardown that runs the group inside a new
 * temporary folder (for code that writes relative paths, like the headers'
 * usage examples): the working directory changes to it, and back, and the
 * folder is removed afterwards. */
int tu_cwd_tmpdir_setup(void **state);
int tu_cwd_tmpdir_teardown(void **state);
/* Removes path and everything below it (links are removed, not followed);
 * 0 when it is gone, -1 otherwise. */
int tu_rm_tree(const char *path);
/* buf = "dir/name"; returns buf. */
char *tu_path(char *buf, size_t size, const char *dir, const char *name);
/* Number of entries of dir besides . and ..; fails the test when dir cannot
 * be opened. */
int tu_count_entries(const char *dir);
/* Writes n bytes (or a string) to path, replacing it; fails the test on any
 * error, the close included. */
void tu_write_file(const char *path, const void *bytes, size_t n);
void tu_write_text(const char *path, const char *text);
/* The whole file, malloc'd with one spare 0 byte after it; *n its size.
 * Fails the test when it cannot be read. */
unsigned char *tu_read_file(const char *path, size_t *n);

/* ---- errors ------------------------------------------------------------- */

/* Fails unless rc == want and duet_last_error() contains every needle: a
 * NULL-terminated list (a NULL needle ends it, so optional ones may be
 * passed as NULL last). E.g. tu_expect_error(rc, DUET_ESHAPE, "linear",
 * "[3, 6]", NULL). */
void tu_expect_error(int rc, int want, ...) __attribute__((sentinel));

/* ---- skipping ------------------------------------------------------------- */

/* Skips the calling test case for a reason of this machine (a CPU feature, a
 * kernel setting, a sanitizer): prints "SKIPPED: <reason>" and makes tu_exit
 * return TU_SKIP_CODE, which CTest reports as a skipped test (the tests'
 * SKIP_RETURN_CODE), so that a skip shows in ctest's output. */
#define TU_SKIP_CODE 77
#define tu_skip(...) (tu_skip_note(__VA_ARGS__), skip())
void tu_skip_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A test program's exit status from cmocka's count of failed tests: that
 * count when nonzero, else TU_SKIP_CODE when a case called tu_skip, else 0. */
int tu_exit(int failed);

/* ---- kernels -------------------------------------------------------------- */

/* Switches the kernels to bf16 mixed precision on num_threads threads, or
 * skips the calling test where the CPU has neither AVX512_BF16 nor AMX-BF16.
 * tu_kernels_default goes back to the default kernels (float32); as a
 * cmocka teardown it also runs when the test failed midway. */
void tu_bf16_or_skip(int num_threads);
int tu_kernels_default(void **state);

/* ---- autograd and modules ----------------------------------------------- */

/* Backpropagates L = sum(out * r) through its own recorded op, so that the
 * gradient reaching out is exactly r (out->numel values, copied). */
void tu_backprop_with(duet_tensor *out, const float *r);
/* a and b have the same state-dict names and sizes; with want_equal every
 * entry is bitwise equal (failing names the first that is not), without it
 * at least one entry differs. */
void tu_assert_same_state(duet_module *a, duet_module *b, bool want_equal);

/* ---- images and models -------------------------------------------------- */

/* An h x w image of c channels, every sample uniform in 0..255. */
duet_image *tu_random_image(duet_rng *rng, int64_t h, int64_t w, int c);
/* A small SRGAN (generator 8 channels 1 block, discriminator 4 channels on
 * 32x32, perceptual VGG cfg {4, 4, M, 8} at layer 5) for x4 on 8x8 LQ. */
duet_srgan_opts tu_tiny_srgan_opts(void);
/* The small GLInpaintor of the `mmedit` GLInpaintor tests
 * (gen_mmedit_refs.py's GLInpaintor spec): GLEncoderDecoder without norm,
 * GLDiscs of 16 channels with BatchNorm (global 3 convs on 32x32, local 2
 * on 16x16, fc 1024 each), vanilla GAN 0.001, L1 in the hole 1 and the
 * valid region 0.5, DiscShiftLoss 0.1, disc_step 1, iter_tc 0, iter_td 1,
 * local_size 16x16. */
duet_gl_inpaintor_opts tu_tiny_gl_inpaintor_opts(void);
/* The small DeepFillv1Inpaintor of the `mmedit` DeepFillv1 tests
 * (gen_mmedit_refs.py's DeepFillv1Inpaintor spec) on 72x72 images:
 * deepfillv1_256x256_8x2_places.py's model with the generator's channels
 * x 0.25 (as test_ref_deepfill_nets.c), both discriminators 4 convs of 16
 * channels (ELU, fc to 1, LeakyReLU 0.2; global 16*5*5 in, local on the
 * 32x32 patch 16*2*2 in), wgan 0.01, L1 in the hole and the valid region
 * 1 in both stages plus stage 2's GAN loss, GradientPenaltyLoss 10,
 * DiscShiftLoss 0.001, disc_step 1, local_size 32x32, gp_seed 77. */
duet_two_stage_inpaintor_opts tu_tiny_deepfill_v1_opts(void);
/* The TwoStageInpaintor of the `mmedit` DeepFillv2 tests (gen_mmedit_refs.py's
 * DeepFillv2 spec) on 72x72 images, built by the registry from the keys of
 * deepfillv2_256x256_8x2_places.py shrunk: the generator's channels x 1/3,
 * the SN-PatchGAN of 16 channels with the mask as input, hinge 0.1, L1 in
 * the hole and the valid region 1 in both stages, disc_step 1. Its init
 * is duet's (the tests load MMEditing's). */
duet_model *tu_deepfillv2_ref_model(void);
/* The BasicRestorers of the `mmedit` EDSR and RDN tests (gen_mmedit_refs.py's
 * edsr_spec and rdn_spec), built by the registry from MMEditing's generator
 * keys: name "edsr" (EDSR x4, mid 16, 2 blocks, res_scale 0.1, rgb_std
 * (0.9, 1.1, 1.25)) or "rdn" (RDN x3, mid 16, 3 blocks of 3 layers, growth
 * 8); L1 loss. Its init is duet's from seed (the tests load MMEditing's). */
duet_model *tu_sr_backbone_ref_model(const char *name, uint64_t seed);
/* The PConvInpaintor of the `mmedit` PConv tests (gen_mmedit_refs.py's
 * PConvInpaintorSpec), built by the registry from the keys of
 * pconv_256x256_stage1_8x1_places.py shrunk: 4 layers with BatchNorm, the
 * tiny VGG ([8, 8, M, 16, 16], layers 2 and 7) for the perceptual and
 * style terms, L1 hole 6 and valid 1, TV 0.1, loss_out_percep. */
duet_model *tu_pconv_ref_model(uint64_t seed);
/* The RealESRGANs of the `mmedit` Real-ESRGAN tests (gen_mmedit_refs.py's
 * RealESRGANSpec), built by the registry from the keys of MMEditing's two
 * Real-ESRGAN configs shrunk: stage "realesrnet" (RRDBNet mid 8, 2 blocks,
 * growth 4; L1 on gt_unsharp; generator_ema) or "realesrgan" (the same
 * with UNetDiscriminatorWithSpectralNorm mid 4, vanilla GAN 0.1, the tiny
 * VGG's layers 2 and 7 on gt_unsharp, start_iter 0). Its init is duet's
 * from seed (the tests load MMEditing's). */
duet_model *tu_real_esrgan_ref_model(const char *stage, uint64_t seed);
/* A batch of n samples: "lq" (n, 3, 8, 8) and "gt" (n, 3, 32, 32), uniform
 * in [0, 1) from the seed. */
void tu_sr_batch(duet_batch *b, uint64_t seed, int64_t n);
/* The small SRGAN of tu_tiny_srgan_opts, initialised from the seed (the
 * same seed on every rank gives the same model). */
duet_model *tu_tiny_srgan(uint64_t seed);
/* An optimizer set with one Adam (default betas, learning rate lr) each for
 * "generator" and "discriminator". */
/* Adam on "generator" and "discriminator" (an inpaintor's "disc"). */
duet_optimizer_set *tu_adam_pair(duet_model *m, float lr);
/* An inpaintor's batch around gt (N, 3, H, W; taken): one box hole per
 * sample, boxes[n] = {top, left, height, width}. Adds gt_img, mask (N, 1,
 * H, W; 1 in the hole), masked_img (gt_img * (1 - mask), as MMEditing's
 * GetMaskedImage) and, with with_bbox, mask_bbox (N, 4: the boxes). */
void tu_inpainting_batch(duet_batch *b, duet_tensor *gt, const int (*boxes)[4], bool with_bbox);
/* One Adam (default betas, learning rate lr) over m's trainable parameters. */
duet_optimizer *tu_adam_for(duet_module *m, float lr);

/* ---- parameters --------------------------------------------------------- */

/* Every parameter of m (trainable or not, state-dict order) copied into one
 * new 1-d tensor: a snapshot to compare before and after a step. */
duet_tensor *tu_flat_params(duet_module *m);
/* Same numel and bitwise equal data. */
bool tu_same_data(const duet_tensor *a, const duet_tensor *b);

/* ---- the process group of multi-process tests ---------------------------- */

/* tu_world_setup (a cmocka group setup) makes tu_comm = duet_comm_world and
 * sets tu_rank and tu_size; tu_world_teardown destroys it. The program calls
 * duet_comm_finalize after the group. Outside a group tu_rank is 0. */
extern duet_comm *tu_comm;
extern int tu_rank, tu_size;
int tu_world_setup(void **state);
int tu_world_teardown(void **state);

/* ---- the small network of the DDP tests ---------------------------------- */

/* TinyNet: conv1 (3->4, 3x3, pad 1) [-> bn] -> leaky 0.2 -> conv2 (4->c2,
 * 3x3, stride 2, pad 1) -> leaky 0.2 -> flatten -> fc (c2*16 -> 3); an
 * optional `aux` Linear (c2*16 -> 3) that forward never uses (an unused
 * branch). Input (B, 3, 8, 8), output (B, 3). Every rank builds the same
 * replica from the same seed. */
typedef struct tu_tiny_cfg {
    bool bn;
    bool aux;
    int c2; /* 4 unless a test wants a different replica */
} tu_tiny_cfg;
#define TU_TINY_PLAIN ((tu_tiny_cfg){false, false, 4})
duet_module *tu_tiny_create(uint64_t seed, tu_tiny_cfg cfg);
/* The full batch, identical on every rank: x (B, 3, 8, 8), target (B, 3). */
void tu_tiny_batch(uint64_t seed, int64_t B, duet_tensor **x, duet_tensor **t);
/* Samples start .. start+count-1 of t (a view); never NULL. */
duet_tensor *tu_slice0(duet_tensor *t, int64_t start, int64_t count);
/* forward + weight * mse + backward. */
void tu_fwd_bwd(duet_module *m, duet_tensor *x, duet_tensor *t, float weight);
/* A DDP of net over tu_comm with options o (NULL: defaults). */
duet_module *tu_ddp_of(duet_module *net, const duet_ddp_opts *o);
/* Every parameter and buffer of `got` close to the same-named one of `want`
 * (both lists in the same order, names checked); the message names tu_rank. */
void tu_assert_state_close(duet_module *got, duet_module *want, double rtol, double atol);
/* Same for the gradients of the trainable parameters. */
void tu_assert_grads_close(duet_module *got, duet_module *want, double rtol, double atol);
/* Rank 0's copy of every parameter and buffer (and gradient, when
 * with_grads) is broadcast with plain MPI (independently of the DDP's own
 * replica check) and compared bit for bit. */
void tu_assert_bit_identical(duet_module *m, bool with_grads);

#endif
