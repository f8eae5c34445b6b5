/* The WGSL a few kernels emit, kept in tests/golden/NAME.wgsl: a change to the emitter shows as a
 * diff here. After an intended change, rewrite them with
 *     KFUSE_UPDATE_GOLDEN=1 build/debug/kfuse_tests --suite golden
 * and review the diff in git. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/examples.h"

static const char *const golden_names[] = {
    "demo-chain",             /* three maps composed with |> */
    "reduce-sum",             /* workgroup memory, barriers, a while loop */
    "naive-matmul-bias-relu", /* a producer's store phase in a loop, stages inlined there */
    "gelu-erf",               /* the erf helper */
    "subgroup-sum",           /* enable subgroups, subgroup builtins */
};

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) {
        buf[n] = '\0';
    }
    fclose(f);
    return buf;
}

/* The first line where a and b differ, for the failure message. */
static void first_difference(const char *a, const char *b, char *out, size_t size) {
    int line = 1;
    const char *la = a, *lb = b;
    while (*a && *a == *b) {
        if (*a == '\n') {
            line++;
            la = a + 1;
            lb = b + 1;
        }
        a++;
        b++;
    }
    int na = (int)strcspn(la, "\n"), nb = (int)strcspn(lb, "\n");
    snprintf(out, size, "line %d:\n      emitted: %.*s\n      golden:  %.*s", line, na, la, nb, lb);
}

KT_CPU_TEST(golden, wgsl_matches_golden_files) {
    const char *update = getenv("KFUSE_UPDATE_GOLDEN");
    bool rewrite = update && !strcmp(update, "1");
    for (size_t i = 0; i < sizeof golden_names / sizeof golden_names[0]; i++) {
        const char *name = golden_names[i];
        kf_kernel *k = kf__example_build(name);
        char *wgsl = k ? kf_kernel_emit_wgsl(k) : NULL;
        kf_kernel_destroy(k);
        KT_CHECK(wgsl, "%s: no WGSL", name);
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/golden/%s.wgsl", KF_SOURCE_DIR, name);
        if (rewrite) {
            FILE *f = fopen(path, "wb");
            bool ok = f && fputs(wgsl, f) >= 0;
            if (f) {
                ok = fclose(f) == 0 && ok;
            }
            kf_free(wgsl);
            KT_CHECK(ok, "cannot write %s", path);
            printf("    rewrote %s\n", path);
            continue;
        }
        char *golden = read_file(path);
        if (!golden) {
            kf_free(wgsl);
            KT_CHECK(false, "cannot read %s (KFUSE_UPDATE_GOLDEN=1 writes it)", path);
        }
        bool same = !strcmp(wgsl, golden);
        char diff[1024] = "";
        if (!same) {
            first_difference(wgsl, golden, diff, sizeof diff);
        }
        kf_free(wgsl);
        free(golden);
        KT_CHECK(same,
                 "%s differs from %s at %s\n    (if the change is intended: "
                 "KFUSE_UPDATE_GOLDEN=1 kfuse_tests --suite golden)",
                 name, path, diff);
    }
}

/* Emission is deterministic: the same kernel built twice gives the same bytes, and emitting
 * twice from one kernel too. */
KT_CPU_TEST(golden, wgsl_is_deterministic) {
    for (uint32_t i = 0; i < kf__example_count(); i++) {
        const kf__example *e = kf__example_at(i);
        kf_kernel *a = e->build(), *b = e->build();
        char *wa = kf_kernel_emit_wgsl(a), *wb = kf_kernel_emit_wgsl(b),
             *wa2 = kf_kernel_emit_wgsl(a);
        bool same = wa && wb && wa2 && !strcmp(wa, wb) && !strcmp(wa, wa2);
        kf_free(wa);
        kf_free(wb);
        kf_free(wa2);
        kf_kernel_destroy(a);
        kf_kernel_destroy(b);
        KT_CHECK(same, "%s: two emissions differ", e->name);
    }
}
