/* Input from outside, answered: numbers on the command line read strictly, messages that name
 * the culprit once, --save that writes whole files or none, .npy writes that survive kill -9,
 * shapes whose element count overflows, labels that are no class index, NULL arguments. Each
 * test asserts the status (or exit code) and that the message names what was wrong. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Runs the CLI with args (shell syntax), capturing stdout and stderr; returns the exit status. */
static int cli(const char *args, char *out, size_t size) {
    size_t len = strlen(KF_CLI_PATH) + strlen(args) + 16;
    char *cmd = malloc(len);
    if (!cmd) {
        return -1;
    }
    snprintf(cmd, len, "'%s' %s 2>&1", KF_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) {
        return -1;
    }
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A fresh folder under /tmp, removed (with what is in it) by scratch_clean. */
static bool scratch_make(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/kfuse-cli-test-XXXXXX");
    return mkdtemp(dir) != NULL;
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

/* The names in dir other than . and .., as one string "a b c " (sorted as readdir gives). */
static int dir_entries(const char *dir, char *names, size_t size) {
    DIR *d = opendir(dir);
    int count = 0;
    size_t used = 0;
    names[0] = '\0';
    if (!d) {
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            count++;
            int n = snprintf(names + used, size - used, "%s ", e->d_name);
            used += n > 0 && (size_t)n < size - used ? (size_t)n : 0;
        }
    }
    closedir(d);
    return count;
}

static bool write_vector(const char *path, uint32_t n, float first) {
    kf_shape s = kf_shape_1d(n);
    kf_tensor *t = NULL;
    if (kf_tensor_create(&s, &t) != KF_OK) {
        return false;
    }
    for (uint32_t i = 0; i < n; i++) {
        t->data[i] = first + (float)i;
    }
    bool ok = kf_npy_write(path, t, KF_DTYPE_F32) == KF_OK;
    kf_tensor_destroy(t);
    return ok;
}

/* ---- numbers from the command line ---------------------------------------------------------- */

KT_CPU_TEST(unit, cli_numbers_are_read_strictly) {
    static const struct {
        const char *args;
        const char *named; /* the message names the option... */
        const char *value; /* ...and the value given */
    } cases[] = {
        {"run -e 'x: f32[2]' --seed ''", "--seed", "''"},
        {"run -e 'x: f32[2]' --seed -1", "--seed", "'-1'"},
        {"run -e 'x: f32[2]' --seed ' 7'", "--seed", "' 7'"},
        {"run -e 'x: f32[2]' --seed 18446744073709551616", "--seed", "'18446744073709551616'"},
        {"run -e 'x: f32[2]' --seed 0x", "--seed", "'0x'"},
        {"run -e 'x: f32[2]' --repeat 5abc", "--repeat", "'5abc'"},
        {"run -e 'x: f32[2]' --repeat 0", "--repeat", "'0'"},
        {"run -e 'x: f32[2]' --repeat +5", "--repeat", "'+5'"},
        {"bench --repeat 3.5", "--repeat", "'3.5'"},
        {"bench --seed 12z", "--seed", "'12z'"},
        {"bench --batch 65", "--batch", "'65'"},
        {"bench --batch 0", "--batch", "'0'"},
        {"demo --repeat -2", "--repeat", "'-2'"},
        {"demo --seed ''", "--seed", "''"},
        {"verify --seed 1e3", "--seed", "'1e3'"},
        {"sgmat --repeat 5abc", "--repeat", "'5abc'"},
        {"sgmat --repeat ''", "--repeat", "''"},
        {"sgmat --warmup-ms nan", "--warmup-ms", "'nan'"},
        {"sgmat --warmup-ms 0x10", "--warmup-ms", "'0x10'"},
        {"sgmat --shape -1x2x3", "shape", "'-1x2x3'"},
        {"sgmat --shape 4x4x4x", "shape", "'4x4x4x'"},
        {"tune 64x-3x2", "64x-3x2", "MxKxN"},
        {"tune ' 64x64x64'", " 64x64x64", "MxKxN"},
        {"wgsl relu --shape 4x+3", "4x+3", "--shape"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli(cases[i].args, out, sizeof out);
        KT_CHECK(rc == 2, "kfuse %s: exit %d (want 2, a usage error): %s", cases[i].args, rc, out);
        KT_CHECK(strstr(out, cases[i].named) && strstr(out, cases[i].value),
                 "kfuse %s: the message names neither %s nor %s: %s", cases[i].args, cases[i].named,
                 cases[i].value, out);
    }
}

/* ---- messages ------------------------------------------------------------------------------- */

static int count_of(const char *text, const char *word) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, word)) != NULL; p += strlen(word)) {
        n++;
    }
    return n;
}

