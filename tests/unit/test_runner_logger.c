/* The runner's log: MMEditing's text line, the ETA and its format, and
 * log.jsonl records that parse back to what was logged. */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outputs/logger.h"

static void test_duration(void **state) {
    (void)state;
    char b[64];
    assert_string_equal(duet__fmt_duration(0, b, sizeof b), "0:00:00");
    assert_string_equal(duet__fmt_duration(59.6, b, sizeof b), "0:01:00");
    assert_string_equal(duet__fmt_duration(3723, b, sizeof b), "1:02:03");
    assert_string_equal(duet__fmt_duration(86400 + 61, b, sizeof b), "1 day, 0:01:01");
    assert_string_equal(duet__fmt_duration(3 * 86400, b, sizeof b), "3 days, 0:00:00");
    assert_string_equal(duet__fmt_duration(NAN, b, sizeof b), "0:00:00");
}

static void test_eta(void **state) {
    (void)state;
    /* 10 s for 20 iterations since a resume at 100: 0.5 s each, 880 left. */
    assert_float_equal(duet__eta(10.0, 20, 120, 1000), 440.0, 1e-9);
    assert_true(duet__eta(10.0, 0, 0, 1000) < 0);
    assert_float_equal(duet__eta(10.0, 20, 1000, 1000), 0.0, 1e-12);
}

static void test_train_line(void **state) {
    (void)state;
    duet__kv lr[] = {{"generator", 1e-4}, {"discriminator", 5e-5}};
    duet__kv losses[] = {{"loss_pix", 0.04321}, {"loss_gan", 1.5}};
    duet__train_record r = {.iter = 100, .max_iters = 1000, .lr = lr, .nlr = 2,
                            .losses = losses, .nlosses = 2, .time = 0.1234, .data_time = 0.01,
                            .eta = 3723};
    char line[512];
    duet__format_train_line(&r, line, sizeof line);
    assert_string_equal(line, "Iter [100/1000]\tlr_generator: 1.000e-04, lr_discriminator: "
                              "5.000e-05, eta: 1:02:03, time: 0.123, data_time: 0.010, "
                              "loss_pix: 0.0432, loss_gan: 1.5000");
    /* A short buffer truncates without overflowing. */
    char small[16];
    duet__format_train_line(&r, small, sizeof small);
    assert_int_equal(strlen(small), 15);
}

static char *make_dir(void) {
    char tmpl[] = "/tmp/duet_logger_XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static void test_jsonl(void **state) {
    (void)state;
    char *dir = make_dir();
    FILE *text = tmpfile();
    assert_non_null(text);
    duet__logger *lg = NULL;
    TU_OK(duet__logger_open(dir, text, &lg));
    duet__kv lr[] = {{"generator", 2e-4}};
    duet__kv losses[] = {{"loss_pix", 0.25}, {"loss", NAN}};
    duet__train_record r = {.iter = 10, .max_iters = 20, .lr = lr, .nlr = 1, .losses = losses,
                            .nlosses = 2, .time = 0.5, .data_time = 0.125, .eta = 5};
    TU_OK(duet__logger_train(lg, &r));
    duet__kv m[] = {{"PSNR", 27.5}, {"SSIM", 0.75}};
    TU_OK(duet__logger_val(lg, 20, 4, m, 2));
    duet__logger_close(lg);

    /* Reopening appends. */
    TU_OK(duet__logger_open(dir, NULL, &lg));
    r.iter = 20;
    TU_OK(duet__logger_train(lg, &r));
    duet__logger_close(lg);

    char path[512];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[1024];
    int n = 0;
    while (fgets(buf, sizeof buf, f) != NULL) {
        json_error_t err;
        json_t *o = json_loads(buf, 0, &err);
        if (o == NULL) fail_msg("line %d is not JSON (%s): %s", n + 1, err.text, buf);
        const char *mode = json_string_value(json_object_get(o, "mode"));
        assert_non_null(mode);
        if (n == 0 || n == 2) {
            assert_string_equal(mode, "train");
            assert_int_equal(json_integer_value(json_object_get(o, "iter")), n == 0 ? 10 : 20);
            assert_float_equal(json_real_value(json_object_get(json_object_get(o, "lr"),
                                                               "generator")), 2e-4, 1e-12);
            assert_float_equal(json_real_value(json_object_get(o, "loss_pix")), 0.25, 0);
            assert_true(json_is_null(json_object_get(o, "loss"))); /* NaN -> null */
            assert_float_equal(json_real_value(json_object_get(o, "time")), 0.5, 0);
            assert_float_equal(json_real_value(json_object_get(o, "data_time")), 0.125, 0);
        } else {
            assert_string_equal(mode, "val");
            assert_int_equal(json_integer_value(json_object_get(o, "iter")), 20);
            assert_float_equal(json_real_value(json_object_get(o, "PSNR")), 27.5, 0);
            assert_float_equal(json_real_value(json_object_get(o, "SSIM")), 0.75, 0);
        }
        json_decref(o);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 3);

    /* The text lines: one train and one val line, no progress bar (not a
     * terminal). */
    rewind(text);
    int lines = 0;
    bool saw_train = false, saw_val = false;
    while (fgets(buf, sizeof buf, text) != NULL) {
        lines++;
        assert_null(strchr(buf, '\r'));
        if (strstr(buf, "INFO - Iter [10/20]\tlr_generator: 2.000e-04") != NULL) saw_train = true;
        if (strstr(buf, "Iter(val) [20]\tPSNR: 27.5000, SSIM: 0.7500") != NULL) saw_val = true;
    }
    fclose(text);
    assert_int_equal(lines, 2);
    assert_true(saw_train);
    assert_true(saw_val);

    unlink(path);
    rmdir(dir);
    free(dir);
}

