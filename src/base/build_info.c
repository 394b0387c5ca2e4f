/* What the build knows about its source: `git describe` of the checkout,
 * generated into generated/duet_git.h by cmake/GitDescribe.cmake at every
 * build (the logs' run header, `duet --version`, `duet info`). */
#include "duet/base.h"

#include "duet_git.h" /* generated: DUET_GIT_DESCRIBE */

const char *duet_git_describe(void) { return DUET_GIT_DESCRIBE; }
