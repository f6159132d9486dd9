/*
 * model.c — kiln_onnx_load: an ONNX ModelProto (parsed by protobuf-c from
 * the schema compiled at build time) checked and resolved into a
 * kiln_onnx_model; the queries on it and kiln_onnx_free.
 *
 * Loading checks everything running will rely on, so a malformed or
 * unsupported file fails here with a message naming what is wrong: the
 * default-domain opset in [7, 18]; every node an operator of the table
 * (ops_table.c) with an input and output count it accepts; every node
 * input produced by an earlier node, an initializer or a graph input (a
 * graph out of topological order, with a cycle or a missing initializer
 * fails this); no value defined twice; every graph output defined. Value
 * names become slot numbers (a hash of the names, open addressing), and
 * each node lists the slots it reads last so running can drop them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

static const char *const FN = "kiln_onnx_load";

/* ------------------------------------------------------------ name map */

typedef struct name_map {
  size_t cap; /* power of two */
  const char **keys;
  int *vals;
} name_map;

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static bool map_init(name_map *m, size_t n) {
  m->cap = 16;
  while (m->cap < 2 * n + 1) m->cap *= 2;
  m->keys = calloc(m->cap, sizeof *m->keys);
  m->vals = calloc(m->cap, sizeof *m->vals);
  return m->keys && m->vals;
}

static void map_free(name_map *m) {
  free(m->keys);
  free(m->vals);
}

/* The slot of name, or -1. */
static int map_get(const name_map *m, const char *name) {
  for (size_t i = hash(name) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return -1;
    if (strcmp(m->keys[i], name) == 0) return m->vals[i];
  }
}

/* Adds name -> val; false when the name is present. The map is sized
 * for every value of the graph, so it never fills. */
static bool map_put(name_map *m, const char *name, int val) {
  size_t i = hash(name) & (m->cap - 1);
  for (; m->keys[i]; i = (i + 1) & (m->cap - 1))
    if (strcmp(m->keys[i], name) == 0) return false;
  m->keys[i] = name;
  m->vals[i] = val;
  return true;
}

/* ------------------------------------------------------------ checks */

static const char *node_name(const Onnx__NodeProto *n) { return n->name && *n->name ? n->name : ""; }

static bool read_opset(kiln_onnx_model *m) {
  m->opset = -1;
  for (size_t k = 0; k < m->proto->n_opset_import; k++) {
    const Onnx__OperatorSetIdProto *o = m->proto->opset_import[k];
    if (!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0) m->opset = (int)o->version;
  }
  if (m->opset < 0) {
    const char *d = m->proto->n_opset_import ? m->proto->opset_import[0]->domain : NULL;
    api_error(KILN_ERR_UNSUPPORTED, FN, "the model imports no opset of the default ONNX domain (%s%s%s)",
              d ? "it imports domain '" : "no opset_import", d ? d : "", d ? "'" : "");
    return false;
  }
  if (m->opset < ONNX_OPSET_MIN || m->opset > ONNX_OPSET_MAX) {
    api_error(KILN_ERR_UNSUPPORTED, FN, "opset %d of the default domain (Kiln reads %d to %d)", m->opset,
              ONNX_OPSET_MIN, ONNX_OPSET_MAX);
    return false;
  }
  return true;
}

static void io_info(onnx_io *io, const Onnx__ValueInfoProto *v, int slot) {
  io->name = v->name;
  io->slot = slot;
  io->dtype = KILN_F32;
  io->ndim = -1;
  const Onnx__TypeProto *t = v->type;
  if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type) return;
  kiln_dtype d;
  if (t->tensor_type->has_elem_type && onnx_dtype(t->tensor_type->elem_type, &d)) {
    io->dtype = d;
    io->typed = true;
  }
  const Onnx__TensorShapeProto *s = t->tensor_type->shape;
  if (!s || s->n_dim > KILN_MAX_DIMS) return;
  io->ndim = (int)s->n_dim;
  for (size_t k = 0; k < s->n_dim; k++)
    io->sizes[k] = s->dim[k]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? s->dim[k]->dim_value
                                                                                                : -1;
}

/* Initializers: a slot and a tensor each. */
static bool load_initializers(kiln_onnx_model *m, name_map *names, const char *dir) {
  const Onnx__GraphProto *g = m->proto->graph;
  m->n_inits = (int)g->n_initializer;
  m->inits = calloc(g->n_initializer + 1, sizeof *m->inits);
  m->init_names = calloc(g->n_initializer + 1, sizeof *m->init_names);
  m->init_slots = calloc(g->n_initializer + 1, sizeof *m->init_slots);
  if (!m->inits || !m->init_names || !m->init_slots) return api_error(KILN_ERR_OOM, FN, "out of memory"), false;
  for (int k = 0; k < m->n_inits; k++) {
    const Onnx__TensorProto *t = g->initializer[k];
    if (!t->name || !*t->name) return api_error(KILN_ERR_ARG, FN, "initializer %d has no name", k), false;
    if (!map_put(names, t->name, m->n_slots))
      return api_error(KILN_ERR_ARG, FN, "initializer '%s' is defined twice", t->name), false;
    m->init_names[k] = t->name;
    m->init_slots[k] = m->n_slots++;
    m->inits[k] = kiln_escape(onnx_tensor_from_proto(t, dir, FN));
    if (!m->inits[k]) return false;
  }
  return true;
}

