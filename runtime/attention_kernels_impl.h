/*
 * attention_kernels_impl.h — the attention kernels' block work for one
 * element type, included by attention_kernels.c once per type with ATT_T
 * (float or double), ATT_LOG and ATT_SFX (the functions' suffix, also of
 * the row functions it calls: row_max_f32, ...) defined; it undefines
 * them. Not a header of its own: attention_kernels.c's file comment says
 * what the functions compute.
 */
#define ATT_CAT2(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT2(a, b)
#define ATT_FN(name) ATT_CAT(name, ATT_SFX)

/* A chunk's scratch: the layout's parts as pointers, and the batch whose
 * operands its panels hold (-1: none yet). */
typedef struct ATT_FN(chunk) {
  ATT_T *s, *ds, *acc, *m, *l, *blk, *qi, *kt, *vb, *qa, *doa, *vt, *dob, *qb, *kb;
  int64_t batch;
  graph_buffer *buf;
} ATT_FN(chunk);

static bool ATT_FN(chunk_open)(att_job *j, ATT_FN(chunk) *c) {
  c->buf = graph_buffer_alloc(j->off[P_COUNT]);
  if (!c->buf) {
    atomic_store(&j->oom, true);
    return false;
  }
  ATT_T **ptr[P_COUNT] = {&c->s, &c->ds, &c->acc, &c->m, &c->blk, &c->qi, &c->kt, &c->vb, &c->qa, &c->doa, &c->vt,
                          &c->dob, &c->qb, &c->kb};
  for (int i = 0; i < P_COUNT; i++) *ptr[i] = (ATT_T *)(c->buf->data + j->off[i]);
  c->l = c->m + j->br;
  c->batch = -1;
  return true;
}

/* Batch i's operands packed as panels, once per batch a chunk visits:
 * Kᵀ always; V for the forward's output (with_v); Q, dO as A panels,
 * Vᵀ, and dO, Q, K as B panels over their rows for the backward (bwd). */
static void ATT_FN(pack_batch)(const att_job *j, ATT_FN(chunk) *c, int64_t i, bool bwd, bool with_v) {
  if (c->batch == i) return;
  const rt_attention *a = &j->a;
  const rt_gemm_block *g = &j->g;
  const char *q = at(&a->q, a->nb, i, 0, 0, j->esz), *k = at(&a->k, a->nb, i, 0, 0, j->esz);
  const char *v = at(&a->v, a->nb, i, 0, 0, j->esz);
  rt_gemm_block_pack_b(g, c->kt, k, a->k.cs, a->k.rs, a->E, a->S);
  if (with_v) rt_gemm_block_pack_b(g, c->vb, v, a->v.rs, a->v.cs, a->S, a->Ev);
  if (bwd) {
    const char *dout = at(&a->dout, a->nb, i, 0, 0, j->esz);
    rt_gemm_block_pack_a(g, c->qa, q, a->q.rs, a->q.cs, a->L, a->E);
    rt_gemm_block_pack_a(g, c->doa, dout, a->dout.rs, a->dout.cs, a->L, a->Ev);
    rt_gemm_block_pack_b(g, c->vt, v, a->v.cs, a->v.rs, a->Ev, a->S);
    rt_gemm_block_pack_b(g, c->dob, dout, a->dout.rs, a->dout.cs, a->L, a->Ev);
    rt_gemm_block_pack_b(g, c->qb, q, a->q.rs, a->q.cs, a->L, a->E);
    rt_gemm_block_pack_b(g, c->kb, k, a->k.rs, a->k.cs, a->S, a->E);
  }
  c->batch = i;
}

/* Block x [br, bc] (row stride BC) of raw scores q·kᵀ for query rows
 * r0.. and key columns c0.. of batch i: scaled and masked in place
 * (masked: -inf), columns from bc on -inf. */
