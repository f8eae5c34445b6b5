/* The core folder and the layering (docs/architecture.md, "The folders"): every internal header
 * can be included together (no name is defined two ways), each status has its own words, and no
 * folder of src/ includes a header of a folder above it. */
#include "core/core.h"
#include "fuse/fuse_internal.h"
#include "fuse/plan_internal.h"
#include "harness.h"
#include "ir/ir_internal.h"
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

/* The folders of src/ from the bottom up: a file may include headers of its own folder and of
 * folders below it (docs/architecture.md). */
static const char *const layers[] = {"core", "util", "runtime", "wgsl",
                                     "ir",   "ops",  "fuse",    "spec"};
enum { LAYER_COUNT = sizeof layers / sizeof layers[0] };

/* Includes that still run upward, each with the issue item that removes it. */
static const char *const upward_allowed[][2] = {
    /* the emitter reads the IR's types (nodes, statements, the kernel): wgsl/wgsl.h includes
     * them, and is the only file of src/wgsl that does; the IR reaches the emitter only through
     * wgsl/wgsl.h (#10 item 5) */
    {"wgsl", "ir/ir_internal.h"},
};

static int layer_of(const char *folder, size_t n) {
    for (int i = 0; i < LAYER_COUNT; i++) {
        if (strlen(layers[i]) == n && strncmp(layers[i], folder, n) == 0) {
            return i;
        }
    }
    return -1;
}

static bool allowed(const char *folder, const char *header) {
    for (size_t i = 0; i < sizeof upward_allowed / sizeof upward_allowed[0]; i++) {
        if (strcmp(upward_allowed[i][0], folder) == 0 &&
            strcmp(upward_allowed[i][1], header) == 0) {
            return true;
        }
    }
    return false;
}

/* Checks every #include "..." of one file; returns the first violation in bad (empty: none). */
static void check_file(const char *path, const char *folder, char *bad, size_t bad_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(bad, bad_size, "cannot open %s", path);
        return;
    }
    int own = layer_of(folder, strlen(folder));
    char line[512];
    while (!bad[0] && fgets(line, sizeof line, f)) {
        if (strncmp(line, "#include \"", 10) != 0) {
            continue;
        }
        char header[256];
        if (sscanf(line + 10, "%255[^\"]", header) != 1) {
            continue;
        }
        const char *slash = strchr(header, '/');
        if (!slash) {
            continue; /* kfuse.h: the public API, which every layer may include */
        }
        int target = layer_of(header, (size_t)(slash - header));
/* a message cut short is still a failure: gcc's truncation warning does not apply */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
        if (target < 0) {
            snprintf(bad, bad_size, "%s includes %s, of no known folder", path, header);
        } else if (target > own && !allowed(folder, header)) {
            snprintf(bad, bad_size, "%s (%s) includes %s, a folder above it", path, folder, header);
        }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    }
    fclose(f);
}

static void check_folder(const char *dir, const char *folder, char *bad, size_t bad_size) {
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
        char path[768];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = strlen(e->d_name);
        if (n > 2 &&
            (strcmp(e->d_name + n - 2, ".c") == 0 || strcmp(e->d_name + n - 2, ".h") == 0)) {
            check_file(path, folder, bad, bad_size);
        } else if (!strchr(e->d_name, '.')) {
            check_folder(path, folder, bad, bad_size); /* fuse/rules belongs to fuse */
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
        if (layer_of(e->d_name, strlen(e->d_name)) < 0) {
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
    KT_CHECK(folders == LAYER_COUNT, "%u folders in src/, %d in the table", folders, LAYER_COUNT);
}
