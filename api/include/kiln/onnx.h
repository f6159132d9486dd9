/*
 * kiln/onnx.h — ONNX import: a model read from an .onnx file (or bytes)
 * whose graph runs as recorded Kiln ops, lazily, so it is fused, compiled,
 * profiled and differentiated like any Kiln program (docs/onnx.md).
 *
 * Present when libkiln was built with ONNX import (protobuf-c found at
 * build time: CMake prints "ONNX import on"). Builds on kiln.h.
 */
#ifndef KILN_ONNX_H
#define KILN_ONNX_H

#include <stddef.h>

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An imported ONNX model: its graph, its initializers as Kiln tensors,
 *  the names, dtypes and shapes of its inputs and outputs. Opaque. */
typedef struct kiln_onnx_model kiln_onnx_model;

/** Reads the ONNX model at path (a serialized ModelProto, IR version 3 or
 *  later, default-domain opsets 7 to 18; initializers stored in external
 *  data files are read from path's folder). Every node is checked at load:
 *  an operator Kiln does not map, a domain other than ONNX's, an input no
 *  earlier node, initializer or graph input produces (a cycle, a missing
 *  initializer) is an error naming the operator and the node. Returns a
 *  new model (release with kiln_onnx_free) or NULL with the error set:
 *  KILN_ERR_IO (unreadable or malformed file), KILN_ERR_UNSUPPORTED (an
 *  operator, opset or dtype Kiln lacks), KILN_ERR_ARG (a graph that is
 *  not well formed), KILN_ERR_SHAPE (an initializer whose data does not
 *  hold its dims). Mirrors onnx.load + an inference session. */
KILN_API kiln_onnx_model *kiln_onnx_load(const char *path);

/** kiln_onnx_load over size bytes at data (copied: data may be freed
 *  after the call). External data files, which need a folder, are
 *  KILN_ERR_UNSUPPORTED. */
KILN_API kiln_onnx_model *kiln_onnx_load_memory(const void *data, size_t size);

/** Releases the model and its references to its initializers (a tensor
 *  taken with kiln_onnx_initializer stays valid). NULL is a no-op; any
 *  later use of the model, a second free included, is KILN_ERR_ARG
 *  "argument model was released (used after kiln_onnx_free)". */
KILN_API void kiln_onnx_free(kiln_onnx_model *model);

/** Records the model's graph on inputs [n_inputs] (in the order of
 *  kiln_onnx_input_name; n_inputs must equal kiln_onnx_num_inputs) and
 *  stores its first n_outputs outputs (1 <= n_outputs <=
 *  kiln_onnx_num_outputs) as new lazy references in outputs[]. Nothing
 *  is computed except the small integer tensors that shapes depend on
 *  (Reshape's shape, Slice's starts, ...). Each input must have the
 *  declared dtype and rank and the declared size of every fixed dim;
 *  outputs are differentiable (kiln_grad) w.r.t. the inputs and the
 *  initializers. Returns KILN_OK, or a negative status with the error
 *  naming the node that failed and outputs untouched. Borrows inputs. */
KILN_API int kiln_onnx_run(kiln_onnx_model *model, kiln_tensor *const *inputs, int n_inputs, kiln_tensor **outputs,
                           int n_outputs);

/** Number of graph inputs the caller supplies (those that are not
 *  initializers); -1 and KILN_ERR_ARG for a NULL model. */
KILN_API int kiln_onnx_num_inputs(const kiln_onnx_model *model);
/** Number of graph outputs; -1 and KILN_ERR_ARG for a NULL model. */
KILN_API int kiln_onnx_num_outputs(const kiln_onnx_model *model);
/** Name of input i (borrowed, valid until kiln_onnx_free); NULL and
 *  KILN_ERR_ARG when i is out of range. */
KILN_API const char *kiln_onnx_input_name(const kiln_onnx_model *model, int i);
/** Name of output i, as kiln_onnx_input_name. */
KILN_API const char *kiln_onnx_output_name(const kiln_onnx_model *model, int i);
/** Declared dtype and shape of input i: *dtype, *ndim and sizes[0 ..
 *  ndim) (sizes holds KILN_MAX_DIMS entries; a symbolic or unknown dim is
 *  -1). *ndim is -1 when the model declares no shape. Any out-pointer
 *  may be NULL. Returns KILN_OK, KILN_ERR_ARG (i out of range). */
KILN_API int kiln_onnx_input_info(const kiln_onnx_model *model, int i, kiln_dtype *dtype, int *ndim,
                                  int64_t *sizes);
/** Declared dtype and shape of output i, as kiln_onnx_input_info. */
KILN_API int kiln_onnx_output_info(const kiln_onnx_model *model, int i, kiln_dtype *dtype, int *ndim,
                                   int64_t *sizes);

/** Number of initializers (the model's weights and constants). */
KILN_API int kiln_onnx_num_initializers(const kiln_onnx_model *model);
/** Name of initializer i (borrowed), as kiln_onnx_input_name. */
KILN_API const char *kiln_onnx_initializer_name(const kiln_onnx_model *model, int i);
/** Initializer i as a Kiln tensor: a new reference to the very tensor
 *  kiln_onnx_run reads, so kiln_grad w.r.t. it gives the weight's
 *  gradient and an in-place update (an optimizer step) changes what later
 *  runs compute. NULL and KILN_ERR_ARG when i is out of range. */
KILN_API kiln_tensor *kiln_onnx_initializer(const kiln_onnx_model *model, int i);

#ifdef __cplusplus
}
#endif

#endif /* KILN_ONNX_H */