/* A model without metrics (the translation configs' test_cfg.metrics = [])
 * gets a text line that says so, with the image count (MMEditing's
 * generation datasets log val_saved_number), never a bare
 * "Iter(val) [N]\t"; its JSON record is mode and iter. */
static void test_val_without_metrics(void **state) {
    (void)state;
    char *dir = make_dir();
    FILE *text = tmpfile();
    assert_non_null(text);
    duet__logger *lg = NULL;
    TU_OK(duet__logger_open(dir, text, &lg));
    TU_OK(duet__logger_val(lg, 200, 6, NULL, 0));
    TU_OK(duet__logger_val(lg, 400, 1, NULL, 0));
    duet__logger_close(lg);
    rewind(text);
    char buf[1024];
    const char *want[2] = {"Iter(val) [200]\t6 images evaluated, no metrics (test_cfg.metrics "
                           "is empty)\n",
                           "Iter(val) [400]\t1 image evaluated, no metrics (test_cfg.metrics "
                           "is empty)\n"};
    for (int i = 0; i < 2; i++) {
        assert_non_null(fgets(buf, sizeof buf, text));
        const char *at = strstr(buf, "Iter(val)");
        if (at == NULL || strcmp(at, want[i]) != 0) fail_msg("text line: '%s'", buf);
    }
    assert_null(fgets(buf, sizeof buf, text));
    fclose(text);

    char path[512];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    json_error_t err;
    json_t *o = json_loads(buf, 0, &err);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "mode")), "val");
    assert_int_equal(json_integer_value(json_object_get(o, "iter")), 200);
    assert_int_equal(json_object_size(o), 2);
    json_decref(o);
    fclose(f);
    unlink(path);
    rmdir(dir);
    free(dir);
}

static void test_progress_bar(void **state) {
    (void)state;
    char *dir = make_dir();
    FILE *text = tmpfile();
    duet__logger *lg = NULL;
    TU_OK(duet__logger_open(dir, text, &lg));
    duet__logger_set_progress(lg, true);
    duet__logger_progress(lg, 5, 10, 65);
    duet__logger_text(lg, "hello");
    duet__logger_close(lg);
    rewind(text);
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, text);
    buf[n] = '\0';
    fclose(text);
    /* Bar half full, then cleared before the text line. */
    assert_non_null(strstr(buf, "\r[===============>              ] 5/10, eta: 0:01:05"));
    assert_non_null(strstr(buf, "\r\033[K"));
    assert_non_null(strstr(buf, "INFO - hello\n"));
    char path[512];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    unlink(path);
    rmdir(dir);
    free(dir);
}

static void test_open_fails_cleanly(void **state) {
    (void)state;
    duet__logger *lg = NULL;
    int rc = duet__logger_open("/nonexistent/dir/for/duet", NULL, &lg);
    assert_int_equal(rc, DUET_EIO);
    assert_null(lg);
    assert_non_null(strstr(duet_last_error(), "/nonexistent/dir/for/duet/log.jsonl"));
    duet__logger_close(NULL);
    TU_OK(duet__logger_train(NULL, &(duet__train_record){0}));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration),    cmocka_unit_test(test_eta),
        cmocka_unit_test(test_train_line),  cmocka_unit_test(test_jsonl),
        cmocka_unit_test(test_val_without_metrics),
        cmocka_unit_test(test_progress_bar), cmocka_unit_test(test_open_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
