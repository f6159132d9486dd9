/*
 * kir.h — Kiln's kernel IR: the backend-neutral form every kernel takes
 * before the LLVM or CUDA backend lowers it.
 *
 * A kernel is a linear list of micro-ops (uops) in SSA form: each uop's
 * result is referred to by its index in the list. Loops are RANGE ... END
 * pairs that nest like brackets; every value is defined before it is used
 * and a value defined inside a loop is used only inside that loop.
 * Accumulators (ACC) are the only mutable values: defined before their loop,
 * updated with ACC_SET inside it, read after it (a use of an ACC index reads
 * its current value). A LOCAL is a small array private to the thread running
 * the kernel (a stack array on the CPU, a local array in CUDA): LOAD and
 * STORE take it in place of a PARAM. Its contents are undefined each time
 * its definition is reached, so a kernel writes an element before reading
 * it (kir_local).
 *
 * Types are kir_type values: the element types (KIR_BOOL .. KIR_F64, equal
 * to their kiln_dtype), KIR_INDEX (int64 index arithmetic), KIR_PTR (a
 * buffer parameter or a LOCAL) and KIR_VOID (no value); kir_types[] has
 * their traits. Values of BOOL type are 1-bit truths in registers and 1
 * byte (0/1) in memory. ALU uops never take F16 or BF16 operands: lowering
 * casts them to F32 (CAST to and from F16/BF16 rounds to nearest even).
 *
 * Calling convention of a compiled kernel:
 *   void kernel(void *const *bufs, int64_t start, int64_t end);
 * bufs[i] is the base pointer of PARAM i. The first RANGE uop flagged
 * `parallel` iterates [start, end) instead of [0, extent), so a runtime can
 * split it across threads; a kernel without one ignores start/end.
 */
#ifndef KILN_KIR_H
#define KILN_KIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/types.h"

/* ---------------------------------------------------------------- types */

/** The type of a uop's result, or of a buffer's elements. The element
 *  types have their kiln_dtype's value (kir_type_of converts), so a node's
 *  dtype becomes a uop type without a table. KIR_INDEX, KIR_PTR and
 *  KIR_VOID keep the values 100..102 they had when they were kiln_dtype
 *  values out of range: a kernel's uop bytes, the kernel caches' key (on
 *  disk too), are what they were. Values 10..99 are not types. */
typedef enum kir_type {
  KIR_BOOL = 0,
  KIR_U8 = 1,
  KIR_I8 = 2,
  KIR_I16 = 3,
  KIR_I32 = 4,
  KIR_I64 = 5,
  KIR_F16 = 6,  /* memory only: arithmetic runs in F32 */
  KIR_BF16 = 7, /* memory only: arithmetic runs in F32 */
  KIR_F32 = 8,
  KIR_F64 = 9,
  KIR_INDEX = 100, /* int64 index arithmetic */
  KIR_PTR = 101,   /* a buffer: PARAM or LOCAL */
  KIR_VOID = 102,  /* no value: END, ACC_SET, STORE */
  KIR_TYPE_COUNT = 103
} kir_type;

_Static_assert(KIR_BOOL == (int)KILN_BOOL && KIR_U8 == (int)KILN_U8 && KIR_I8 == (int)KILN_I8 &&
                   KIR_I16 == (int)KILN_I16 && KIR_I32 == (int)KILN_I32 && KIR_I64 == (int)KILN_I64 &&
                   KIR_F16 == (int)KILN_F16 && KIR_BF16 == (int)KILN_BF16 && KIR_F32 == (int)KILN_F32 &&
                   KIR_F64 == (int)KILN_F64 && KILN_DTYPE_COUNT == 10,
               "kir_type's element types are kiln_dtype's, value for value");
_Static_assert(sizeof(kir_type) == sizeof(kiln_dtype), "a uop's type field keeps its size (the cache key's bytes)");

typedef enum kir_category {
  KIR_CAT_NONE = 0, /* PTR, VOID, and values that are not types */
  KIR_CAT_BOOL,
  KIR_CAT_INT, /* integers and INDEX */
  KIR_CAT_FLOAT
} kir_category;

