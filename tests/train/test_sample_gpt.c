/* kfuse sample (tools/kfuse/cmd_sample.c), run as a user runs it. The models are tiny graphs
 * whose logits are a param indexed by position (`logits = copy(b)`, b [B*T, V]), so what the
 * command must print follows from b alone: at temperature 0 the argmax of row (window length - 1),
 * which checks the window sliding over the last T tokens, the row read, the prompt's encoding into
 * the longest vocabulary entries and the JSON escapes; at temperature > 0 draws whose frequencies
 * must match softmax(row / temperature). */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Runs `kfuse sample ARGS` with stdout into out and stderr into err; returns the exit status. */
static int sample(const char *dir, const char *args, char *out, size_t out_size, char *err,
                  size_t err_size) {
    char cmd[4096], err_path[1024];
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' sample %s 2>stderr.txt", dir, KF_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    if (!p) {
        return -1;
    }
    size_t n = fread(out, 1, out_size - 1, p);
    out[n] = '\0';
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    FILE *e = fopen(err_path, "r");
    n = e ? fread(err, 1, err_size - 1, e) : 0;
    err[n] = '\0';
    if (e) {
        fclose(e);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void scratch_clean(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        return;
    }
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (remove(path) != 0) {
                scratch_clean(path);
                rmdir(path);
            }
        }
    }
    closedir(d);
    rmdir(dir);
}

static bool write_text(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    return f && fclose(f) == 0 && ok;
}

/* A model of `rows` = B*T positions over `classes` tokens: dir/m.kf and dir/p/b.npy = logits. */
static bool write_model(const char *dir, uint32_t batch, uint32_t context, uint32_t classes,
                        const float *logits) {
    char spec[256], path[1024];
    snprintf(spec, sizeof spec,
             "x: i32[%u, %u]\nparam b: f32[%u, %u]\nlogits = copy(b)\nout logits\n", batch, context,
             batch * context, classes);
    snprintf(path, sizeof path, "%s/p", dir);
    if (!write_text(dir, "m.kf", spec) || (mkdir(path, 0777) != 0 && access(path, F_OK) != 0)) {
        return false;
    }
    kf_shape s = kf_shape_2d(batch * context, classes);
    kf_tensor *t = NULL;
    if (kf_tensor_create(&s, &t) != KF_OK) {
        return false;
    }
    memcpy(t->data, logits, sizeof(float) * batch * context * classes);
    snprintf(path, sizeof path, "%s/p/b.npy", dir);
    bool ok = kf_npy_write(path, t, KF_DTYPE_F32) == KF_OK;
    kf_tensor_destroy(t);
    return ok;
}

/* One-character entries 'a', 'b', ... as a JSON list. */
static void letters_json(uint32_t n, char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "[");
    for (uint32_t i = 0; i < n && used < size; i++) {
        used += (size_t)snprintf(out + used, size - used, "%s\"%c\"", i ? ", " : "", 'a' + i);
    }
    snprintf(out + used, size - used, "]\n");
}

KT_TEST(unit, sample_reads_the_row_of_the_last_token_of_a_sliding_window) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char dir[] = "/tmp/kfuse-sample-test-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    uint32_t batch = 1 + (uint32_t)(kt_rand_u64() % 3), context = 2 + (uint32_t)(kt_rand_u64() % 7);
    uint32_t classes = 3 + (uint32_t)(kt_rand_u64() % 5), rows = batch * context;
    float *logits = malloc(sizeof(float) * rows * classes);
    uint32_t *best = malloc(sizeof(uint32_t) * rows);
    char vocab[256], out[4096], err[4096], args[512], want[4096];
    KT_CHECK(logits && best, "out of memory");
    /* every row has one clear winner (margin 1); other rows than the first T are never read */
    for (uint32_t r = 0; r < rows; r++) {
        best[r] = (uint32_t)(kt_rand_u64() % classes);
        for (uint32_t c = 0; c < classes; c++) {
            logits[r * classes + c] = kt_rand_f32(-4.0f, 3.0f) + (c == best[r] ? 8.0f : 0.0f);
        }
    }
    letters_json(classes, vocab, sizeof vocab);
    KT_CHECK(write_model(dir, batch, context, classes, logits) && write_text(dir, "v.json", vocab),
             "cannot write the model");
    uint32_t prompt_len = 1 + (uint32_t)(kt_rand_u64() % (context + 2)), length = 3 * context;
    char prompt[64] = {0};
    for (uint32_t i = 0; i < prompt_len; i++) {
        prompt[i] = (char)('a' + kt_rand_u64() % classes);
    }
    /* what the command must print: the prompt, then the winner of row min(len, T) - 1 */
    size_t w = (size_t)snprintf(want, sizeof want, "%s", prompt);
    for (uint32_t n = 0, len = prompt_len; n < length; n++, len++) {
        want[w++] = (char)('a' + best[(len < context ? len : context) - 1]);
    }
    want[w++] = '\n';
    want[w] = '\0';
    snprintf(args, sizeof args,
             "m.kf --params p --vocab v.json --prompt %s --length %u "
             "--temperature 0",
             prompt, length);
    int rc = sample(dir, args, out, sizeof out, err, sizeof err);
    KT_CHECK(rc == 0, "kfuse sample %s exited %d: %s", args, rc, err);
    KT_CHECK(!strcmp(out, want), "B %u, T %u, V %u, prompt %s: printed\n%s\nnot\n%s", batch,
             context, classes, prompt, out, want);
    KT_CHECK(strstr(err, "tokens in"), "no timing on stderr: %s", err);
    free(logits);
    free(best);
    scratch_clean(dir);
}

