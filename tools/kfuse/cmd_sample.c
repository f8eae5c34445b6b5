/* kfuse sample: text from a trained language model (a graph whose value `logits` scores the next
 * token at every position of a window of token ids), one token per forward run. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sample_usage(FILE *f) {
    fprintf(
        f, "usage: kfuse sample SPEC --params DIR --vocab FILE [--prompt TEXT] [--length N]\n"
           "                    [--temperature T] [--seed S] [--tokens NAME] [--logits NAME]\n\n"
           "Generates text from the language model in SPEC, trained by `kfuse train --save DIR`.\n"
           "SPEC's input `x` (i32 [B, T]) holds a window of token ids and its value `logits`\n"
           "([B*T, V] or [B, T, V]) the scores of the next token at each position. Each new\n"
           "token runs the graph on the last T tokens (row 0 of the batch, the rest of the window\n"
           "padded): a causal model's logits at position t depend on tokens 0..t only. The\n"
           "prompt and the sample go to standard output, the timing to standard error.\n\n"
           "  --params DIR       NAME.npy for every param (kfuse train --save DIR)\n"
           "  --vocab FILE       a JSON list of strings: entry i is token i (prepare.py writes\n"
           "                     vocab.json); the prompt is split into the longest entries\n"
           "  --prompt TEXT      the text to continue (default: a newline)\n"
           "  --length N         tokens to generate (default 200)\n"
           "  --temperature T    softmax(logits / T); 0 takes the most likely token (default 1)\n"
           "  --seed S           seed of the draws (default 0)\n"
           "  --tokens NAME      the input holding the window (default x)\n"
           "  --logits NAME      the value holding the logits (default logits)\n");
}

typedef struct sample_args {
    const char *spec, *params, *vocab, *prompt, *tokens, *logits;
    uint64_t length, seed;
    double temperature;
} sample_args;

static int parse_args(int argc, char **argv, sample_args *a) {
    a->prompt = "\n";
    a->tokens = "x";
    a->logits = "logits";
    a->length = 200;
    a->temperature = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (kf_cli_is_help(arg)) {
            sample_usage(stdout);
            return 0;
        } else if (arg[0] != '-' || !arg[1]) {
            if (a->spec) {
                fprintf(stderr, "kfuse sample: one SPEC only ('%s' is extra)\n", arg);
                return 2;
            }
            a->spec = arg;
        } else if (!next) {
            fprintf(stderr, "kfuse sample: unknown or incomplete option '%s'\n", arg);
            sample_usage(stderr);
            return 2;
        } else if (!strcmp(arg, "--params")) {
            a->params = argv[++i];
        } else if (!strcmp(arg, "--vocab")) {
            a->vocab = argv[++i];
        } else if (!strcmp(arg, "--prompt")) {
            a->prompt = argv[++i];
        } else if (!strcmp(arg, "--tokens")) {
            a->tokens = argv[++i];
        } else if (!strcmp(arg, "--logits")) {
            a->logits = argv[++i];
        } else if (!strcmp(arg, "--length")) {
            if (!kf_cli_number("sample", "--length", argv[++i], 0, 100000000, &a->length)) {
                return 2;
            }
        } else if (!strcmp(arg, "--seed")) {
            if (!kf_cli_number("sample", "--seed", argv[++i], 0, UINT64_MAX, &a->seed)) {
                return 2;
            }
        } else if (!strcmp(arg, "--temperature")) {
            if (!kf_cli_real("sample", "--temperature", argv[++i], 0.0, 1e6, &a->temperature)) {
                return 2;
            }
        } else {
            fprintf(stderr, "kfuse sample: unknown option '%s'\n", arg);
            sample_usage(stderr);
            return 2;
        }
    }
    if (!a->spec || !a->params || !a->vocab) {
        fprintf(stderr, "kfuse sample: SPEC, --params and --vocab are required\n");
        sample_usage(stderr);
        return 2;
    }
    return -1;
}

/* The whole of a file, NUL-terminated; NULL (errno set) when it cannot be read. */
static char *read_file(const char *path, size_t *length) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    size_t cap = 4096, len = 0, n;
    char *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    bool failed = ferror(f);
    fclose(f);
    if (!buf || failed) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *length = len;
    return buf;
}

