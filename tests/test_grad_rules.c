/*
 * test_grad_rules.c — the gradient rule table (api/grad_rules.c) against
 * the op table (graph/ops.def): every differentiable (DIFF) op has a rule
 * and no other op has one, so an op added later without its rule fails
 * here rather than in a user's kiln_grad.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "grad_internal.h"

static void every_diff_op_has_a_rule(void **state) {
  (void)state;
  int n_diff = 0;
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    bool diff = graph_op_is_differentiable((graph_op)op), rule = grad_rule_of((graph_op)op) != NULL;
    if (diff && !rule) fail_msg("op %s is differentiable (ops.def DIFF) but has no gradient rule", graph_ops[op].name);
    if (!diff && rule) fail_msg("op %s has a gradient rule but is not marked DIFF in ops.def", graph_ops[op].name);
    n_diff += diff;
  }
  assert_true(n_diff > 30);
  assert_null(grad_rule_of(GRAPH_OP_COUNT));
  assert_null(grad_rule_of((graph_op)-1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_diff_op_has_a_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
