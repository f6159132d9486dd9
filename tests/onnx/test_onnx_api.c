/*
 * test_onnx_api.c — kiln/onnx.h on models built here with protobuf-c
 * (Y = Relu(X·W + B), W and B initializers): the queries, values against
 * a double-precision reference, gradients w.r.t. an initializer, an
 * in-place update of one seen by the next run, loading from a file,
 * external data files; and
 * the errors — an unsupported operator named with its node, a missing
 * initializer, a cycle, truncation at every length, huge dims, data that
 * does not fill its dims, wrong inputs to kiln_onnx_run.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "onnx_internal.h"
#include "test_util.h"

/* ------------------------------------------------------ model building */

enum { MAXN = 8 };

/* A model under construction; every pointer refers into the struct or to
 * static strings (protobuf-c's pack only reads). */
typedef struct mb {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__NodeProto nodes[MAXN], *node_ptrs[MAXN];
  char *node_in[MAXN][4], *node_out[MAXN][2];
  Onnx__TensorProto inits[MAXN], *init_ptrs[MAXN];
  int64_t init_dims[MAXN][4];
  Onnx__ValueInfoProto vi[2], *in_ptrs[1], *out_ptrs[1];
  Onnx__TypeProto type[2];
  Onnx__TypeProto__Tensor tt[2];
  Onnx__TensorShapeProto shape[2];
  Onnx__TensorShapeProto__Dimension dim[2][2], *dim_ptrs[2][2];
} mb;

static const float W[12] = {0.5f, -1, 2, 0.25f, -0.5f, 1, -2, 0.75f, 1.5f, 0, 1, -1};
static const float B[4] = {0.1f, -0.2f, 0.3f, -0.4f};

static void add_node(mb *b, const char *op, const char *name, const char *in0, const char *in1, const char *out) {
  int j = (int)b->graph.n_node++;
  Onnx__NodeProto *n = &b->nodes[j];
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->name = (char *)name;
  b->node_in[j][0] = (char *)in0;
  b->node_in[j][1] = (char *)in1;
  n->n_input = in1 ? 2 : 1;
  n->input = b->node_in[j];
  b->node_out[j][0] = (char *)out;
  n->n_output = 1;
  n->output = b->node_out[j];
  b->node_ptrs[j] = n;
}

static void add_init(mb *b, const char *name, int ndim, const int64_t *dims, const float *data, size_t n) {
  int k = (int)b->graph.n_initializer++;
  Onnx__TensorProto *t = &b->inits[k];
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  for (int d = 0; d < ndim; d++) b->init_dims[k][d] = dims[d];
  t->n_dims = (size_t)ndim;
  t->dims = b->init_dims[k];
  t->n_float_data = n;
  t->float_data = (float *)data;
  b->init_ptrs[k] = t;
}