/* ---- the vocabulary: a JSON array of strings ---- */

typedef struct vocab {
    uint32_t count;
    char **tokens; /* UTF-8, NUL-terminated */
    size_t *lengths;
} vocab;

static void vocab_free(vocab *v) {
    for (uint32_t i = 0; i < v->count; i++) {
        free(v->tokens[i]);
    }
    free(v->tokens);
    free(v->lengths);
}

static const char *skip_space(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
        s++;
    }
    return s;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            return -1;
        }
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One JSON string at *s (after its opening quote) into a new buffer; NULL with *why on error. */
static char *json_string(const char **s, size_t *length, const char **why) {
    const char *p = *s;
    /* escapes never lengthen the text: \uXXXX (6 bytes) is at most 3 bytes of UTF-8, a pair of
     * them (12) at most 4 */
    char *out = malloc(strlen(p) + 1);
    size_t n = 0;
    if (!out) {
        *why = "out of memory";
        return NULL;
    }
    for (;;) {
        unsigned char c = (unsigned char)*p++;
        if (c == '"') {
            break;
        } else if (c == '\0') {
            *why = "a string is not closed";
        } else if (c < 0x20) {
            *why = "a control character inside a string (write it as an escape)";
        } else if (c != '\\') {
            out[n++] = (char)c;
            continue;
        } else {
            char e = *p++;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                out[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
                continue;
            }
            int cp = e == 'u' ? hex4(p) : -1;
            if (cp >= 0) {
                p += 4;
                if (cp >= 0xd800 && cp < 0xdc00) {
                    int lo = p[0] == '\\' && p[1] == 'u' ? hex4(p + 2) : -1;
                    if (lo < 0xdc00 || lo >= 0xe000) {
                        *why = "a \\u escape of a lone surrogate";
                        free(out);
                        return NULL;
                    }
                    p += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp < 0xe000) {
                    *why = "a \\u escape of a lone surrogate";
                    free(out);
                    return NULL;
                }
                n += put_utf8(out + n, (uint32_t)cp);
                continue;
            }
            *why = "an unknown escape in a string";
        }
        free(out);
        return NULL;
    }
    out[n] = '\0';
    *length = n;
    *s = p;
    return out;
}

/* Reads FILE as a JSON array of non-empty strings. */
static int vocab_load(const char *path, vocab *v) {
    memset(v, 0, sizeof *v);
    size_t size = 0;
    char *text = read_file(path, &size);
    if (!text) {
        fprintf(stderr, "kfuse sample: --vocab %s: %s\n", path, strerror(errno));
        return 1;
    }
    const char *why = NULL;
    const char *s = skip_space(text);
    uint32_t cap = 0;
    if (*s++ != '[') {
        why = "it does not start with '[' (a JSON list of strings)";
    }
    s = skip_space(s);
    if (!why && *s == ']') {
        why = "the list is empty";
    }
    while (!why) {
        if (*s++ != '"') {
            why = "an entry is not a string";
            break;
        }
        size_t len = 0;
        char *token = json_string(&s, &len, &why);
        if (!token) {
            break;
        }
        if (len == 0) {
            free(token);
            why = "an entry is the empty string";
            break;
        }
        if (v->count == cap) {
            cap = cap ? cap * 2 : 128;
            char **t = realloc(v->tokens, sizeof *t * cap);
            size_t *l = t ? realloc(v->lengths, sizeof *l * cap) : NULL;
            if (t) {
                v->tokens = t;
            }
            if (!l) {
                free(token);
                why = "out of memory";
                break;
            }
            v->lengths = l;
        }
        v->tokens[v->count] = token;
        v->lengths[v->count++] = len;
        s = skip_space(s);
        if (*s == ',') {
            s = skip_space(s + 1);
        } else if (*s == ']') {
            s = skip_space(s + 1);
            if (*s) {
                why = "text after the closing ']'";
            }
            break;
        } else {
            why = "entries are not separated by ','";
        }
    }
    free(text);
    if (why) {
        fprintf(stderr, "kfuse sample: --vocab %s: not a JSON list of strings: %s (entry %u)\n",
                path, why, v->count + 1);
        vocab_free(v);
        return 1;
    }
    return 0;
}

