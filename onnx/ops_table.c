/*
 * ops_table.c — the importer's operator table: the tables of the operator
 * files (ops_math.c, ops_shape.c, ops_nn.c, ops_resize.c, ops_loss.c, ops_misc.c) searched by op_type. One
 * place answers "does Kiln run this operator?", at load time.
 */
#include <string.h>

#include "onnx_internal.h"

static const onnx_op *const tables[] = {onnx_ops_math, onnx_ops_shape, onnx_ops_nn, onnx_ops_resize, onnx_ops_loss,
                                        onnx_ops_misc};

const onnx_op *onnx_op_find(const char *op_type) {
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const onnx_op *o = tables[t]; o->name; o++)
      if (strcmp(o->name, op_type) == 0) return o;
  return NULL;
}