/* Value info i: a float tensor [d0, d1], d0 < 0 symbolic ("N"). */
static Onnx__ValueInfoProto *value_info(mb *b, int i, const char *name, int64_t d0, int64_t d1) {
  Onnx__ValueInfoProto *v = &b->vi[i];
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(&b->type[i]);
  onnx__type_proto__tensor__init(&b->tt[i]);
  onnx__tensor_shape_proto__init(&b->shape[i]);
  int64_t d[2] = {d0, d1};
  for (int k = 0; k < 2; k++) {
    onnx__tensor_shape_proto__dimension__init(&b->dim[i][k]);
    if (d[k] < 0) {
      b->dim[i][k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      b->dim[i][k].dim_param = "N";
    } else {
      b->dim[i][k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      b->dim[i][k].dim_value = d[k];
    }
    b->dim_ptrs[i][k] = &b->dim[i][k];
  }
  b->shape[i].n_dim = 2;
  b->shape[i].dim = b->dim_ptrs[i];
  b->tt[i].has_elem_type = 1;
  b->tt[i].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  b->tt[i].shape = &b->shape[i];
  b->type[i].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  b->type[i].tensor_type = &b->tt[i];
  v->name = (char *)name;
  v->type = &b->type[i];
  return v;
}

/* Y = Relu(X·W + B): X [N, 3], W [3, 4], B [4], Y [N, 4]. */
static void linear_model(mb *b) {
  memset(b, 0, sizeof *b);
  onnx__model_proto__init(&b->model);
  onnx__graph_proto__init(&b->graph);
  onnx__operator_set_id_proto__init(&b->opset);
  b->opset.domain = "";
  b->opset.has_version = 1;
  b->opset.version = 13;
  b->opsets[0] = &b->opset;
  b->model.has_ir_version = 1;
  b->model.ir_version = 8;
  b->model.n_opset_import = 1;
  b->model.opset_import = b->opsets;
  b->model.graph = &b->graph;
  b->graph.name = "linear";
  add_node(b, "MatMul", "mm", "X", "W", "XW");
  add_node(b, "Add", "bias", "XW", "B", "Z");
  add_node(b, "Relu", "act", "Z", NULL, "Y");
  b->graph.node = b->node_ptrs;
  add_init(b, "W", 2, (int64_t[]){3, 4}, W, 12);
  add_init(b, "B", 1, (int64_t[]){4}, B, 4);
  b->graph.initializer = b->init_ptrs;
  b->in_ptrs[0] = value_info(b, 0, "X", -1, 3);
  b->out_ptrs[0] = value_info(b, 1, "Y", -1, 4);
  b->graph.n_input = 1;
  b->graph.input = b->in_ptrs;
  b->graph.n_output = 1;
  b->graph.output = b->out_ptrs;
}

/* The packed bytes of b (caller frees). */
static uint8_t *pack(mb *b, size_t *size) {
  *size = onnx__model_proto__get_packed_size(&b->model);
  uint8_t *buf = malloc(*size + 1);
  assert_non_null(buf);
  assert_int_equal(onnx__model_proto__pack(&b->model, buf), *size);
  return buf;
}

static kiln_onnx_model *load(mb *b) {
  size_t size;
  uint8_t *buf = pack(b, &size);
  kiln_onnx_model *m = kiln_onnx_load_memory(buf, size);
  free(buf);
  return m;
}

static const float X[6] = {1, 2, -1, 0.5f, -3, 2};

/* relu(X·W + B) in double. */
static void reference(const float *w, double *y) {
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      double z = B[j];
      for (int k = 0; k < 3; k++) z += (double)X[i * 3 + k] * w[k * 4 + j];
      y[i * 4 + j] = z > 0 ? z : 0;
    }
}

/* ------------------------------------------------------------- tests */

static void queries_and_values(void **state) {
  mb b;
  linear_model(&b);
  kiln_onnx_model *m = load(&b);
  assert_non_null(m);
  assert_int_equal(kiln_onnx_num_inputs(m), 1);
  assert_int_equal(kiln_onnx_num_outputs(m), 1);
  assert_int_equal(kiln_onnx_num_initializers(m), 2);
  assert_string_equal(kiln_onnx_input_name(m, 0), "X");
  assert_string_equal(kiln_onnx_output_name(m, 0), "Y");
  assert_string_equal(kiln_onnx_initializer_name(m, 1), "B");
  kiln_dtype d;
  int nd;
  int64_t s[KILN_MAX_DIMS];
  assert_int_equal(kiln_onnx_input_info(m, 0, &d, &nd, s), KILN_OK);
  assert_int_equal(d, KILN_F32);
  assert_int_equal(nd, 2);
  assert_int_equal(s[0], -1);
  assert_int_equal(s[1], 3);
  assert_null(kiln_onnx_input_name(m, 1));
  expect_error(KILN_ERR_ARG, "kiln_onnx_input_name", "out of range", NULL);

  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, X), *y = NULL;
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y, 1), KILN_OK);
  double want[8];
  reference(W, want);
  expect_values_tol(y, want, 8, 1e-6);
  kiln_release(y);
  kiln_release(x);
  kiln_onnx_free(m);
  expect_no_error();
}

