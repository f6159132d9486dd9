/*
 * run.c — kiln_onnx_run: the model's nodes recorded, in file order, as
 * Kiln ops on the caller's inputs and the model's initializers; and the
 * queries on the model's inputs, outputs and initializers.
 *
 * Slots hold a tensor per graph value. Inputs and initializers are
 * borrowed; each node's results are references of the run's own, taken
 * inside a scope that releases whatever else the operator created, and
 * dropped after the slot's last reader (model.c plans it). An operator's
 * error is reported again naming the node, with the Kiln op's message.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

static const char *const FN = "kiln_onnx_run";

static bool check_model(const kiln_onnx_model *m, const char *fn) {
  return api_check_handle(GRAPH_HANDLE_ONNX_MODEL, m, fn, "model");
}

static bool check_input(const onnx_io *io, kiln_tensor *t, int k) {
  if (!api_check(t, FN, "inputs[k]")) return false;
  if (io->typed && kiln_dtype_of(t) != io->dtype) {
    api_error(KILN_ERR_DTYPE, FN, "input %d ('%s') has dtype %s, the model declares %s", k, io->name,
              kiln_dtype_name(kiln_dtype_of(t)), kiln_dtype_name(io->dtype));
    return false;
  }
  if (io->ndim < 0) return true;
  bool ok = kiln_dim(t) == io->ndim;
  for (int d = 0; ok && d < io->ndim; d++) ok = io->sizes[d] < 0 || io->sizes[d] == kiln_size(t, d);
  if (!ok) {
    char a[256], b[256];
    api_fmt_sizes(a, sizeof a, kiln_dim(t), kiln_sizes(t));
    api_fmt_sizes(b, sizeof b, io->ndim, io->sizes);
    api_error(KILN_ERR_SHAPE, FN, "input %d ('%s') has sizes %s, the model declares %s (-1: any)", k, io->name, a, b);
  }
  return ok;
}

/* Reports a failed operator's error again, naming its node. */
static int node_error(onnx_ctx *c, int rc) {
  const char *msg = kiln_last_error();
  if (msg && strncmp(msg, FN, strlen(FN)) == 0) return rc;
  char saved[768];
  snprintf(saved, sizeof saved, "%s", msg && *msg ? msg : "failed");
  kiln_clear_error();
  return onnx_fail(c, rc, "%s", saved);
}

/* Runs node n: its results go to their slots (owned). */
static int run_node(const kiln_onnx_model *m, const onnx_node *n, kiln_tensor **slots, bool *owned) {
  kiln_tensor *in[64] = {0}, *out[64] = {0};
  if (n->n_in > 64 || n->n_out > 64) {
    onnx_ctx c0 = {n->proto, m->opset};
    return onnx_fail(&c0, KILN_ERR_UNSUPPORTED, "%d inputs, %d outputs (at most 64)", n->n_in, n->n_out);
  }
  for (int k = 0; k < n->n_in; k++) in[k] = n->in[k] >= 0 ? slots[n->in[k]] : NULL;
  onnx_ctx c = {n->proto, m->opset};
  kiln_scope_begin();
  int rc = n->op->fn(&c, in, n->n_in, out, n->n_out);
  for (int k = 0; rc == KILN_OK && k < n->n_out; k++) {
    if (n->out[k] < 0) continue;
    if (!out[k]) {
      rc = onnx_fail(&c, KILN_ERR_UNSUPPORTED, "output %d is not computed by Kiln", k);
      break;
    }
    slots[n->out[k]] = kiln_retain(out[k]);
    owned[n->out[k]] = true;
  }
  kiln_scope_end();
  if (rc != KILN_OK) return node_error(&c, rc);
  for (int k = 0; k < n->n_release; k++) {
    int s = n->release[k];
    if (owned[s]) kiln_release(slots[s]);
    slots[s] = NULL;
    owned[s] = false;
  }
  return KILN_OK;
}

