/*
 * kiln/dist.h — collective communication across processes (MPI), as lazy
 * graph nodes. Included by kiln/kiln.h; see docs/distributed.md.
 *
 * Model. A program runs as N processes (ranks) started by mpirun; each
 * builds the same graph on its own data. A collective records a node
 * like any op: producers fuse into the kernel that packs its send buffer,
 * consumers into the kernels that read its result, and forcing runs it
 * (one MPI call). Tensors are CPU or CUDA (CUDA goes through host memory).
 *
 * Ordering. Every rank must record the collectives of a group in the same
 * order (as in MPI). Kiln issues them in that recorded order whatever
 * order values are forced in: each collective depends on the previous one
 * of its group, so forcing one first runs the earlier ones still pending.
 * kiln_dist_finalize runs those still pending at the end.
 *
 * Agreement. Before data moves, the ranks exchange what they are about to
 * do (op, reduction, dtype, sizes, root): a disagreement fails the force on
 * every rank with KILN_ERR_SHAPE naming both sides ("ranks disagree on a
 * collective: rank 0 has ALL_REDUCE(sum) of f32 [4, 3], rank 1 has
 * ALL_REDUCE(sum) of f32 [5, 3]") — never a hang or a truncated buffer.
 *
 * Timeouts. A collective that does not complete within KILN_DIST_TIMEOUT
 * seconds (default 300) prints which collective and rank waited and ends
 * the job with MPI_Abort — the one place Kiln ends the process: MPI 4.1
 * cannot recover a communicator that lost a peer.
 *
 * Determinism. Float SUM (and MEAN) and PROD are reduced in rank order:
 * every rank gets bit-identical results, run after run, for the same rank
 * count. Reductions run in F32 for F16/BF16 and are converted back.
 *
 * Gradients: kiln_grad differentiates through all_reduce (SUM, MEAN),
 * all_gather, reduce_scatter (SUM, MEAN) and broadcast, the objective
 * being the sum of every rank's loss; their gradients are collectives too,
 * so every rank must differentiate the same graph. MAX, MIN and PROD have
 * no gradient (KILN_ERR_UNSUPPORTED).
 *
 * Threads: MPI runs with MPI_THREAD_SERIALIZED: record and force
 * collectives (of any group) from one thread at a time.
 */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#ifdef __cplusplus
