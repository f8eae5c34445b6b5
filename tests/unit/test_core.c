/* The core folder and the layering (docs/architecture.md, "The folders"): every internal header
 * can be included together (no name is defined two ways), each status has its own words, and no
 * folder of src/ includes a header of a folder above it. */
#include "core/core.h"
#include "fuse/fuse_internal.h"
#include "fuse/plan_internal.h"
#include "harness.h"
#include "ir/ir_internal.h"
#include "ir/ir_types.h"
#include "ir/mutate.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"
#include "spec/spec_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

KT_CPU_TEST(unit, core_headers_include_together) {
    /* Compiling this file is most of the test; this checks the names mean what they say. */
    kf__node graph_node = {0};
    graph_node.kind = KF__NODE_INPUT;
    kf__ir_node ir_node = {0};
    ir_node.kind = KF__NODE_STAGE_IN;
    KT_CHECK(graph_node.kind == KF__NODE_INPUT && ir_node.kind == KF__NODE_STAGE_IN, "kinds");
    KT_CHECK(KF__KERNEL_ERROR_SIZE < KF__ERROR_SIZE, "a context holds a kernel's message whole");
}

KT_CPU_TEST(unit, core_status_strings_distinct) {
    static const kf_status all[] = {KF_OK,
                                    KF_ERROR_INVALID_ARGUMENT,
                                    KF_ERROR_NO_LIBRARY,
                                    KF_ERROR_NO_ADAPTER,
                                    KF_ERROR_NO_DEVICE,
                                    KF_ERROR_LIMIT,
                                    KF_ERROR_OUT_OF_MEMORY,
                                    KF_ERROR_COMPILE,
                                    KF_ERROR_VALIDATION,
                                    KF_ERROR_DEVICE_LOST,
                                    KF_ERROR_TYPE,
                                    KF_ERROR_SHAPE,
                                    KF_ERROR_PARSE,
                                    KF_ERROR_IO,
                                    KF_ERROR_UNSUPPORTED,
                                    KF_ERROR_MISMATCH,
                                    KF_ERROR_INTERNAL};
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        const char *s = kf_status_str(all[i]);
        KT_CHECK(s && s[0] && strcmp(s, "unknown status") != 0, "status %d has no words",
                 (int)all[i]);
        for (size_t j = 0; j < i; j++) {
            KT_CHECK(strcmp(s, kf_status_str(all[j])) != 0, "statuses %d and %d both read '%s'",
                     (int)all[i], (int)all[j], s);
        }
    }
    KT_CHECK(strcmp(kf_status_str((kf_status)9999), "unknown status") == 0, "out of range");
}

KT_CPU_TEST(unit, core_shape_helpers) {
    kf_shape s = {3, {2, 3, 5, 0}};
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&s, &rows, &cols);
    KT_CHECK(rows == 6 && cols == 5, "rows %llu cols %u", (unsigned long long)rows, cols);
    kf_shape d = kf__shape_drop_last(&s);
    KT_CHECK(d.rank == 2 && d.dims[0] == 2 && d.dims[1] == 3 && d.dims[2] == 0, "drop_last");
    kf_shape zero = {2, {4, 0, 0, 0}};
    KT_CHECK(!kf__shape_valid(&zero) && kf__shape_valid(&s), "valid");
    kf_shape row = kf_shape_1d(5);
    KT_CHECK(kf__broadcast_kind(&row, &s) == KF__BCAST_ROW, "a row onto 2x3x5");
    kf_shape col = {3, {2, 3, 1, 0}};
    KT_CHECK(kf__broadcast_kind(&col, &s) == KF__BCAST_COL, "a column onto 2x3x5");
    char buf[32];
    KT_CHECK(strcmp(kf_shape_str(&s, buf, sizeof buf), "2x3x5") == 0, "%s", buf);
    KT_CHECK(strcmp(kf_dtype_str(KF_DTYPE_F16), "f16") == 0 && kf_dtype_size(KF_DTYPE_F16) == 2,
             "f16");
}

/* The layers of src/ from the bottom up: a file may include headers of its own layer and of
 * layers below it (docs/architecture.md). A layer is a folder, or one header that stands below
 * its folder: the IR's data (ir/ir_types.h), which the emitter reads, sits under src/wgsl while
 * the IR's code, which calls the emitter, sits above it. */
static const char *const layers[] = {"core", "util", "runtime", "ir/ir_types.h", "wgsl",
                                     "ir",   "ops",  "fuse",    "spec"};
enum { LAYER_COUNT = sizeof layers / sizeof layers[0] };

/* The layer of a path under src/ ("wgsl/emit.c", "ir/ir_types.h"): the header's own entry, else
 * its folder's; -1 when it is in no layer. */