/* The prompt as token ids, each step taking the longest entry that the text starts with. */
static int encode(const vocab *v, const char *text, uint32_t **ids, uint64_t *count) {
    size_t len = strlen(text);
    *ids = malloc(sizeof **ids * (len + 1));
    *count = 0;
    if (!*ids) {
        fprintf(stderr, "kfuse sample: out of memory\n");
        return 1;
    }
    for (size_t at = 0; at < len;) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < v->count; i++) {
            if (v->lengths[i] <= len - at && !memcmp(text + at, v->tokens[i], v->lengths[i]) &&
                (best == UINT32_MAX || v->lengths[i] > v->lengths[best])) {
                best = i;
            }
        }
        if (best == UINT32_MAX) {
            /* name the whole UTF-8 character, not a byte of it */
            size_t n = 1;
            while (at + n < len && ((unsigned char)text[at + n] & 0xc0) == 0x80) {
                n++;
            }
            fprintf(stderr,
                    "kfuse sample: --prompt: '%.*s' (byte %zu) is in no entry of the "
                    "vocabulary\n",
                    (int)n, text + at, at + 1);
            free(*ids);
            *ids = NULL;
            return 1;
        }
        (*ids)[(*count)++] = best;
        at += v->lengths[best];
    }
    return 0;
}

/* ---- the model ---- */

/* SPEC with `logits` among its outputs: as written when it is one already, else with
 * `out LOGITS` appended (the language allows any number of out statements). */
