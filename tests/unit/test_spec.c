/* The graph language: the lexer's tokens, the graphs programs build (rendered back as nested
 * calls, so equivalent spellings are seen to build the same graph), the output rule, and an
 * error table where each malformed program must fail at a given line and column saying what was
 * expected. */
#include "fuse/fuse_internal.h"
#include "harness.h"
#include "spec/spec_internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* ---- lexer ---------------------------------------------------------------------------------- */

KT_CPU_TEST(unit, spec_lexer_tokens) {
    const char *src = "x: f32[64, 128] # comment |> (\n"
                      "y = a |> f(b, -1.5e-3); out y\r\n"
                      "z=.5+";
    kf__token *tok = NULL;
    uint32_t n = 0;
    kf_spec_error err;
    /* the '+' is an error; lex everything before it */
    KT_CHECK_OK(kf__spec_lex(src, strlen(src) - 1, &tok, &n, &err));
    static const struct {
        kf__tok_kind kind;
        const char *text;
        uint32_t line, column;
    } want[] = {
        {KF__TOK_NAME, "x", 1, 1},         {KF__TOK_COLON, ":", 1, 2},
        {KF__TOK_NAME, "f32", 1, 4},       {KF__TOK_LBRACKET, "[", 1, 7},
        {KF__TOK_NUMBER, "64", 1, 8},      {KF__TOK_COMMA, ",", 1, 10},
        {KF__TOK_NUMBER, "128", 1, 12},    {KF__TOK_RBRACKET, "]", 1, 15},
        {KF__TOK_END, "\n", 1, 31},        {KF__TOK_NAME, "y", 2, 1},
        {KF__TOK_EQUALS, "=", 2, 3},       {KF__TOK_NAME, "a", 2, 5},
        {KF__TOK_PIPE, "|>", 2, 7},        {KF__TOK_NAME, "f", 2, 10},
        {KF__TOK_LPAREN, "(", 2, 11},      {KF__TOK_NAME, "b", 2, 12},
        {KF__TOK_COMMA, ",", 2, 13},       {KF__TOK_MINUS, "-", 2, 15},
        {KF__TOK_NUMBER, "1.5e-3", 2, 16}, {KF__TOK_RPAREN, ")", 2, 22},
        {KF__TOK_END, ";", 2, 23},         {KF__TOK_NAME, "out", 2, 25},
        {KF__TOK_NAME, "y", 2, 29},        {KF__TOK_END, "\n", 2, 31},
        {KF__TOK_NAME, "z", 3, 1},         {KF__TOK_EQUALS, "=", 3, 2},
        {KF__TOK_NUMBER, ".5", 3, 3},      {KF__TOK_EOF, "", 3, 5},
    };
    size_t count = sizeof want / sizeof want[0];
    KT_CHECK(n == count, "%u tokens, expected %zu", n, count);
    for (size_t i = 0; i < count; i++) {
        KT_CHECK(tok[i].kind == want[i].kind && tok[i].length == strlen(want[i].text) &&
                     !memcmp(tok[i].text, want[i].text, tok[i].length) &&
                     tok[i].line == want[i].line && tok[i].column == want[i].column,
                 "token %zu: kind %d '%.*s' at %u:%u, expected kind %d '%s' at %u:%u", i,
                 (int)tok[i].kind, (int)tok[i].length, tok[i].text, tok[i].line, tok[i].column,
                 (int)want[i].kind, want[i].text, want[i].line, want[i].column);
    }
    free(tok);

    static const char *const numbers[] = {"0", "12", ".5", "1.", "1e5", "2.5E+3", "7e-09"};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        KT_CHECK_OK(kf__spec_lex(numbers[i], strlen(numbers[i]), &tok, &n, &err));
        KT_CHECK(n == 2 && tok[0].kind == KF__TOK_NUMBER && tok[0].length == strlen(numbers[i]),
                 "'%s' is not one number token", numbers[i]);
        free(tok);
    }
}