KT_TEST(unit, sample_splits_the_prompt_into_the_longest_entries_and_reads_json_escapes) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char dir[] = "/tmp/kfuse-sample-test-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    /* entries: 0 "a", 1 "b", 2 "ab", 3 e-acute (\u00e9), 4 newline, 5 '"', 6 U+1F600 (a
     * surrogate pair); row t's winner is entry t + 1, so the first token printed tells how many
     * tokens the prompt became */
    const char *vocab = "[\"a\", \"b\",\"ab\" ,\"\\u00e9\",\"\\n\", \"\\\"\", \"\\ud83d\\ude00\"]";
    const char *entries[] = {"a", "b", "ab", "\xc3\xa9", "\n", "\"", "\xf0\x9f\x98\x80"};
    uint32_t context = 6, classes = 7;
    float logits[6 * 7];
    for (uint32_t r = 0; r < context; r++) {
        for (uint32_t c = 0; c < classes; c++) {
            logits[r * classes + c] = kt_rand_f32(-1.0f, 1.0f) + (c == r + 1 ? 5.0f : 0.0f);
        }
    }
    KT_CHECK(write_model(dir, 1, context, classes, logits) && write_text(dir, "v.json", vocab),
             "cannot write the model");
    /* "abab" is 2 tokens (not 4), the emoji 1 (not 4 bytes) */
    const struct {
        const char *prompt_arg, *prompt;
        uint32_t tokens;
    } cases[] = {{"abab", "abab", 2},
                 {"ba", "ba", 2},
                 {"'\xc3\xa9\"'", "\xc3\xa9\"", 2},
                 {"'\xf0\x9f\x98\x80'", "\xf0\x9f\x98\x80", 1},
                 {"aab", "aab", 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256], out[256], err[1024], want[256];
        snprintf(args, sizeof args,
                 "m.kf --params p --vocab v.json --prompt %s --length 1 --temperature 0",
                 cases[i].prompt_arg);
        int rc = sample(dir, args, out, sizeof out, err, sizeof err);
        KT_CHECK(rc == 0, "%s: exited %d: %s", args, rc, err);
        snprintf(want, sizeof want, "%s%s\n", cases[i].prompt, entries[cases[i].tokens]);
        KT_CHECK(!strcmp(out, want), "%s: printed '%s', not '%s' (the prompt is %u tokens)", args,
                 out, want, cases[i].tokens);
    }
    scratch_clean(dir);
}

