#define _POSIX_C_SOURCE 200809L
/*
 * test_handles.c — a stale or foreign handle is an error at every entry
 * point, always (graph/handle.h): using a tensor after its last
 * kiln_release or after the scope that owned it ended, a second release,
 * a pointer Kiln never returned, a storage or an optimizer after it died;
 * the message says how the handle died. A dead handle's slot is never
 * handed out again, and memory stays flat.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static void use_after_release_is_an_error(void **state) {
  (void)state;
  int64_t n = 3;
  kiln_tensor *t = kiln_ones(KILN_F32, 1, &n), *u = kiln_zeros(KILN_F32, 1, &n);
  kiln_release(t);
  assert_null(kiln_add(t, u));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument a was released", NULL);
  assert_int_equal(kiln_dim(t), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "was released", NULL);
  assert_null(kiln_retain(t));
  expect_error(KILN_ERR_ARG, "kiln_retain", NULL);
  kiln_release(t); /* a second release */
  expect_error(KILN_ERR_ARG, "kiln_release", "was released", NULL);
  /* live handles are untouched */
  expect_values_tol(u, (double[]){0, 0, 0}, 3, 0);
  kiln_release(u);
  expect_no_error();
}

/* A handle released inside a scope that owns it: the scope's end does not
 * release it again, and a later use is an error. */
static void scope_owned_release(void **state) {
  (void)state;
  kiln_tensor *t;
  kiln_scope_begin();
  t = kiln_arange(KILN_F64, 0, 4, 1);
  kiln_release(t);
  kiln_scope_end();
  assert_int_equal(kiln_realize(t), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_realize", "was released", NULL);
}

/* A handle freed by the end of the scope that owned it: the message names
 * that scope (by depth), not kiln_release; one freed by kiln_release inside
 * a scope names kiln_release. */
static void scope_end_names_the_scope(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = kiln_ones(KILN_F32, 1, (int64_t[]){2});
  kiln_scope_begin();
  kiln_tensor *x = kiln_mul_scalar(a, 2), *y = kiln_add_scalar(a, 1);
  kiln_release(y);
  kiln_scope_end();
  assert_null(kiln_add(x, a));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument a was released", "kiln_scope_end", "depth 2", NULL);
  assert_null(kiln_add(a, y));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument b was released", "its last kiln_release", NULL);
  kiln_scope_end();
  assert_int_equal(kiln_dim(a), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "kiln_scope_end", "depth 1", NULL);
}

/* The issue's two crashes: a use after the scope's end exited 139, a
 * double release read freed memory. */
static void issue_examples(void **state) {
  (void)state;
  kiln_tensor *a = kiln_ones(KILN_F32, 1, (int64_t[]){4});
  kiln_scope_begin();
  kiln_tensor *x = kiln_mul_scalar(a, 2);
  kiln_scope_end();
  assert_null(kiln_add(x, a));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument a was released", "kiln_scope_end", "depth 1", NULL);
  kiln_release(a);
  expect_no_error();
  kiln_release(a);
  expect_error(KILN_ERR_ARG, "kiln_release", "argument t was released", "its last kiln_release", NULL);
}

/* Pointers Kiln never returned are rejected without being read: memory
 * of the caller's, the middle of a live handle, a handle of another kind. */
static void foreign_pointers(void **state) {
  (void)state;
  double on_stack[64] = {0};
  void *heap = calloc(1, 4096);
  kiln_tensor *t = kiln_zeros(KILN_F32, 1, (int64_t[]){3});
  kiln_storage *s = kiln_storage_of(t);
  const void *bad[] = {on_stack, heap, (const char *)t + 8, (const char *)t - 16, s, (void *)(uintptr_t)16};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(kiln_dim((const kiln_tensor *)bad[i]), -1);
    expect_error(KILN_ERR_ARG, "kiln_dim", "is not a Kiln tensor", NULL);
  }
  assert_int_equal(kiln_storage_numel((const kiln_storage *)t), -1);
  expect_error(KILN_ERR_ARG, "kiln_storage_numel", "argument s", "is not a Kiln storage", NULL);
  kiln_release((kiln_tensor *)heap); /* nothing freed */
  expect_error(KILN_ERR_ARG, "kiln_release", "is not a Kiln tensor", NULL);
  assert_int_equal(kiln_storage_numel(s), 3);
  kiln_storage_release(s);
  kiln_release(t);
  free(heap);
  expect_no_error();
}

/* A storage dies with its last reference; a later use says so. */
static void dead_storage(void **state) {
  (void)state;
  kiln_tensor *t = kiln_arange(KILN_F64, 0, 5, 1);
  kiln_storage *s = kiln_storage_of(t);
  kiln_release(t);
  assert_int_equal(kiln_storage_dtype(s), KILN_F64);
  kiln_storage_release(s);
  expect_no_error();
  assert_int_equal(kiln_storage_numel(s), -1);
  expect_error(KILN_ERR_ARG, "kiln_storage_numel", "argument s was released", "its last reference", NULL);
  assert_null(kiln_tensor_from_storage(s, 0, 1, (int64_t[]){2}, NULL));
  expect_error(KILN_ERR_ARG, "kiln_tensor_from_storage", "was released", NULL);
  kiln_storage_release(s);
  expect_error(KILN_ERR_ARG, "kiln_storage_release", "was released", NULL);
}