KT_CPU_TEST(unit, spec_lexer_errors) {
    static const struct {
        const char *src;
        uint32_t line, column;
        const char *needle;
    } cases[] = {
        {"x: f32[4]\ny = relu(x) @", 2, 13, "unexpected '@'"},
        {"x: f32[64x128]", 1, 8, "malformed number '64x128'"},
        {"y = scale(x, 1e)", 1, 14, "malformed number '1e'"},
        {"y = scale(x, 1.2.3)", 1, 14, "malformed number '1.2.3'"},
        {"y = x | relu", 1, 7, "'|>'"},
        {"y = a + b", 1, 7, "write add(a, b)"},
        {"y = a * b", 1, 7, "write mul(a, b)"},
        {"\n\n  y = a / b", 3, 9, "write div(a, b)"},
        {"y = \"x\"", 1, 5, "unexpected '\"'"},
        {"y = x\x01", 1, 6, "byte 0x01"},
        {"y = \xc3\xa9", 1, 5, "byte 0xc3"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa = x", 1, 1,
         "longer than 63"},
        {"y = 1234567890123456789012345678901234567890123456789012345678901234567", 1, 5,
         "longer than 63"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf__token *tok = (kf__token *)1;
        uint32_t n = 7;
        kf_spec_error err = {0};
        kf_status st = kf__spec_lex(cases[i].src, strlen(cases[i].src), &tok, &n, &err);
        KT_CHECK(st == KF_ERROR_PARSE && !tok && !n, "case %zu lexed: %s", i, cases[i].src);
        KT_CHECK(err.line == cases[i].line && err.column == cases[i].column &&
                     strstr(err.message, cases[i].needle),
                 "case %zu: %u:%u '%s', expected %u:%u '%s'", i, err.line, err.column, err.message,
                 cases[i].line, cases[i].column, cases[i].needle);
    }
    /* a NUL inside the text is a byte like any other, not the end */
    const char nul[] = "y = x\0z";
    kf__token *tok;
    uint32_t n;
    kf_spec_error err;
    KT_CHECK(kf__spec_lex(nul, sizeof nul - 1, &tok, &n, &err) == KF_ERROR_PARSE &&
                 err.column == 6 && strstr(err.message, "byte 0x00"),
             "NUL: %u:%u %s", err.line, err.column, err.message);
}

KT_CPU_TEST(unit, spec_edit_distance) {
    static const struct {
        const char *a, *b;
        uint32_t cap, want;
    } cases[] = {
        {"gelu", "gelu", 2, 0},      {"gleu", "gelu", 2, 1},      {"gel", "gelu", 2, 1},
        {"gelux", "gelu", 2, 1},     {"relu", "gelu", 2, 1},      {"softmx", "softmax", 2, 1},
        {"kitten", "sitting", 5, 3}, {"kitten", "sitting", 2, 3}, {"", "abc", 5, 3},
        {"abc", "", 1, 2},           {"ca", "abc", 5, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t d = kf__spec_edit_distance(cases[i].a, strlen(cases[i].a), cases[i].b,
                                            strlen(cases[i].b), cases[i].cap);
        KT_CHECK(d == cases[i].want, "distance('%s', '%s', cap %u) = %u, expected %u", cases[i].a,
                 cases[i].b, cases[i].cap, d, cases[i].want);
    }
}

/* ---- graphs --------------------------------------------------------------------------------- */

/* A node as nested calls: "gelu(add(matmul(x, w), b))", numbers with %g, non-default parameters
 * after a ';'. Equal strings mean equal graphs for everything these tests build. */
static void render(const kf_graph *g, uint32_t id, char *buf, size_t size) {
    size_t n = strlen(buf);
    const kf__node *node = kf__graph_node(g, id);
    if (!node || n + 1 >= size) {
        snprintf(buf + n, size - n, "?");
        return;
    }
    if (node->kind == KF__NODE_INPUT) {
        snprintf(buf + n, size - n, "%s", node->name);
        return;
    }
    if (node->kind == KF__NODE_SCALAR) {
        snprintf(buf + n, size - n, "%g", (double)node->scalar);
        return;
    }
    snprintf(buf + n, size - n, "%s(", node->op->name);
    for (uint32_t i = 0; i < node->input_count; i++) {
        if (i) {
            strncat(buf, ", ", size - strlen(buf) - 1);
        }
        render(g, node->inputs[i], buf, size);
    }
    const kf_op_params *p = &node->params;
    char params[160] = "";
    size_t k = 0;
    if (p->alpha != 0.0f) {
        k += (size_t)snprintf(params + k, sizeof params - k, " alpha=%g", (double)p->alpha);
    }
    if (p->beta != 0.0f) {
        k += (size_t)snprintf(params + k, sizeof params - k, " beta=%g", (double)p->beta);
    }
    if (p->eps != 0.0f) {
        k += (size_t)snprintf(params + k, sizeof params - k, " eps=%g", (double)p->eps);
    }
    if (p->exact) {
        k += (size_t)snprintf(params + k, sizeof params - k, " exact");
    }
    if (p->transpose_a) {
        k += (size_t)snprintf(params + k, sizeof params - k, " transpose_a");
    }
    if (p->transpose_b) {
        snprintf(params + k, sizeof params - k, " transpose_b");
    }
    if (params[0]) {
        strncat(buf, ";", size - strlen(buf) - 1);
        strncat(buf, params, size - strlen(buf) - 1);
    }
    strncat(buf, ")", size - strlen(buf) - 1);
}

/* "name=rendering" for every output, joined by "  ". */
static void render_outputs(const kf_graph *g, char *buf, size_t size) {
    buf[0] = '\0';
    for (uint32_t i = 0; i < g->output_count; i++) {
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, "%s%s=", i ? "  " : "", g->outputs[i].name);
        render(g, g->outputs[i].node, buf, size);
    }
}

static kf_graph *parse(const char *src, kf_spec_error *err) {
    kf_graph *g = NULL;
    kf_status st = kf_spec_parse(src, strlen(src), &g, err);
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s at %u:%u: %s\n--- program:\n%s", kf_status_str(st),
                err->line, err->column, err->message, src);
        return NULL;
    }
    return g;
}

