/* docs/builder.md's complete example: this test compiles docs/examples/builder_example.c as it
 * is, runs it (GPU and interpreter must agree with each other and with float64), and checks that
 * the page shows the file unchanged. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define main kt_builder_example_main
#include "../../docs/examples/builder_example.c"
#undef main

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

KT_TEST(unit, ir_doc_example_runs) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    fflush(stdout);
    int rc = kt_builder_example_main();
    KT_CHECK(rc == 0, "docs/examples/builder_example.c returned %d", rc);
}

KT_CPU_TEST(unit, ir_doc_example_is_on_the_page) {
    char *page = slurp(KF_SOURCE_DIR "/docs/builder.md");
    char *code = slurp(KF_SOURCE_DIR "/docs/examples/builder_example.c");
    bool ok = page && code;
    if (ok) {
        /* the page holds the file verbatim inside a ```c block */
        size_t n = strlen(code) + 16;
        char *block = malloc(n);
        snprintf(block, n, "```c\n%s```", code);
        ok = strstr(page, block) != NULL;
        free(block);
    }
    free(page);
    free(code);
    KT_CHECK(ok, "docs/builder.md does not show docs/examples/builder_example.c verbatim");
}