/* Graph inputs that are not initializers (IR < 4 lists both). */
static bool load_inputs(kiln_onnx_model *m, name_map *names) {
  const Onnx__GraphProto *g = m->proto->graph;
  m->inputs = calloc(g->n_input + 1, sizeof *m->inputs);
  if (!m->inputs) return api_error(KILN_ERR_OOM, FN, "out of memory"), false;
  for (size_t k = 0; k < g->n_input; k++) {
    const Onnx__ValueInfoProto *v = g->input[k];
    if (!v->name || !*v->name) return api_error(KILN_ERR_ARG, FN, "graph input %zu has no name", k), false;
    if (map_get(names, v->name) >= 0) continue; /* an initializer */
    map_put(names, v->name, m->n_slots);
    io_info(&m->inputs[m->n_inputs++], v, m->n_slots++);
  }
  return true;
}

static bool check_counts(const Onnx__NodeProto *p, const onnx_op *op) {
  int ni = (int)p->n_input, no = (int)p->n_output;
  if (ni < op->min_in || (op->max_in >= 0 && ni > op->max_in) || no < op->min_out ||
      (op->max_out >= 0 && no > op->max_out)) {
    api_error(KILN_ERR_UNSUPPORTED, FN, "node '%s' (%s) has %d inputs and %d outputs (Kiln's %s takes %d to %d and %d to %d)",
              node_name(p), p->op_type, ni, no, op->name, op->min_in, op->max_in, op->min_out, op->max_out);
    return false;
  }
  return true;
}

static bool resolve_node(kiln_onnx_model *m, name_map *names, int j) {
  const Onnx__NodeProto *p = m->proto->graph->node[j];
  onnx_node *n = &m->nodes[j];
  n->proto = p;
  if (!p->op_type) return api_error(KILN_ERR_ARG, FN, "node %d has no op_type", j), false;
  if (p->domain && *p->domain && strcmp(p->domain, "ai.onnx") != 0) {
    api_error(KILN_ERR_UNSUPPORTED, FN, "node '%s': operator %s of domain '%s' is not supported (Kiln reads the "
              "default ONNX domain)", node_name(p), p->op_type, p->domain);
    return false;
  }
  n->op = onnx_op_find(p->op_type);
  if (!n->op) {
    api_error(KILN_ERR_UNSUPPORTED, FN, "node '%s': operator %s is not supported by Kiln", node_name(p), p->op_type);
    return false;
  }
  if (!check_counts(p, n->op)) return false;
  n->n_in = (int)p->n_input;
  n->n_out = (int)p->n_output;
  n->in = calloc(p->n_input + 1, sizeof *n->in);
  n->out = calloc(p->n_output + 1, sizeof *n->out);
  n->release = calloc(p->n_input + 1, sizeof *n->release);
  if (!n->in || !n->out || !n->release) return api_error(KILN_ERR_OOM, FN, "out of memory"), false;
  for (int k = 0; k < n->n_in; k++) {
    const char *s = p->input[k];
    n->in[k] = s && *s ? map_get(names, s) : -1;
    if (s && *s && n->in[k] < 0) {
      api_error(KILN_ERR_ARG, FN, "node '%s' (%s): input '%s' is produced by no earlier node, initializer or graph "
                "input (a missing initializer, a cycle, or nodes out of order)", node_name(p), p->op_type, s);
      return false;
    }
  }
  for (int k = 0; k < n->n_out; k++) {
    const char *s = p->output[k];
    n->out[k] = -1;
    if (!s || !*s) continue;
    if (!map_put(names, s, m->n_slots)) {
      api_error(KILN_ERR_ARG, FN, "node '%s' (%s): output '%s' is defined twice", node_name(p), p->op_type, s);
      return false;
    }
    n->out[k] = m->n_slots++;
  }
  return true;
}

/* Each slot's last reader releases it; graph outputs are never released. */
static bool plan_releases(kiln_onnx_model *m) {
  int *last = malloc(((size_t)m->n_slots + 1) * sizeof *last);
  if (!last) return api_error(KILN_ERR_OOM, FN, "out of memory"), false;
  for (int s = 0; s < m->n_slots; s++) last[s] = -1;
  for (int j = 0; j < m->n_nodes; j++)
    for (int k = 0; k < m->nodes[j].n_in; k++)
      if (m->nodes[j].in[k] >= 0) last[m->nodes[j].in[k]] = j;
  for (int k = 0; k < m->n_outputs; k++) last[m->outputs[k].slot] = -1;
  for (int j = 0; j < m->n_nodes; j++) {
    onnx_node *n = &m->nodes[j];
    for (int k = 0; k < n->n_in; k++) {
      int s = n->in[k];
      if (s < 0 || last[s] != j) continue;
      last[s] = -1; /* once, even when the node reads it twice */
      n->release[n->n_release++] = s;
    }
  }
  free(last);
  return true;
}

