/*
 * graph.h — Kiln's graph layer: dtype traits, views, storages, version
 * nodes and tensor handles. Internal; nothing here knows a backend exists.
 *
 * Model (docs/internals.md, "Versions and in-place writes"): a storage's
 * contents are a *version*, a graph_node that produces the whole flat
 * storage (numel elements, contiguous). A node is either realized
 * (node->buffer set) or pending (an op over inputs). Each input is (node,
 * view) captured when the op was recorded, so later writes never change
 * an already recorded op. Tensors hold a storage and a view.
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fault.h"
#include "handle.h"
#include "kiln/types.h"

/* ----------------------------------------------------------- settings */

/** Not read yet (the initial value of a graph_env_once slot). */
#define GRAPH_ENV_UNREAD INT64_MIN
/** A setting read once: *slot caches read()'s value (the environment
 *  parsed); store GRAPH_ENV_UNREAD to read it again. Atomic: the first
 *  forces of several threads may read a setting at the same time, and
 *  each computes the same value from the same environment. */
static inline int64_t graph_env_once(atomic_int_fast64_t *slot, int64_t (*read)(void)) {
  int64_t v = atomic_load_explicit(slot, memory_order_relaxed);
  if (v == GRAPH_ENV_UNREAD) {
    v = read();
    atomic_store_explicit(slot, v, memory_order_relaxed);
  }
  return v;
}

/** The integer value of env `name` (decimal, surrounding blanks allowed),
 *  or `fallback` when it is unset; a value that is not an integer ≥ min
 *  gives `fallback` too, with one line on stderr ("kiln: NAME=abc is not a
 *  non-negative integer; using 10000 <unit>"). graph/env.c. */
int64_t graph_env_int(const char *name, int64_t min, int64_t fallback, const char *unit);
/** The parse graph_env_int makes: a decimal integer ≥ min, surrounding
 *  blanks allowed, into *out; false for anything else. */
bool graph_env_parse_int(const char *s, int64_t min, int64_t *out);

/** Writes n bytes of data to fd, retrying short writes and EINTR; false
 *  on any other failure (errno tells). graph/file.c. */
bool graph_write_all(int fd, const void *data, size_t n);

/** Name of a status code, e.g. "KILN_ERR_SHAPE" (static string): what
 *  kiln_status_name returns, for layers below the API. */
const char *graph_status_name(kiln_status s);

/* ----------------------------------------------------- reference counts */

/** Takes a reference (an object's count is atomic: realized data may be
 *  shared between threads). */
static inline void graph_ref(atomic_int *rc) { atomic_fetch_add_explicit(rc, 1, memory_order_relaxed); }
/** Drops a reference; true when it was the last (free the object). The
 *  last reference needs no atomic read-modify-write: no other thread can
 *  take one from an object it holds no reference to. (The history queue
 *  does, for orphan nodes: graph_node_release drops theirs its own way.) */
static inline bool graph_unref(atomic_int *rc) {
  if (atomic_load_explicit(rc, memory_order_acquire) == 1) return true;
  return atomic_fetch_sub_explicit(rc, 1, memory_order_acq_rel) == 1;
}

/* ------------------------------------------------------------- dtypes */

typedef enum graph_category { GRAPH_CAT_BOOL = 0, GRAPH_CAT_INT = 1, GRAPH_CAT_FLOAT = 2 } graph_category;

typedef struct graph_dtype_traits {
  const char *name;       /* "f32" */
  const char *torch_name; /* "Float": printed as kiln.FloatTensor */
  int size;               /* bytes */
  graph_category category;
  bool is_signed;         /* signed integer or float */
  int bits;               /* value bits: 1 for bool, 8..64 */
} graph_dtype_traits;

extern const graph_dtype_traits graph_dtypes[KILN_DTYPE_COUNT];

static inline bool graph_dtype_valid(kiln_dtype d) { return (unsigned)d < KILN_DTYPE_COUNT; }
static inline bool graph_is_float(kiln_dtype d) { return graph_dtypes[d].category == GRAPH_CAT_FLOAT; }
static inline bool graph_is_int(kiln_dtype d) { return graph_dtypes[d].category == GRAPH_CAT_INT; }

