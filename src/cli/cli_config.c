/* order-worker config: the effective configuration and the key reference. */
#include <stdio.h>

#include "cli.h"

void ow_help_config_keys(void)
{
    puts("Configuration: a key = value file ('#' starts a comment), every key also\n"
         "settable as ORDER_WORKER_<KEY> with '.' as '_' (the environment wins).\n");
    ow_config_print_reference(stdout, 0);
}

void ow_help_config(void)
{
    puts("usage: order-worker config --print [--config FILE]\n"
         "       order-worker config --markdown\n"
         "\n"
         "  --print     the effective configuration (file, then environment), one\n"
         "              key per line with the source of its value; secrets are\n"
         "              printed as (redacted)\n"
         "  --markdown  the key reference below as a Markdown table (the README's\n"
         "              configuration section is generated from it)\n"
         "\n"
         "Exit status: 0, or 2 for bad arguments or configuration.\n");
    ow_help_config_keys();
}

int ow_cmd_config(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", "--print!", "--markdown!", NULL};
    int print = ow_cli_flag(argc, argv, "--print");
    int markdown = ow_cli_flag(argc, argv, "--markdown");
    ow_config cfg;
    int code;

    (void)stop;
    if (ow_cli_args(argc, argv, known, "config", NULL, 0) < 0)
        return OW_EXIT_USAGE;
    if (print == markdown) {
        fprintf(stderr, "order-worker config: give exactly one of --print and --markdown "
                        "(see order-worker config --help)\n");
        return OW_EXIT_USAGE;
    }
    if (markdown) {
        ow_config_print_reference(stdout, 1);
        return OW_EXIT_OK;
    }
    code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    ow_config_print(&cfg, stdout);
    ow_config_cleanup(&cfg);
    return OW_EXIT_OK;
}
