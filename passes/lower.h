/*
 * lower.h — lowering of one graph node to one kernel-IR kernel.
 *
 * Parameter layout of the produced kernel: PARAM 0 is the node's output
 * buffer (numel elements of node->dtype, written); PARAM 1 + i is the
 * buffer of input i, or is absent when that input is inlined (a pending
 * FULL or ARANGE source is computed in the kernel instead of loaded). The
 * caller passes NULL for an inlined input's buffer pointer.
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

#endif /* KILN_LOWER_H */
