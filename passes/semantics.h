/*
 * semantics.h — kernel-IR building blocks shared by the lowering files:
 * typed constants and casts, short ALU helpers, and the per-op semantics
 * of elementwise graph ops (semantics.c).
 */
#ifndef KILN_SEMANTICS_H
#define KILN_SEMANTICS_H

#include "graph.h"
#include "kir.h"

/** Integers and KIR_INDEX (kir_is_int). */
bool pass_is_int_type(kir_type t);
/** Constant v of `type` (integers and KIR_INDEX truncate). */
int pass_cst(kir_kernel *k, kir_type type, double v);
kir_type pass_type_of(const kir_kernel *k, int v);
/** v converted to type (no uop when it already has it). */
int pass_cast_to(kir_kernel *k, kir_type type, int v);
int pass_alu2(kir_kernel *k, kir_op op, int a, int b);
int pass_alu1(kir_kernel *k, kir_op op, int a);
int pass_cmp(kir_kernel *k, kir_op op, int a, int b);
int pass_where(kir_kernel *k, int c, int a, int b);
/** A value in registers: F16/BF16 widen to F32. */
int pass_to_register(kir_kernel *k, int v);
/** Unary elementwise op (incl. CLAMP, which reads n's attributes) on x in
 *  the compute dtype; -1 for an op that is not unary. */
int pass_op_unary(kir_kernel *k, graph_op op, int x, const graph_node *n);
/** asin, acos, atan, sinh, cosh, asinh, acosh, atanh on float x
 *  (semantics_trig.c); -1 for another op. */
int pass_op_trig(kir_kernel *k, graph_op op, int x);
/** Binary elementwise op on a, b in the compute dtype; -1 if not binary. */
int pass_op_binary(kir_kernel *k, graph_op op, int a, int b);

#endif /* KILN_SEMANTICS_H */
