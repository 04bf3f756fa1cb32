#include "server/cli.h"
int gs_cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; return 1; }