static void ATT_FN(mask_block)(const att_job *j, int64_t i, int64_t r0, int64_t br, int64_t c0, int64_t bc,
                               ATT_T *x) {
  const rt_attention *a = &j->a;
  ATT_T scale = (ATT_T)a->scale;
  for (int64_t r = 0; r < br; r++) {
    ATT_T *row = x + r * BC;
    for (int64_t c = 0; c < bc; c++) row[c] *= scale;
    for (int64_t c = bc; c < BC; c++) row[c] = -INFINITY;
    if (a->kind == GRAPH_ATTENTION_CAUSAL)
      for (int64_t c = r0 + r + 1 - c0 > 0 ? r0 + r + 1 - c0 : 0; c < bc; c++) row[c] = -INFINITY;
    if (a->kind != GRAPH_ATTENTION_MASK) continue;
    const char *m = at(&a->mask, a->nb, i, r0 + r, c0, a->bool_mask ? 1 : j->esz);
    int64_t cs = a->mask.cs;
    if (a->bool_mask)
      for (int64_t c = 0; c < bc; c++) row[c] = m[c * cs] ? row[c] : -INFINITY;
    else
      for (int64_t c = 0; c < bc; c++) row[c] += ((const ATT_T *)m)[c * cs];
  }
}

/* The online softmax step of block x [br, BC] for rows with running max
 * m, sum l and accumulator acc [br, Ev] (Ev 0: none): x becomes P =
 * exp(x − m_new), l and acc are rescaled by exp(m_old − m_new) and l
 * gets P's row sums. */
static void ATT_FN(online_step)(int64_t br, int64_t bc, int64_t ev, ATT_T *x, ATT_T *m, ATT_T *l, ATT_T *acc) {
  for (int64_t r = 0; r < br; r++) {
    ATT_T *row = x + r * BC, mx = ATT_FN(row_max)(row);
    ATT_T mnew = mx > m[r] ? mx : m[r];
    if (mnew == -INFINITY) { /* nothing kept so far: P is 0 (NaN stays NaN) */
      for (int64_t c = 0; c < bc; c++) row[c] = row[c] != row[c] ? row[c] : 0;
      continue;
    }
    ATT_T alpha = (ATT_T)exp((double)m[r] - (double)mnew); /* 0 for the first block kept (m = -inf) */
    ATT_T sum = ATT_FN(exp_sum)(row, mnew);
    l[r] = l[r] * alpha + sum;
    m[r] = mnew;
    if (alpha != 1)
      for (int64_t e = 0; e < ev; e++) acc[r * ev + e] *= alpha;
  }
}

/* Batch i, query rows [r0, r0 + br): the online softmax over every key
 * block kept, and with `with_v` the output O = Σ P·V / l; the rows'
 * log-sum-exp m + log l goes to j->lse when there is one. */
static void ATT_FN(fwd_block)(const att_job *j, ATT_FN(chunk) *c, int64_t i, int64_t r0, int64_t br, bool with_v) {
  const rt_attention *a = &j->a;
  const rt_gemm_block *g = &j->g;
  int64_t ev = with_v ? a->Ev : 0, mr = g->spec.mr, nr = g->spec.nr;
  ATT_FN(pack_batch)(j, c, i, false, with_v);
  rt_gemm_block_pack_a(g, c->qi, at(&a->q, a->nb, i, r0, 0, j->esz), a->q.rs, a->q.cs, br, a->E);
  for (int64_t r = 0; r < br; r++) c->m[r] = -INFINITY, c->l[r] = 0;
  memset(c->acc, 0, sizeof *c->acc * (size_t)(br * ev));
  int64_t cend = a->kind == GRAPH_ATTENTION_CAUSAL ? min64(a->S, r0 + br) : a->S;
  for (int64_t c0 = 0; c0 < cend; c0 += BC) {
    int64_t bc = min64(BC, cend - c0);
    rt_gemm_block_panels(g, br, bc, a->E, c->qi, a->E * mr, c->kt + c0 / nr * a->E * nr, a->E * nr, c->s, BC, false);
    ATT_FN(mask_block)(j, i, r0, br, c0, bc, c->s);
    ATT_FN(online_step)(br, bc, ev, c->s, c->m, c->l, c->acc);
    if (!with_v) continue;
    rt_gemm_block_pack_a(g, c->blk, c->s, BC, 1, br, bc);
    rt_gemm_block_panels(g, br, ev, bc, c->blk, bc * mr, c->vb + c0 * nr, a->S * nr, c->acc, ev, true);
  }
  if (j->lse)
    for (int64_t r = 0; r < br; r++) ((ATT_T *)j->lse)[i * a->L + r0 + r] = c->m[r] + ATT_LOG(c->l[r]);
  if (!with_v) return;
  ATT_T *o = (ATT_T *)j->out + (i * a->L + r0) * ev;
  for (int64_t r = 0; r < br; r++) {
    ATT_T inv = a->S == 0 ? 0 : 1 / c->l[r]; /* no keys at all: O = 0 (an empty sum), as p·v with S = 0 */
    for (int64_t e = 0; e < ev; e++) o[r * ev + e] = c->acc[r * ev + e] * inv;
  }
}