KT_CPU_TEST(unit, cli_messages_name_the_culprit_once) {
    char out[8192];
    int rc = cli("run /nonexistent/kfuse-missing.kf", out, sizeof out);
    KT_CHECK(rc == 1 && count_of(out, "/nonexistent/kfuse-missing.kf") == 1 &&
                 strstr(out, "No such file"),
             "a missing program: exit %d, the path once and the system's reason: %s", rc, out);
    rc = cli("run /tmp", out, sizeof out);
    KT_CHECK(rc == 1 && count_of(out, "/tmp") == 1 && strstr(out, "directory"),
             "a directory as the program: exit %d: %s", rc, out);

    /* 33 --input: the limit is named, not the syntax */
    char args[2048] = "run -e 'x: f32[2]'";
    for (int i = 0; i < 33; i++) {
        size_t n = strlen(args);
        snprintf(args + n, sizeof args - n, " --input in%d=/tmp/in%d.npy", i, i);
    }
    rc = cli(args, out, sizeof out);
    KT_CHECK(rc == 2 && strstr(out, "32") && strstr(out, "in32"),
             "the 33rd --input: exit %d, the message names the limit and the input: %s", rc, out);
    rc = cli("run -e 'x: f32[2]' --input x", out, sizeof out);
    KT_CHECK(rc == 2 && strstr(out, "NAME=FILE.npy") && strstr(out, "'x'"),
             "--input without '=': exit %d: %s", rc, out);
}

