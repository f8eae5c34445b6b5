/* The core folder and the layering (docs/architecture.md, "The folders"): every internal header
 * can be included together (no name is defined two ways), each status has its own words, and no
 * folder of src/ includes a header of a folder above it. */
#include "core/core.h"
#include "fuse/fuse_internal.h"
#include "fuse/mutation.h"
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
 * `static inline` definition or a typedef (or be a preprocessor line). */
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
                KT_CHECK(strncmp(line, "static inline ", 14) == 0 ||
                             strncmp(line, "typedef ", 8) == 0,
                         "%s:%u declares a function: %s", layers[i], number, line);
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

/* ---- calls: the include check's twin for calls through the public header ---------------- */

/* The text of a source file with comments, string and character literals and preprocessor lines
 * (with their continuations) blanked, newlines kept; NULL when unreadable. free() it. */
static char *read_code(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = size >= 0 ? malloc((size_t)size + 1) : NULL;
    size_t n = s ? fread(s, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!s) {
        return NULL;
    }
    s[n] = '\0';
    bool line_start = true;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '/' && s[i + 1] == '*') {
            for (; i < n && !(s[i] == '*' && s[i + 1] == '/'); i++) {
                s[i] = s[i] == '\n' ? '\n' : ' ';
            }
            if (i < n) {
                s[i] = s[i + 1] = ' ';
                i++;
            }
        } else if (c == '/' && s[i + 1] == '/') {
            for (; i < n && s[i] != '\n'; i++) {
                s[i] = ' ';
            }
        } else if (c == '"' || c == '\'') {
            s[i] = ' ';
            for (i++; i < n && s[i] != c && s[i] != '\n'; i++) {
                if (s[i] == '\\' && i + 1 < n) {
                    s[i++] = ' ';
                }
                s[i] = ' ';
            }
            if (i < n && s[i] == c) {
                s[i] = ' ';
            }
        } else if (c == '#' && line_start) {
            for (; i < n && !(s[i] == '\n' && s[i - 1] != '\\'); i++) {
                s[i] = ' ';
            }
        }
        if (i < n) {
            line_start = s[i] == '\n' || (line_start && (s[i] == ' ' || s[i] == '\t'));
        }
    }
    return s;
}

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

typedef struct fn_layer {
    char name[80];
    int layer;
} fn_layer;

typedef struct call_scan {
    fn_layer *defs;
    uint32_t def_count, def_cap;
    uint32_t files, calls; /* calls checked, for the test's own sanity */
    char bad[1024];
} call_scan;

static int def_layer(const call_scan *cs, const char *name) {
    for (uint32_t i = 0; i < cs->def_count; i++) {
        if (!strcmp(cs->defs[i].name, name)) {
            return cs->defs[i].layer;
        }
    }
    return -1;
}

/* One file: with `define`, records the kf_ / kf__ functions it defines (not static); else checks
 * that each call of such a function is to one of the file's own layer or below. */
static void scan_calls(call_scan *cs, const char *path, const char *rel, bool define) {
    char *s = read_code(path);
    if (!s) {
        snprintf(cs->bad, sizeof cs->bad, "cannot read %s", path);
        return;
    }
    cs->files++;
    int own = layer_of(rel);
    int braces = 0;
    bool is_static = false; /* the file-scope declaration being read began with `static` */
    for (size_t i = 0; s[i] && !cs->bad[0]; i++) {
        char c = s[i];
        if (c == '{') {
            braces++;
        } else if (c == '}') {
            braces--;
            is_static = braces == 0 ? false : is_static;
        } else if (c == ';' && braces == 0) {
            is_static = false;
        }
        if (!ident_char(c) || (i > 0 && ident_char(s[i - 1]))) {
            continue;
        }
        size_t end = i;
        while (ident_char(s[end])) {
            end++;
        }
        char name[80];
        size_t len = end - i < sizeof name - 1 ? end - i : sizeof name - 1;
        memcpy(name, s + i, len);
        name[len] = '\0';
        if (braces == 0 && !strcmp(name, "static")) {
            is_static = true;
        }
        size_t j = end;
        while (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
            j++;
        }
        bool kf_name = strncmp(name, "kf_", 3) == 0;
        if (kf_name && s[j] == '(' && braces == 0 && define && !is_static) {
            int depth = 0; /* a definition: its parameter list, then its body */
            size_t k = j;
            for (; s[k]; k++) {
                depth += s[k] == '(' ? 1 : s[k] == ')' ? -1 : 0;
                if (depth == 0) {
                    break;
                }
            }
            for (k += s[k] ? 1 : 0; s[k] == ' ' || s[k] == '\n' || s[k] == '\t'; k++) {
            }
            if (s[k] == '{' && def_layer(cs, name) < 0) {
                if (cs->def_count == cs->def_cap) {
                    cs->def_cap = cs->def_cap ? 2 * cs->def_cap : 256;
                    cs->defs = realloc(cs->defs, cs->def_cap * sizeof *cs->defs);
                }
                snprintf(cs->defs[cs->def_count].name, sizeof cs->defs[0].name, "%s", name);
                cs->defs[cs->def_count++].layer = own;
            }
        } else if (kf_name && s[j] == '(' && braces > 0 && !define) {
            int target = def_layer(cs, name);
            cs->calls += target >= 0;
            if (target > own) {
                snprintf(cs->bad, sizeof cs->bad,
                         "%s (layer %s) calls %s, of the layer %s above it", rel, layers[own], name,
                         layers[target]);
            }
        }
        i = end - 1;
    }
    free(s);
}

static void scan_folder(call_scan *cs, const char *dir, const char *rel, bool define) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(cs->bad, sizeof cs->bad, "cannot open %s", dir);
        return;
    }
    struct dirent *e;
    while (!cs->bad[0] && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[768], sub[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        size_t n = strlen(e->d_name);
        if (n > 2 &&
            (strcmp(e->d_name + n - 2, ".c") == 0 || strcmp(e->d_name + n - 2, ".h") == 0)) {
            scan_calls(cs, path, sub, define);
        } else if (!strchr(e->d_name, '.')) {
            scan_folder(cs, path, sub, define);
        }
    }
    closedir(d);
}

/* The include check cannot see a call through the public header (kfuse.h declares every layer's
 * API): a function of src/ calls no function, public or internal, defined in a layer above its
 * own. Definitions are found by their bodies, calls inside function bodies; macro bodies are not
 * read. */
KT_CPU_TEST(unit, core_calls_one_way) {
    call_scan cs = {0};
    scan_folder(&cs, KF_SOURCE_DIR "/src", "", true);
    uint32_t defs = cs.def_count, files = cs.files;
    scan_folder(&cs, KF_SOURCE_DIR "/src", "", false);
    KT_CHECK(!cs.bad[0], "%s", cs.bad);
    /* the scan saw the library: hundreds of functions, most of them called from another file */
    KT_CHECK(defs > 300 && files > 80 && cs.calls > 1000, "%u definitions in %u files, %u calls",
             defs, files, cs.calls);
    KT_CHECK(def_layer(&cs, "kf_spec_parse") == layer_of("spec/parser.c") &&
                 def_layer(&cs, "kf__wgsl_emit") == layer_of("wgsl/emit.c"),
             "definitions placed by their files");
    free(cs.defs);
}