/** Torch's promote_types for two dtypes. */
kiln_dtype graph_promote(kiln_dtype a, kiln_dtype b);
/** The dtype arithmetic runs in: F16 and BF16 compute in F32. */
kiln_dtype graph_compute_dtype(kiln_dtype d);
/** Process-wide default float dtype (F32 unless changed). */
kiln_dtype graph_default_float(void);
/** The range [*min, *max] of integer dtype t (BOOL: [0, 1]). */
void graph_int_range(kiln_dtype t, int64_t *min, int64_t *max);
void graph_set_default_float(kiln_dtype d);

/** Element at p as a double (exact for all but I64 beyond 2^53). */
double graph_load_scalar(kiln_dtype d, const void *p);
/** Stores v at p converted as a cast does: float→int truncates toward zero
 *  (out of range: wraps modulo 2^bits via int64), →BOOL is v != 0, floats
 *  round to nearest even. */
void graph_store_scalar(kiln_dtype d, void *p, double v);
/** A key whose unsigned order is Torch's sort order of the element at p:
 *  integers and BOOL by value (I64 exact), floats by value with -0.0 equal
 *  to 0.0 and every NaN equal to each other and above +inf. Equal keys are
 *  exactly the elements sort, mode and unique treat as ties. */
uint64_t graph_order_key(kiln_dtype d, const void *p);
uint16_t graph_f32_to_f16(float f);
float graph_f16_to_f32(uint16_t h);
uint16_t graph_f32_to_bf16(float f);
float graph_bf16_to_f32(uint16_t h);

/* --------------------------------------------------------------- views */

/** A strided window of a flat storage: element (i0..in-1) lives at
 *  offset + sum(ik * strides[k]). Sizes, strides and offset in elements. */
typedef struct graph_view {
  int ndim;
  int64_t offset;
  int64_t sizes[KILN_MAX_DIMS];
  int64_t strides[KILN_MAX_DIMS];
} graph_view;

int64_t graph_view_numel(const graph_view *v);
/** Contiguous view of sizes [ndim] at offset 0. */
graph_view graph_view_contiguous(int ndim, const int64_t *sizes);
bool graph_view_is_contiguous(const graph_view *v);
/** No two indices of v reach the same storage element (strides >= 0). */
bool graph_view_injective(const graph_view *v);
/** Largest element index + 1 the view touches (0 when empty). */
int64_t graph_view_extent(const graph_view *v);
/** Row-major contiguous strides for sizes [ndim] into strides. */
void graph_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides);
/** v broadcast to sizes [ndim] (NumPy rules, aligned at the last dim):
 *  new and size-1 dims get stride 0. False when v does not broadcast. */
bool graph_view_broadcast(const graph_view *v, int ndim, const int64_t *sizes, graph_view *out);
/** Torch's view rule: strides for new sizes over the same memory, or false
 *  when the old strides cannot express them. */
bool graph_view_reshape(const graph_view *v, int ndim, const int64_t *sizes, graph_view *out);

/** A view of a reshape copy's buffer read from the copy's input instead
 *  (view_split.c): outer dim d (of ndim) is the sub-dims [first[d],
 *  first[d+1]) of sizes/strides (row-major among themselves, strides in
 *  the input's elements); offset is the element of outer index 0, the
 *  input view's offset included. */
