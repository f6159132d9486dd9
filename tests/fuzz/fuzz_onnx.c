/*
 * fuzz_onnx.c — libFuzzer harness of the ONNX loader (onnx/model.c,
 * onnx/tensor.c; built when the ONNX layer is).
 *
 * Each input is the whole contents of an .onnx file, loaded from memory
 * (kiln_onnx_load_memory). The loader must never crash, leak or read out
 * of bounds (ASan+UBSan); a failure must be KILN_ERR_IO, _ARG, _SHAPE,
 * _UNSUPPORTED or _OOM with a message naming kiln_onnx_load; a model
 * that loads must answer its queries consistently: every input, output
 * and initializer has a name, every initializer is a tensor whose
 * element count is the product of its sizes, and kiln_onnx_free releases
 * everything (LeakSanitizer). Models are not run: their shapes are the
 * fuzzer's, and running is covered by the ONNX test suites.
 *
 * Seeds: tests/fuzz/corpus/onnx (small models of libonnx-testdata).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
  fprintf(stderr, "fuzz_onnx: %s (status %s, last error: %s)\n", what, kiln_status_name(kiln_last_status()),
          kiln_last_error());
  abort();
}

static void check_model(kiln_onnx_model *m) {
  int ni = kiln_onnx_num_inputs(m), no = kiln_onnx_num_outputs(m), nw = kiln_onnx_num_initializers(m);
  if (ni < 0 || no < 1 || nw < 0) fail("counts");
  for (int k = 0; k < ni; k++) {
    kiln_dtype d = KILN_F32;
    int nd = 0;
    int64_t s[KILN_MAX_DIMS];
    if (!kiln_onnx_input_name(m, k) || kiln_onnx_input_info(m, k, &d, &nd, s) != KILN_OK) fail("input query");
    if (nd < -1 || nd > KILN_MAX_DIMS) fail("input rank");
  }
  for (int k = 0; k < no; k++)
    if (!kiln_onnx_output_name(m, k)) fail("output name");
  for (int k = 0; k < nw; k++) {
    kiln_tensor *t = kiln_onnx_initializer(m, k);
    if (!t || !kiln_onnx_initializer_name(m, k)) fail("initializer");
    int64_t n = 1;
    for (int d = 0; d < kiln_dim(t); d++) n *= kiln_size(t, d);
    if (n != kiln_numel(t)) fail("initializer numel");
    kiln_release(t);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_onnx_model *m = kiln_onnx_load_memory(size ? (const void *)data : "", size);
  if (m) {
    check_model(m);
    if (kiln_last_status() != KILN_OK) fail("a loaded model left an error");
  } else {
    kiln_status s = kiln_last_status();
    if (s != KILN_ERR_IO && s != KILN_ERR_ARG && s != KILN_ERR_SHAPE && s != KILN_ERR_UNSUPPORTED &&
        s != KILN_ERR_OOM)
      fail("unexpected status");
    if (strncmp(kiln_last_error(), "kiln_onnx_load", 14) != 0) fail("message does not name kiln_onnx_load");
  }
  kiln_onnx_free(m);
  kiln_clear_error();
  return 0;
}