static kf_graph *load_model(const char *path, const char *logits) {
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
        fprintf(stderr, "kfuse sample: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    kf_status st = kf_spec_parse(text, len, &g, &err);
    if (st != KF_OK) {
        fprintf(stderr, "%s:%u:%u: error: %s\n", path, err.line, err.column, err.message);
        free(text);
        return NULL;
    }
    for (uint32_t i = 0; i < kf_graph_output_count(g); i++) {
        const char *name;
        kf_graph_output_info(g, i, &name, NULL, NULL);
        if (!strcmp(name, logits)) {
            free(text);
            return g;
        }
    }
    kf_graph_destroy(g);
    g = NULL;
    size_t extra = strlen(logits) + 8;
    char *more = realloc(text, len + extra);
    if (!more) {
        free(text);
        fprintf(stderr, "kfuse sample: out of memory\n");
        return NULL;
    }
    text = more;
    int n = snprintf(text + len, extra, "\nout %s\n", logits);
    st = kf_spec_parse(text, len + (size_t)n, &g, &err);
    free(text);
    if (st != KF_OK) {
        fprintf(stderr,
                "kfuse sample: %s has no value named '%s' to read the logits from (%s); "
                "--logits NAME names it\n",
                path, logits, err.message);
        return NULL;
    }
    return g;
}

typedef struct model {
    kf_plan *plan;
    kf_tensor *window; /* the tokens input, [B, T] */
    kf_tensor *logits;
    uint32_t context, classes;
} model;

static void model_free(model *m) {
    kf_plan_destroy(m->plan);
    kf_tensor_destroy(m->window);
    kf_tensor_destroy(m->logits);
}

/* Compiles g, reads its params from DIR and zeroes its other inputs but the tokens. */
static int model_open(kf_context *ctx, kf_graph *g, const sample_args *a, model *m) {
    memset(m, 0, sizeof *m);
    bool have_tokens = false;
    kf_shape tokens_shape = {0};
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *name;
        kf_shape shape;
        kf_dtype dtype;
        kf_graph_input_info(g, i, &name, &shape, &dtype);
        if (!strcmp(name, a->tokens)) {
            char s[64];
            if (dtype != KF_DTYPE_I32 || shape.rank != 2) {
                fprintf(stderr,
                        "kfuse sample: input %s is %s[%s]: the tokens are i32 [batch, context] "
                        "(--tokens NAME names another input)\n",
                        name, kf_dtype_str(dtype), kf_shape_str(&shape, s, sizeof s));
                return 1;
            }
            have_tokens = true;
            tokens_shape = shape;
        }
    }
    if (!have_tokens) {
        fprintf(stderr, "kfuse sample: %s has no input named '%s' (--tokens NAME names it)\n",
                a->spec, a->tokens);
        return 1;
    }
    m->context = tokens_shape.dims[1];
    for (uint32_t i = 0; i < kf_graph_output_count(g); i++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, i, &name, &shape, NULL);
        if (strcmp(name, a->logits) != 0) {
            continue;
        }
        uint64_t positions = (uint64_t)tokens_shape.dims[0] * tokens_shape.dims[1];
        char s[64];
        if (shape.rank < 2 || kf_shape_elements(&shape) / shape.dims[shape.rank - 1] != positions) {
            fprintf(stderr,
                    "kfuse sample: %s is [%s]: the logits of a [%u, %u] window are [%llu, V] "
                    "or [%u, %u, V]\n",
                    name, kf_shape_str(&shape, s, sizeof s), tokens_shape.dims[0],
                    tokens_shape.dims[1], (unsigned long long)positions, tokens_shape.dims[0],
                    tokens_shape.dims[1]);
            return 1;
        }
        m->classes = shape.dims[shape.rank - 1];
        if (kf_tensor_create(&shape, &m->logits) != KF_OK) {
            fprintf(stderr, "kfuse sample: out of memory\n");
            return 1;
        }
    }
    if (!m->logits || kf_tensor_create(&tokens_shape, &m->window) != KF_OK) {
        fprintf(stderr, "kfuse sample: out of memory\n");
        return 1;
    }
    kf_status st = kf_graph_compile(ctx, g, NULL, &m->plan);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse sample: %s: %s: %s\n", a->spec, kf_status_str(st),
                kf_context_last_error(ctx));
        return 1;
    }
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *name;
        kf_shape shape;
        kf_graph_input_info(g, i, &name, &shape, NULL);
        if (!strcmp(name, a->tokens)) {
            continue;
        }
        kf_tensor *v = NULL;
        char msg[512] = {0};
        if (kf_graph_input_is_param(g, i, NULL)) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.npy", a->params, name);
            if (kf_npy_read(path, &v, msg, sizeof msg) != KF_OK) {
                fprintf(stderr, "kfuse sample: param %s: %s\n", name, msg);
                return 1;
            }
        } else if (kf_tensor_create(&shape, &v) != KF_OK) {
            /* data other than the tokens (the targets of the training loss): zeros, which every
             * operator takes (a class index 0 included); the logits do not read them */
            fprintf(stderr, "kfuse sample: out of memory\n");
            return 1;
        }
        st = kf_plan_set_input(m->plan, name, v);
        kf_tensor_destroy(v);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse sample: input %s: %s: %s\n", name, kf_status_str(st),
                    kf_context_last_error(ctx));
            return 1;
        }
    }
    return 0;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The next token from one row of logits: argmax at temperature 0, else a draw from
 * softmax(row / temperature) computed in double. */
