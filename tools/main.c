/* `tilestack`: subcommand dispatch. A new subcommand is one line in g_cmds. */
#include "cli.h"
#include "progress_bar.h"
#include "bench.h"

#include <stdio.h>
#include <string.h>

typedef struct cmd_entry {
    const char *name;
    const char *what;
    int (*fn)(int argc, char **argv); /* argv excludes the subcommand itself */
} cmd_entry;

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const cmd_entry g_cmds[] = {
    {"info", "version, CPU, ISA path, threads, caches (--probe: also measure peak/bandwidth)",
     ts__cmd_info},
    {"demo", "decode runner: TPOT, tokens/s per rank, kernel breakdown (--sweep, --check)",
     ts__cmd_demo},
    {"bench", "benchmark suites vs this machine's rooflines (tilestack bench --list)",
     ts__cmd_bench},
    {"tilec", "compile a .tile kernel file (--emit-ast|--emit-ir|--emit-c) [-o out]",
     ts__cmd_tilec},
    {"tokenize", "text to ids and back with a tokenizer.json (--model DIR | --tokenizer FILE)",
     ts__cmd_tokenize},
    {"generate", "stream a reply to --prompt (--model / --weights, --tokenizer; --json)",
     ts__cmd_generate},
    {"chat", "interactive chat over stdin, history kept (/reset, /exit, Ctrl-D)", ts__cmd_chat},
    {"serve", "an OpenAI-compatible HTTP server with continuous batching (--model, --port)",
     ts__cmd_serve},
    {"export-hf", "write a model as a DeepSeek-V4 checkpoint directory (--model NAME --out DIR)",
     ts__cmd_export_hf},
    {"version", "print the version", cmd_version},
    {"help", "this text", cmd_help},
};
#define N_CMDS (sizeof g_cmds / sizeof g_cmds[0])

static void usage(FILE *f) {
    fprintf(f, "tilestack %s: DeepSeek's LLM kernel stack on CPUs\n\n", ts_version_string());
    fprintf(f, "usage: tilestack <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_CMDS; i++) fprintf(f, "  %-9s %s\n", g_cmds[i].name, g_cmds[i].what);
    fprintf(f,
            "\nenvironment: TS_NUM_THREADS=N (thread pool size), TS_ISA=generic|avx2 (force a "
            "kernel path)\n"
            "exit codes: 0 ok, 1 failure while running, 2 bad command line\n");
}

static int cmd_help(int argc, char **argv) {
    (void)argc, (void)argv;
    usage(stdout);
    return 0;
}

static int cmd_version(int argc, char **argv) {
    (void)argc, (void)argv;
    /* The run-time query names the library actually linked, which may differ from the headers
     * this binary was built against when libtilestack.so is swapped underneath. */
    printf("tilestack %s (headers %s)\n", ts_version_string(), TS_VERSION_STRING);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--version") || !strcmp(c, "-V")) return cmd_version(0, NULL);
    if (!strcmp(c, "--help") || !strcmp(c, "-h")) return cmd_help(0, NULL);
    ts__progress_bar_install();
    for (size_t i = 0; i < N_CMDS; i++)
        if (!strcmp(c, g_cmds[i].name)) return g_cmds[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "tilestack: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