KT_CPU_TEST(unit, npy_directory_is_called_a_directory) {
    char dir[64];
    KT_CHECK(scratch_make(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    char msg[512];
    kf_tensor *t = (kf_tensor *)1;
    kf_status st = kf_npy_read(dir, &t, msg, sizeof msg);
    scratch_clean(dir);
    KT_CHECK(st == KF_ERROR_IO && t == NULL, "a directory read as .npy: %s", kf_status_str(st));
    KT_CHECK(strstr(msg, dir) && strstr(msg, "directory") && !strstr(msg, "not a .npy file ("),
             "the message: %s", msg);
}

KT_CPU_TEST(unit, spec_cr_only_line_endings) {
    static const char *const texts[] = {
        "x: f32[4]\ry = relu(x)\rout y\r",
        "x: f32[4]\r# a comment\ry = relu(x)",
        "x: f32[4]\r\ny = relu(x)\r\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        kf_graph *g = NULL;
        kf_spec_error err = {0};
        kf_status st = kf_spec_parse(texts[i], strlen(texts[i]), &g, &err);
        KT_CHECK(st == KF_OK, "text %zu: %u:%u: %s", i, err.line, err.column, err.message);
        KT_CHECK(kf_graph_output_count(g) == 1, "text %zu: %u outputs", i,
                 kf_graph_output_count(g));
        kf_graph_destroy(g);
    }
    /* lines still count: an error on the third CR-ended line says line 3 */
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    const char *bad = "x: f32[4]\ry = relu(x)\rz = gleu(x)\r";
    KT_CHECK(kf_spec_parse(bad, strlen(bad), &g, &err) == KF_ERROR_PARSE && !g, "gleu parsed");
    KT_CHECK(err.line == 3 && strstr(err.message, "gleu"), "%u:%u: %s", err.line, err.column,
             err.message);
}

KT_CPU_TEST(unit, api_null_arguments_have_messages) {
    kf_graph *g = kf_graph_create();
    kf_shape s = kf_shape_1d(4);
    kf_node x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    KT_CHECK(x.id != 0, "input");
    kf_node bad = kf_graph_op(g, "add", NULL, 2, NULL);
    KT_CHECK(bad.id == 0 && kf_graph_status(g) == KF_ERROR_INVALID_ARGUMENT, "NULL inputs: %s",
             kf_status_str(kf_graph_status(g)));
    KT_CHECK(strstr(kf_graph_error(g), "add") && strstr(kf_graph_error(g), "NULL") &&
                 !strstr(kf_graph_error(g), "got 2"),
             "the message names the op and the NULL: %s", kf_graph_error(g));
    kf_graph_destroy(g);

    /* failing calls set *out to NULL, as docs/errors.md promises */
    kf_graph *parsed = (kf_graph *)1;
    kf_spec_error err = {0};
    KT_CHECK(kf_spec_parse(NULL, 5, &parsed, &err) == KF_ERROR_INVALID_ARGUMENT && !parsed,
             "kf_spec_parse(NULL text) left *out");
    KT_CHECK(strstr(err.message, "text"), "message: %s", err.message);
    kf_buffer *buf = (kf_buffer *)1;
    KT_CHECK(kf_buffer_create(NULL, 16, &buf) == KF_ERROR_INVALID_ARGUMENT && !buf,
             "kf_buffer_create(NULL ctx) left *out");
    kf_pipeline *pipe = (kf_pipeline *)1;
    KT_CHECK(kf_pipeline_get(NULL, NULL, &pipe) == KF_ERROR_INVALID_ARGUMENT && !pipe,
             "kf_pipeline_get(NULL ctx) left *out");
    kf_tensor *t = (kf_tensor *)1;
    KT_CHECK(kf_tensor_create(NULL, &t) == KF_ERROR_SHAPE && !t, "kf_tensor_create(NULL)");
}

/* ---- shapes whose element count overflows ---------------------------------------------------- */

KT_CPU_TEST(unit, shapes_that_overflow_are_refused) {
    kf_shape huge = {4, {65536, 65536, 65536, 65536}}; /* 2^64 elements: wrapped to 0 before */
    kf_shape big = {3, {4294967295u, 4294967295u, 2}};
    KT_CHECK(kf_shape_elements(&huge) == UINT64_MAX, "65536^4 counts %llu elements",
             (unsigned long long)kf_shape_elements(&huge));
    KT_CHECK(kf_shape_elements(&big) == UINT64_MAX, "(2^32-1)^2*2 counts %llu",
             (unsigned long long)kf_shape_elements(&big));
    kf_tensor *t = (kf_tensor *)1;
    KT_CHECK(kf_tensor_create(&huge, &t) == KF_ERROR_SHAPE && !t, "tensor of 2^64 elements");
    KT_CHECK(kf_tensor_constant(&big, 1.0f, &t) == KF_ERROR_SHAPE && !t, "tensor of 2^65");

    kf_graph *g = kf_graph_create();
    kf_node x = kf_graph_input(g, "x", &huge, KF_DTYPE_F32);
    KT_CHECK(x.id == 0 && kf_graph_status(g) != KF_OK, "graph input of 2^64 elements accepted");
    KT_CHECK(strstr(kf_graph_error(g), "x") && strstr(kf_graph_error(g), "elements"), "message: %s",
             kf_graph_error(g));
    kf_graph_destroy(g);

    const char *text = "x: f32[65536, 65536, 65536, 65536]\ny = relu(x)\n";
    kf_spec_error err = {0};
    g = (kf_graph *)1;
    KT_CHECK(kf_spec_parse(text, strlen(text), &g, &err) != KF_OK && !g,
             "the language accepted 2^64 elements");
    KT_CHECK(err.line == 1 && strstr(err.message, "elements"), "%u:%u: %s", err.line, err.column,
             err.message);
}

/* ---- kf_npy_write under kill -9 ---------------------------------------------------------------
 */

/* A child rewrites a large file over and over; the parent kills it with SIGKILL while a write
 * is under way (once the file or a temporary beside it changes). The file must then be whole:
 * the previous contents or the new, never a truncated mix. */
KT_CPU_TEST(unit, npy_write_survives_kill) {
    char dir[64], path[128];
    KT_CHECK(scratch_make(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/out.npy", dir);
    KT_CHECK(write_vector(path, 1000, 7.0f), "the first file");
    const uint32_t big = 8u << 20; /* 32 MiB of f32 */
    for (int round = 0; round < 3; round++) {
        struct stat before;
        KT_CHECK(stat(path, &before) == 0, "stat");
        pid_t child = fork();
        KT_CHECK(child >= 0, "fork: %s", strerror(errno));
        if (child == 0) {
            for (;;) {
                write_vector(path, big, 1.0f);
            }
        }
        /* Wait for the write to start: a new entry in the folder (kills leave temporaries
         * behind, so count from what is there now), or the file changing. Up to 60 s: the
         * machine may be busy. */
        char names[1024];
        int entries_before = dir_entries(dir, names, sizeof names);
        bool started = false;
        for (int spin = 0; spin < 600000 && !started; spin++) {
            struct stat now;
            started = dir_entries(dir, names, sizeof names) > entries_before ||
                      (stat(path, &now) == 0 && (now.st_size != before.st_size ||
                                                 now.st_mtim.tv_nsec != before.st_mtim.tv_nsec));
            if (!started) {
                usleep(100);
            }
        }
        usleep((useconds_t)(kt_rand_u64() % 20000)); /* somewhere inside the write */
        kill(child, SIGKILL);
        int status;
        waitpid(child, &status, 0);
        KT_CHECK(started, "the child never started writing");
        kf_tensor *t = NULL;
        char msg[512];
        kf_status st = kf_npy_read(path, &t, msg, sizeof msg);
        if (st != KF_OK) {
            scratch_clean(dir);
        }
        KT_CHECK(st == KF_OK, "round %d: after kill -9 the file does not read: %s", round, msg);
        uint64_t n = kf_tensor_size(t);
        bool whole = (n == 1000 && t->data[999] == 1006.0f) ||
                     (n == big && t->data[0] == 1.0f && t->data[big - 1] == (float)big);
        kf_tensor_destroy(t);
        KT_CHECK(whole, "round %d: %llu elements, neither the old file nor the new", round,
                 (unsigned long long)n);
    }
    /* What a kill leaves is hidden temporaries, never a file of the target's name half written. */
    char names[1024];
    dir_entries(dir, names, sizeof names);
    scratch_clean(dir);
    KT_CHECK(strstr(names, "out.npy "), "the file is gone: %s", names);
}

KT_CPU_TEST(unit, npy_write_errors_say_why) {
    char dir[64], path[256];
    KT_CHECK(scratch_make(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    kf_shape s = kf_shape_1d(3);
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_constant(&s, 2.0f, &t));
    /* a directory where the file should go: EISDIR, and it stays a directory */
    snprintf(path, sizeof path, "%s/d.npy", dir);
    mkdir(path, 0777);
    errno = 0;
    kf_status st = kf_npy_write(path, t, KF_DTYPE_F32);
    int why = errno;
    struct stat sb;
    bool still_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    /* a missing folder: ENOENT */
    snprintf(path, sizeof path, "%s/missing/x.npy", dir);
    errno = 0;
    kf_status st2 = kf_npy_write(path, t, KF_DTYPE_F32);
    int why2 = errno;
    char names[512];
    int left = dir_entries(dir, names, sizeof names);
    kf_tensor_destroy(t);
    scratch_clean(dir);
    KT_CHECK(st == KF_ERROR_IO && why == EISDIR && still_dir, "directory: %s, errno %s",
             kf_status_str(st), strerror(why));
    KT_CHECK(st2 == KF_ERROR_IO && why2 == ENOENT, "missing folder: %s, errno %s",
             kf_status_str(st2), strerror(why2));
    KT_CHECK(left == 1, "failed writes left files behind: %s", names);
}

/* ---- the plan API -------------------------------------------------------------------------- */

KT_TEST(unit, plan_refusals_have_messages) {
    KT_NEED_GPU(ctx);
    kf_plan *plan = (kf_plan *)1;
    KT_CHECK(kf_graph_compile(ctx, NULL, NULL, &plan) == KF_ERROR_INVALID_ARGUMENT && !plan,
             "NULL graph");
    KT_CHECK(strstr(kf_context_last_error(ctx), "kf_graph_compile"), "message: %s",
             kf_context_last_error(ctx));
    kf_graph *g = kf_graph_create();
    kf_shape s = kf_shape_2d(3, 5);
    kf_node x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    plan = (kf_plan *)1;
    KT_CHECK(kf_graph_compile(ctx, g, NULL, &plan) == KF_ERROR_INVALID_ARGUMENT && !plan,
             "a graph with no outputs compiled");
    KT_CHECK(strstr(kf_context_last_error(ctx), "no outputs"), "message: %s",
             kf_context_last_error(ctx));
    kf_graph_output(g, "y", kf_graph_unary(g, "relu", x));
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &plan));
    KT_CHECK(kf_plan_set_input(plan, "x", NULL) == KF_ERROR_INVALID_ARGUMENT, "NULL value");
    KT_CHECK(strstr(kf_context_last_error(ctx), "input x") &&
                 strstr(kf_context_last_error(ctx), "NULL"),
             "message: %s", kf_context_last_error(ctx));
    kf_tensor *in = NULL, *out = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &in));
    KT_CHECK_OK(kf_tensor_create(&s, &out));
    for (uint64_t i = 0; i < kf_tensor_size(in); i++) {
        in->data[i] = kt_rand_f32(0.5f, 2.0f);
        out->data[i] = NAN;
    }
    bool ok = kf_plan_set_input(plan, "x", in) == KF_OK;
    /* before any run there is no result: an error naming the output, never zeros */
    kf_status before = kf_plan_get_output(plan, "y", out);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kf_context_last_error(ctx));
    kf_status null_out = kf_plan_get_output(plan, "y", NULL);
    char null_out_msg[256];
    snprintf(null_out_msg, sizeof null_out_msg, "%s", kf_context_last_error(ctx));
    /* NULL out-parameters: each refusal names what was NULL on the plan's context */
    static const char *const null_names[4] = {"kf_plan_summary_get", "report",
                                              "kf_plan_random_input", "names"};
    char null_msgs[4][256];
    kf_status null_st[4];
    kf_plan_report rep;
    null_st[0] = kf_plan_summary_get(plan, NULL);
    snprintf(null_msgs[0], sizeof null_msgs[0], "%s", kf_context_last_error(ctx));
    null_st[1] = kf_plan_verify(plan, 1, NULL);
    snprintf(null_msgs[1], sizeof null_msgs[1], "%s", kf_context_last_error(ctx));
    null_st[2] = kf_plan_random_input(plan, "x", 1, NULL);
    snprintf(null_msgs[2], sizeof null_msgs[2], "%s", kf_context_last_error(ctx));
    null_st[3] = kf_plan_check(plan, NULL, NULL, 1, 1, &rep);
    snprintf(null_msgs[3], sizeof null_msgs[3], "%s", kf_context_last_error(ctx));
    kf_status run = kf_plan_run(plan);
    kf_status after = kf_plan_get_output(plan, "y", out);
    bool equal = after == KF_OK;
    for (uint64_t i = 0; equal && i < kf_tensor_size(in); i++) {
        equal = out->data[i] == in->data[i]; /* relu of positives */
    }
    kf_tensor_destroy(in);
    kf_tensor_destroy(out);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    KT_CHECK(ok, "set_input");
    KT_CHECK(before == KF_ERROR_INVALID_ARGUMENT, "get_output before a run: %s",
             kf_status_str(before));
    KT_CHECK(strstr(msg, "y") && strstr(msg, "not run"), "message: %s", msg);
    KT_CHECK(null_out == KF_ERROR_INVALID_ARGUMENT && strstr(null_out_msg, "out"), "NULL out: %s",
             null_out_msg);
    KT_CHECK(run == KF_OK && equal, "after the run: %s", kf_status_str(after));
    for (int i = 0; i < 4; i++) {
        KT_CHECK(null_st[i] == KF_ERROR_INVALID_ARGUMENT && strstr(null_msgs[i], null_names[i]),
                 "NULL case %d: %s: %s", i, kf_status_str(null_st[i]), null_msgs[i]);
    }

    kf_shape huge = {4, {65536, 65536, 65536, 65536}};
    kf_gpu_tensor *gt = (kf_gpu_tensor *)1;
    KT_CHECK(kf_gpu_tensor_create(ctx, &huge, KF_DTYPE_F32, &gt) == KF_ERROR_SHAPE && !gt,
             "a GPU tensor of 2^64 elements");
}