static int layer_of(const char *path) {
    for (int i = 0; i < LAYER_COUNT; i++) {
        if (strchr(layers[i], '/') && strcmp(layers[i], path) == 0) {
            return i;
        }
    }
    const char *slash = strchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : strlen(path);
    for (int i = 0; i < LAYER_COUNT; i++) {
        if (!strchr(layers[i], '/') && strlen(layers[i]) == n && strncmp(layers[i], path, n) == 0) {
            return i;
        }
    }
    return -1;
}

/* Checks every #include "..." of one file; returns the first violation in bad (empty: none). */
static void check_file(const char *path, const char *rel, char *bad, size_t bad_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(bad, bad_size, "cannot open %s", path);
        return;
    }
    int own = layer_of(rel);
    char line[512];
    while (!bad[0] && fgets(line, sizeof line, f)) {
        if (strncmp(line, "#include \"", 10) != 0) {
            continue;
        }
        char header[256];
        if (sscanf(line + 10, "%255[^\"]", header) != 1) {
            continue;
        }
        if (!strchr(header, '/')) {
            continue; /* kfuse.h: the public API, which every layer may include */
        }
        int target = layer_of(header);
/* a message cut short is still a failure: gcc's truncation warning does not apply */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
        if (target < 0) {
            snprintf(bad, bad_size, "%s includes %s, of no known folder", path, header);
        } else if (target > own) {
            snprintf(bad, bad_size, "%s (layer %s) includes %s, of the layer %s above it", path,
                     layers[own], header, layers[target]);
        }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    }
    fclose(f);
}

/* dir is src/ + rel, a folder; checks every .c and .h below it. */
static void check_folder(const char *dir, const char *rel, char *bad, size_t bad_size) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(bad, bad_size, "cannot open %s", dir);
        return;
    }
    struct dirent *e;
    while (!bad[0] && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[768], sub[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        size_t n = strlen(e->d_name);
        if (n > 2 &&
            (strcmp(e->d_name + n - 2, ".c") == 0 || strcmp(e->d_name + n - 2, ".h") == 0)) {
            check_file(path, sub, bad, bad_size);
        } else if (!strchr(e->d_name, '.')) {
            check_folder(path, sub, bad, bad_size); /* fuse/rules belongs to fuse */
        }
    }
    closedir(d);
}

KT_CPU_TEST(unit, core_layering_one_way) {
    char bad[1024] = "";
    DIR *d = opendir(KF_SOURCE_DIR "/src");
    KT_CHECK(d != NULL, "cannot open src/");
    struct dirent *e;
    uint32_t folders = 0;
    while (!bad[0] && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        if (layer_of(e->d_name) < 0) {
            snprintf(bad, sizeof bad, "src/%s is in no layer of the table", e->d_name);
            break;
        }
        char dir[512];
        snprintf(dir, sizeof dir, "%s/src/%s", KF_SOURCE_DIR, e->d_name);
        check_folder(dir, e->d_name, bad, sizeof bad);
        folders++;
    }
    closedir(d);
    KT_CHECK(!bad[0], "%s", bad);
    uint32_t folder_layers = 0;
    for (int i = 0; i < LAYER_COUNT; i++) {
        folder_layers += strchr(layers[i], '/') == NULL;
    }
    KT_CHECK(folders == folder_layers, "%u folders in src/, %u in the table", folders,
             folder_layers);
}

/* A header that is a layer of its own below its folder (ir/ir_types.h) holds types and inline
 * readers only: a function it declared would be defined by its folder's code, so a layer below
 * that includes it would call up. Every line at file scope that has a parenthesis must begin a
 * `static inline` definition (or be a preprocessor line). */
KT_CPU_TEST(unit, core_layer_headers_declare_no_functions) {
    for (int i = 0; i < LAYER_COUNT; i++) {
        if (!strchr(layers[i], '/')) {
            continue;
        }
        char path[512];
        snprintf(path, sizeof path, "%s/src/%s", KF_SOURCE_DIR, layers[i]);
        FILE *f = fopen(path, "r");
        KT_CHECK(f != NULL, "cannot open %s", path);
        char line[512];
        bool in_comment = false;
        uint32_t number = 0, inline_defs = 0;
        while (f && fgets(line, sizeof line, f)) {
            number++;
            line[strcspn(line, "\n")] = '\0';
            bool starts_comment = strncmp(line, "/*", 2) == 0;
            bool code = !in_comment && !starts_comment && line[0] != ' ' && line[0] != '\t' &&
                        line[0] != '#' && line[0] != '}' && line[0] != '\0';
            if (code && strchr(line, '(')) {
                KT_CHECK(strncmp(line, "static inline ", 14) == 0, "%s:%u declares a function: %s",
                         layers[i], number, line);
                inline_defs++;
            }
            if (starts_comment || in_comment) {
                in_comment = strstr(line, "*/") == NULL;
            }
        }
        if (f) {
            fclose(f);
        }
        KT_CHECK(inline_defs > 0, "%s: no inline reader seen (is the check reading it?)",
                 layers[i]);
    }
}