extern "C" {
#endif

/** A group of ranks (an MPI communicator). Owned by Kiln: valid until
 *  kiln_dist_finalize, never freed by the caller. */
typedef struct kiln_group kiln_group;

/** How values of the ranks combine. MEAN is SUM followed by a lazy
 *  multiplication by 1/size that fuses into the result's readers; it
 *  needs a float dtype. On BOOL, SUM and MAX are "or", PROD and MIN
 *  "and". */
typedef enum kiln_reduce_op {
  KILN_REDUCE_SUM = 0,
  KILN_REDUCE_MEAN = 1,
  KILN_REDUCE_MAX = 2,
  KILN_REDUCE_MIN = 3,
  KILN_REDUCE_PROD = 4
} kiln_reduce_op;

/** Starts distributed execution and sets *world to the group of all ranks
 *  (owned by Kiln). backend: "mpi" (MPI_Init; KILN_ERR_UNSUPPORTED when
 *  MPI cannot be loaded, with the reason), "none" (a group of size 1), or
 *  "auto"/NULL (MPI when the process was started by mpirun/mpiexec and MPI
 *  loads, else "none"). A second call returns the same world. Errors:
 *  NULL world or unknown backend, or after kiln_dist_finalize
 *  (KILN_ERR_ARG). MPI is loaded at run time (libkiln_mpi.so beside
 *  libkiln; env KILN_MPI_PLUGIN names another path — a path that does not
 *  load makes "mpi" fail, for tests). */
KILN_API int kiln_dist_init(const char *backend, kiln_group **world);
/** Forces every collective still pending, frees every group and ends MPI
 *  (MPI_Finalize, when kiln_dist_init started MPI; a program that called
 *  MPI_Init itself before kiln_dist_init finalizes MPI itself). Afterwards collectives and kiln_dist_init fail with
 *  KILN_ERR_ARG. Calling it without kiln_dist_init, or twice, is KILN_OK.
 *  Returns the first error of the pending collectives, if any. */
KILN_API int kiln_dist_finalize(void);
/** This process's rank in g (0-based), or -1 (KILN_ERR_ARG) for a bad
 *  group. */
KILN_API int kiln_group_rank(const kiln_group *g);
/** The number of ranks in g, or -1 (KILN_ERR_ARG) for a bad group. */
KILN_API int kiln_group_size(const kiln_group *g);
/** MPI_Comm_split: the ranks of g passing the same color form a new group,
 *  ranked by key (ties by rank in g). Collective over g. A negative color
 *  joins no group (*out = NULL). Owned by Kiln. Errors: bad group or NULL
 *  out (KILN_ERR_ARG). */
KILN_API int kiln_group_split(kiln_group *g, int color, int key, kiln_group **out);

/** Elementwise reduction of t over the ranks of g: every rank gets the
 *  result, sizes and dtype of t (MEAN: t's float dtype). Any dtype (MEAN:
 *  floats only, else KILN_ERR_DTYPE); strided t is packed. Lazy; new
 *  reference. Errors (NULL, nothing recorded): bad group or op
 *  (KILN_ERR_ARG). A size mismatch across ranks is reported when forced
 *  (KILN_ERR_SHAPE). Torch: torch.distributed.all_reduce (out of place). */
KILN_API kiln_tensor *kiln_all_reduce(kiln_tensor *t, kiln_reduce_op op, kiln_group *g);
/** The tensors t of every rank concatenated along dim in rank order:
 *  sizes of t with sizes[dim] * size. Every rank passes the same sizes.
 *  Lazy; new reference. Errors: bad group, dim out of range (KILN_ERR_ARG).
 *  Torch: all_gather_into_tensor. */
KILN_API kiln_tensor *kiln_all_gather(kiln_tensor *t, int dim, kiln_group *g);
/** Reduces t over the ranks, then rank r keeps block r of size
 *  sizes[dim] / size along dim. sizes[dim] must be divisible by the group
 *  size (KILN_ERR_SHAPE). Lazy; new reference. Errors also: bad group, op
 *  or dim (KILN_ERR_ARG), MEAN on integers (KILN_ERR_DTYPE). Torch:
 *  reduce_scatter_tensor. */
KILN_API kiln_tensor *kiln_reduce_scatter(kiln_tensor *t, kiln_reduce_op op, int dim, kiln_group *g);
/** Root's t on every rank (same sizes and dtype on every rank). Lazy; new
 *  reference. Errors: bad group, root outside [0, size) (KILN_ERR_ARG). */
KILN_API kiln_tensor *kiln_broadcast(kiln_tensor *t, int root, kiln_group *g);
/** Sends t's elements (row-major, t's dtype) to rank dst of g with tag
 *  (≥ 0). Not lazy: forces t, then sends (returns once MPI has the data; it may wait for dst's receive).
 *  Errors: bad group, dst out of range or this rank, negative tag
 *  (KILN_ERR_ARG), a failed force. */
KILN_API int kiln_send(kiln_tensor *t, int dst, int tag, kiln_group *g);
/** Receives a tensor of dtype and sizes [ndim] sent by rank src of g with
 *  tag. Lazy, and not ordered with g's collectives (MPI matches it by
 *  source and tag when forced): receives of the same source and tag take
 *  messages in the order they are forced. A message of another byte
 *  size is KILN_ERR_SHAPE when forced. New reference. Errors: bad group,
 *  src out of range or this rank, negative tag, bad sizes or dtype. */
KILN_API kiln_tensor *kiln_recv(kiln_dtype dtype, int ndim, const int64_t *sizes, int src, int tag, kiln_group *g);
/** All-reduces every tensor of ts [n] in place (written through its view,
 *  as kiln_copy_): the tensors are packed into buckets of one dtype of
 *  up to KILN_DIST_BUCKET_BYTES (default 25 MiB), one collective per
 *  bucket, and each tensor's new value is a lazy read of its bucket's
 *  result (MEAN's 1/size fused into it) — the gradients of data-parallel
 *  training. Errors (nothing recorded): bad list, group or op, MEAN on
 *  integers. */
KILN_API int kiln_all_reduce_(kiln_tensor *const *ts, int n, kiln_reduce_op op, kiln_group *g);

#ifdef __cplusplus
}
#endif
#endif /* KILN_DIST_H */