typedef struct graph_split_view {
  int ndim, nsub;
  int first[KILN_MAX_DIMS + 1];
  int64_t offset;
  int64_t sizes[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
} graph_split_view;

/** Splits `outer`, a view of the contiguous copy of `src` (any sizes of
 *  the same element count, as kiln_reshape copies), over src's dims into
 *  *out. False (out unspecified) when some outer dim does not step
 *  through a run of whole src dims. */
bool graph_view_split(const graph_view *outer, const graph_view *src, graph_split_view *out);
/** Element offset (from s->offset) of index i along outer dim d of s. */
int64_t graph_split_offset(const graph_split_view *s, int d, int64_t i);

/* --------------------------------------------------------------- nodes */

typedef enum graph_op {
#define X(name, arity, kind, result, props) GRAPH_OP_##name,
#include "ops.def"
#undef X
  GRAPH_OP_COUNT
} graph_op;

typedef enum graph_kind {
  GRAPH_SOURCE, GRAPH_UNARY, GRAPH_BINARY, GRAPH_TERNARY, GRAPH_CAST, GRAPH_REDUCE, GRAPH_ASSIGN,
  GRAPH_EXTERN, GRAPH_SCAN, GRAPH_GATHER, GRAPH_SCATTER, GRAPH_KIND_COUNT
} graph_kind;

typedef enum graph_result { GRAPH_RES_SAME, GRAPH_RES_FLOAT, GRAPH_RES_BOOL, GRAPH_RES_LONG, GRAPH_RES_NODE } graph_result;

/* Properties of an op (graph/ops.def's props column, plus what its kind
 * implies); a pass asks for the one it needs through the predicates
 * below. */
enum {
  /* one output element per index of the node's sizes, computed from the
   * inputs read at that index: UNARY, BINARY, TERNARY, CAST (from the kind) */
  GRAPH_PROP_POINTWISE = 1 << 0,
  /* pointwise, or GATHER: also one output element per index, but one
   * input (the source) is read at a data-dependent position (from the kind) */
  GRAPH_PROP_ELEMENTWISE = 1 << 1,
  GRAPH_PROP_CHEAP = 1 << 2,          /* ops.def CHEAP: cheap to recompute per reader */
  GRAPH_PROP_MOVEMENT = 1 << 3,       /* ops.def MOVE: elements moved, never combined */
  GRAPH_PROP_DIFFERENTIABLE = 1 << 4, /* ops.def DIFF: a derivative in its float inputs */
};

typedef struct graph_op_info {
  const char *name; /* "ADD" */
  int arity;
  graph_kind kind;
  graph_result result;
  unsigned props; /* GRAPH_PROP_* */
} graph_op_info;

extern const graph_op_info graph_ops[GRAPH_OP_COUNT];

static inline bool graph_op_has(graph_op op, unsigned prop) { return (graph_ops[op].props & prop) != 0; }
/** Computed at each index of its sizes from its inputs at that index
 *  (views may broadcast): loops over all its inputs merge and fuse alike. */
static inline bool graph_op_is_pointwise(graph_op op) { return graph_op_has(op, GRAPH_PROP_POINTWISE); }
/** Pointwise or a gather: fuses into its readers as one value per index. */
static inline bool graph_op_is_elementwise(graph_op op) { return graph_op_has(op, GRAPH_PROP_ELEMENTWISE); }
/** Cheap enough that each reader of a fused value recomputes it. */
static inline bool graph_op_is_cheap(graph_op op) { return graph_op_has(op, GRAPH_PROP_CHEAP); }
static inline bool graph_op_is_movement(graph_op op) { return graph_op_has(op, GRAPH_PROP_MOVEMENT); }
static inline bool graph_op_is_differentiable(graph_op op) { return graph_op_has(op, GRAPH_PROP_DIFFERENTIABLE); }

#define GRAPH_MAX_INPUTS 3

/* Node attributes are one byte blob (as ggml's op_params): the schedule
 * key (runtime/schedule.c) and CSE (passes/algebra.c) hash and compare
 * attr_len bytes of it, so an attribute added later can never be left
 * out of either. Read and written only through graph_attr_* below.
 * Each field has a fixed offset (setting one never moves another) and
 * reads as zero when unset; bytes from attr_len on are zero, and attr_len
 * ends at the last nonzero byte, so most nodes (no attributes, or all
 * zero) have attr_len 0, and two nodes have the same attributes exactly
 * when their attr_len and bytes are equal (-0.0 is not 0.0).
 *   [0, 8)   scalar (double): FULL's value, ARANGE's start, CLAMP's lo,
 *            GATHER's and SCATTER's dim
 *   [8, 16)  scalar2 (double): ARANGE's step, CLAMP's hi
 *   [16, 20) reduce_mask (uint32): REDUCE: bit k = input dim k reduced;
 *            SCAN: the one bit of the scanned dim
 *   [20, ..) region (ASSIGN: the view written), compact: ndim (1 byte),
 *            offset, sizes[ndim], strides[ndim] (int64) */
#define GRAPH_ATTR_SCALAR 0
#define GRAPH_ATTR_SCALAR2 8
#define GRAPH_ATTR_REDUCE_MASK 16
#define GRAPH_ATTR_REGION 20
#define GRAPH_ATTR_BYTES (GRAPH_ATTR_REGION + 1 + 8 + 16 * KILN_MAX_DIMS)

struct graph_node;

/** One recorded input: the version read and the view it was read through.
 *  For elementwise ops the view is already broadcast (stride 0) to the
 *  node's sizes. */
typedef struct graph_input {
  struct graph_node *node; /* holds a reference */
  graph_view view;
  bool no_grad; /* no gradient flows along this edge: it bypasses a DETACH
                   (passes/algebra.c), which must not change a recipe */
  bool order_only; /* an ordering edge (a collective's previous one in its
                      group, dist/collectives.c): the input is realized first, its
                      value is never read, no gradient flows along it, and
                      a realized node's recipe does not keep it */
} graph_input;

/** Where buffer memory comes from: the runtime installs its caching
 *  allocator; the default is aligned_alloc/free. `alloc` returns memory of
 *  at least `bytes` (≥ 1), 64-byte aligned, uninitialised, or NULL. */
typedef struct graph_allocator {
  void *(*alloc)(int64_t bytes);
  void (*free)(void *p, int64_t bytes);
} graph_allocator;

void graph_set_allocator(const graph_allocator *a);

/** A realized, reference-counted buffer. On KILN_CPU `data` is host
 *  memory; on KILN_CUDA it is a device address (runtime/device.h) that
 *  host code must not dereference. */
typedef struct graph_buffer {
  atomic_int refcount; /* atomic: realized data may be shared across threads */
  kiln_device device;
  void *data;
  int64_t bytes;
  void (*deleter)(void *data, void *ctx); /* from_blob: the caller's */
  void *ctx;
  void (*free_fn)(void *p, int64_t bytes); /* Kiln-allocated: how to free */
  bool borrowed; /* from_blob without deleter: never freed by Kiln */
} graph_buffer;

typedef struct graph_node {
  atomic_int refcount; /* atomic: realized data may be shared across threads */
  uint64_t id;          /* creation order, for stable printing */
  graph_op op;
  kiln_dtype dtype;     /* dtype of the produced buffer */
  kiln_dtype cdtype;    /* elementwise: dtype operands are promoted to */
  kiln_device device;   /* where its buffer lives: KILN_CUDA when any input
                           is there (graph_node_add_input), unless set */
  int64_t numel;        /* elements of the produced (flat, contiguous) buffer */
  /* Logical shape of the result: elementwise and cast nodes produce
   * contiguous [sizes]; reductions produce the keepdim shape; ASSIGN and
   * sources produce [numel] (ndim 1). */
  int ndim;
  int64_t sizes[KILN_MAX_DIMS];
  int n_inputs;
  graph_input inputs[GRAPH_MAX_INPUTS];
  uint16_t attr_len;                    /* attributes: see GRAPH_ATTR_BYTES */
  unsigned char attr[GRAPH_ATTR_BYTES]; /* zero from attr_len on */
  graph_buffer *buffer; /* set once realized; inputs are then dropped */
  struct graph_node *free_next; /* work list while releasing */
  /* The per-force plan that holds this pending node, and its position
   * there (passes/plan.h). Written only by the force whose pending set
   * holds the node; every other scheduler decision lives in the plan. */
  uint64_t plan_id;
  int32_t plan_pos;
  /* Automatic differentiation (autograd/grad.c, docs/autodiff.md). A realized
   * node keeps its inputs as its recipe: n_inputs becomes 0 (no pass sees
   * them) and n_hist holds how many of inputs[] are kept, so a gradient
   * through a forced value is the same as through a pending one. */
  int n_hist;
  bool no_grad;        /* no gradient flows through this node (DETACH, an
                          optimizer's write); realized, it keeps no recipe */
  bool hist_dropped;   /* realized and its recipe was let go (graph_node_drop_history) */
  bool overwritten;    /* was realized; a later version wrote its buffer in place
                          (buffer NULL: only its recipe is left, in that version's) */
  const char *opaque;  /* a value computed by an element callback: its
                          function's name (no gradient rule exists) */
  uint64_t deps;       /* a 64-bit Bloom filter of the storages this value was computed
                          from (graph_dep_bit): says whether a released recipe led to a wrt */
  uint64_t storage_id; /* the storage this node is (or was) a version of; 0: none */
  uint64_t version_no; /* which version of that storage (0 the first) */
  /* Orphans (graph/history.c): no tensor shows this value any more; one
   * that keeps a recipe waits in the history queue, oldest first. */
  bool orphan;
  bool retired;        /* no longer counted pending (graph_node_retire, or realized) */
  _Atomic bool hist_queued;
  int64_t hist_share;  /* pending nodes its force left in recipes, per realized node */
  int64_t hist_weight; /* what it weighs in the queue (bytes) */
  struct graph_node *hist_prev, *hist_next;
} graph_node;

/** The bit of storage `id` in a node's deps filter (0 for no storage). */
static inline uint64_t graph_dep_bit(uint64_t id) {
  return id ? 1ULL << ((id * 0x9E3779B97F4A7C15ULL) >> 58) : 0;
}

/** A pending node with no inputs yet (refcount 1). NULL on OOM, and for
 *  sizes whose buffer would not fit int64 bytes. */
graph_node *graph_node_new(graph_op op, kiln_dtype dtype, int ndim, const int64_t *sizes);
/** A new pending node computing what pending node n computes (op,
 *  dtype, sizes, attributes, its inputs' views and edge flags) from
 *  inputs[n->n_inputs] (retained) instead of n's inputs: kiln_grad's
 *  private copy of a recipe node that other threads' gradients may read
 *  too (autograd/grad.c). NULL on OOM. */
graph_node *graph_node_clone(const graph_node *n, graph_node *const *inputs);
/** A realized node over a buffer (takes the caller's buffer reference). */
graph_node *graph_node_from_buffer(graph_buffer *buf, kiln_dtype dtype, int64_t numel);
/** Appends an input (retains node; adds its storage and deps to n's
 *  deps); a KILN_CUDA input makes n KILN_CUDA. */
void graph_node_add_input(graph_node *n, graph_node *src, const graph_view *view);
graph_node *graph_node_retain(graph_node *n);
/** Drops a reference; frees the node (and, iteratively, inputs it held the
 *  last reference to) at zero. */
void graph_node_release(graph_node *n);
/* Attributes (the layout is above GRAPH_ATTR_BYTES's definition). */
static inline double graph_attr_scalar(const graph_node *n) {
  double v;
  memcpy(&v, n->attr + GRAPH_ATTR_SCALAR, sizeof v);
  return v;
}
static inline double graph_attr_scalar2(const graph_node *n) {
  double v;
  memcpy(&v, n->attr + GRAPH_ATTR_SCALAR2, sizeof v);
  return v;
}
static inline uint32_t graph_attr_reduce_mask(const graph_node *n) {
  uint32_t m;
  memcpy(&m, n->attr + GRAPH_ATTR_REDUCE_MASK, sizeof m);
  return m;
}
/** ASSIGN's region, decoded (ndim 0 when unset). */
graph_view graph_attr_region(const graph_node *n);
void graph_attr_set_region(graph_node *n, const graph_view *region);

/* The setters' common step (inline: every elementwise op records two
 * scalars, mostly 0): writes bytes at `at` and moves attr_len to the last
 * nonzero byte; bytes past the old attr_len were zero, so only the new
 * ones can extend it, and zeros written there change nothing. */
static inline void graph_attr_write(graph_node *n, int at, const void *src, int bytes) {
  static const unsigned char zero[8];
  if (at >= n->attr_len && bytes <= 8 && memcmp(src, zero, (size_t)bytes) == 0) return;
  memcpy(n->attr + at, src, (size_t)bytes);
  int len = at + bytes;
  if (len < n->attr_len) return; /* the last nonzero byte lies beyond */
  while (len > 0 && n->attr[len - 1] == 0) len--;
  n->attr_len = (uint16_t)len;
}
static inline void graph_attr_set_scalar(graph_node *n, double v) {
  graph_attr_write(n, GRAPH_ATTR_SCALAR, &v, sizeof v);
}
static inline void graph_attr_set_scalar2(graph_node *n, double v) {
  graph_attr_write(n, GRAPH_ATTR_SCALAR2, &v, sizeof v);
}
static inline void graph_attr_set_reduce_mask(graph_node *n, uint32_t mask) {
  graph_attr_write(n, GRAPH_ATTR_REDUCE_MASK, &mask, sizeof mask);
}

/** Marks n realized with buf (takes the reference). Its inputs leave the
 *  pending graph (n_inputs 0) and are kept (n_hist) until the force ends:
 *  no node of a running plan is freed under it. An in-place ASSIGN takes
 *  its old version's buffer (the old node is then `overwritten`). */
void graph_node_set_buffer(graph_node *n, graph_buffer *buf);
/** At the end of a force, for each node it realized: the kept inputs stay
 *  as n's recipe when a gradient could flow through them (n is
 *  differentiable (ops.def DIFF), a float value, not no_grad, and reads a
 *  float input);
 *  otherwise they are released. */
void graph_node_settle(graph_node *n);
/** At the end of a force, for each node of its plan left pending (computed
 *  inside a kernel, not stored): it is part of a recipe now, not work
 *  waiting to be forced, so graph_pending_count (the auto-force's measure)
 *  stops counting it. It stays pending: a later force that reads it
 *  computes it again. */
void graph_node_retire(graph_node *n);
/** Lets a realized node's recipe go (releases the kept inputs) and marks
 *  it hist_dropped when there was one: for an orphan the history budget
 *  evicts, and for a value written detached (ops/detach.c). */
void graph_node_drop_history(graph_node *n);
/** n is an orphan: no tensor shows it any more (its storage was freed, or
 *  a later write superseded this version); the caller holds a reference
 *  it releases next. Realized with a recipe, it joins the history queue
 *  (graph/history.c), whose oldest entries let their recipes go while the
 *  queue weighs more than the budget. */
void graph_node_orphan(graph_node *n);
/* ------------------------------------------ attention (attention_pattern.c) */

/** The mask kinds of an attention (graph/ops.def ATTENTION's reduce_mask). */
enum { GRAPH_ATTENTION_NONE = 0, GRAPH_ATTENTION_CAUSAL = 1, GRAPH_ATTENTION_MASK = 2 };
/** Most nodes in a hand-written attention's chain. */
#define GRAPH_ATTENTION_CHAIN 11

/** An attention written out of ordinary ops (graph_attention_match):
 *  o = softmax(q·kᵀ·scale + mask)·v. The edges point into the nodes of
 *  the chain (o's and the scores' inputs, the mask's reader's). */
typedef struct graph_attention {
  graph_node *o;      /* the last matmul */
  graph_node *scores; /* q·kᵀ, a MATMUL [batch..., L, S] */
  graph_node *chain[GRAPH_ATTENTION_CHAIN]; /* the chain's nodes from p to the scores (o not included) */
  int n_chain;
  const graph_input *q, *kt, *v; /* q [batch..., L, E], kᵀ [batch..., E, S], v [batch..., S, Ev] */
  const graph_input *mask;       /* GRAPH_ATTENTION_MASK: the keep (BOOL) or added mask, read at [batch..., L, S] */
  int kind;                      /* GRAPH_ATTENTION_* */
  double scale;
} graph_attention;

/** Whether o (a MATMUL, pending or realized with its recipe) is the last
 *  product of softmax(q·kᵀ·scale + mask)·v written out of ordinary ops,
 *  as kiln_softmax and a user record it (attention_pattern.c's comment
 *  lists the chain); fills *m. F32/F64, no casts in the chain. Reads the
 *  graph only. */
bool graph_attention_match(graph_node *o, graph_attention *m);
/** False under env KILN_ATTENTION=unfused (read at each call): attention
 *  then runs as the composition it is written as (no match, and
 *  kiln_scaled_dot_product_attention records the composition), for
 *  measurements against it. */
bool graph_attention_fused(void);

/** Called by graph_node_settle for a node that keeps its recipe: an
 *  orphan realized after it became one joins the queue then. */
void graph_history_settled(graph_node *n);
/** A walk over realized nodes' recipes (kiln_grad) holds the history
 *  from before its first read to after its last: no recipe is dropped
 *  meanwhile, whichever thread enqueues orphans (eviction waits, and
 *  the unhold evicts what was skipped). Holds nest; every hold is
 *  matched by one unhold on the same thread. */
void graph_history_hold(void);
void graph_history_unhold(void);
/** Takes n out of the history queue (its recipe went, or it is freed). */
void graph_history_forget(graph_node *n);
/** The history budget in bytes: KILN_HISTORY_BYTES (default 64 MiB; 0
 *  lets an orphan's recipe go at once), or graph_history_set_budget's. */
int64_t graph_history_budget(void);
/** Tests: sets the budget (bytes ≥ 0), or -1 for the environment's. */
void graph_history_set_budget(int64_t bytes);
/** What the queued orphans weigh now (bytes), for tests. */
int64_t graph_history_weight(void);
/** Live pending (unrealized) nodes in the process, for tests and the
 *  auto-realize threshold. */
int64_t graph_pending_count(void);
/** Live nodes (pending or realized) and live buffers in the process, for
 *  tests (what a loop that is never forced keeps: the auto-force bound). */
int64_t graph_live_nodes(void);
int64_t graph_live_buffers(void);

/** Uninitialised buffer of bytes (64-byte aligned). NULL on OOM. */
graph_buffer *graph_buffer_alloc(int64_t bytes);
graph_buffer *graph_buffer_wrap(void *data, int64_t bytes, void (*deleter)(void *, void *), void *ctx);
/** A buffer over memory `data` of `device` that the last release hands to
 *  free_fn(data, bytes). NULL on OOM (data is then not freed). */
graph_buffer *graph_buffer_own(void *data, int64_t bytes, kiln_device device, void (*free_fn)(void *, int64_t));
graph_buffer *graph_buffer_retain(graph_buffer *b);
void graph_buffer_release(graph_buffer *b);

/* ------------------------------------------------ storages and tensors */

struct kiln_storage {
  atomic_int refcount; /* atomic: realized data may be shared across threads */
  uint64_t id;         /* unique per storage: versions carry it (storage_id) */
  kiln_dtype dtype;
  kiln_device device;
  int64_t numel;
  graph_node *version; /* current contents; holds a reference */
};

struct kiln_tensor {
  atomic_int refcount; /* atomic: realized data may be shared across threads */
  atomic_int scope_refs; /* how many of those references open scopes hold
                            (api/lifetime.c; only the owning thread's) */
  kiln_storage *storage; /* holds a reference */
  graph_view view;
  /* kiln_detach: values read through this handle pass a DETACH node
   * (api_version), cached here for the storage's current version. */
  bool detached;
  graph_node *detach_read; /* holds a reference; NULL until read */
};

/* Storages and tensors live in type-stable handle slots (handle.h):
 * freed with graph_handle_free(GRAPH_HANDLE_STORAGE / _TENSOR, ...). */

/** New storage whose contents are `version` (takes the reference), on
 *  version's device. */
kiln_storage *graph_storage_new(kiln_dtype dtype, int64_t numel, graph_node *version);
/** Replaces the storage's version (takes the reference to v). */
void graph_storage_set_version(kiln_storage *s, graph_node *v);
/** New tensor handle (refcount 1) over s (retained) with view v. */
kiln_tensor *graph_tensor_new(kiln_storage *s, const graph_view *v);

#endif /* KILN_GRAPH_H */