static bool load_graph(kiln_onnx_model *m, const char *dir) {
  const Onnx__GraphProto *g = m->proto->graph;
  if (!g) return api_error(KILN_ERR_ARG, FN, "the model has no graph"), false;
  size_t values = g->n_initializer + g->n_input;
  for (size_t j = 0; j < g->n_node; j++) values += g->node[j]->n_output;
  name_map names = {0};
  bool ok = map_init(&names, values);
  if (!ok) api_error(KILN_ERR_OOM, FN, "out of memory");
  ok = ok && load_initializers(m, &names, dir) && load_inputs(m, &names);
  m->n_nodes = (int)g->n_node;
  m->nodes = ok ? calloc(g->n_node + 1, sizeof *m->nodes) : NULL;
  if (ok && !m->nodes) ok = (api_error(KILN_ERR_OOM, FN, "out of memory"), false);
  for (int j = 0; ok && j < m->n_nodes; j++) ok = resolve_node(m, &names, j);
  m->outputs = ok ? calloc(g->n_output + 1, sizeof *m->outputs) : NULL;
  if (ok && !m->outputs) ok = (api_error(KILN_ERR_OOM, FN, "out of memory"), false);
  for (size_t k = 0; ok && k < g->n_output; k++) {
    const Onnx__ValueInfoProto *v = g->output[k];
    int s = v->name ? map_get(&names, v->name) : -1;
    if (s < 0) ok = (api_error(KILN_ERR_ARG, FN, "graph output '%s' is produced by no node", v->name ? v->name : ""), false);
    else io_info(&m->outputs[m->n_outputs++], v, s);
  }
  if (ok && m->n_outputs == 0) ok = (api_error(KILN_ERR_ARG, FN, "the graph has no outputs"), false);
  map_free(&names);
  return ok && plan_releases(m);
}

static kiln_onnx_model *load_bytes(const uint8_t *data, size_t size, const char *dir) {
  kiln_onnx_model *m = graph_handle_alloc(GRAPH_HANDLE_ONNX_MODEL, sizeof *m);
  if (!m) return api_error(KILN_ERR_OOM, FN, "out of memory"), NULL;
  m->proto = onnx__model_proto__unpack(NULL, size, data);
  if (!m->proto) {
    api_error(KILN_ERR_IO, FN, "not an ONNX model: the %zu bytes do not parse as a ModelProto (truncated or wrong file?)",
              size);
  }
  if (!m->proto || !read_opset(m) || !load_graph(m, dir)) {
    kiln_onnx_free(m);
    return NULL;
  }
  return m;
}

KILN_API kiln_onnx_model *kiln_onnx_load_memory(const void *data, size_t size) {
  if (!data) return api_error(KILN_ERR_ARG, FN, "argument data is NULL"), NULL;
  return load_bytes(data, size, NULL);
}

KILN_API kiln_onnx_model *kiln_onnx_load(const char *path) {
  if (!path) return api_error(KILN_ERR_ARG, FN, "argument path is NULL"), NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return api_error(KILN_ERR_IO, FN, "cannot open %s", path), NULL;
  uint8_t *buf = NULL;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) buf = malloc((size_t)size + 1);
  bool ok = buf && fread(buf, 1, (size_t)size, f) == (size_t)size;
  fclose(f);
  if (!ok) {
    free(buf);
    return api_error(KILN_ERR_IO, FN, "cannot read %s", path), NULL;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  kiln_onnx_model *m = load_bytes(buf, (size_t)size, dir);
  free(buf);
  return m;
}

KILN_API void kiln_onnx_free(kiln_onnx_model *m) {
  if (!m || !api_check_handle(GRAPH_HANDLE_ONNX_MODEL, m, "kiln_onnx_free", "model")) return;
  for (int k = 0; k < m->n_inits; k++) kiln_release(m->inits[k]);
  for (int j = 0; m->nodes && j < m->n_nodes; j++) {
    free(m->nodes[j].in);
    free(m->nodes[j].out);
    free(m->nodes[j].release);
  }
  free(m->nodes);
  free(m->inits);
  free(m->init_names);
  free(m->init_slots);
  free(m->inputs);
  free(m->outputs);
  if (m->proto) onnx__model_proto__free_unpacked(m->proto, NULL);
  graph_handle_free(GRAPH_HANDLE_ONNX_MODEL, m, 0);
}
