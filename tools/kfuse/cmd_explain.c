/* kfuse explain: what the planner fuses, and what it saves. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void explain_usage(FILE *f) {
    fprintf(f, "usage: kfuse explain SPEC [--wgsl] [--no-fuse] [--json]\n\n"
               "Plans the graph in SPEC (a file of the graph language, '-' for standard input,\n"
               "or -e 'TEXT') and prints its fusion groups: the ops in each, the dispatch count\n"
               "and the bytes read and written, fused and unfused.\n\n"
               "  --wgsl      print each group's WGSL too\n"
               "  --no-fuse   plan one dispatch per operator\n"
               "  --json      one JSON object: dispatches, unfused_dispatches, bytes, "
               "unfused_bytes\n");
}

int kf_cmd_explain(int argc, char **argv) {
    const char *spec = NULL;
    bool spec_is_text = false, wgsl = false, json = false;
    kf_compile_options opts = {.no_prime = true}; /* nothing runs: no first dispatch to pay */
    for (int i = 1; i < argc; i++) {
        if (kf_cli_is_help(argv[i])) {
            explain_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--wgsl")) {
            wgsl = true;
        } else if (!strcmp(argv[i], "--no-fuse")) {
            opts.no_fuse = true;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "-e") && i + 1 < argc) {
            spec = argv[++i];
            spec_is_text = true;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "kfuse explain: unknown option '%s'\n", argv[i]);
            explain_usage(stderr);
            return 2;
        } else if (!spec) {
            spec = argv[i];
        } else {
            fprintf(stderr, "kfuse explain: one SPEC only ('%s' is extra)\n", argv[i]);
            return 2;
        }
    }
    if (!spec) {
        explain_usage(stderr);
        return 2;
    }
    kf_graph *g = kf_cli_load_spec(spec, spec_is_text);
    if (!g) {
        return 1;
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        kf_graph_destroy(g);
        return 1;
    }
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, &opts, &plan);
    int rc = 0;
    if (st != KF_OK) {
        fprintf(stderr, "kfuse explain: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        rc = 1;
    } else if (json) {
        kf_plan_summary s;
        kf_plan_summary_get(plan, &s);
        printf("{\"dispatches\": %u, \"unfused_dispatches\": %u, \"bytes\": %llu, "
               "\"unfused_bytes\": %llu}\n",
               s.dispatches, s.unfused_dispatches, (unsigned long long)s.bytes,
               (unsigned long long)s.unfused_bytes);
    } else {
        char *text = kf_plan_explain(plan, wgsl);
        if (text) {
            fputs(text, stdout);
        }
        kf_free(text);
    }
    kf_plan_destroy(plan);
    kf_context_destroy(ctx);
    kf_graph_destroy(g);
    return rc;
}