/* d sum(Y) / dW = X^T · (Z > 0), through kiln_grad w.r.t. the initializer. */
static void gradient_of_initializer(void **state) {
  mb b;
  linear_model(&b);
  kiln_onnx_model *m = load(&b);
  assert_non_null(m);
  kiln_tensor *w = kiln_onnx_initializer(m, 0), *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, X), *y = NULL;
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y, 1), KILN_OK);
  kiln_tensor *loss = kiln_sum(y, 0, NULL, false), *g = NULL;
  assert_int_equal(kiln_grad(&loss, NULL, 1, &w, 1, &g), KILN_OK);
  double yv[8], want[12] = {0};
  reference(W, yv);
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < 2; i++) want[k * 4 + j] += yv[i * 4 + j] > 0 ? X[i * 3 + k] : 0;
  expect_values_tol(g, want, 12, 1e-6);
  /* an in-place update of the initializer is what the next run reads */
  assert_int_equal(kiln_zero_(w), KILN_OK);
  kiln_tensor *y2 = NULL;
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y2, 1), KILN_OK);
  double relu_b[8];
  for (int i = 0; i < 8; i++) relu_b[i] = B[i % 4] > 0 ? B[i % 4] : 0;
  expect_values_tol(y2, relu_b, 8, 1e-7);
  kiln_release(y2);
  kiln_release(g);
  kiln_release(loss);
  kiln_release(y);
  kiln_release(x);
  kiln_onnx_free(m);
  kiln_release(w); /* outlives the model */
  expect_no_error();
}

static void load_from_file(void **state) {
  mb b;
  linear_model(&b);
  size_t size;
  uint8_t *buf = pack(&b, &size);
  char path[] = "/tmp/kiln_onnx_api_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, buf, size), (ssize_t)size);
  close(fd);
  free(buf);
  kiln_onnx_model *m = kiln_onnx_load(path);
  unlink(path);
  assert_non_null(m);
  assert_int_equal(kiln_onnx_num_initializers(m), 2);
  kiln_onnx_free(m);
  assert_null(kiln_onnx_load(path));
  expect_error(KILN_ERR_IO, "kiln_onnx_load", "cannot open", NULL);
}

/* W stored in an external data file beside the model (data_location
 * EXTERNAL, keys location / offset / length); a model in memory cannot
 * read it, a missing file is KILN_ERR_IO. */
static void external_data(void **state) {
  char dir[] = "/tmp/kiln_onnx_ext_XXXXXX", path[256], data_path[256];
  assert_non_null(mkdtemp(dir));
  snprintf(data_path, sizeof data_path, "%s/weights.bin", dir);
  FILE *f = fopen(data_path, "wb");
  assert_non_null(f);
  float pad = 0;
  assert_int_equal(fwrite(&pad, sizeof pad, 1, f), 1); /* W starts at offset 4 */
  assert_int_equal(fwrite(W, sizeof W, 1, f), 1);
  fclose(f);
  mb b;
  linear_model(&b);
  Onnx__StringStringEntryProto kv[3], *kvp[3] = {&kv[0], &kv[1], &kv[2]};
  const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {"weights.bin", "4", "48"};
  for (int k = 0; k < 3; k++) {
    onnx__string_string_entry_proto__init(&kv[k]);
    kv[k].key = (char *)keys[k];
    kv[k].value = (char *)vals[k];
  }
  b.inits[0].n_float_data = 0;
  b.inits[0].float_data = NULL;
  b.inits[0].has_data_location = 1;
  b.inits[0].data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  b.inits[0].n_external_data = 3;
  b.inits[0].external_data = kvp;
  size_t size;
  uint8_t *buf = pack(&b, &size);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, size, f), size);
  fclose(f);
  kiln_onnx_model *m = kiln_onnx_load(path);
  assert_non_null(m);
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, X), *y = NULL;
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y, 1), KILN_OK);
  double want[8];
  reference(W, want);
  expect_values_tol(y, want, 8, 1e-6);
  kiln_release(y);
  kiln_release(x);
  kiln_onnx_free(m);
  assert_null(kiln_onnx_load_memory(buf, size));
  expect_error(KILN_ERR_UNSUPPORTED, "tensor 'W'", "external data", NULL);
  f = fopen(data_path, "wb"); /* shorter than offset + length */
  assert_non_null(f);
  assert_int_equal(fwrite(W, sizeof W, 1, f), 1);
  fclose(f);
  assert_null(kiln_onnx_load(path));
  expect_error(KILN_ERR_IO, "tensor 'W'", "cannot read 48 bytes at offset 4", NULL);
  unlink(data_path);
  assert_null(kiln_onnx_load(path));
  expect_error(KILN_ERR_IO, "tensor 'W'", "weights.bin", NULL);
  free(buf);
  unlink(path);
  rmdir(dir);
}

