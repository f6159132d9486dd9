/*
 * groups.h — process groups and the collective extern ops
 * (collectives_run.c), over the MPI plugin (dist_plugin.h) loaded at run
 * time. Private to dist/: collectives.c records the nodes, and the
 * runtime runs them through the rows collectives_run.c registers in its
 * table of extern ops (rt_extern_register).
 */
#ifndef KILN_DIST_GROUPS_H
#define KILN_DIST_GROUPS_H

#include <stddef.h>

#include "graph.h"

/* Reductions a node carries in its scalar attribute (MEAN is recorded as
 * SUM and a lazy scale by the API). */
typedef enum dist_reduce { DIST_REDUCE_SUM = 0, DIST_REDUCE_MAX = 1, DIST_REDUCE_MIN = 2, DIST_REDUCE_PROD = 3 } dist_reduce;

/** A group of ranks (the public kiln_group). Owned by collectives_run.c's group
 *  table until kiln_dist_finalize. `last` is the group's most recently
 *  recorded collective (a reference, or NULL): the next one takes it as
 *  its ordering input, and finalize forces it. */
struct kiln_group {
  int id;       /* index in the group table; a node's scalar2 */
  void *comm;   /* the plugin's communicator; NULL for backend "none" */
  int rank, size;
  graph_node *last;
};

/** Loads MPI ("mpi") or not ("none"; "auto"/NULL: MPI when started by
 *  mpirun/mpiexec and the plugin loads) and makes the world group.
 *  KILN_ERR_UNSUPPORTED when "mpi" cannot be loaded (the reason in err),
 *  KILN_ERR_ARG for an unknown backend or after dist_finalize. A second
 *  call returns the same world. */
int dist_init(const char *backend, struct kiln_group **world, char *err, size_t errlen);
/** Frees the groups and finalizes MPI; collectives are refused after it
 *  (the caller forced the pending ones). */
int dist_finalize(char *err, size_t errlen);
/** True between a successful dist_init and dist_finalize. */
bool dist_active(void);
/** The live group with id `id` (a node's scalar2), or NULL. */
struct kiln_group *dist_group_by_id(int id);
/** True when dist_finalize ran. */
bool dist_finalized(void);
/** g is a live group of this process. */
bool dist_group_valid(const struct kiln_group *g);
/** Groups made so far (ids 0 .. count-1; dist_group_by_id), for
 *  finalize. */
int dist_group_count(void);
/** MPI_Comm_split of g: *out a new group, or NULL when color < 0. */
int dist_split(struct kiln_group *g, int color, int key, struct kiln_group **out, char *err, size_t errlen);

/** The extern host function of ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER,
 *  BROADCAST, SEND and RECV, which dist_init registers with the
 *  runtime (rt_extern_register, runtime.h): in[0] the packed input
 *  (contiguous from its view's offset), out the result buffer. Checks
 *  first that every rank issues the same collective (op, dtype, sizes,
 *  root): a disagreement is KILN_ERR_SHAPE on every rank naming both. */
int dist_run(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** KILN_DIST_TIMEOUT (seconds, default 300). */
double dist_timeout(void);

#endif /* KILN_DIST_GROUPS_H */
