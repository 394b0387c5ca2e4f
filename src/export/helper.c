/* The converters of scripts/ run as child processes, so that what PyTorch
 * and MMEditing users have opens as it is: an MMEditing .py config
 * (scripts/convert-config.py, which evaluates literals only) and a .pth
 * file (scripts/convert-pth.py through pth_safe.py, which runs no code from
 * the pickle). Neither runs anything from the file it reads.
 *
 * Where they are: $DUET_SCRIPTS when set, else the scripts/ folder beside
 * the program's folder (the build tree: build/duet -> scripts/), else
 * share/duet/scripts beside it (an install: bin/duet ->
 * share/duet/scripts). The interpreter is $DUET_PYTHON, else python3 on
 * the PATH; both converters need only Python's standard library. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "export/export.h"

extern char **environ;

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The script's path (malloc'd), or NULL with the places looked at in
 * `tried`. */
static char *find_script(const char *name, duet__str *tried) {
    const char *env = getenv("DUET_SCRIPTS");
    if (env != NULL && env[0] != '\0') {
        char *p = duet__path_join(env, name);
        if (p != NULL && is_file(p)) return p;
        duet__str_add_item(tried, ", ", "%s ($DUET_SCRIPTS)", p != NULL ? p : env);
        free(p);
        return NULL;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        duet__str_addf(tried, "(the program's own path is unknown: set DUET_SCRIPTS)");
        return NULL;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash != NULL) *slash = '\0';
    static const char *const rel[] = {"../scripts", "../share/duet/scripts"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char *p = duet__strf("%s/%s/%s", exe, rel[i], name);
        if (p != NULL && is_file(p)) return p;
        if (p != NULL) duet__str_add_item(tried, ", ", "%s", p);
        free(p);
    }
    return NULL;
}