KT_TEST(unit, sample_draws_follow_the_softmax_and_the_seed) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char dir[] = "/tmp/kfuse-sample-test-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    uint32_t context = 3, classes = 4 + (uint32_t)(kt_rand_u64() % 4), length = 3000;
    float logits[3 * 8];
    for (uint32_t i = 0; i < context * classes; i++) {
        logits[i] = kt_rand_f32(-1.5f, 1.5f);
    }
    /* never 1, where a sampler that ignores the temperature would pass */
    uint32_t pick = (uint32_t)(kt_rand_u64() % 14);
    double temperature = pick < 5 ? 0.5 + pick / 10.0 : 1.2 + (pick - 5) / 10.0;
    char vocab[128], args[256], err[1024];
    letters_json(classes, vocab, sizeof vocab);
    KT_CHECK(write_model(dir, 1, context, classes, logits) && write_text(dir, "v.json", vocab),
             "cannot write the model");
    static char out[3][4096];
    uint64_t seeds[3] = {kt_rand_u64() % 1000000, 0, 0};
    seeds[1] = seeds[0];
    seeds[2] = seeds[0] + 1;
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args,
                 "m.kf --params p --vocab v.json --prompt aaa --length %u --temperature %.1f "
                 "--seed %llu",
                 length, temperature, (unsigned long long)seeds[k]);
        int rc = sample(dir, args, out[k], sizeof out[k], err, sizeof err);
        KT_CHECK(rc == 0, "%s: exited %d: %s", args, rc, err);
        KT_CHECK(strlen(out[k]) == 3 + length + 1, "%s: printed %zu bytes", args, strlen(out[k]));
    }
    KT_CHECK(!strcmp(out[0], out[1]), "the same seed gave two samples");
    KT_CHECK(strcmp(out[0], out[2]) != 0, "seeds %llu and %llu gave the same sample",
             (unsigned long long)seeds[0], (unsigned long long)seeds[2]);
    /* the window is full from the start: every draw comes from row T - 1 */
    const float *row = logits + (context - 1) * classes;
    double z = 0.0, p[8];
    for (uint32_t c = 0; c < classes; c++) {
        z += exp((double)row[c] / temperature);
    }
    uint32_t counts[8] = {0};
    for (uint32_t i = 0; i < length; i++) {
        char ch = out[0][3 + i];
        KT_CHECK(ch >= 'a' && ch < (char)('a' + classes), "draw %u is '%c'", i, ch);
        counts[ch - 'a']++;
    }
    for (uint32_t c = 0; c < classes; c++) {
        p[c] = exp((double)row[c] / temperature) / z;
        double sd = sqrt(p[c] * (1.0 - p[c]) / length), f = (double)counts[c] / length;
        /* 5 standard deviations: a false alarm about once in 3 million runs per token */
        KT_CHECK(fabs(f - p[c]) <= 5.0 * sd,
                 "token %u: drawn %.4f of the time, softmax %.4f "
                 "(temperature %.1f, sd %.4f)",
                 c, f, p[c], temperature, sd);
    }
    scratch_clean(dir);
}

KT_TEST(unit, sample_refusals_name_the_culprit) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char dir[] = "/tmp/kfuse-sample-test-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    float logits[2 * 3];
    for (int i = 0; i < 6; i++) {
        logits[i] = kt_rand_f32(-1.0f, 1.0f);
    }
    KT_CHECK(
        write_model(dir, 1, 2, 3, logits) && write_text(dir, "v3.json", "[\"a\",\"b\",\"c\"]") &&
            write_text(dir, "v4.json", "[\"a\",\"b\",\"c\",\"d\"]") &&
            write_text(dir, "bad.json", "[\"a\", 3]") &&
            write_text(dir, "open.json", "[\"a\", \"b") &&
            write_text(dir, "nologits.kf", "x: i32[1, 2]\nparam b: f32[2, 3]\ny = copy(b)\n") &&
            write_text(dir, "f32.kf", "x: f32[1, 2]\nparam b: f32[2, 3]\nlogits = copy(b)\n"),
        "cannot write the files");
    const struct {
        const char *args;
        int rc;
        const char *message;
    } cases[] = {
        {"m.kf --params p --vocab v4.json --prompt a", 1, "v4.json has 4 entries"},
        {"m.kf --params p --vocab v3.json --prompt az", 1, "'z' (byte 2)"},
        {"m.kf --params p --vocab v3.json --prompt ''", 1, "--prompt is empty"},
        {"m.kf --params p --vocab bad.json", 1, "an entry is not a string (entry 2)"},
        {"m.kf --params p --vocab open.json", 1, "a string is not closed"},
        {"m.kf --params p --vocab nothere.json", 1, "nothere.json"},
        {"m.kf --params nothere --vocab v3.json --prompt a", 1, "nothere/b.npy"},
        {"nologits.kf --params p --vocab v3.json --prompt a", 1, "no value named 'logits'"},
        {"nologits.kf --params p --vocab v3.json --prompt a --logits y --tokens w", 1,
         "no input named 'w'"},
        {"f32.kf --params p --vocab v3.json --prompt a", 1, "the tokens are i32"},
        {"m.kf --params p --vocab v3.json --length -1", 2, "--length"},
        {"m.kf --params p --vocab v3.json --temperature -1", 2, "--temperature"},
        {"m.kf --vocab v3.json", 2, "--params and --vocab are required"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[1024], err[2048];
        int rc = sample(dir, cases[i].args, out, sizeof out, err, sizeof err);
        KT_CHECK(rc == cases[i].rc, "%s: exited %d, not %d: %s", cases[i].args, rc, cases[i].rc,
                 err);
        KT_CHECK(strstr(err, cases[i].message), "%s: the message does not say '%s': %s",
                 cases[i].args, cases[i].message, err);
    }
    /* the logits named by --logits in a spec without an out for them */
    char out[1024], err[2048];
    int rc = sample(dir, "nologits.kf --params p --vocab v3.json --prompt a --logits y --length 2",
                    out, sizeof out, err, sizeof err);
    KT_CHECK(rc == 0, "--logits y: exited %d: %s", rc, err);
    scratch_clean(dir);
}

