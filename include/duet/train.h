/* duet/train.h — the config and runner layers, one header per subsystem;
 * this one includes them all, so that code written against the former
 * single header keeps compiling:
 *
 *   duet/config.h      config files, paths, getters, overrides, unused keys
 *   duet/checkpoint.h  checkpoint files (state dicts, optimizer states, metadata)
 *   duet/runner.h      `duet train | test | infer | info`
 *   duet/registry.h    building parts, models, wrappers, optimizers and
 *                      datasets by type name; registering new types
 */
#ifndef DUET_TRAIN_H
#define DUET_TRAIN_H

#include "duet/checkpoint.h"
#include "duet/config.h"
#include "duet/registry.h"
#include "duet/runner.h"

#endif