int duet__helper_convert(const char *script, const char *input, const char *suffix,
                         bool show_notes, char **out_path) {
    *out_path = NULL;
    duet__str tried = {0};
    char *path = find_script(script, &tried);
    if (path == NULL) {
        int rc = duet__error(DUET_ENOTFOUND, "%s needs scripts/%s, which is not at %s: set "
                             "DUET_SCRIPTS to duet's scripts folder", input, script,
                             duet__str_get(&tried));
        duet__str_free(&tried);
        return rc;
    }
    duet__str_free(&tried);
    const char *tmpdir = getenv("TMPDIR");
    char *out = duet__strf("%s/duet-convert-XXXXXX%s", tmpdir && tmpdir[0] ? tmpdir : "/tmp",
                           suffix);
    if (out == NULL) {
        free(path);
        return duet__error(DUET_ENOMEM, "out of memory");
    }
    int fd = mkstemps(out, (int)strlen(suffix));
    if (fd < 0) {
        int rc = duet__error(DUET_EIO, "%s: cannot make a temporary file %s: %s", input, out,
                             strerror(errno));
        free(out);
        free(path);
        return rc;
    }
    close(fd);
    const char *py = getenv("DUET_PYTHON");
    if (py == NULL || py[0] == '\0') py = "python3";
    char *argv[] = {(char *)py, path, (char *)input, "-o", out, NULL};
    /* The converter's lines (what it moved, dropped, converted) go to
     * stderr, so that stdout keeps what duet prints (duet test --json). */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (show_notes)
        posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
    else
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int err = posix_spawnp(&pid, py, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0, rc = DUET_OK;
    if (err != 0) {
        rc = duet__error(DUET_ENOTFOUND, "%s: cannot run %s %s: %s (DUET_PYTHON names the "
                         "Python 3 to use)", input, py, path, strerror(err));
    } else {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = duet__error(DUET_ECONFIG, "%s: %s %s refused it (its message is above); "
                             "nothing of the file was run", input, py, path);
    }
    free(path);
    if (rc != DUET_OK) {
        unlink(out);
        free(out);
        return rc;
    }
    *out_path = out;
    return DUET_OK;
}

static bool ends_with(const char *s, const char *end) {
    size_t n = strlen(s), m = strlen(end);
    return n >= m && strcmp(s + n - m, end) == 0;
}

bool duet__is_pth(const char *path) { return ends_with(path, ".pth"); }

int duet__load_config_any(const char *path, bool show_notes, duet_config **out) {
    if (!ends_with(path, ".py")) return duet_config_load(path, out);
    char *cfg_path = NULL;
    DUET_TRY(duet__helper_convert("convert-config.py", path, ".cfg", show_notes, &cfg_path));
    unsigned char *text = NULL;
    size_t len = 0;
    int rc = duet__read_file(cfg_path, &text, &len);
    unlink(cfg_path);
    free(cfg_path);
    if (rc != DUET_OK) return rc;
    char *z = malloc(len + 1); /* NUL-terminated for the parser */
    if (z != NULL) {
        memcpy(z, text, len);
        z[len] = '\0';
    }
    duet_aligned_free(text);
    if (z == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    /* Messages name the converted text's lines: `python3
     * scripts/convert-config.py X.py -o X.cfg` writes the same text. */
    char *name = duet__strf("%s (converted)", path);
    rc = name != NULL ? duet_config_load_string(z, name, out)
                      : duet__error(DUET_ENOMEM, "out of memory");
    free(name);
    free(z);
    return rc;
}

/* torchvision's file names (torchvision.models.vgg's model_urls): the
 * hash prefix torch.hub checks is part of the name. Only the VGGs without
 * batch norm: duet's perceptual VGG has none. */
static const struct {
    const char *name, *file;
} torchvision_files[] = {{"vgg11", "vgg11-8a719046.pth"},
                         {"vgg13", "vgg13-19584684.pth"},
                         {"vgg16", "vgg16-397923af.pth"},
                         {"vgg19", "vgg19-dcbb9e9d.pth"}};

const char *duet__torchvision_file(const char *name) {
    for (size_t i = 0; i < sizeof torchvision_files / sizeof torchvision_files[0]; i++)
        if (strcmp(name, torchvision_files[i].name) == 0) return torchvision_files[i].file;
    return NULL;
}

/* torch.hub's checkpoint folder: $TORCH_HOME/hub/checkpoints, TORCH_HOME
 * defaulting to $XDG_CACHE_HOME/torch, then ~/.cache/torch (torch's
 * _get_torch_home). */
static char *hub_dir(void) {
    const char *th = getenv("TORCH_HOME"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (th != NULL && th[0] != '\0') return duet__strf("%s/hub/checkpoints", th);
    if (xdg != NULL && xdg[0] != '\0') return duet__strf("%s/torch/hub/checkpoints", xdg);
    return duet__strf("%s/.cache/torch/hub/checkpoints", home != NULL ? home : "");
}

int duet__torchvision_find(const char *name, char **out_path) {
    *out_path = NULL;
    const char *file = duet__torchvision_file(name);
    if (file == NULL)
        return duet__error(DUET_ECONFIG, "torchvision://%s: not a torchvision VGG duet knows "
                           "(vgg11, vgg13, vgg16, vgg19)", name);
    char *dir = hub_dir();
    char *path = dir != NULL ? duet__path_join(dir, file) : NULL;
    if (path == NULL) {
        free(dir);
        return duet__error(DUET_ENOMEM, "out of memory");
    }
    int rc = DUET_OK;
    if (is_file(path)) {
        *out_path = path;
        path = NULL;
    } else {
        rc = duet__error(DUET_ENOTFOUND, "pretrained = 'torchvision://%s': %s is not there: put "
                         "torchvision's file %s in %s (torchvision.models.%s(pretrained=True) "
                         "downloads it there, from https://download.pytorch.org/models/%s; "
                         "TORCH_HOME moves the folder), or give pretrained = a .pth or "
                         ".safetensors path, or pretrained = \"random\" for a seeded random "
                         "network", name, path, file, dir, name, file);
    }
    free(path);
    free(dir);
    return rc;
}