/* Labels that are not class indices (NaN, 1e10, 2.5, -3e9, C) make their row's loss NaN on the
 * GPU as on the CPU (docs/operators.md); valid ones give the CPU spec's number. */
KT_TEST(unit, labels_that_are_no_class_index_give_nan) {
    KT_NEED_GPU(ctx);
    const char *text = "logits: f32[5, 7]\nlabels: i32[5]\nloss = cross_entropy(logits, labels)\n";
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        /* the language has no i32 until "params" lands: build the same graph by hand */
        g = kf_graph_create();
        kf_shape ls = kf_shape_2d(5, 7), bs = kf_shape_1d(5);
        kf_node in[2] = {kf_graph_input(g, "logits", &ls, KF_DTYPE_F32),
                         kf_graph_input(g, "labels", &bs, KF_DTYPE_I32)};
        kf_graph_output(g, "loss", kf_graph_op(g, "cross_entropy", in, 2, NULL));
    }
    KT_CHECK(kf_graph_status(g) == KF_OK, "graph: %s", kf_graph_error(g));
    kf_plan *plan = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &plan));
    kf_shape ls = kf_shape_2d(5, 7), bs = kf_shape_1d(5), one = {0, {0}};
    kf_tensor *logits = NULL, *labels = NULL, *loss = NULL;
    kf_tensor_create(&ls, &logits);
    kf_tensor_create(&bs, &labels);
    kf_tensor_create(&one, &loss);
    KT_CHECK(logits && labels && loss, "tensors");
    kf_tensor_fill_random(logits, kt_rand_u64(), -2.0f, 2.0f);
    const float bad[] = {NAN, 1e10f, 2.5f, -3e9f, 7.0f, -1.0f, INFINITY};
    bool ok = true;
    for (size_t b = 0; ok && b <= sizeof bad / sizeof bad[0]; b++) {
        for (uint32_t r = 0; r < 5; r++) {
            labels->data[r] = (float)((r * 3) % 7);
        }
        if (b < sizeof bad / sizeof bad[0]) {
            labels->data[kt_rand_u64() % 5] = bad[b];
        }
        loss->data[0] = 12345.0f;
        ok = kf_plan_set_input(plan, "logits", logits) == KF_OK &&
             kf_plan_set_input(plan, "labels", labels) == KF_OK && kf_plan_run(plan) == KF_OK &&
             kf_plan_get_output(plan, "loss", loss) == KF_OK;
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "run %zu: %s", b, kf_context_last_error(ctx));
            break;
        }
        if (b < sizeof bad / sizeof bad[0]) {
            ok = isnan(loss->data[0]);
            if (!ok) {
                kt_fail(__FILE__, __LINE__, "label %g: loss %g, want NaN", (double)bad[b],
                        (double)loss->data[0]);
            }
        } else {
            kf_plan_report rep;
            const char *names[2] = {"logits", "labels"};
            const kf_tensor *vals[2] = {logits, labels};
            ok = isfinite(loss->data[0]) &&
                 kf_plan_check(plan, names, vals, 2, kt_rand_u64(), &rep) == KF_OK && rep.passed;
            if (!ok) {
                kt_fail(__FILE__, __LINE__, "valid labels: loss %g, check failed",
                        (double)loss->data[0]);
            }
        }
    }
    kf_tensor_destroy(logits);
    kf_tensor_destroy(labels);
    kf_tensor_destroy(loss);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