static uint32_t draw(const float *row, uint32_t n, double temperature, uint64_t *rng) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) {
        best = row[i] > row[best] ? i : best;
    }
    if (temperature == 0.0) {
        return best;
    }
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        sum += exp(((double)row[i] - (double)row[best]) / temperature);
    }
    double u = (double)(splitmix(rng) >> 11) * 0x1.0p-53 * sum, acc = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        acc += exp(((double)row[i] - (double)row[best]) / temperature);
        if (u < acc) {
            return i;
        }
    }
    return best; /* u within rounding of sum */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kf_cmd_sample(int argc, char **argv) {
    sample_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        return rc;
    }
    vocab v = {0};
    if (vocab_load(a.vocab, &v) != 0) {
        return 1;
    }
    uint32_t *prompt = NULL;
    uint64_t prompt_count = 0;
    if (encode(&v, a.prompt, &prompt, &prompt_count) != 0) {
        vocab_free(&v);
        return 1;
    }
    rc = 1;
    uint32_t *ids = NULL;
    kf_context *ctx = NULL;
    model m = {0};
    kf_graph *g = load_model(a.spec, a.logits);
    if (!g) {
        goto done;
    }
    if (prompt_count == 0) {
        fprintf(stderr, "kfuse sample: --prompt is empty: the model needs a token to continue\n");
        goto done;
    }
    ctx = kf_cli_context();
    if (!ctx || model_open(ctx, g, &a, &m) != 0) {
        goto done;
    }
    if (m.classes != v.count) {
        fprintf(stderr,
                "kfuse sample: %s has %u entries but %s scores %u tokens: the vocabulary of "
                "another model?\n",
                a.vocab, v.count, a.logits, m.classes);
        goto done;
    }
    ids = malloc(sizeof *ids * (prompt_count + a.length));
    if (!ids) {
        fprintf(stderr, "kfuse sample: out of memory\n");
        goto done;
    }
    memcpy(ids, prompt, sizeof *ids * prompt_count);
    fputs(a.prompt, stdout);
    fflush(stdout);
    uint64_t rng = a.seed, count = prompt_count;
    double t0 = now_s();
    for (uint64_t n = 0; n < a.length; n++) {
        uint64_t first = count > m.context ? count - m.context : 0;
        uint32_t used = (uint32_t)(count - first);
        /* every row holds the window (the model sees a batch of equal rows); positions past it
         * hold token 0, which the causal model's position used-1 does not read */
        for (uint64_t e = 0; e < kf_tensor_size(m.window); e++) {
            uint32_t t = (uint32_t)(e % m.context);
            m.window->data[e] = t < used ? (float)ids[first + t] : 0.0f;
        }
        kf_status st = kf_plan_set_input(m.plan, a.tokens, m.window);
        if (st == KF_OK) {
            st = kf_plan_run(m.plan);
        }
        if (st == KF_OK) {
            st = kf_plan_get_output(m.plan, a.logits, m.logits);
        }
        if (st != KF_OK) {
            fprintf(stderr, "\nkfuse sample: %s: %s\n", kf_status_str(st),
                    kf_context_last_error(ctx));
            goto done;
        }
        const float *row = m.logits->data + (uint64_t)(used - 1) * m.classes;
        uint32_t next = draw(row, m.classes, a.temperature, &rng);
        ids[count++] = next;
        fwrite(v.tokens[next], 1, v.lengths[next], stdout);
        fflush(stdout);
    }
    double elapsed = now_s() - t0;
    printf("\n");
    fprintf(stderr, "kfuse sample: %llu tokens in %.2f s (%.1f ms per token, context %u)\n",
            (unsigned long long)a.length, elapsed,
            a.length ? 1e3 * elapsed / (double)a.length : 0.0, m.context);
    rc = 0;
done:
    model_free(&m);
    kf_context_destroy(ctx);
    kf_graph_destroy(g);
    free(ids);
    free(prompt);
    vocab_free(&v);
    return rc;
}