static void unsupported_operator_named(void **state) {
  mb b;
  linear_model(&b);
  b.nodes[2].op_type = "FrobnicateV2";
  assert_null(load(&b));
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_onnx_load", "FrobnicateV2", "'act'", NULL);
  linear_model(&b);
  b.nodes[1].domain = "com.example";
  assert_null(load(&b));
  expect_error(KILN_ERR_UNSUPPORTED, "'bias'", "com.example", NULL);
  linear_model(&b);
  b.opset.version = 5;
  assert_null(load(&b));
  expect_error(KILN_ERR_UNSUPPORTED, "opset 5", NULL);
}

static void malformed_graphs(void **state) {
  mb b;
  linear_model(&b);
  b.graph.n_initializer = 1; /* B missing */
  assert_null(load(&b));
  expect_error(KILN_ERR_ARG, "'bias'", "input 'B'", "missing initializer", NULL);
  linear_model(&b);
  b.node_in[0][0] = "Y"; /* a cycle: mm reads act's output */
  assert_null(load(&b));
  expect_error(KILN_ERR_ARG, "'mm'", "input 'Y'", NULL);
  linear_model(&b);
  b.node_out[1][0] = "XW"; /* defined twice */
  assert_null(load(&b));
  expect_error(KILN_ERR_ARG, "output 'XW' is defined twice", NULL);
  linear_model(&b);
  b.vi[1].name = "nowhere";
  assert_null(load(&b));
  expect_error(KILN_ERR_ARG, "graph output 'nowhere'", NULL);
  linear_model(&b);
  b.model.graph = NULL;
  assert_null(load(&b));
  expect_error(KILN_ERR_ARG, "no graph", NULL);
}

static void bad_initializers(void **state) {
  mb b;
  linear_model(&b);
  b.init_dims[0][0] = (int64_t)1 << 40;
  b.init_dims[0][1] = (int64_t)1 << 40;
  assert_null(load(&b));
  expect_error(KILN_ERR_SHAPE, "tensor 'W'", NULL);
  linear_model(&b);
  b.inits[0].n_float_data = 11; /* 12 needed */
  assert_null(load(&b));
  expect_error(KILN_ERR_SHAPE, "tensor 'W'", "12 elements", NULL);
  linear_model(&b); /* 2^34 elements declared, none held: refused before any allocation */
  b.init_dims[0][0] = (int64_t)1 << 24;
  b.init_dims[0][1] = (int64_t)1 << 10;
  b.inits[0].n_float_data = 0;
  assert_null(load(&b));
  expect_error(KILN_ERR_SHAPE, "tensor 'W'", "hold 0 of the 17179869184 elements", NULL);
  linear_model(&b);
  b.inits[1].float_data = NULL;
  b.inits[1].n_float_data = 0;
  b.inits[1].has_raw_data = 1;
  b.inits[1].raw_data.len = 15; /* 16 bytes needed */
  b.inits[1].raw_data.data = (uint8_t *)B;
  assert_null(load(&b));
  expect_error(KILN_ERR_SHAPE, "tensor 'B'", "15 bytes", NULL);
  linear_model(&b);
  b.inits[1].data_type = ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
  assert_null(load(&b));
  expect_error(KILN_ERR_UNSUPPORTED, "tensor 'B'", NULL);
}

