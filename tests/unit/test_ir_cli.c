/* kfuse wgsl NAME: prints a named kernel's WGSL; `list` names them; an unknown name lists them
 * and exits with 2. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

/* Runs the CLI with args, capturing stdout and stderr; returns the exit status. */
static int run_cli(const char *args, char *out, size_t size) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", KF_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    if (!p) {
        return -1;
    }
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

KT_CPU_TEST(unit, ir_cli_wgsl) {
    static char out[65536];
    int rc = run_cli("wgsl demo-chain", out, sizeof out);
    KT_CHECK(rc == 0, "kfuse wgsl demo-chain exited %d: %s", rc, out);
    KT_CHECK(strstr(out, "// affine |> relu |> gelu") &&
                 strstr(out, "@workgroup_size(256, 1, 1)") && strstr(out, "tanh("),
             "demo-chain WGSL:\n%s", out);
    rc = run_cli("wgsl list", out, sizeof out);
    KT_CHECK(rc == 0 && strstr(out, "demo-chain\n") && strstr(out, "reduce-sum\n"), "list: %s",
             out);
    rc = run_cli("wgsl no-such-kernel", out, sizeof out);
    KT_CHECK(rc == 2 && strstr(out, "no kernel named 'no-such-kernel'") &&
                 strstr(out, "demo-chain"),
             "unknown name: exit %d: %s", rc, out);
    rc = run_cli("wgsl", out, sizeof out);
    KT_CHECK(rc == 2 && strstr(out, "usage: kfuse wgsl"), "no name: exit %d: %s", rc, out);
    rc = run_cli("wgsl relu --shape 10x10", out, sizeof out);
    KT_CHECK(rc == 0 && strstr(out, "fn main("), "an operator's kernel: exit %d: %s", rc, out);
    rc = run_cli("wgsl relu --shape 0x3", out, sizeof out);
    KT_CHECK(rc == 2 && strstr(out, "--shape"), "bad shape: exit %d: %s", rc, out);
    /* one --shape per input, any rank: the ids of embedding_grad are i32 [N] beside f32 tables */
    rc = run_cli("wgsl embedding_grad --shape 65x128 --shape 4096 --shape 4096x128 --bounds", out,
                 sizeof out);
    KT_CHECK(rc == 0 && strstr(out, "load 'ids': proved: index in [0, 4095], 4096 elements"),
             "per-input shapes: exit %d: %s", rc, out);
    rc = run_cli("wgsl attention --shape 2x4x64x32", out, sizeof out);
    KT_CHECK(rc == 0 && strstr(out, "var<storage, read> q: array<f32>;"), "rank 4: exit %d: %s", rc,
             out);
    rc = run_cli("wgsl add --shape 7x13 --shape 13x7", out, sizeof out);
    KT_CHECK(rc == 1 && strstr(out, "try other --shape"), "mismatched shapes: exit %d: %s", rc,
             out);
    rc = run_cli("wgsl add --shape 7xx", out, sizeof out);
    KT_CHECK(rc == 2 && strstr(out, "--shape wants"), "bad rank-2 shape: exit %d: %s", rc, out);
    /* the in-bounds proof: an operator's kernel for its shapes is proved whole; an example that
     * declares no lengths has guarded accesses */
    rc = run_cli("wgsl softmax --shape 5x37 --bounds", out, sizeof out);
    KT_CHECK(rc == 0 && strstr(out, "softmax: 46 accesses, 46 proved in bounds, 0 guarded") &&
                 strstr(out, "load 'x': proved: index in [0, 184], 185 elements"),
             "--bounds: exit %d: %s", rc, out);
    rc = run_cli("wgsl reduce-sum --bounds", out, sizeof out);
    KT_CHECK(rc == 0 && strstr(out, "1 guarded") &&
                 strstr(out, "store 'out': guarded: index in [0, 4294967295], length unknown"),
             "--bounds of an example: exit %d: %s", rc, out);
}
