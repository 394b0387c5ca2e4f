/* duet — the command line: `duet train | test | infer | info`. All of it is
 * duet_cli_main (src/runner/cli.c), which a program that registers its own
 * models calls the same way (examples/custom_model.c). */
#include "duet/duet.h"

int main(int argc, char **argv) { return duet_cli_main(argc, argv); }
