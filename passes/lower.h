/*
 * lower.h — lowering of one graph node to one kernel-IR kernel.
 *
 * Parameter layout of the produced kernel:
 *   PARAM 0          the node's output buffer (numel × node->dtype, written);
 *   PARAM 1 + i      input i's buffer; for an inlined FULL input, a pointer
 *                    to its one value stored in its dtype; for an inlined
 *                    ARANGE (computed in the kernel) it is unused (NULL);
 *   PARAM 1 + n_in   int64 arguments: the storage offset of each input's
 *                    view, then (ASSIGN only) the region's offset.
 * Offsets and constants are arguments, not code, so a kernel compiled once
 * serves every offset and every fill value.
 */
#ifndef KILN_LOWER_H
#define KILN_LOWER_H

#include <stdbool.h>
#include <stddef.h>

#include "graph.h"
#include "kir.h"

/** True when a pending input node is computed inside its consumer's kernel
 *  rather than realized first. */
bool pass_is_inlined(const graph_node *n);

/** Lowers node n into k (initialised by this call). For ASSIGN, `in_place`
 *  says the output buffer already holds the old version (PARAM 0 aliases
 *  input 0's buffer, which is then not a parameter): only the region is
 *  written. Returns KILN_OK, or an error with a message in err. */
int pass_lower_node(const graph_node *n, bool in_place, kir_kernel *k, char *err, size_t errlen);

/** Extent of the kernel's parallel range (the runtime passes [0, extent)
 *  or splits it), 0 when it has none. */
int64_t pass_parallel_extent(const kir_kernel *k);

/** Fills the int64 arguments (see above) of node n's kernel into args
 *  [GRAPH_MAX_INPUTS + 1]. */
void pass_kernel_args(const graph_node *n, int64_t *args);

#endif /* KILN_LOWER_H */
