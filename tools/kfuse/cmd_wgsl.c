/* kfuse wgsl NAME: prints the WGSL of a named kernel, so a user can read what runs. Names are the
 * built-in example kernels (src/ir/examples.c), then the operators' forward kernels at a default
 * shape. */
#include "cli.h"
#include "ir/examples.h"
#include "ops/ops_internal.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: kfuse wgsl NAME [--shape DIMS]... [--bounds]\n"
            "       kfuse wgsl list\n\n"
            "Prints the WGSL kfuse emits for a named kernel: a built-in example (below) or an\n"
            "operator's forward kernel (kfuse verify --list names them), built for inputs of\n"
            "--shape (N, RxC, up to %d dims, or 'scalar'; default 64x64). One --shape gives\n"
            "every input that shape; repeated, the i-th is input i's (an operator of inputs\n"
            "of different shapes: kfuse wgsl embedding_grad --shape 65x128 --shape 4096 --shape "
            "4096x128).\n"
            "--bounds prints the in-bounds proof instead: each access, its index's range and\n"
            "whether it is proved or guarded (clamped load, skipped store).\n\n"
            "Examples:\n",
            KF_MAX_DIMS);
    for (uint32_t i = 0; i < kf__example_count(); i++) {
        const kf__example *e = kf__example_at(i);
        fprintf(f, "  %-18s %s\n", e->name, e->about);
    }
}

static void list(void) {
    for (uint32_t i = 0; i < kf__example_count(); i++) {
        printf("%s\n", kf__example_at(i)->name);
    }
    for (uint32_t i = 0; i < kf_op_count(); i++) {
        printf("%s\n", kf_op_name(kf_op_at(i)));
    }
}

/* N, RxC, AxBxC... (up to KF_MAX_DIMS dims) or "scalar". */
static bool parse_shape(const char *s, kf_shape *out) {
    memset(out, 0, sizeof *out);
    if (!strcmp(s, "scalar")) {
        return true;
    }
    for (;;) {
        if (out->rank == KF_MAX_DIMS || !kf_cli_dim(&s, 1, 1u << 24, &out->dims[out->rank])) {
            return false;
        }
        out->rank++;
        if (*s == '\0') {
            return true;
        }
        if (*s++ != 'x') {
            return false;
        }
    }
}

/* An operator's forward kernel with input i of shapes[i], or of the last shape given where fewer
 * were (NULL with a message when the op cannot be built that way). */
static kf_kernel *op_kernel(const kf_operator *op, const kf_shape *shapes, uint32_t count) {
    kf_op_params params;
    memset(&params, 0, sizeof params);
    uint32_t arity = kf_op_arity(op, &params);
    kf_shape in[4];
    for (uint32_t i = 0; i < 4; i++) {
        in[i] = shapes[i < count ? i : count - 1];
    }
    if (arity > 4) {
        fprintf(stderr, "kfuse wgsl: operator '%s' has no forward kernel to show\n",
                kf_op_name(op));
        return NULL;
    }
    kf_shape out;
    char msg[256] = {0};
    if (kf_op_shape(op, in, &params, &out, msg, sizeof msg) != KF_OK) {
        fprintf(stderr, "kfuse wgsl: %s: %s (try other --shape)\n", kf_op_name(op), msg);
        return NULL;
    }
    kf_kernel *k = kf_op_kernel_forward(op, in, &params, KF_DTYPE_F32);
    if (k) {
        kf__op_kernel_lengths(k, op, in, &params, KF_DTYPE_F32); /* what a plan binds */
    }
    return k;
}

int kf_cmd_wgsl(int argc, char **argv) {
    const char *name = NULL;
    kf_shape shapes[4] = {kf_shape_2d(64, 64)};
    uint32_t shape_count = 0;
    bool bounds = false;
    for (int i = 1; i < argc; i++) {
        if (kf_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (shape_count == 4) {
                fprintf(stderr, "kfuse wgsl: at most 4 --shape (one per input)\n");
                return 2;
            }
            if (!parse_shape(argv[++i], &shapes[shape_count++])) {
                fprintf(stderr,
                        "kfuse wgsl: --shape wants N, RxC, AxBxC... or scalar (e.g. 64x64), got "
                        "'%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--bounds")) {
            bounds = true;
        } else if (argv[i][0] == '-' || name) {
            fprintf(stderr, "kfuse wgsl: unexpected argument '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            name = argv[i];
        }
    }
    if (!name) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(name, "list")) {
        list();
        return 0;
    }
    kf_kernel *k = kf__example_build(name);
    if (!k) {
        const kf_operator *op = kf_op_find(name);
        if (!op) {
            fprintf(stderr, "kfuse wgsl: no kernel named '%s'; the names are:\n", name);
            for (uint32_t i = 0; i < kf__example_count(); i++) {
                fprintf(stderr, "  %s\n", kf__example_at(i)->name);
            }
            fprintf(stderr, "and the operators:");
            for (uint32_t i = 0; i < kf_op_count(); i++) {
                fprintf(stderr, " %s", kf_op_name(kf_op_at(i)));
            }
            fprintf(stderr, "\n");
            return 2;
        }
        k = op_kernel(op, shapes, shape_count ? shape_count : 1);
        if (!k) {
            return 1;
        }
    }
    if (bounds) {
        kf_bounds_report r;
        char *text = NULL;
        kf_status st = kf_kernel_bounds(k, &r, &text);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse wgsl: %s: %s\n", kf_status_str(st), kf_kernel_error(k));
            kf_kernel_destroy(k);
            return 1;
        }
        printf("%s: %u accesses, %u proved in bounds, %u guarded\n%s", kf_kernel_name(k),
               r.accesses, r.proved, r.guarded, text ? text : "");
        kf_free(text);
        kf_kernel_destroy(k);
        return 0;
    }
    char *wgsl = kf_kernel_emit_wgsl(k);
    if (!wgsl) {
        fprintf(stderr, "kfuse wgsl: %s: %s\n", kf_status_str(kf_kernel_status(k)),
                kf_kernel_error(k));
        kf_kernel_destroy(k);
        return 1;
    }
    fputs(wgsl, stdout);
    kf_free(wgsl);
    kf_kernel_destroy(k);
    return 0;
}
