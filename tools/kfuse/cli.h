/* The kfuse command-line program: one function per command, each in its own cmd_*.c file.
 * A command gets argv with argv[0] = its own name and returns the process exit code. */
#ifndef KF_CLI_H
#define KF_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kfuse.h"

typedef struct kf_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} kf_cli_command;

/* Creates the context the way every command does (KF_BACKEND honoured); prints the reason and
 * what to install on failure, and returns NULL. */
kf_context *kf_cli_context(void);
/* true if arg is -h or --help. */
bool kf_cli_is_help(const char *arg);

/* Numbers from the command line, read strictly: the whole of s is the number (no sign, no
 * space, nothing after it), decimal or 0x-hexadecimal, within [lo, hi]. On failure prints
 * "kfuse CMD: OPTION takes a whole number from LO to HI, not 'S'" and returns false. */
bool kf_cli_number(const char *cmd, const char *option, const char *s, uint64_t lo, uint64_t hi,
                   uint64_t *out);
/* The same for a real number (finite, decimal notation, within [lo, hi]). */
bool kf_cli_real(const char *cmd, const char *option, const char *s, double lo, double hi,
                 double *out);
/* Reads a decimal number within [lo, hi] at *s and moves *s past it; false (nothing moved) when
 * *s does not start with a digit or the number is out of range. For dims such as 64x128. */
bool kf_cli_dim(const char **s, uint32_t lo, uint32_t hi, uint32_t *out);

/* Parses a graph-language program: a file path, "-" for standard input, or the text itself;
 * prints "FILE:LINE:COL: error: ..." and returns NULL when it does not parse. */
kf_graph *kf_cli_load_spec(const char *arg, bool is_text);

int kf_cmd_info(int argc, char **argv);
int kf_cmd_explain(int argc, char **argv);
int kf_cmd_run(int argc, char **argv);
int kf_cmd_tune(int argc, char **argv);
int kf_cmd_demo(int argc, char **argv);
int kf_cmd_bench(int argc, char **argv);
int kf_cmd_verify(int argc, char **argv);
int kf_cmd_mutate(int argc, char **argv);
int kf_cmd_wgsl(int argc, char **argv);
int kf_cmd_sgmat(int argc, char **argv);
int kf_cmd_train(int argc, char **argv);
int kf_cmd_sample(int argc, char **argv);

#endif
