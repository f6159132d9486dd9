/* Control for the top layer when ONNX import is built: onnx/ sees its
 * own interface (with the protoc-c header) and every layer below it. */
#include "autograd.h"
#include "io_internal.h"
#include "kiln/onnx.h"
#include "nn_internal.h"
#include "onnx.pb-c.h"
#include "onnx_internal.h"
#include "ops.h"
#include "runtime.h"

int kiln_layering_onnx_control(void);
int kiln_layering_onnx_control(void) { return KILN_OK; }