KILN_API int kiln_onnx_run(kiln_onnx_model *m, kiln_tensor *const *inputs, int n_inputs, kiln_tensor **outputs,
                           int n_outputs) {
  if (!check_model(m, FN)) return KILN_ERR_ARG;
  if (n_inputs != m->n_inputs || (n_inputs > 0 && !inputs))
    return api_error(KILN_ERR_ARG, FN, "the model takes %d inputs, got %d%s", m->n_inputs, n_inputs,
                     inputs ? "" : " (inputs is NULL)");
  if (n_outputs < 1 || n_outputs > m->n_outputs || !outputs)
    return api_error(KILN_ERR_ARG, FN, "n_outputs = %d: the model has %d outputs (outputs %s)", n_outputs,
                     m->n_outputs, outputs ? "given" : "NULL");
  for (int k = 0; k < n_inputs; k++)
    if (!check_input(&m->inputs[k], inputs[k], k)) return api_status();
  kiln_tensor **slots = calloc((size_t)m->n_slots + 1, sizeof *slots);
  bool *owned = calloc((size_t)m->n_slots + 1, sizeof *owned);
  if (!slots || !owned) {
    free(slots);
    free(owned);
    return api_error(KILN_ERR_OOM, FN, "out of memory");
  }
  for (int k = 0; k < m->n_inits; k++) slots[m->init_slots[k]] = m->inits[k];
  for (int k = 0; k < n_inputs; k++) slots[m->inputs[k].slot] = inputs[k];
  int rc = KILN_OK;
  for (int j = 0; rc == KILN_OK && j < m->n_nodes; j++) rc = run_node(m, &m->nodes[j], slots, owned);
  if (rc == KILN_OK)
    for (int k = 0; k < n_outputs; k++) outputs[k] = api_track(kiln_retain(slots[m->outputs[k].slot]));
  for (int s = 0; s < m->n_slots; s++)
    if (owned[s]) kiln_release(slots[s]);
  free(slots);
  free(owned);
  return rc;
}

/* ------------------------------------------------------------ queries */

KILN_API int kiln_onnx_num_inputs(const kiln_onnx_model *m) {
  return check_model(m, "kiln_onnx_num_inputs") ? m->n_inputs : -1;
}

KILN_API int kiln_onnx_num_outputs(const kiln_onnx_model *m) {
  return check_model(m, "kiln_onnx_num_outputs") ? m->n_outputs : -1;
}

KILN_API int kiln_onnx_num_initializers(const kiln_onnx_model *m) {
  return check_model(m, "kiln_onnx_num_initializers") ? m->n_inits : -1;
}

static bool check_index(const kiln_onnx_model *m, int i, int n, const char *fn) {
  if (!check_model(m, fn)) return false;
  if (i >= 0 && i < n) return true;
  api_error(KILN_ERR_ARG, fn, "index %d is out of range [0, %d)", i, n);
  return false;
}

KILN_API const char *kiln_onnx_input_name(const kiln_onnx_model *m, int i) {
  return check_index(m, i, m ? m->n_inputs : 0, "kiln_onnx_input_name") ? m->inputs[i].name : NULL;
}

KILN_API const char *kiln_onnx_output_name(const kiln_onnx_model *m, int i) {
  return check_index(m, i, m ? m->n_outputs : 0, "kiln_onnx_output_name") ? m->outputs[i].name : NULL;
}

KILN_API const char *kiln_onnx_initializer_name(const kiln_onnx_model *m, int i) {
  return check_index(m, i, m ? m->n_inits : 0, "kiln_onnx_initializer_name") ? m->init_names[i] : NULL;
}

KILN_API kiln_tensor *kiln_onnx_initializer(const kiln_onnx_model *m, int i) {
  if (!check_index(m, i, m ? m->n_inits : 0, "kiln_onnx_initializer")) return NULL;
  return api_track(kiln_retain(m->inits[i]));
}

static int io_query(const onnx_io *io, kiln_dtype *dtype, int *ndim, int64_t *sizes) {
  if (dtype) *dtype = io->dtype;
  if (ndim) *ndim = io->ndim;
  if (sizes)
    for (int d = 0; d < io->ndim; d++) sizes[d] = io->sizes[d];
  return KILN_OK;
}

KILN_API int kiln_onnx_input_info(const kiln_onnx_model *m, int i, kiln_dtype *dtype, int *ndim, int64_t *sizes) {
  if (!check_index(m, i, m ? m->n_inputs : 0, "kiln_onnx_input_info")) return KILN_ERR_ARG;
  return io_query(&m->inputs[i], dtype, ndim, sizes);
}

KILN_API int kiln_onnx_output_info(const kiln_onnx_model *m, int i, kiln_dtype *dtype, int *ndim, int64_t *sizes) {
  if (!check_index(m, i, m ? m->n_outputs : 0, "kiln_onnx_output_info")) return KILN_ERR_ARG;
  return io_query(&m->outputs[i], dtype, ndim, sizes);
}
