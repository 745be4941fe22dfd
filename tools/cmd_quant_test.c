/* cmd_quant_test.c - placeholder until the quant-test command lands. */
#include "cli.h"
#include <stdio.h>
int cmd_quant_test(int argc, char **argv) { (void)argc; (void)argv; return cli_error("quant-test", "not implemented yet"); }
