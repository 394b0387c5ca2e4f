/* The export layer's header (src/export/: onnx.c, protobuf.c, helper.c),
 * for the registry, the outputs and the runner above it: the ONNX writer,
 * and the converters of scripts/ that duet runs as child processes for
 * MMEditing's .py configs and PyTorch .pth files. Not installed. */
#ifndef DUET_EXPORT_H
#define DUET_EXPORT_H

#include "duet/config.h"
#include "duet/models.h"
#include "duet/nn.h"

#include <stdbool.h>

/* ---- onnx.c ---- */
/* The network `net` (named `part` in messages and the graph) as an ONNX
 * model at `path` (onnx.c) in `opset` (DUET__ONNX_OPSET_MIN..MAX, else
 * DUET_EINVAL); batch_stats: BatchNorm2d normalises with the
 * batch's statistics (the network tests in training mode) rather than the
 * running ones. What was written goes to *stats: the graph's nodes, the
 * BatchNorm2d layers, the Dropout layers with p > 0 (written as
 * identities). */
enum { DUET__ONNX_OPSET_MIN = 13, DUET__ONNX_OPSET_MAX = 18, DUET__ONNX_OPSET_DEFAULT = 17 };
typedef struct duet__onnx_stats {
    size_t nodes;
    int batch_norms, dropouts;
} duet__onnx_stats;
int duet__onnx_export(duet_module *net, const char *part, const char *path, int opset,
                      bool batch_stats, duet__onnx_stats *stats);

/* ---- helper.c ---- */
/* Runs scripts/<script> (found through $DUET_SCRIPTS, or beside the
 * program) with $DUET_PYTHON (default python3) as `script INPUT -o OUT`,
 * OUT a new temporary file ending in `suffix`; *out_path (free it, and
 * unlink the file) on success. The converter's own lines go to stderr
 * when show_notes, else nowhere. DUET_ENOTFOUND naming where it looked
 * when the script or Python is missing; DUET_ECONFIG when it refused the
 * file (its message is on stderr). */
int duet__helper_convert(const char *script, const char *input, const char *suffix,
                         bool show_notes, char **out_path);
/* duet_config_load, and for an MMEditing .py config its conversion through
 * scripts/convert-config.py (no code of it run); messages then name "X.py
 * (converted)" and the converted text's lines. */
int duet__load_config_any(const char *path, bool show_notes, duet_config **out);
/* path ends in ".pth" (a PyTorch file, for scripts/convert-pth.py). */
bool duet__is_pth(const char *path);
/* torchvision's file name for a model name MMEditing writes as
 * torchvision://<name> ("vgg19" -> "vgg19-dcbb9e9d.pth"), or NULL. */
const char *duet__torchvision_file(const char *name);
/* That file in torch.hub's folder ($TORCH_HOME/hub/checkpoints, else
 * $XDG_CACHE_HOME/torch/..., else ~/.cache/torch/...): *out_path (free it);
 * DUET_ENOTFOUND naming the folder, the file and where it comes from. */
int duet__torchvision_find(const char *name, char **out_path);

#endif