#define MLP_INPUTS "x: f32[64, 128]\nw: f32[128, 256]\nb: f32[256]\n"

KT_CPU_TEST(unit, spec_builds_graph) {
    kf_spec_error err;
    kf_graph *g = parse(MLP_INPUTS "y = matmul(x, w) |> add(b) |> gelu\n", &err);
    KT_CHECK(g, "parse");
    char out[512];
    render_outputs(g, out, sizeof out);
    KT_CHECK(!strcmp(out, "y=gelu(add(matmul(x, w), b))"), "got %s", out);
    KT_CHECK(kf_graph_input_count(g) == 3, "inputs %u", kf_graph_input_count(g));
    const char *name;
    kf_shape shape;
    kf_dtype dtype;
    KT_CHECK_OK(kf_graph_input_info(g, 1, &name, &shape, &dtype));
    KT_CHECK(!strcmp(name, "w") && shape.rank == 2 && shape.dims[0] == 128 &&
                 shape.dims[1] == 256 && dtype == KF_DTYPE_F32,
             "input 1");
    KT_CHECK_OK(kf_graph_output_info(g, 0, &name, &shape, &dtype));
    KT_CHECK(shape.rank == 2 && shape.dims[0] == 64 && shape.dims[1] == 256, "output shape");
    kf_graph_destroy(g);
}

/* Every spelling of the same computation builds the same graph. */
KT_CPU_TEST(unit, spec_spellings_agree) {
    static const char *const spellings[] = {
        "y = gelu(add(matmul(x, w), b))",
        "y = matmul(x, w) |> add(b) |> gelu",
        "y = x |> matmul(w) |> add(b) |> gelu()",
        "h = matmul(x, w)\ny = gelu(add(h, b))",
        "h = matmul(x, w)\ny = gelu(add(h, b))\nout y",
        "y = matmul(x, w)\n    |> add(b)   # bias\n\n    # then the activation\n    |> gelu\n",
        "y = matmul(x, w) |>\n  add(b) |>\n  gelu",
        "y = gelu(add(\n  matmul(x,\n         w),\n  b\n))",
        "y = (matmul(x, w) |> add(b)) |> gelu",
        "y = ((((matmul(x, w)))) |> (add)(b)) |> gelu",
        "h = matmul(x, w); y = h |> add(b) |> gelu; out y",
        "\n\n# leading comments and blank lines\n\n y = gelu(add(matmul(x, w), b));;\n\n",
    };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, "%s%s", MLP_INPUTS, spellings[i]);
        kf_spec_error err;
        kf_graph *g = NULL;
        kf_status st = kf_spec_parse(src, strlen(src), &g, &err);
        if (i == 9) {
            /* '(add)(b)' is not a callee: only a name may follow '|>' */
            KT_CHECK(st == KF_ERROR_PARSE && err.line == 4 && strstr(err.message, "operator"),
                     "(add) as a callee: %s", err.message);
            continue;
        }
        KT_CHECK(st == KF_OK, "spelling %zu: %u:%u %s\n%s", i, err.line, err.column, err.message,
                 src);
        char out[512];
        render_outputs(g, out, sizeof out);
        kf_graph_destroy(g);
        KT_CHECK(!strcmp(out, "y=gelu(add(matmul(x, w), b))"), "spelling %zu: %s", i, out);
    }
}

