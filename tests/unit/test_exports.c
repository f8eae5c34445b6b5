/* The shared library's ABI: it exports exactly the functions include/kfuse.h declares with
 * KF_API (no internal kf__ symbol, nothing declared that does not exist), and its version is the
 * header's. Reads `nm -D --defined-only` of the built libkfuse.so. */
#include "harness.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 512
#define NAME_LEN 64

typedef struct names {
    char name[MAX_NAMES][NAME_LEN];
    uint32_t count;
} names;

static bool has(const names *n, const char *name) {
    for (uint32_t i = 0; i < n->count; i++) {
        if (!strcmp(n->name[i], name)) {
            return true;
        }
    }
    return false;
}

static void add(names *n, const char *name, size_t len) {
    if (n->count < MAX_NAMES && len < NAME_LEN) {
        memcpy(n->name[n->count], name, len);
        n->name[n->count][len] = '\0';
        n->count++;
    }
}

/* Every `KF_API ... kf_name(` of the header (a declaration may wrap lines). */
static bool header_names(names *out) {
    FILE *f = fopen(KF_SOURCE_DIR "/include/kfuse.h", "rb");
    if (!f) {
        return false;
    }
    static char text[1 << 18];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    for (char *p = strstr(text, "\nKF_API "); p; p = strstr(p + 1, "\nKF_API ")) {
        char *paren = strchr(p, '(');
        if (!paren) {
            break;
        }
        char *end = paren;
        while (end > p && isspace((unsigned char)end[-1])) {
            end--;
        }
        char *start = end;
        while (start > p && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) {
            start--;
        }
        add(out, start, (size_t)(end - start));
    }
    return true;
}

KT_CPU_TEST(unit, shared_library_exports_only_the_api) {
    static names declared, exported;
    declared.count = exported.count = 0;
    KT_CHECK(header_names(&declared), "cannot read include/kfuse.h");
    KT_CHECK(declared.count > 150, "%u KF_API declarations found", declared.count);
    FILE *nm = popen("nm -D --defined-only '" KF_SHARED_LIB "' 2>&1", "r");
    KT_CHECK(nm != NULL, "cannot run nm");
    char line[512];
    uint32_t others = 0;
    while (fgets(line, sizeof line, nm)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) {
            continue;
        }
        if (strncmp(name, "kf_", 3) || !strncmp(name, "kf__", 4)) {
            if (others++ < 5) {
                kt_fail(__FILE__, __LINE__, "libkfuse.so exports a non-API symbol '%s'", name);
            }
            continue;
        }
        add(&exported, name, strlen(name));
    }
    int rc = pclose(nm);
    KT_CHECK(rc == 0, "nm -D %s failed (%d)", KF_SHARED_LIB, rc);
    KT_CHECK(others == 0, "%u non-API symbols exported", others);
    for (uint32_t i = 0; i < exported.count; i++) {
        KT_CHECK(has(&declared, exported.name[i]), "'%s' is exported but not declared KF_API",
                 exported.name[i]);
    }
    for (uint32_t i = 0; i < declared.count; i++) {
        KT_CHECK(has(&exported, declared.name[i]), "'%s' is declared KF_API but not in the library",
                 declared.name[i]);
    }
}

KT_CPU_TEST(unit, version_is_the_headers) {
    KT_CHECK(kf_version() == KF_VERSION_HEX, "library %#x, header %#x", kf_version(),
             (unsigned)KF_VERSION_HEX);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", KF_VERSION_MAJOR, KF_VERSION_MINOR, KF_VERSION_PATCH);
    KT_CHECK(!strcmp(kf_version_string(), want), "%s against %s", kf_version_string(), want);
}
