/* libFuzzer target: the config reader (libconfig syntax through duet's
 * typed getters, --set overrides, the unused-key check and the dump). The
 * input is "<config text>\0<override>" (the override is optional). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "duet/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *set = memchr(data, '\0', size) != NULL ? text + strlen(text) + 1 : NULL;
    duet_config *cfg = NULL;
    if (duet_config_load_string(text, "<fuzz>", &cfg) == DUET_OK) {
        if (set != NULL && set < text + size) duet_config_set(cfg, set);
        int64_t i;
        double d;
        bool b;
        const char *s;
        int64_t ia[8];
        size_t n;
        duet_config_get_int_or(cfg, "total_iters", 0, &i);
        duet_config_get_double_or(cfg, "dist.timeout", 600, &d);
        duet_config_get_bool_or(cfg, "data.train.lazy", false, &b);
        duet_config_get_string_or(cfg, "work_dir", "", &s);
        duet_config_get_int_array(cfg, "lr_config.step", ia, 8, &n);
        duet_config *sub = NULL;
        if (duet_config_sub(cfg, "model", &sub) == DUET_OK) {
            size_t len = 0;
            if (duet_config_length(sub, "generator", &len) == DUET_OK && len > 0) {
                const char *name;
                duet_config_member_name(sub, "generator", 0, &name);
            }
            duet_config_destroy(sub);
        }
        duet_config_check_unused(cfg);
        char *dump = NULL;
        if (duet_config_text(cfg, &dump) == DUET_OK) {
            /* What duet writes next to a run must read back. */
            duet_config *again = NULL;
            if (duet_config_load_string(dump, "<dump>", &again) != DUET_OK) abort();
            duet_config_destroy(again);
        }
        free(dump);
        duet_config_destroy(cfg);
    }
    free(text);
    return 0;
}