/* A pool chunk over (batch, query block) items [start, end), each run
 * by block (fwd_block or dq_block) with the flag. */
static void ATT_FN(query_chunk)(void *const *bufs, int64_t start, int64_t end,
                                void (*block)(const att_job *, ATT_FN(chunk) *, int64_t, int64_t, int64_t, bool),
                                bool flag) {
  att_job *j = bufs[0];
  ATT_FN(chunk) c;
  if (!ATT_FN(chunk_open)(j, &c)) return;
  int64_t qb = (j->a.L + j->br - 1) / j->br;
  for (int64_t it = start; it < end; it++) {
    int64_t i = it / qb, r0 = it % qb * j->br;
    block(j, &c, i, r0, min64(j->br, j->a.L - r0), flag);
  }
  graph_buffer_release(c.buf);
}

/* The forward (O and, when asked, the log-sum-exp), or the log-sum-exp
 * alone. */
static void ATT_FN(fwd_chunk)(void *const *bufs, int64_t start, int64_t end) {
  ATT_FN(query_chunk)(bufs, start, end, ATT_FN(fwd_block), true);
}

static void ATT_FN(lse_chunk)(void *const *bufs, int64_t start, int64_t end) {
  ATT_FN(query_chunk)(bufs, start, end, ATT_FN(fwd_block), false);
}

/* ------------------------------------------------------------ backward */

/* P = exp(S − lse) into c->s and dS = P ∘ (dO_i·V_jᵀ − D)·scale into
 * c->ds for batch i (packed), query rows r0.. (a block start) and keys
 * c0... */
static void ATT_FN(probs_and_grads)(const att_job *j, ATT_FN(chunk) *c, int64_t i, int64_t r0, int64_t br, int64_t c0,
                                    int64_t bc) {
  const rt_attention *a = &j->a;
  const rt_gemm_block *g = &j->g;
  int64_t mr = g->spec.mr, nr = g->spec.nr;
  rt_gemm_block_panels(g, br, bc, a->E, c->qa + r0 / mr * a->E * mr, a->E * mr, c->kt + c0 / nr * a->E * nr,
                       a->E * nr, c->s, BC, false);
  ATT_FN(mask_block)(j, i, r0, br, c0, bc, c->s);
  rt_gemm_block_panels(g, br, bc, a->Ev, c->doa + r0 / mr * a->Ev * mr, a->Ev * mr, c->vt + c0 / nr * a->Ev * nr,
                       a->Ev * nr, c->ds, BC, false);
  const ATT_T *lse = (const ATT_T *)j->lse + i * a->L + r0;
  for (int64_t r = 0; r < br; r++) {
    ATT_T d = *(const ATT_T *)at(&a->dsum, a->nb, i, r0 + r, 0, j->esz);
    ATT_FN(grad_row)(c->s + r * BC, c->ds + r * BC, lse[r], d, (ATT_T)a->scale);
  }
}

/* dK_j and dV_j for batch i, keys [c0, c0 + bc): c->acc [bc, E + Ev];
 * with dq (batch i's dQ [L, E], already summing the key blocks before
 * c0), dS_ij·K_j is added to it too (the one-sweep backward). */