/** Traits of a kir_type, indexed by it (name NULL: not a type). */
typedef struct kir_type_traits {
  const char *name;      /* "f32", "index", "ptr", "void": the canonical text */
  int size;              /* bytes of an element in memory (BOOL: 1; INDEX,
                            PTR: 8; VOID: 0) */
  int bits;              /* value bits: BOOL 1, U8 8, ... INDEX 64 */
  kir_category category;
  bool is_signed;        /* signed integer, INDEX or float */
  bool is_half;          /* F16, BF16: loaded and stored, never computed */
} kir_type_traits;

extern const kir_type_traits kir_types[KIR_TYPE_COUNT];

static inline bool kir_type_valid(kir_type t) { return (unsigned)t < KIR_TYPE_COUNT && kir_types[t].name; }
/** An element type (a kiln_dtype's): what a buffer holds. */
static inline bool kir_is_elem(kir_type t) { return (unsigned)t <= KIR_F64; }
static inline bool kir_is_float(kir_type t) { return kir_type_valid(t) && kir_types[t].category == KIR_CAT_FLOAT; }
/** Integers and INDEX (not BOOL). */
static inline bool kir_is_int(kir_type t) { return kir_type_valid(t) && kir_types[t].category == KIR_CAT_INT; }
static inline bool kir_is_half(kir_type t) { return t == KIR_F16 || t == KIR_BF16; }
/** The type arithmetic on t runs in: F16 and BF16 compute in F32. */
static inline kir_type kir_compute_type(kir_type t) { return kir_is_half(t) ? KIR_F32 : t; }
/** The uop type of a graph dtype: lowering's one conversion. */
static inline kir_type kir_type_of(kiln_dtype d) { return (kir_type)d; }

#define KIR_MAX_PARAMS 32

typedef enum kir_op {
  /* definitions */
  KIR_PARAM,   /* arg = param index; type KIR_PTR; elem = element type */
  KIR_LOCAL,   /* per-thread array of ival elements of type elem; type
                  KIR_PTR (kir_local) */
  KIR_CONST,   /* cval (floats/bool) or ival (ints, KIR_INDEX) of `type` */
  KIR_RANGE,   /* loop var 0..ival-1 (type KIR_INDEX); `parallel` flag */
  KIR_END,     /* closes src[0] (a RANGE) */
  KIR_ACC,     /* mutable accumulator of `type`, initial value src[0] */
  KIR_ACC_SET, /* src[0] = ACC, src[1] = new value */
  /* memory */
  KIR_LOAD,    /* src[0] = PARAM or LOCAL, src[1] = element index (KIR_INDEX) */
  KIR_STORE,   /* src[0] = PARAM or LOCAL, src[1] = index, src[2] = value */
  /* conversion */
  KIR_CAST,    /* src[0] converted to `type` (C semantics: float→int
                  truncates, →BOOL is != 0, BOOL→x is 0/1) */
  /* ALU: operands and result of `type` unless noted */
  KIR_NEG, KIR_ADD, KIR_SUB, KIR_MUL,
  KIR_DIV,     /* floats: IEEE; ints: truncating (divisor 0 gives 0) */
  KIR_MOD,     /* floats: C fmod; ints: truncating remainder (÷0 gives 0) */
  KIR_MAX, KIR_MIN, /* floats: NaN propagates */
  KIR_CMPLT, KIR_CMPLE, KIR_CMPEQ, KIR_CMPNE, /* result BOOL; operands of
                                                 the type of src[0] */
  KIR_AND, KIR_OR, KIR_XOR, /* bitwise on ints and BOOL */
  KIR_WHERE,   /* src[0] BOOL ? src[1] : src[2] */
  /* float-only math, F32 or F64 */
  KIR_SQRT, KIR_EXP, KIR_EXP2, KIR_LOG, KIR_LOG2, KIR_LOG1P, KIR_EXPM1,
  KIR_SIN, KIR_COS, KIR_TAN, KIR_TANH, KIR_ERF,
  KIR_FLOOR, KIR_CEIL, KIR_RINT /* half to even */, KIR_TRUNC,
  KIR_POW, KIR_ATAN2,
  KIR_OP_COUNT
} kir_op;

