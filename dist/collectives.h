/*
 * collectives.h — what the collectives layer (dist/) offers the layers
 * above it: the gradient rule of a collective (autograd/grad_rules.c).
 * The public functions are in kiln/dist.h; process groups and the
 * extern ops that run collectives are the runtime's (runtime/include/
 * dist.h).
 */
#ifndef KILN_COLLECTIVES_H
#define KILN_COLLECTIVES_H

#include "ops.h"

/** The gradient of collective n (ALL_REDUCE or REDUCE_SCATTER with SUM,
 *  ALL_GATHER, BROADCAST) for its data input, given its cotangent g in
 *  n's sizes: all_reduce(g, SUM); reduce_scatter(g, SUM) along the rank
 *  dim; all_gather(g) along dim 0; on the root all_reduce(g, SUM), zeros
 *  elsewhere (the collective is recorded on every rank all the same). A
 *  collective itself: every rank must differentiate the same graph. NULL
 *  and KILN_ERR_UNSUPPORTED for MAX, MIN and PROD. */
kiln_tensor *dist_grad(const graph_node *n, kiln_tensor *g);

#endif /* KILN_COLLECTIVES_H */