static void ATT_FN(dkv_block)(const att_job *j, ATT_FN(chunk) *c, int64_t i, int64_t c0, int64_t bc, ATT_T *dq) {
  const rt_attention *a = &j->a;
  const rt_gemm_block *g = &j->g;
  int64_t w = a->E + a->Ev, mr = g->spec.mr, nr = g->spec.nr;
  ATT_FN(pack_batch)(j, c, i, true, false);
  memset(c->acc, 0, sizeof *c->acc * (size_t)(bc * w));
  int64_t rstart = a->kind == GRAPH_ATTENTION_CAUSAL ? c0 / j->br * j->br : 0; /* rows before c0 see none of these keys */
  for (int64_t r0 = rstart; r0 < a->L; r0 += j->br) {
    int64_t br = min64(j->br, a->L - r0);
    ATT_FN(probs_and_grads)(j, c, i, r0, br, c0, bc);
    /* dV_j += Pᵀ·dO_i, dK_j += dSᵀ·Q_i, dQ_i += dS·K_j */
    rt_gemm_block_pack_a(g, c->blk, c->s, 1, BC, bc, br);
    rt_gemm_block_panels(g, bc, a->Ev, br, c->blk, br * mr, c->dob + r0 * nr, a->L * nr, c->acc + a->E, w, true);
    rt_gemm_block_pack_a(g, c->blk, c->ds, 1, BC, bc, br);
    rt_gemm_block_panels(g, bc, a->E, br, c->blk, br * mr, c->qb + r0 * nr, a->L * nr, c->acc, w, true);
    if (!dq) continue;
    rt_gemm_block_pack_a(g, c->blk, c->ds, BC, 1, br, bc);
    rt_gemm_block_panels(g, br, a->E, bc, c->blk, bc * mr, c->kb + c0 * nr, a->S * nr, dq + r0 * a->E, a->E, true);
  }
  ATT_T *out = (ATT_T *)j->out + a->batches * a->L * a->E + (i * a->S + c0) * w;
  memcpy(out, c->acc, sizeof *c->acc * (size_t)(bc * w));
}

/* dQ_i for batch i, query rows [r0, r0 + br) (a block start); `unused`:
 * query_chunk's flag. */
static void ATT_FN(dq_block)(const att_job *j, ATT_FN(chunk) *c, int64_t i, int64_t r0, int64_t br, bool unused) {
  (void)unused;
  const rt_attention *a = &j->a;
  const rt_gemm_block *g = &j->g;
  int64_t mr = g->spec.mr, nr = g->spec.nr;
  ATT_FN(pack_batch)(j, c, i, true, false);
  memset(c->acc, 0, sizeof *c->acc * (size_t)(br * a->E));
  int64_t cend = a->kind == GRAPH_ATTENTION_CAUSAL ? min64(a->S, r0 + br) : a->S;
  for (int64_t c0 = 0; c0 < cend; c0 += BC) {
    int64_t bc = min64(BC, cend - c0);
    ATT_FN(probs_and_grads)(j, c, i, r0, br, c0, bc);
    rt_gemm_block_pack_a(g, c->blk, c->ds, BC, 1, br, bc);
    rt_gemm_block_panels(g, br, a->E, bc, c->blk, bc * mr, c->kb + c0 * nr, a->S * nr, c->acc, a->E, true);
  }
  memcpy((ATT_T *)j->out + (i * a->L + r0) * a->E, c->acc, sizeof *c->acc * (size_t)(br * a->E));
}

static void ATT_FN(dkv_chunk)(void *const *bufs, int64_t start, int64_t end) {
  att_job *j = bufs[0];
  ATT_FN(chunk) c;
  if (!ATT_FN(chunk_open)(j, &c)) return;
  int64_t kb = (j->a.S + BC - 1) / BC;
  for (int64_t it = start; it < end; it++) {
    int64_t i = it / kb, c0 = it % kb * BC;
    ATT_FN(dkv_block)(j, &c, i, c0, min64(BC, j->a.S - c0), NULL);
  }
  graph_buffer_release(c.buf);
}

static void ATT_FN(dq_chunk)(void *const *bufs, int64_t start, int64_t end) {
  ATT_FN(query_chunk)(bufs, start, end, ATT_FN(dq_block), false);
}

/* One sweep per batch: dQ, dK and dV of whole batches [start, end). */
static void ATT_FN(batch_chunk)(void *const *bufs, int64_t start, int64_t end) {
  att_job *j = bufs[0];
  ATT_FN(chunk) c;
  if (!ATT_FN(chunk_open)(j, &c)) return;
  for (int64_t i = start; i < end; i++) {
    ATT_T *dq = (ATT_T *)j->out + i * j->a.L * j->a.E;
    memset(dq, 0, sizeof *dq * (size_t)(j->a.L * j->a.E));
    for (int64_t c0 = 0; c0 < j->a.S; c0 += BC) ATT_FN(dkv_block)(j, &c, i, c0, min64(BC, j->a.S - c0), dq);
  }
  graph_buffer_release(c.buf);
}

#undef ATT_FN
#undef ATT_CAT
#undef ATT_CAT2
#undef ATT_T
#undef ATT_LOG
#undef ATT_SFX