/* Every prefix of a valid file: an error or a model, never a crash or a
 * leak (ASan); the empty prefix parses as an empty ModelProto. */
static void truncated_at_every_length(void **state) {
  mb b;
  linear_model(&b);
  size_t size;
  uint8_t *buf = pack(&b, &size);
  int loaded = 0;
  for (size_t n = 0; n < size; n++) {
    kiln_onnx_model *m = kiln_onnx_load_memory(buf, n);
    if (m) loaded++;
    else assert_int_not_equal(kiln_last_status(), KILN_OK);
    kiln_onnx_free(m);
    kiln_clear_error();
  }
  free(buf);
  assert_true(loaded < (int)size / 2); /* most prefixes are rejected */
  assert_null(kiln_onnx_load_memory("\xff\xff\xff\xff", 4));
  expect_error(KILN_ERR_IO, "not an ONNX model", NULL);
}

static void run_errors(void **state) {
  mb b;
  linear_model(&b);
  kiln_onnx_model *m = load(&b);
  assert_non_null(m);
  kiln_tensor *y = NULL, *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, X);
  assert_int_equal(kiln_onnx_run(m, &x, 0, &y, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "takes 1 inputs, got 0", NULL);
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "n_outputs = 2", NULL);
  kiln_tensor *x64 = kiln_to_dtype(x, KILN_F64);
  assert_int_equal(kiln_onnx_run(m, &x64, 1, &y, 1), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "'X'", NULL);
  kiln_tensor *x4 = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 4});
  assert_int_equal(kiln_onnx_run(m, &x4, 1, &y, 1), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "[2, 4]", "[-1, 3]", NULL);
  assert_null(y); /* outputs untouched */
  assert_int_equal(kiln_onnx_run(NULL, &x, 1, &y, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "model is NULL", NULL);
  kiln_release(x4);
  kiln_release(x64);
  kiln_onnx_free(m);
  kiln_onnx_free(NULL);
  expect_no_error();
  /* a freed model is an error at every entry point, a second free too */
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_onnx_run", "argument model was released", "kiln_onnx_free", NULL);
  assert_int_equal(kiln_onnx_num_inputs(m), -1);
  expect_error(KILN_ERR_ARG, "kiln_onnx_num_inputs", "was released", NULL);
  kiln_onnx_free(m);
  expect_error(KILN_ERR_ARG, "kiln_onnx_free", "was released", NULL);
  assert_int_equal(kiln_onnx_num_outputs((const kiln_onnx_model *)x), -1);
  expect_error(KILN_ERR_ARG, "is not a Kiln ONNX model", NULL);
  kiln_release(x);
}

/* An operator's failure names the node and keeps the Kiln op's message. */
static void node_error_names_node(void **state) {
  mb b;
  linear_model(&b);
  b.init_dims[1][0] = 2; /* B [2, 2]: does not broadcast with [N, 4] */
  b.init_dims[1][1] = 2;
  b.inits[1].n_dims = 2;
  kiln_onnx_model *m = load(&b);
  assert_non_null(m);
  kiln_tensor *y = NULL, *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, X);
  assert_int_equal(kiln_onnx_run(m, &x, 1, &y, 1), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_onnx_run: node 'bias' (Add)", "kiln_add", "cannot be broadcast", NULL);
  assert_null(y);
  kiln_release(x);
  kiln_onnx_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(queries_and_values),   cmocka_unit_test(gradient_of_initializer),
      cmocka_unit_test(load_from_file),       cmocka_unit_test(external_data),
      cmocka_unit_test(unsupported_operator_named),
      cmocka_unit_test(malformed_graphs),     cmocka_unit_test(bad_initializers),
      cmocka_unit_test(truncated_at_every_length), cmocka_unit_test(run_errors),
      cmocka_unit_test(node_error_names_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
