/*
 * test_messages.c — error messages say what is wrong: a NULL list is "the
 * tensor list is NULL", not "needs at least one tensor" or "bad tensor
 * list"; a KILN_NUM_THREADS that is not a positive integer is reported
 * once on stderr (the one thing the library prints unasked). The
 * environment cases run this program again as a child (--child) with the
 * variable set and read its stderr through a pipe.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, fdopen, dup2 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"
#include "text_util.h"

static void null_lists(void **state) {
  (void)state;
  assert_null(kiln_cat(NULL, 2, 0));
  expect_error(KILN_ERR_ARG, "kiln_cat: the tensor list is NULL (n = 2)", NULL);
  assert_null(kiln_stack(NULL, 3, 0));
  expect_error(KILN_ERR_ARG, "kiln_stack: the tensor list is NULL (n = 3)", NULL);
  kiln_tensor *one = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  assert_null(kiln_cat(&one, 0, 0));
  expect_error(KILN_ERR_ARG, "kiln_cat: needs at least one tensor (n = 0)", NULL);
  assert_null(kiln_cat(NULL, 0, 0));
  expect_error(KILN_ERR_ARG, "kiln_cat: needs at least one tensor (n = 0)", NULL);
  assert_int_equal(kiln_graph_write_dot(NULL, 1, "unused.dot", 0), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_graph_write_dot: the tensor list is NULL (n = 1)", NULL);
  assert_int_equal(kiln_graph_write_dot(&one, -1, "unused.dot", 0), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_graph_write_dot: n = -1 is negative", NULL);
  assert_int_equal(kiln_realize_many(NULL, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_realize_many: the tensor list is NULL (n = 2)", NULL);
  assert_int_equal(kiln_realize_many(NULL, 0), KILN_OK);
  kiln_release(one);
  expect_no_error();
}

static const char *self_path;

/* Runs this program with --child and KILN_NUM_THREADS = value (NULL:
 * unset); returns its stderr in buf [n]. The child must succeed. */
static void run_child(const char *value, char *buf, size_t n) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (value) setenv("KILN_NUM_THREADS", value, 1);
    else unsetenv("KILN_NUM_THREADS");
    unsetenv("KILN_DEBUG");
    execl(self_path, self_path, "--child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t r;
  while ((r = read(fds[0], buf + got, n - 1 - got)) > 0) got += (size_t)r;
  buf[got] = 0;
  close(fds[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) != 0) fail_msg("child (KILN_NUM_THREADS=%s) exited with %d: %s", value ? value : "(unset)",
                                         WEXITSTATUS(status), buf);
}

/* The child: two forces big enough to run on the thread pool. */
static int child_main(void) {
  int64_t n = 1 << 20;
  for (int i = 0; i < 2; i++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_arange(KILN_F64, 0, (double)n, 1);
    double s = kiln_item(kiln_sum(kiln_mul_scalar(x, 2), 0, NULL, false));
    kiln_scope_end();
    if (s != (double)n * (double)(n - 1)) return 1;
  }
  return kiln_last_status() == KILN_OK ? 0 : 2;
}

static void num_threads_warning(void **state) {
  (void)state;
  char out[2048];
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  char want[160];
  const char *bad[] = {"abc", "0", "-3", "4x", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    run_child(bad[i], out, sizeof out);
    snprintf(want, sizeof want, "kiln: KILN_NUM_THREADS=%s is not a positive integer; using %ld threads\n", bad[i],
             ncpu < 1 ? 1 : ncpu);
    /* (other lines may come from the backend: cuda-emu prints its summary) */
    if (!strstr(out, want)) fail_msg("stderr for KILN_NUM_THREADS=%s: \"%s\", want \"%s\"", bad[i], out, want);
    assert_int_equal(count_text(out, "KILN_NUM_THREADS"), 1); /* once */
  }
  const char *good[] = {"1", "2", " 3 ", NULL};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    run_child(good[i], out, sizeof out);
    if (count_text(out, "KILN_NUM_THREADS"))
      fail_msg("stderr for KILN_NUM_THREADS=%s: \"%s\", want no warning", good[i] ? good[i] : "(unset)", out);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
  self_path = argv[0];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(null_lists),
      cmocka_unit_test(num_threads_warning),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
