#include "cli.h"

#include <string.h>

static const kf_cli_command commands[] = {
    {"info", "show the WebGPU adapter, its features and the limits kfuse uses", kf_cmd_info},
    {"demo", "run the main demo: fused vs unfused, checked against the CPU", kf_cmd_demo},
    {"explain", "show how a graph fuses: groups, dispatches, bytes, WGSL", kf_cmd_explain},
    {"run", "run a graph fused (or not), check it against the CPU specs, time it", kf_cmd_run},
    {"bench", "time fused against unfused on this device (docs/PERFORMANCE.md)", kf_cmd_bench},
    {"verify", "check every operator's GPU kernels against its CPU spec", kf_cmd_verify},
    {"wgsl", "print the WGSL of a named kernel (an example or an operator)", kf_cmd_wgsl},
    {"tune", "time the matmul tile configurations on this device and cache the fastest",
     kf_cmd_tune},
    {"sgmat", "time the subgroup-matrix (tensor core) f16 matmul's tile configurations",
     kf_cmd_sgmat},
    {"train", "train a graph's params on .npy data (SGD or AdamW on the GPU)", kf_cmd_train},
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