/* An optimizer after kiln_optimizer_free: every entry point is an error. */
static void dead_optimizer(void **state) {
  (void)state;
  kiln_tensor *w = kiln_ones(KILN_F32, 1, (int64_t[]){2});
  kiln_optimizer *opt = kiln_sgd(&w, 1, 0.1, 0, 0, false);
  assert_non_null(opt);
  kiln_optimizer_free(opt);
  expect_no_error();
  kiln_tensor *g = kiln_ones(KILN_F32, 1, (int64_t[]){2});
  assert_int_equal(kiln_optimizer_step(opt, &g), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_step", "argument opt was released", "kiln_optimizer_free", NULL);
  assert_int_equal(kiln_optimizer_set_lr(opt, 0.5), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_set_lr", "was released", NULL);
  assert_true(isnan(kiln_optimizer_lr(opt)));
  expect_error(KILN_ERR_ARG, "kiln_optimizer_lr", "was released", NULL);
  kiln_optimizer_free(opt);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_free", "was released", NULL);
  kiln_optimizer_free((kiln_optimizer *)w); /* a tensor is not an optimizer */
  expect_error(KILN_ERR_ARG, "kiln_optimizer_free", "is not a Kiln optimizer", NULL);
  expect_values_tol(w, (double[]){1, 1}, 2, 0); /* untouched */
  kiln_release(g);
  kiln_release(w);
  expect_no_error();
}

/* Resident memory in bytes (/proc/self/statm). */
static long long rss_bytes(void) {
  long long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

/* A dead handle's slot is never reused: it stays an error, with its
 * cause while its chunk is in the quarantine (thousands of later deaths)
 * and as "long ago" after that, through hundreds of thousands of deaths;
 * the slots' memory stays flat however many tensors are made and freed,
 * and the live count comes back to where it was. */
static void stale_forever_and_bounded_memory(void **state) {
  (void)state;
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){4});
  kiln_tensor *first = NULL;
  kiln_scope_begin(); /* a chunk of slots with only these (x is live) */
  for (int i = 0; i < 100; i++) {
    kiln_tensor *y = kiln_add_scalar(x, i);
    if (i == 50) first = y;
  }
  kiln_scope_end();
  long long live0 = graph_handle_live(GRAPH_HANDLE_TENSOR);
  /* within the quarantine: at most 8 tensors per chunk die here (a chunk
   * holds 15), so first's chunk is still in it */
  int window = (int)graph_handle_quarantine[GRAPH_HANDLE_TENSOR] * 8;
  for (int i = 0; i < window; i++) {
    kiln_tensor *y = kiln_add_scalar(x, i);
    assert_true(y != first);
    kiln_release(y);
  }
  assert_int_equal(kiln_dim(first), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "argument t was released", "kiln_scope_end", "depth 1", NULL);
  const int rounds = 200, per_round = 1000;
  long long rss1 = 0;
  size_t resident1 = 0, slots1 = 0;
  for (int r = 0; r < rounds; r++) {
    kiln_scope_begin();
    for (int i = 0; i < per_round; i++) assert_true(kiln_add_scalar(x, i) != first);
    kiln_scope_end();
    if (r == 49) {
      rss1 = rss_bytes();
      resident1 = graph_handle_resident(GRAPH_HANDLE_TENSOR);
      slots1 = graph_handle_bytes(GRAPH_HANDLE_TENSOR);
    }
  }
  long long rss2 = rss_bytes();
  size_t resident2 = graph_handle_resident(GRAPH_HANDLE_TENSOR);
  size_t slots2 = graph_handle_bytes(GRAPH_HANDLE_TENSOR);
  print_message("after 50,000 tensors made and freed: tensor slots resident %.1f MiB, RSS %.1f MiB; after %d: "
                "%.1f MiB, %.1f MiB (%.1f MiB of address space used)\n",
                (double)resident1 / (1 << 20), (double)rss1 / (1 << 20), rounds * per_round,
                (double)resident2 / (1 << 20), (double)rss2 / (1 << 20), (double)slots2 / (1 << 20));
  /* 150,000 more tensors took fresh slots, none a dead one's ... */
  assert_true(slots2 - slots1 >= (size_t)150000 * 512);
  /* ... and the memory of dead ones went back: the quarantine and a batch */
  assert_true(resident2 < resident1 + (1u << 20));
  assert_true(resident2 < (4u << 20));
#if !SANITIZED
  /* (ASan's own quarantine of freed blocks grows RSS, and TSan's shadow of
   * every fresh slot does) */
  assert_true(rss2 - rss1 < 4ll << 20);
#endif
  assert_int_equal(kiln_dim(first), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "argument t was released (long ago", NULL);
  kiln_release(first);
  expect_error(KILN_ERR_ARG, "kiln_release", "was released", NULL);
  assert_int_equal(graph_handle_live(GRAPH_HANDLE_TENSOR), live0);
  kiln_release(x);
  expect_no_error();
}

/* The slots themselves, on a region capped at 16 MiB (4,096 chunks of 31
 * slots): a slot not yet handed out is foreign; a freed one keeps its
 * death code through the quarantine, then reads as dead, how unknown;
 * and when every chunk was handed out once, returned chunks are taken
 * again, with live objects untouched and memory bounded. */
static void slots_wrap_when_the_region_is_used_up(void **state) {
  (void)state;
  const graph_handle_kind k = GRAPH_HANDLE_TEST;
  assert_true(graph_handle_limit(k, (size_t)16 << 20));
  enum { SIZE = 100, KEPT = 40 };
  long long *kept[KEPT];
  for (int i = 0; i < KEPT; i++) {
    kept[i] = graph_handle_alloc(k, SIZE);
    assert_non_null(kept[i]);
    kept[i][0] = i;
  }
  assert_false(graph_handle_limit(k, (size_t)32 << 20)); /* too late */
  /* the next slot of this thread's chunk (128-byte slots) */
  assert_int_equal(graph_handle_state_of(k, (char *)kept[KEPT - 1] + 128, NULL), GRAPH_HANDLE_FOREIGN);
  long long *old = graph_handle_alloc(k, SIZE);
  graph_handle_free(k, old, 7);
  int death = 0;
  assert_int_equal(graph_handle_state_of(k, old, &death), GRAPH_HANDLE_DEAD);
  assert_int_equal(death, 7);
  /* 3 times the region's slots, made and freed: it wraps twice */
  const long long total = 3ll * 4096 * 31;
  long long *early = NULL, *last = NULL;
  for (long long i = 0; i < total; i++) {
    long long *p = graph_handle_alloc(k, SIZE);
    assert_non_null(p);
    assert_int_equal(p[0], 0); /* zeroed, also when reused */
    p[0] = -1;
    graph_handle_free(k, p, (int)(i % 1000));
    last = p;
    if (i == 1000) early = p;
    if (i == 100000) { /* 3,000 chunks died after early's: its memory went back */
      assert_int_equal(graph_handle_state_of(k, early, &death), GRAPH_HANDLE_DEAD);
      assert_int_equal(death, GRAPH_HANDLE_DEATH_UNKNOWN);
      assert_true(graph_handle_resident(k) <= (size_t)(16 + 64 + 4) * 4096);
    }
  }
  assert_int_equal(graph_handle_bytes(k), (size_t)16 << 20);
  assert_true(graph_handle_resident(k) <= (size_t)(16 + 64 + 4) * 4096);
  assert_int_equal(graph_handle_state_of(k, last, &death), GRAPH_HANDLE_DEAD);
  assert_int_equal(death, (int)((total - 1) % 1000));
  for (int i = 0; i < KEPT; i++) {
    assert_int_equal(graph_handle_state_of(k, kept[i], NULL), GRAPH_HANDLE_LIVE);
    assert_int_equal(kept[i][0], i);
    graph_handle_free(k, kept[i], 0);
  }
  assert_int_equal(graph_handle_live(k), 0);
}

/* Tensors made in one thread and released in another; a thread that ends
 * gives back the rest of its chunk. */
static void *make_tensors(void *out) {
  kiln_tensor **ts = out;
  for (int i = 0; i < 100; i++) ts[i] = kiln_full(KILN_F32, 1, (int64_t[]){2}, i);
  return NULL;
}

static void across_threads(void **state) {
  (void)state;
  long long live0 = graph_handle_live(GRAPH_HANDLE_TENSOR);
  kiln_tensor *ts[100];
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, make_tensors, ts), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(graph_handle_live(GRAPH_HANDLE_TENSOR), live0 + 100);
  expect_values_tol(ts[42], (double[]){42, 42}, 2, 0);
  for (int i = 0; i < 100; i++) kiln_release(ts[i]);
  assert_int_equal(graph_handle_live(GRAPH_HANDLE_TENSOR), live0);
  assert_int_equal(kiln_numel(ts[7]), -1);
  expect_error(KILN_ERR_ARG, "kiln_numel", "was released", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(use_after_release_is_an_error),
      cmocka_unit_test(scope_owned_release),
      cmocka_unit_test(scope_end_names_the_scope),
      cmocka_unit_test(issue_examples),
      cmocka_unit_test(foreign_pointers),
      cmocka_unit_test(dead_storage),
      cmocka_unit_test(dead_optimizer),
      cmocka_unit_test(stale_forever_and_bounded_memory),
      cmocka_unit_test(slots_wrap_when_the_region_is_used_up),
      cmocka_unit_test(across_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