/* A bigram model, logits = embedding(table, x) [B, T, V]: the logits at a position are the
 * table's row of the token there, so greedy sampling follows the table's argmax from token to
 * token; the window's tokens must sit at their positions and the row read must be the last
 * one's. */
KT_TEST(unit, sample_follows_a_bigram_table_through_the_window) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char dir[] = "/tmp/kfuse-sample-test-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    uint32_t batch = 1 + (uint32_t)(kt_rand_u64() % 3), context = 2 + (uint32_t)(kt_rand_u64() % 9);
    uint32_t classes = 3 + (uint32_t)(kt_rand_u64() % 20);
    uint32_t next[32];
    kf_shape s = kf_shape_2d(classes, classes);
    kf_tensor *table = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &table));
    for (uint32_t r = 0; r < classes; r++) {
        next[r] = (uint32_t)(kt_rand_u64() % classes);
        for (uint32_t c = 0; c < classes; c++) {
            table->data[r * classes + c] = kt_rand_f32(-2.0f, 2.0f) + (c == next[r] ? 5.0f : 0.0f);
        }
    }
    char spec[256], path[1024], vocab[256];
    snprintf(spec, sizeof spec,
             "x: i32[%u, %u]\nparam table: f32[%u, %u]\nlogits = embedding(table, x)\n", batch,
             context, classes, classes);
    snprintf(path, sizeof path, "%s/p", dir);
    KT_CHECK(mkdir(path, 0777) == 0 && write_text(dir, "bigram.kf", spec), "cannot write");
    snprintf(path, sizeof path, "%s/p/table.npy", dir);
    KT_CHECK_OK(kf_npy_write(path, table, KF_DTYPE_F32));
    kf_tensor_destroy(table);
    letters_json(classes, vocab, sizeof vocab);
    KT_CHECK(write_text(dir, "v.json", vocab), "cannot write the vocabulary");
    char prompt[16] = {0}, want[256], args[256], out[256], err[1024];
    uint32_t prompt_len = 1 + (uint32_t)(kt_rand_u64() % 12), length = 2 * context + 3;
    for (uint32_t i = 0; i < prompt_len; i++) {
        prompt[i] = (char)('a' + kt_rand_u64() % classes);
    }
    size_t w = (size_t)snprintf(want, sizeof want, "%s", prompt);
    uint32_t last = (uint32_t)(prompt[prompt_len - 1] - 'a');
    for (uint32_t n = 0; n < length; n++) {
        last = next[last];
        want[w++] = (char)('a' + last);
    }
    want[w++] = '\n';
    want[w] = '\0';
    snprintf(args, sizeof args,
             "bigram.kf --params p --vocab v.json --prompt %s --length %u --temperature 0", prompt,
             length);
    int rc = sample(dir, args, out, sizeof out, err, sizeof err);
    KT_CHECK(rc == 0, "%s: exited %d: %s", args, rc, err);
    KT_CHECK(!strcmp(out, want), "B %u, T %u, V %u: printed\n%s\nnot\n%s", batch, context, classes,
             out, want);
    scratch_clean(dir);
}