KT_CPU_TEST(unit, spec_numbers) {
    static const struct {
        const char *stmt;
        const char *want;
    } cases[] = {
        {"y = add(x, 1)", "y=add(x, 1)"},
        {"y = sub(1, x)", "y=sub(1, x)"},
        {"y = 2 |> mul(x)", "y=mul(2, x)"},
        {"y = x |> sub(0.5)", "y=sub(x, 0.5)"},
        {"y = div(x, -4)", "y=div(x, -4)"},
        {"y = leaky_relu(x, 0.25)", "y=leaky_relu(x; alpha=0.25)"},
        {"y = leaky_relu(x, alpha=-0.25)", "y=leaky_relu(x; alpha=-0.25)"},
        {"y = x |> leaky_relu(.5e-1)", "y=leaky_relu(x; alpha=0.05)"},
        {"y = affine(x, 2, -1)", "y=affine(x; alpha=2 beta=-1)"},
        {"y = affine(x, beta=3, alpha=2)", "y=affine(x; alpha=2 beta=3)"},
        {"y = gelu(x, exact=1)", "y=gelu(x; exact)"},
        {"y = gelu(x, exact=true)", "y=gelu(x; exact)"},
        {"y = gelu(x, true)", "y=gelu(x; exact)"},
        {"y = gelu(x, exact=false)", "y=gelu(x)"},
        {"y = rmsnorm(x, g, eps=1e-6)", "y=rmsnorm(x, g; eps=1e-06)"},
        {"y = rmsnorm(x, g, 1e-6)", "y=rmsnorm(x, g; eps=1e-06)"},
        {"y = x |> rmsnorm(g,\n  eps = 2.5E-3\n)", "y=rmsnorm(x, g; eps=0.0025)"},
        {"y = matmul(x, w, transpose_b=1)", "y=matmul(x, w; transpose_b)"},
        {"y = matmul(w, x, transpose_a=1, transpose_b=1)",
         "y=matmul(w, x; transpose_a transpose_b)"},
        {"y = add(x, (3))", "y=add(x, 3)"},
        {"y = add(x, 3 |> mul(x))", "y=add(x, mul(3, x))"},
        {"s = 2\ny = mul(x, s)", "y=mul(x, 2)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, "x: f32[8, 8]\ng: f32[8]\nw: f32[8, 8]\n%s\n", cases[i].stmt);
        kf_spec_error err;
        kf_graph *g = parse(src, &err);
        KT_CHECK(g, "case %zu", i);
        char out[512];
        render_outputs(g, out, sizeof out);
        kf_graph_destroy(g);
        KT_CHECK(!strcmp(out, cases[i].want), "%s\n      built %s\n   expected %s", cases[i].stmt,
                 out, cases[i].want);
    }
}

KT_CPU_TEST(unit, spec_outputs) {
    static const struct {
        const char *stmts;
        const char *want;
    } cases[] = {
        /* without 'out': what nothing reads, in order of assignment */
        {"h = relu(x)\ny = exp(h)\nz = neg(x)", "y=exp(relu(x))  z=neg(x)"},
        {"h = relu(x)\ny = exp(h)\nz = add(y, h)", "z=add(exp(relu(x)), relu(x))"},
        /* with 'out': exactly those, in the order named */
        {"h = relu(x)\ny = exp(h)\nz = neg(x)\nout z", "z=neg(x)"},
        {"a = relu(x)\nb = exp(x)\nout b\nout a", "b=exp(x)  a=relu(x)"},
        {"a = relu(x)\nb = exp(a)\nout a, b", "a=relu(x)  b=exp(relu(x))"},
        {"a = relu(x); out a; b = exp(a); out b", "a=relu(x)  b=exp(relu(x))"},
        /* an alias is an output under its own name */
        {"y = x |> relu\nz = y", "z=relu(x)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[256];
        snprintf(src, sizeof src, "x: f32[3, 5]\n%s\n", cases[i].stmts);
        kf_spec_error err;
        kf_graph *g = parse(src, &err);
        KT_CHECK(g, "case %zu", i);
        char out[512];
        render_outputs(g, out, sizeof out);
        kf_graph_destroy(g);
        KT_CHECK(!strcmp(out, cases[i].want), "case %zu:\n%s\n      built %s\n   expected %s", i,
                 src, out, cases[i].want);
    }
}

KT_CPU_TEST(unit, spec_inputs) {
    kf_spec_error err;
    kf_graph *g = parse("s: f32[]\none: f32[1]\nh: f16[2,3,5,7]\nbig: f32[4294967295]\n"
                        "y = mul(one, s)\nz = relu(h)\nout y, z\n",
                        &err);
    KT_CHECK(g, "parse");
    kf_shape shape;
    kf_dtype dtype;
    KT_CHECK_OK(kf_graph_input_info(g, 0, NULL, &shape, &dtype));
    KT_CHECK(shape.rank == 0 && dtype == KF_DTYPE_F32, "f32[] is a rank-0 scalar");
    KT_CHECK_OK(kf_graph_input_info(g, 1, NULL, &shape, &dtype));
    KT_CHECK(shape.rank == 1 && shape.dims[0] == 1, "f32[1] is rank 1");
    KT_CHECK_OK(kf_graph_input_info(g, 2, NULL, &shape, &dtype));
    KT_CHECK(shape.rank == 4 && shape.dims[3] == 7 && dtype == KF_DTYPE_F16, "f16 rank 4");
    KT_CHECK_OK(kf_graph_input_info(g, 3, NULL, &shape, &dtype));
    KT_CHECK(shape.dims[0] == 4294967295u, "the largest dimension");
    KT_CHECK(kf_graph_output_count(g) == 2, "outputs");
    KT_CHECK_OK(kf_graph_output_info(g, 1, NULL, &shape, &dtype));
    KT_CHECK(shape.rank == 4 && dtype == KF_DTYPE_F16, "relu of f16 is f16");
    kf_graph_destroy(g);

    /* CRLF files, and text that is not NUL-terminated (only `length` bytes are read) */
    const char crlf[] = "x: f32[4]\r\ny = relu(x)\r\n@@@";
    KT_CHECK_OK(kf_spec_parse(crlf, sizeof crlf - 4, &g, &err));
    KT_CHECK(kf_graph_output_count(g) == 1, "crlf");
    kf_graph_destroy(g);
}

/* ---- errors --------------------------------------------------------------------------------- */

KT_CPU_TEST(unit, spec_errors) {
    static const struct {
        const char *src;
        kf_status status;
        uint32_t line, column;
        const char *needle;
    } cases[] = {
        {"x: f32[4]\ny = gleu(x)\n", KF_ERROR_PARSE, 2, 5,
         "unknown operator 'gleu' (did you mean 'gelu'?)"},
        {"x: f32[4]\ny = x |> softmx\n", KF_ERROR_PARSE, 2, 10, "did you mean 'softmax'?"},
        {"x: f32[4]\ny = foo(x)\n", KF_ERROR_PARSE, 2, 5,
         "unknown operator 'foo' (the operators are listed in docs/operators.md)"},
        {"x: f32[4]\nw: f32[4]\ny = x |> w\n", KF_ERROR_PARSE, 3, 10,
         "'w' is a tensor, not an operator"},
        {"x: f32[4]\ny = relu(z)\n", KF_ERROR_PARSE, 2, 10, "name 'z' is not defined"},
        {"x: f32[4]\nhidden = relu(x)\nz = exp(hiden)\n", KF_ERROR_PARSE, 3, 9,
         "name 'hiden' is not defined (did you mean 'hidden'?)"},
        {"x: f32[4]\ny = gelu\n", KF_ERROR_PARSE, 2, 5, "('gelu' is an operator: call it as"},
        {"x: f32[4]\nx: f32[8]\n", KF_ERROR_PARSE, 2, 1, "'x' is already defined at line 1"},
        {"x: f32[4]\ny = relu(x)\ny = exp(x)\n", KF_ERROR_PARSE, 3, 1,
         "'y' is already defined at line 2"},
        {"x: f32[4]\ny = relu(y)\n", KF_ERROR_PARSE, 2, 10, "name 'y' is not defined"},
        {"x: f64[4]\n", KF_ERROR_PARSE, 1, 4,
         "unknown dtype 'f64' (the dtypes are f32, f16 and i32)"},
        {"x: [4]\n", KF_ERROR_PARSE, 1, 4,
         "expected a dtype (f32, f16 or i32) after ':', found '['"},
        {"x: f32\n", KF_ERROR_PARSE, 1, 7, "expected '[' and the shape after the dtype"},
        {"x: f32[0]\n", KF_ERROR_PARSE, 1, 8, "a dimension must be at least 1"},
        {"x: f32[-3]\n", KF_ERROR_PARSE, 1, 8, "expected a dimension"},
        {"x: f32[2.5]\n", KF_ERROR_PARSE, 1, 8, "a dimension must be a whole number, not 2.5"},
        {"x: f32[1e3]\n", KF_ERROR_PARSE, 1, 8, "whole number"},
        {"x: f32[1,2,3,4,5]\n", KF_ERROR_PARSE, 1, 16, "a shape has at most 4 dimensions"},
        {"x: f32[4294967296]\n", KF_ERROR_PARSE, 1, 8, "dimension 4294967296 is too large"},
        {"x: f32[99999999999999999999999]\n", KF_ERROR_PARSE, 1, 8, "too large"},
        {"x: f32[65536, 65536]\n", KF_ERROR_PARSE, 1, 15, "more than 4294967295 elements"},
        {"x: f32[4,]\n", KF_ERROR_PARSE, 1, 10, "expected a dimension"},
        {"x: f32[4 4]\n", KF_ERROR_PARSE, 1, 10, "expected ',' or ']' in the shape"},
        {"x: f32[4]\ny = matmul(x, x\n", KF_ERROR_PARSE, 3, 1,
         "expected ',' or ')' after the arguments of matmul (its '(' is at line 2, column 11), "
         "found end of file"},
        {"x: f32[4]\ny = (relu(x)\nz = 1\n", KF_ERROR_PARSE, 3, 1,
         "expected ')' to close the '(' at line 2, column 5, found name 'z'"},
        {"x: f32[4]\ny = relu(x,)\n", KF_ERROR_PARSE, 2, 12, "expected an expression"},
        {"", KF_ERROR_PARSE, 1, 1, "the program has no outputs"},
        {"# only a comment\n", KF_ERROR_PARSE, 2, 1, "the program has no outputs"},
        {"x: f32[4]\n", KF_ERROR_PARSE, 2, 1, "no outputs"},
        {"x: f32[4]\ny = scale(x, 1e39)\n", KF_ERROR_PARSE, 2, 14,
         "number 1e39 is out of range for f32"},
        {"x: f32[4]\ny = scale(x, -1e39)\n", KF_ERROR_PARSE, 2, 14, "number -1e39 is out of"},
        {"x: f32[4]\ny = 1e400\n", KF_ERROR_PARSE, 2, 5, "out of range"},
        {"x: f32[4]\ny = relu(x) z\n", KF_ERROR_PARSE, 2, 13,
         "expected the end of the statement (a new line or ';'), found name 'z'"},
        {"x: f32[4]\nrelu(x)\n", KF_ERROR_PARSE, 2, 1, "an expression alone is not a statement"},
        {"x: f32[4]\nx |> relu\n", KF_ERROR_PARSE, 2, 1, "an expression alone"},
        {"x f32[4]\n", KF_ERROR_PARSE, 1, 3,
         "expected ':' (an input) or '=' (an assignment) after 'x', found name 'f32'"},
        {"x: f32[4]\n= relu(x)\n", KF_ERROR_PARSE, 2, 1, "expected a statement"},
        {"x: f32[4]\nout = relu(x)\n", KF_ERROR_PARSE, 2, 1, "'out' is a reserved word"},
        {"true: f32[4]\n", KF_ERROR_PARSE, 1, 1, "'true' is a reserved word"},
        {"x: f32[4]\ny = relu(x)\nout y, y\n", KF_ERROR_PARSE, 3, 8,
         "'y' is already an output (line 3)"},
        {"x: f32[4]\ny = relu(x)\nout y\nout y\n", KF_ERROR_PARSE, 4, 5,
         "'y' is already an output (line 3)"},
        {"x: f32[4]\nout q\n", KF_ERROR_PARSE, 2, 5, "name 'q' is not defined"},
        {"x: f32[4]\nout\n", KF_ERROR_PARSE, 2, 4, "expected the name of an output"},
        {"x: f32[4]\ny = relu(x)\nout y,\n", KF_ERROR_PARSE, 3, 7, "expected the name"},
        {"x: f32[4]\ny = x |>\n", KF_ERROR_PARSE, 3, 1,
         "expected an operator after '|>', found end of file"},
        {"x: f32[4]\ny = x |> 2\n", KF_ERROR_PARSE, 2, 10, "expected an operator after '|>'"},
        {"x: f32[4]\ny =\n", KF_ERROR_PARSE, 2, 4, "expected an expression"},
        {"x: f32[4]\ny = gelu(x, exact=)\n", KF_ERROR_PARSE, 2, 19, "expected an expression"},
        {"x: f32[4]\ny = gelu(x, exact=x)\n", KF_ERROR_INVALID_ARGUMENT, 2, 5,
         "gelu: parameter 'exact' takes a number, not a tensor"},
        {"x: f32[4]\ny = gelu(x, exact=1, exact=0)\n", KF_ERROR_PARSE, 2, 22,
         "'exact' is given twice in gelu(...)"},
        {"x: f32[4]\ny = leaky_relu(x, alpha=0.1, x)\n", KF_ERROR_PARSE, 2, 30,
         "positional argument after a keyword argument"},
        {"x: f32[4]\ny = relu(-x)\n", KF_ERROR_PARSE, 2, 11, "expected a number after '-'"},
        {"x: f32[4]\ny = relu(x) + 1\n", KF_ERROR_PARSE, 2, 13, "no infix arithmetic"},
        {"x: f32[4]\ny = relu(x, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)\n",
         KF_ERROR_PARSE, 2, 64, "too many arguments to relu (at most 16)"},
        /* errors the graph finds, placed at the call that caused them */
        {"x: f32[2, 3]\nw: f32[4, 5]\ny = x |> relu |> matmul(w)\n", KF_ERROR_SHAPE, 3, 18,
         "matmul"},
        {"x: f32[4]\ny = 2\n", KF_ERROR_INVALID_ARGUMENT, 2, 1, "scalar"},
        {"x: f32[4]\ny = relu()\n", KF_ERROR_INVALID_ARGUMENT, 2, 5, "relu"},
        {"x: f32[4]\ny = leaky_relu(x, 1, 2, 3)\n", KF_ERROR_INVALID_ARGUMENT, 2, 5, "leaky_relu"},
        {"x: f32[4]\ny = gelu(x, bogus=1)\n", KF_ERROR_INVALID_ARGUMENT, 2, 5, "bogus"},
        {"x: f32[4]\nh: f16[4]\ny = add(x, h)\n", KF_ERROR_TYPE, 3, 5, "f16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_graph *g = (kf_graph *)1;
        kf_spec_error err;
        kf_status st = kf_spec_parse(cases[i].src, strlen(cases[i].src), &g, &err);
        KT_CHECK(st != KF_OK && g == NULL, "case %zu parsed:\n%s", i, cases[i].src);
        KT_CHECK(st == cases[i].status && err.line == cases[i].line &&
                     err.column == cases[i].column && strstr(err.message, cases[i].needle),
                 "case %zu:\n%s\n   got %s at %u:%u: %s\n  want %s at %u:%u: ...%s...", i,
                 cases[i].src, kf_status_str(st), err.line, err.column, err.message,
                 kf_status_str(cases[i].status), cases[i].line, cases[i].column, cases[i].needle);
    }
}

/* '((((...' a million deep must be an error, not a stack overflow; 60 levels are fine. */
KT_CPU_TEST(unit, spec_nesting_limit) {
    for (int deep = 0; deep < 2; deep++) {
        size_t levels = deep ? 1000000 : 60;
        size_t size = 32 + 2 * levels;
        char *src = malloc(size);
        KT_CHECK(src, "malloc");
        size_t n = (size_t)snprintf(src, size, "x: f32[4]\ny = ");
        memset(src + n, '(', levels);
        n += levels;
        src[n++] = 'x';
        memset(src + n, ')', levels);
        n += levels;
        kf_graph *g = NULL;
        kf_spec_error err;
        kf_status st = kf_spec_parse(src, n, &g, &err);
        free(src);
        if (!deep) {
            KT_CHECK(st == KF_OK, "60 levels: %s", err.message);
            kf_graph_destroy(g);
        } else {
            KT_CHECK(st == KF_ERROR_PARSE && err.line == 2 && err.column == 5 + 64 &&
                         strstr(err.message, "64"),
                     "a million levels: %u:%u %s", err.line, err.column, err.message);
        }
    }
    /* calls nest too */
    char src[2048];
    size_t n = (size_t)snprintf(src, sizeof src, "x: f32[4]\ny = ");
    for (int i = 0; i < 100; i++) {
        n += (size_t)snprintf(src + n, sizeof src - n, "relu(");
    }
    n += (size_t)snprintf(src + n, sizeof src - n, "x");
    for (int i = 0; i < 100; i++) {
        src[n++] = ')';
    }
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK(kf_spec_parse(src, n, &g, &err) == KF_ERROR_PARSE && strstr(err.message, "nested"),
             "100 nested calls: %s", err.message);
}

/* Thousands of statements (the symbol table grows and rehashes): every name stays findable. */
KT_CPU_TEST(unit, spec_long_program) {
    size_t cap = 1 << 20, n = 0;
    char *src = malloc(cap);
    KT_CHECK(src, "malloc");
    n += (size_t)snprintf(src + n, cap - n, "x: f32[8]\nt0 = relu(x)\n");
    for (int i = 1; i < 3000; i++) {
        n += (size_t)snprintf(src + n, cap - n, "t%d = add(t%d, t%d)\n", i, i - 1, i / 2);
    }
    kf_graph *g = NULL;
    kf_spec_error err;
    kf_status st = kf_spec_parse(src, n, &g, &err);
    free(src);
    KT_CHECK(st == KF_OK, "%u:%u %s", err.line, err.column, err.message);
    const char *name;
    KT_CHECK(kf_graph_output_count(g) == 1, "outputs %u", kf_graph_output_count(g));
    KT_CHECK_OK(kf_graph_output_info(g, 0, &name, NULL, NULL));
    KT_CHECK(!strcmp(name, "t2999"), "output %s", name);
    kf_graph_destroy(g);
}

KT_CPU_TEST(unit, spec_api_edges) {
    kf_graph *g = (kf_graph *)1;
    kf_spec_error err;
    KT_CHECK(kf_spec_parse("x: f32[1]", 9, NULL, &err) == KF_ERROR_INVALID_ARGUMENT, "NULL out");
    KT_CHECK(kf_spec_parse(NULL, 4, &g, &err) == KF_ERROR_INVALID_ARGUMENT, "NULL text");
    KT_CHECK(kf_spec_parse(NULL, 0, &g, &err) == KF_ERROR_PARSE && !g, "empty: no outputs");
    /* err may be NULL */
    KT_CHECK(kf_spec_parse("y = ", 4, &g, NULL) == KF_ERROR_PARSE && !g, "NULL err");
    const char *ok = "x: f32[2]\ny = exp(x)";
    KT_CHECK(kf_spec_parse(ok, strlen(ok), &g, NULL) == KF_OK && g, "NULL err, valid program");
    kf_graph_destroy(g);

    const char *missing = "/nonexistent/kfuse/model.kf";
    KT_CHECK(kf_spec_parse_file(missing, &g, &err) == KF_ERROR_IO && !g &&
                 strstr(err.message, missing) && err.line == 0,
             "missing file: %s", err.message);
    KT_CHECK(kf_spec_parse_file("/", &g, &err) == KF_ERROR_IO && strstr(err.message, "'/'"),
             "a folder: %s", err.message);
}

/* The shipped examples all parse, each into a graph with outputs. */
KT_CPU_TEST(unit, spec_examples_parse) {
    const char *dir = KF_SOURCE_DIR "/examples";
    DIR *d = opendir(dir);
    KT_CHECK(d, "cannot open %s", dir);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".kf") != 0) {
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        kf_graph *g = NULL;
        kf_spec_error err;
        kf_status st = kf_spec_parse_file(path, &g, &err);
        if (st != KF_OK) {
            closedir(d);
            KT_CHECK(false, "%s:%u:%u: %s", path, err.line, err.column, err.message);
        }
        KT_CHECK(kf_graph_output_count(g) >= 1, "%s has no outputs", path);
        kf_graph_destroy(g);
        count++;
    }
    closedir(d);
    KT_CHECK(count >= 6, "only %d examples in %s", count, dir);
}

KT_CPU_TEST(unit, spec_mutation_plans_parse) {
    /* the campaign's plans are graph-language text parsed here, not in src/fuse: each parses,
     * has outputs, and a training plan holds its gradient nodes */
    kf_graph *plans[KF__MUTATION_PLANS];
    char msg[300];
    KT_CHECK_OK(kf__mutation_plans_parse(plans, msg, sizeof msg));
    KT_CHECK(msg[0] == '\0', "no message on success: %s", msg);
    uint32_t with_grad = 0;
    for (uint32_t i = 0; i < KF__MUTATION_PLANS; i++) {
        KT_CHECK(plans[i] && kf_graph_output_count(plans[i]) > 0, "plan %u has outputs", i + 1);
        with_grad += kf_graph_output_count(plans[i]) == 5;
    }
    KT_CHECK(with_grad == 2, "the two training plans have a loss and four gradients (%u)",
             with_grad);
    kf__mutation_plans_destroy(plans);
    for (uint32_t i = 0; i < KF__MUTATION_PLANS; i++) {
        KT_CHECK(plans[i] == NULL, "destroy clears plan %u", i + 1);
    }
}
