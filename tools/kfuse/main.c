#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kf_cli_command commands[] = {
    {"info", "show the WebGPU adapter, its features and the limits kfuse uses", kf_cmd_info},
    {"demo", "run the main demo: fused vs unfused, checked against the CPU", kf_cmd_demo},
    {"explain", "show how a graph fuses: groups, dispatches, bytes, WGSL", kf_cmd_explain},
    {"run", "run a graph fused (or not), check it against the CPU specs, time it", kf_cmd_run},
    {"bench", "time fused against unfused on this device (docs/PERFORMANCE.md)", kf_cmd_bench},
    {"verify", "check every operator's GPU kernels against its CPU spec", kf_cmd_verify},
    {"mutate", "mutation testing: wrong kernels made on purpose must fail a check", kf_cmd_mutate},
    {"wgsl", "print the WGSL of a named kernel (an example or an operator)", kf_cmd_wgsl},
    {"tune", "time the matmul tile configurations on this device and cache the fastest",
     kf_cmd_tune},
    {"sgmat", "time the subgroup-matrix (tensor core) f16 matmul's tile configurations",
     kf_cmd_sgmat},
    {"train", "train a graph's params on .npy data (SGD or AdamW on the GPU)", kf_cmd_train},
    {"sample", "generate text from a trained language model (kfuse train --save)", kf_cmd_sample},
};
static const size_t command_count = sizeof commands / sizeof commands[0];

static void usage(FILE *f) {
    fprintf(f, "usage: kfuse [--help] [--version] COMMAND [ARGS]\n\n"
               "Composable, fused and verified GPU compute kernels on WebGPU.\n\n"
               "commands:\n");
    for (size_t i = 0; i < command_count; i++) {
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    }
    fprintf(f, "\nRun 'kfuse COMMAND --help' for a command's options.\n"
               "Environment: KF_WEBGPU_LIB (a webgpu.h library), KF_BACKEND (vulkan|gles|...).\n");
}

bool kf_cli_is_help(const char *arg) {
    return !strcmp(arg, "-h") || !strcmp(arg, "--help");
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

bool kf_cli_number(const char *cmd, const char *option, const char *s, uint64_t lo, uint64_t hi,
                   uint64_t *out) {
    bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char *digits = hex ? s + 2 : s;
    char *end = NULL;
    errno = 0;
    /* strtoull alone takes '' as 0, '-1' as 2^64-1, ' 5' and '5abc' as 5, '010' as 8. */
    unsigned long long v = 0;
    bool ok =
        hex ? (digits[0] != '\0' && strspn(digits, "0123456789abcdefABCDEF") == strlen(digits))
            : is_digit(digits[0]);
    if (ok) {
        v = strtoull(digits, &end, hex ? 16 : 10);
        ok = errno == 0 && *end == '\0' && v >= lo && v <= hi;
    }
    if (!ok) {
        fprintf(stderr, "kfuse %s: %s takes a whole number from %llu to %llu, not '%s'\n", cmd,
                option, (unsigned long long)lo, (unsigned long long)hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool kf_cli_real(const char *cmd, const char *option, const char *s, double lo, double hi,
                 double *out) {
    char *end = NULL;
    errno = 0;
    bool ok = is_digit(s[0]) || (s[0] == '.' && is_digit(s[1])) ||
              (s[0] == '-' && (is_digit(s[1]) || s[1] == '.'));
    double v = 0.0;
    if (ok) {
        v = strtod(s, &end);
        /* strtod also reads hex floats, 'inf' and 'nan'; only plain decimals are numbers here */
        ok = errno == 0 && *end == '\0' && isfinite(v) && v >= lo && v <= hi &&
             !strpbrk(s, "xXnNiI");
    }
    if (!ok) {
        fprintf(stderr, "kfuse %s: %s takes a number from %g to %g, not '%s'\n", cmd, option, lo,
                hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool kf_cli_dim(const char **s, uint32_t lo, uint32_t hi, uint32_t *out) {
    const char *p = *s;
    uint64_t v = 0;
    if (!is_digit(*p)) {
        return false;
    }
    for (; is_digit(*p); p++) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > hi) {
            return false;
        }
    }
    if (v < lo) {
        return false;
    }
    *out = (uint32_t)v;
    *s = p;
    return true;
}

kf_context *kf_cli_context(void) {
    char err[1024] = {0};
    kf_context_desc desc = {0};
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    kf_status st = kf_context_create(&desc, &ctx);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse: %s: %s\n", kf_status_str(st), err);
        return NULL;
    }
    return ctx;
}

int main(int argc, char **argv) {
    if (argc < 2 || kf_cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kfuse 0.1.0\n");
        return 0;
    }
    for (size_t i = 0; i < command_count; i++) {
        if (!strcmp(argv[1], commands[i].name)) {
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "kfuse: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