typedef struct kir_uop {
  kir_op op;
  kir_type type;    /* result type */
  kir_type elem;    /* PARAM, LOCAL: element type of the buffer */
  int src[3];       /* operand uop indices, -1 if unused */
  int64_t ival;     /* CONST (ints, KIR_INDEX), RANGE extent, PARAM index,
                       LOCAL length */
  double cval;      /* CONST (floats, BOOL) */
  bool parallel;    /* RANGE */
  bool tile;        /* RANGE: opens a transpose tile (kir_range_tile) */
  bool skew;        /* INDEX value in a tile: its row's column offset
                       (kir_tile_skew) */
  bool reassoc;     /* float ALU: may be reassociated (reduction updates,
                       so the backend can vectorise them: the order of a
                       sum then depends on the vector width, never on
                       the thread count) */
  bool nontemporal; /* STORE: a streaming store (kir_store_streaming):
                       its buffer is 64-byte aligned, and the backend may
                       bypass the caches for the stores it can prove
                       vector-aligned */
  bool fresh;       /* written PARAM: a buffer allocated for this run,
                       which no other PARAM points into
                       (kir_mark_fresh_outputs) */
} kir_uop;

typedef struct kir_kernel {
  char name[96];
  int n_params;
  kir_type param_type[KIR_MAX_PARAMS];
  bool param_written[KIR_MAX_PARAMS];
  int n_uops, cap;
  kir_uop *uops;
  bool oom; /* set when a builder call could not allocate */
} kir_kernel;

/** Builder. Each call appends a uop and returns its index (or -1 when the
 *  kernel ran out of memory; `oom` is then set and later calls are no-ops).
 *  The builder does not check anything (kir_verify does). kir_const_f and
 *  kir_const_i accept any value type (converting as a CAST would); kir_alu
 *  gives CMP ops type BOOL whatever `type` says; unused operands are -1. */
void kir_init(kir_kernel *k, const char *name);
void kir_free(kir_kernel *k);
int kir_param(kir_kernel *k, kir_type elem, bool written);
int kir_const_f(kir_kernel *k, kir_type type, double v);
int kir_const_i(kir_kernel *k, kir_type type, int64_t v);
int kir_range(kir_kernel *k, int64_t extent, bool parallel);
void kir_end(kir_kernel *k, int range);
/** Opens a tile: two nested ranges of KIR_TILE elements each, the first
 *  flagged `tile`; returns the outer one (the inner is that index + 1).
 *  Nothing but their body may sit between them and their ENDs. A read in
 *  the body whose index is base + ti + tj*s (ti, tj the tile's ranges,
 *  s a constant other than 0 and 1) walks its buffer transposed; the CPU
 *  backend loads such a read's 16 × 16 block with vector loads along ti
 *  and transposes it in registers before the loops (llvm_tile.c). Other
 *  backends run the loops as written. A nontemporal STORE in the body
 *  must have index base + ti*s + tj with base and s multiples of
 *  KIR_TILE (whole rows of a tile are vector-aligned), unless the tile
 *  is skewed (kir_tile_skew). */
#define KIR_TILE 16
int kir_range_tile(kir_kernel *k, int *inner);
/** Flags INDEX value `off`, computed in a tile's body from ti alone and
 *  in [0, KIR_TILE], as the tile's skew: row ti of the tile reads and
 *  writes columns L + off + tj (L before the tile). A read in the body
 *  whose index is base + ti + (tj + off)*s then reads, over the tile, a
 *  parallelogram inside the 2*KIR_TILE rows base + r*s, r in
 *  [0, 2*KIR_TILE), which must lie in its view; the CPU backend loads
 *  and transposes those rows as two blocks (llvm_tile.c). A nontemporal
 *  STORE in a skewed tile must have an index that is a multiple of
 *  KIR_TILE at tj = 0 (lowering picks off so: the rows' chunks are
 *  aligned in the flat output, passes/lower.c lower_skewed). The tile's
 *  enclosing ranges are a column-block range J (not parallel) and, inside
 *  it, a band range: when J steps by one, a read's rows [T, 2T) become
 *  its rows [0, T) for the same band, and the CPU backend keeps them
 *  instead of loading them again. One skew per tile; other backends
 *  compute it as written. Returns off. */
