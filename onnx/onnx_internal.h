/*
 * onnx_internal.h — what the files of the ONNX importer (onnx/) share:
 * the model record, the operator table's entry, attribute readers and
 * the helpers operators use (errors naming the node, host reads of the
 * small integer tensors that shapes depend on, ONNX's axis rules).
 *
 * Values of the graph are numbered slots, resolved once at load: node
 * input k reads slot in[k] (-1: an omitted optional input), writes
 * slot out[k]. Running is one pass over the nodes in file order (ONNX
 * requires topological order; the loader checks it), each node's
 * operator recording Kiln ops on the tensors of its input slots.
 */
#ifndef KILN_ONNX_INTERNAL_H
#define KILN_ONNX_INTERNAL_H

#include <stdint.h>

#include "kiln/onnx.h"
#include "nn_internal.h"
#include "onnx.pb-c.h"

#define ONNX_OPSET_MIN 6
#define ONNX_OPSET_MAX 18

/* What an operator sees of its node while it records. */
typedef struct onnx_ctx {
  const Onnx__NodeProto *node;
  int opset; /* the model's default-domain opset version */
} onnx_ctx;

/* An operator: records node c->node on in [n_in] (NULL for an omitted
 * optional input) and stores its results in out [n_out]. Each result is a
 * tensor a Kiln op returned inside the node's scope, or one of in[]
 * (borrowed; the runner takes its own references). Returns KILN_OK or a
 * negative status with the error set. */
typedef int (*onnx_op_fn)(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out);

typedef struct onnx_op {
  const char *name; /* op_type in the default domain */
  onnx_op_fn fn;
  int8_t min_in, max_in, min_out, max_out; /* max -1: variadic */
} onnx_op;

/* A graph input or output the caller sees. */
typedef struct onnx_io {
  const char *name; /* borrowed from the proto */
  int slot;
  kiln_dtype dtype;
  bool typed; /* a tensor type with a dtype Kiln has was declared */
  int ndim;   /* -1: no shape declared */
  int64_t sizes[KILN_MAX_DIMS];
} onnx_io;

typedef struct onnx_node {
  const Onnx__NodeProto *proto;
  const onnx_op *op;
  int n_in, n_out;
  int *in, *out;  /* slots */
  int n_release;  /* slots whose last reader this node is */
  int *release;
} onnx_node;

struct kiln_onnx_model { /* in a handle slot (graph/handle.h) */
  Onnx__ModelProto *proto;
  int opset;
  int n_slots;
  int n_nodes;
  onnx_node *nodes;
  int n_inputs, n_outputs, n_inits;
  onnx_io *inputs, *outputs;
  const char **init_names;
  kiln_tensor **inits;
  int *init_slots;
};

/* ---- ops_table.c ---- */

/** The operator named op_type (default domain), or NULL. */
const onnx_op *onnx_op_find(const char *op_type);
/** The tables of the operator files, each ending in an entry with a NULL name. */
extern const onnx_op onnx_ops_math[];
extern const onnx_op onnx_ops_shape[];
extern const onnx_op onnx_ops_nn[];
extern const onnx_op onnx_ops_resize[];
extern const onnx_op onnx_ops_loss[];
extern const onnx_op onnx_ops_misc[];

/* ---- tensor.c ---- */

/** The Kiln dtype of ONNX TensorProto.DataType code; false when Kiln has
 *  none (strings, complex, unsigned wider than 8 bits). */
bool onnx_dtype(int32_t code, kiln_dtype *out);
/** A TensorProto as a new contiguous Kiln tensor (raw_data or the typed
 *  fields; external data read from dir, NULL: unsupported). NULL with
 *  the error set (fn named) on a dtype Kiln lacks or data that does not
 *  hold the dims. */
kiln_tensor *onnx_tensor_from_proto(const Onnx__TensorProto *t, const char *dir, const char *fn);

/* ---- attr.c ---- */

/** Attribute `name` of the node, or NULL. */
const Onnx__AttributeProto *onnx_attr(const onnx_ctx *c, const char *name);
int64_t onnx_attr_int(const onnx_ctx *c, const char *name, int64_t def);
double onnx_attr_float(const onnx_ctx *c, const char *name, double def);
/** String attribute copied into buf (NUL-terminated, truncated to len),
 *  or def when absent. Returns buf. */
const char *onnx_attr_string(const onnx_ctx *c, const char *name, const char *def, char *buf, size_t len);
/** Ints attribute: its count (entries stored in *vals, borrowed), -1 when absent. */
int onnx_attr_ints(const onnx_ctx *c, const char *name, const int64_t **vals);
/** Floats attribute, as onnx_attr_ints. */
int onnx_attr_floats(const onnx_ctx *c, const char *name, const float **vals);

/** Sets the error "node 'n' (Op): <message>" (fn kiln_onnx_run) and returns status. */
int onnx_fail(const onnx_ctx *c, kiln_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/** The status of a Kiln op that just returned NULL or failed (never KILN_OK). */
int onnx_status(void);
/** Reads the integer (or float, truncated) tensor t into vals [max]:
 *  its element count, or -1 with the error set (too many, or a read that
 *  failed). Forces t: shapes depend on these values. */
int onnx_read_ints(const onnx_ctx *c, kiln_tensor *t, int64_t *vals, int max, const char *what);
/** axis in [-ndim, ndim) as [0, ndim); -1 with KILN_ERR_ARG naming the node otherwise. */
int onnx_axis(const onnx_ctx *c, int64_t axis, int ndim);
/** Checks out_i = kiln result: NULL means failure (status returned). */
int onnx_set(kiln_tensor **out, kiln_tensor *t);

#endif /* KILN_ONNX_INTERNAL_H */
