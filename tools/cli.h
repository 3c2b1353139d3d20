/* Subcommands of the `tilestack` CLI; each returns the process exit code
 * (0 success, 1 failure while running, 2 bad command line). */
#ifndef TS_TOOLS_CLI_H
#define TS_TOOLS_CLI_H

int ts__cmd_info(int argc, char **argv);
int ts__cmd_demo(int argc, char **argv);
int ts__cmd_tilec(int argc, char **argv);
int ts__cmd_tokenize(int argc, char **argv);
int ts__cmd_generate(int argc, char **argv);
int ts__cmd_chat(int argc, char **argv);
int ts__cmd_serve(int argc, char **argv); /* cmd_serve.c, or serve_missing.c without libmicrohttpd */
int ts__bench_serve(int argc, char **argv); /* `bench serve`: serve_bench.c, or serve_missing.c */
int ts__cmd_export_hf(int argc, char **argv);

#endif