/* ---- kfuse run --save ------------------------------------------------------------------------ */

KT_TEST(unit, cli_save_is_all_or_nothing) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char dir[64], path[256], args[8192], out[8192], names[1024];
    KT_CHECK(scratch_make(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    const char *prog = "-e 'x: f32[3, 5]; y = relu(x); z = neg(x)' --repeat 1";
    /* a first save writes both */
    snprintf(args, sizeof args, "run %s --seed 1 --save %s", prog, dir);
    int rc = cli(args, out, sizeof out);
    int entries = dir_entries(dir, names, sizeof names);
    KT_CHECK(rc == 0 && entries == 2 && strstr(names, "y.npy ") && strstr(names, "z.npy "),
             "first save: exit %d, folder: %s\n%s", rc, names, out);
    /* earlier files of the same names, and a directory in the way of the second output */
    snprintf(path, sizeof path, "%s/y.npy", dir);
    write_vector(path, 4, 5.0f);
    snprintf(path, sizeof path, "%s/z.npy", dir);
    remove(path);
    mkdir(path, 0777);
    snprintf(args, sizeof args, "run %s --seed 2 --save %s", prog, dir);
    rc = cli(args, out, sizeof out);
    entries = dir_entries(dir, names, sizeof names);
    snprintf(path, sizeof path, "%s/y.npy", dir);
    kf_tensor *t = NULL;
    kf_status st = kf_npy_read(path, &t, NULL, 0);
    bool kept = st == KF_OK && kf_tensor_size(t) == 4 && t->data[3] == 8.0f;
    kf_tensor_destroy(t);
    bool named = strstr(out, "z.npy") && strstr(out, "Is a directory");
    /* a path longer than the system allows: its reason, never a silently shortened name */
    char *long_dir = malloc(4200);
    KT_CHECK(long_dir, "malloc");
    size_t n = (size_t)snprintf(long_dir, 4200, "%s", dir);
    while (n < 4090) {
        n += (size_t)snprintf(long_dir + n, 4200 - n, "/.");
    }
    snprintf(args, sizeof args, "run %s --save %s", prog, long_dir);
    free(long_dir);
    char out2[16384];
    int rc2 = cli(args, out2, sizeof out2);
    int entries2 = dir_entries(dir, names, sizeof names);
    scratch_clean(dir);
    KT_CHECK(rc == 1 && named, "a directory in the way: exit %d: %s", rc, out);
    KT_CHECK(kept, "the earlier y.npy was replaced although the save failed");
    KT_CHECK(entries == 2, "the failed save left files: %s", names);
    KT_CHECK(rc2 == 1 && strstr(out2, "File name too long") && strstr(out2, "y.npy"),
             "a path too long: exit %d: %.300s", rc2, out2);
    KT_CHECK(entries2 == 2, "the long path left files: %s", names);
}