int kir_tile_skew(kir_kernel *k, int off);
int kir_acc(kir_kernel *k, kir_type type, int init);
void kir_acc_set(kir_kernel *k, int acc, int value);
/** A LOCAL: an array of n elements of type elem (not F16/BF16),
 *  private to the thread running the kernel, for a block of partial
 *  results too wide for registers (a column reduction's accumulator row,
 *  passes/lower.c). Indices 0..n-1; its contents are undefined each time
 *  this uop is reached: write before reading. At most KIR_LOCAL_MAX bytes
 *  (a CPU thread's stack, a CUDA thread's local memory). */
#define KIR_LOCAL_MAX 32768
int kir_local(kir_kernel *k, kir_type elem, int64_t n);
int kir_load(kir_kernel *k, int param, int index);
void kir_store(kir_kernel *k, int param, int index, int value);
/** A STORE flagged nontemporal, for outputs too large for the caches. The
 *  caller guarantees the buffer of `param` is 64-byte aligned (the CPU
 *  backend tells LLVM so). The CPU backend then rounds the first parallel
 *  range's chunk bounds to multiples of 64 when that range is innermost,
 *  and streams the vector stores LLVM proves aligned; the CUDA backend
 *  ignores the flag. */
void kir_store_streaming(kir_kernel *k, int param, int index, int value);
int kir_cast(kir_kernel *k, kir_type type, int a);
int kir_alu(kir_kernel *k, kir_op op, kir_type type, int a, int b, int c);
/** Marks ALU uop u as reassociable (see kir_uop.reassoc). */
void kir_set_reassoc(kir_kernel *k, int u);
/** Flags every written PARAM fresh: the caller guarantees that each is a
 *  buffer allocated for the kernel's run (no ASSIGN writes in place: the
 *  runtime allocates every output, realize.c), so no other PARAM points
 *  into it. The CPU backend then tells LLVM the buffers are disjoint
 *  (scoped no-alias metadata), sparing the vectoriser run-time overlap
 *  checks; the CUDA backend ignores the flag. */
void kir_mark_fresh_outputs(kir_kernel *k);
/** Whether k has a written PARAM and every written PARAM is fresh. */
bool kir_outputs_fresh(const kir_kernel *k);

/** Canonical text of the kernel (one line per uop). Equal text means the
 *  same machine code: it is the compile-cache key and the KILN_DEBUG=3
 *  listing. The kernel's name is not part of it (kernels that differ only
 *  in name share code). Returns a malloc'ed string (caller frees) or NULL
 *  on OOM. */
char *kir_to_string(const kir_kernel *k);
/** A growable string that printf appends to (the canonical text here, the
 *  CUDA printer's source). Start from {0}; p is malloc'ed (caller frees)
 *  unless oom, set when an append could not allocate (later appends are
 *  no-ops). */
typedef struct kir_strbuf {
  char *p;
  size_t n, cap;
  bool oom;
} kir_strbuf;
void kir_sb_printf(kir_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** True when every STORE of k to a PARAM lies inside its parallel range
 *  and no accumulator lives across it, so chunks of that range write disjoint
 *  elements and may run on different threads (CPU pool chunks, CUDA
 *  grid-stride loops). A non-in-place ASSIGN copies the old contents in a
 *  parallel loop, then writes the region in a serial loop: not splittable. */
bool kir_splittable(const kir_kernel *k);
/** True when a and b compile to the same code: the same uops (bytes) and
 *  written flags — the kernel cache's notion of equality; names aside. */
bool kir_same_code(const kir_kernel *a, const kir_kernel *b);
/** Checks the invariants in the header comment; returns NULL or a message
 *  describing the first violation ("uop 7 (add): operand types differ"),
 *  in a thread-local buffer valid until this thread's next kir_verify. */
const char *kir_verify(const kir_kernel *k);
/** What kir_verify returns when the kernel's builder, or the check itself,
 *  ran out of memory (compare the pointer: an OOM, not a bad kernel). */
extern const char kir_verify_oom[];
const char *kir_op_name(kir_op op);
/** Number of operands op takes (0..3); -1 for an invalid op. */
int kir_op_arity(kir_op op);
/** Name of a uop type: "f32", ..., "index", "ptr", "void"; "?" if invalid. */
const char *kir_type_name(kir_type t);

#endif /* KILN_KIR_H */
