/*
 * test_op_table.c — graph/ops.def's columns agree with each other: every
 * op has a name, an arity its kind allows and a result rule its kind can
 * use; the properties the kind implies (pointwise, elementwise) are set
 * exactly for those kinds; CHEAP, MOVE and DIFF are only on ops where
 * they can hold. A new op whose line contradicts its kind fails here
 * before any pass misreads it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"

static const char *name(graph_op op) { return graph_ops[op].name; }

/* Fails with the op's name, so a bad line is found at once. */
#define expect_op(op, cond)                                                                                            \
  do {                                                                                                                 \
    if (!(cond)) fail_msg("op %s (%d): %s", name(op), (int)(op), #cond);                                               \
  } while (0)

static void every_op_has_a_unique_name(void **state) {
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    expect_op(op, name(op) && name(op)[0]);
    for (int other = 0; other < op; other++) expect_op(op, strcmp(name(op), name(other)) != 0);
  }
  /* the enum and the table come from the same lines */
  assert_string_equal(name(GRAPH_OP_ADD), "ADD");
  assert_string_equal(name(GRAPH_OP_CLAMP), "CLAMP");
  assert_string_equal(name(GRAPH_OP_COUNT - 1), "RECV");
}

static bool arity_fits(graph_kind k, int arity) {
  switch (k) {
  case GRAPH_SOURCE: return arity == 0;
  case GRAPH_UNARY: case GRAPH_CAST: case GRAPH_REDUCE: case GRAPH_SCAN: return arity == 1;
  case GRAPH_BINARY: case GRAPH_ASSIGN: case GRAPH_GATHER: case GRAPH_SCATTER: return arity == 2;
  case GRAPH_TERNARY: return arity == 3;
  case GRAPH_EXTERN: return arity >= 1 && arity <= GRAPH_MAX_INPUTS;
  case GRAPH_KIND_COUNT: break; /* not a kind */
  }
  return false;
}

static void arity_matches_kind(void **state) {
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    expect_op(op, graph_ops[op].kind < GRAPH_KIND_COUNT);
    expect_op(op, graph_ops[op].arity >= 0 && graph_ops[op].arity <= GRAPH_MAX_INPUTS);
    expect_op(op, arity_fits(graph_ops[op].kind, graph_ops[op].arity));
  }
  /* clamp's bounds are attributes: one input */
  assert_int_equal(graph_ops[GRAPH_OP_CLAMP].kind, GRAPH_UNARY);
  assert_int_equal(graph_ops[GRAPH_OP_CLAMP].arity, 1);
  assert_int_equal(graph_ops[GRAPH_OP_WHERE].arity, 3);
}

/* ops/elementwise.c infers an elementwise node's dtype from its result
 * rule; the other kinds' creators set it (NODE), except arg-reductions. */
static void result_rules_fit_kind(void **state) {
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    graph_kind k = graph_ops[op].kind;
    graph_result r = graph_ops[op].result;
    if (k == GRAPH_UNARY || k == GRAPH_BINARY || k == GRAPH_TERNARY) expect_op(op, r != GRAPH_RES_NODE);
    else if (k == GRAPH_REDUCE) expect_op(op, r == GRAPH_RES_NODE || r == GRAPH_RES_LONG);
    else expect_op(op, r == GRAPH_RES_NODE);
  }
  assert_int_equal(graph_ops[GRAPH_OP_ARGMAX].result, GRAPH_RES_LONG);
}

static void kind_properties(void **state) {
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    graph_kind k = graph_ops[op].kind;
    bool pointwise = k == GRAPH_UNARY || k == GRAPH_BINARY || k == GRAPH_TERNARY || k == GRAPH_CAST;
    expect_op(op, graph_op_is_pointwise(op) == pointwise);
    expect_op(op, graph_op_is_elementwise(op) == (pointwise || k == GRAPH_GATHER));
    expect_op(op, graph_ops[op].props < (unsigned)GRAPH_PROP_DIFFERENTIABLE << 1); /* no unknown bits */
  }
  assert_true(graph_op_is_elementwise(GRAPH_OP_GATHER) && !graph_op_is_pointwise(GRAPH_OP_GATHER));
}

static void op_properties_are_possible(void **state) {
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    graph_result r = graph_ops[op].result;
    /* recomputed per reader means fused as a value per index */
    if (graph_op_is_cheap(op)) expect_op(op, graph_op_is_pointwise(op));
    /* moved elements keep one input's values: a per-index op whose dtype
     * the creator chooses */
    if (graph_op_is_movement(op)) expect_op(op, graph_op_is_elementwise(op) && r == GRAPH_RES_NODE);
    /* a derivative needs an input and a float result */
    if (graph_op_is_differentiable(op))
      expect_op(op, graph_ops[op].arity > 0 && r != GRAPH_RES_BOOL && r != GRAPH_RES_LONG);
  }
  /* fusion's rule 3: no transcendental, division, pow or rounding is cheap */
  const graph_op costly[] = {GRAPH_OP_EXP, GRAPH_OP_LOG, GRAPH_OP_TANH, GRAPH_OP_DIV,
                             GRAPH_OP_POW, GRAPH_OP_FMOD, GRAPH_OP_SQRT, GRAPH_OP_FLOOR};
  for (size_t i = 0; i < sizeof costly / sizeof *costly; i++) expect_op(costly[i], !graph_op_is_cheap(costly[i]));
  assert_true(graph_op_is_cheap(GRAPH_OP_CLAMP) && graph_op_is_cheap(GRAPH_OP_WHERE));
  assert_true(graph_op_is_cheap(GRAPH_OP_CAST));
  /* zero or undefined derivative almost everywhere */
  const graph_op flat[] = {GRAPH_OP_FLOOR, GRAPH_OP_CEIL, GRAPH_OP_ROUND, GRAPH_OP_TRUNC, GRAPH_OP_SIGN};
  for (size_t i = 0; i < sizeof flat / sizeof *flat; i++) expect_op(flat[i], !graph_op_is_differentiable(flat[i]));
  assert_true(graph_op_is_differentiable(GRAPH_OP_EXP) && graph_op_is_differentiable(GRAPH_OP_AMAX));
  assert_true(graph_op_is_movement(GRAPH_OP_CAST) && !graph_op_is_movement(GRAPH_OP_ADD));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_op_has_a_unique_name), cmocka_unit_test(arity_matches_kind),
      cmocka_unit_test(result_rules_fit_kind),      cmocka_unit_test(kind_properties),
      cmocka_unit_test(op_properties_are_possible),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
