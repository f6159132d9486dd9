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

/* Block x [br, bc] (row stride BC) of raw scores q·kᵀ for query rows
 * r0.. and key columns c0.. of batch i: scaled and masked in place
 * (masked: -inf). */
static void ATT_FN(mask_block)(const att_job *j, int64_t i, int64_t r0, int64_t br, int64_t c0, int64_t bc,
                               ATT_T *x) {
  const rt_attention *a = &j->a;
  ATT_T scale = (ATT_T)a->scale;
  for (int64_t r = 0; r < br; r++) {
    ATT_T *row = x + r * BC;
    for (int64_t c = 0; c < bc; c++) row[c] *= scale;
    if (a->kind == RT_ATTENTION_CAUSAL)
      for (int64_t c = r0 + r + 1 - c0 > 0 ? r0 + r + 1 - c0 : 0; c < bc; c++) row[c] = -INFINITY;
    if (a->kind != RT_ATTENTION_MASK) continue;
    const char *m = at(&a->mask, a->nb, i, r0 + r, c0, a->bool_mask ? 1 : j->esz);
    int64_t cs = a->mask.cs;
    if (a->bool_mask)
      for (int64_t c = 0; c < bc; c++) row[c] = m[c * cs] ? row[c] : -INFINITY;
    else
      for (int64_t c = 0; c < bc; c++) row[c] += ((const ATT_T *)m)[c * cs];
  }
}

/* S [br, BC] (row stride BC) = Q_i·K_jᵀ, scaled and masked: query rows
 * r0.., keys c0..; columns from bc on -inf. */
static void ATT_FN(scores)(const att_job *j, int64_t i, int64_t r0, int64_t br, int64_t c0, int64_t bc, ATT_T *s,
                           void *pack) {
  const rt_attention *a = &j->a;
  const char *q = at(&a->q, a->nb, i, r0, 0, j->esz), *k = at(&a->k, a->nb, i, c0, 0, j->esz);
  rt_gemm_block_run(&j->g, br, bc, a->E, q, a->q.rs, a->q.cs, k, a->k.cs, a->k.rs, s, BC, false, pack);
  ATT_FN(mask_block)(j, i, r0, br, c0, bc, s);
  for (int64_t r = 0; r < br && bc < BC; r++)
    for (int64_t c = bc; c < BC; c++) s[r * BC + c] = -INFINITY;
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
static void ATT_FN(fwd_block)(const att_job *j, int64_t i, int64_t r0, int64_t br, bool with_v, char *scratch) {
  const rt_attention *a = &j->a;
  int64_t ev = with_v ? a->Ev : 0;
  ATT_T *s = (ATT_T *)scratch, *acc = s + BR * BC, *m = acc + BR * a->Ev, *l = m + BR;
  void *pack = (char *)scratch + fwd_blocks_bytes(j);
  for (int64_t r = 0; r < br; r++) m[r] = -INFINITY, l[r] = 0;
  memset(acc, 0, sizeof *acc * (size_t)(br * ev));
  int64_t cend = a->kind == RT_ATTENTION_CAUSAL ? min64(a->S, r0 + br) : a->S;
  for (int64_t c0 = 0; c0 < cend; c0 += BC) {
    int64_t bc = min64(BC, cend - c0);
    ATT_FN(scores)(j, i, r0, br, c0, bc, s, pack);
    ATT_FN(online_step)(br, bc, ev, s, m, l, acc);
    if (!with_v) continue;
    const char *v = at(&a->v, a->nb, i, c0, 0, j->esz);
    rt_gemm_block_run(&j->g, br, ev, bc, s, BC, 1, v, a->v.rs, a->v.cs, acc, ev, true, pack);
  }
  if (j->lse)
    for (int64_t r = 0; r < br; r++) ((ATT_T *)j->lse)[i * a->L + r0 + r] = m[r] + ATT_LOG(l[r]);
  if (!with_v) return;
  ATT_T *o = (ATT_T *)j->out + (i * a->L + r0) * ev;
  for (int64_t r = 0; r < br; r++) {
    ATT_T inv = a->S == 0 ? 0 : 1 / l[r]; /* no keys at all: O = 0 (an empty sum), as p·v with S = 0 */
    for (int64_t e = 0; e < ev; e++) o[r * ev + e] = acc[r * ev + e] * inv;
  }
}

/* Pool chunks over (batch, query block) items: the forward (O and,
 * when asked, the log-sum-exp), or the log-sum-exp alone. */
static void ATT_FN(rows_chunk)(void *const *bufs, int64_t start, int64_t end, bool with_v) {
  att_job *j = bufs[0];
  graph_buffer *scratch = graph_buffer_alloc(j->scratch_bytes);
  if (!scratch) {
    atomic_store(&j->oom, true);
    return;
  }
  int64_t qb = (j->a.L + BR - 1) / BR;
  for (int64_t it = start; it < end; it++) {
    int64_t i = it / qb, r0 = it % qb * BR;
    ATT_FN(fwd_block)(j, i, r0, min64(BR, j->a.L - r0), with_v, scratch->data);
  }
  graph_buffer_release(scratch);
}

static void ATT_FN(fwd_chunk)(void *const *bufs, int64_t start, int64_t end) {
  ATT_FN(rows_chunk)(bufs, start, end, true);
}

static void ATT_FN(lse_chunk)(void *const *bufs, int64_t start, int64_t end) {
  ATT_FN(rows_chunk)(bufs, start, end, false);
}

/* ------------------------------------------------------------ backward */

/* P = exp(S − lse) and dS = P ∘ (dO_i·V_jᵀ − D)·scale for batch i, query
 * rows r0.. and keys c0..: p and ds [br, BC] (row stride BC). */
static void ATT_FN(probs_and_grads)(const att_job *j, int64_t i, int64_t r0, int64_t br, int64_t c0, int64_t bc,
                                    ATT_T *p, ATT_T *ds, void *pack) {
  const rt_attention *a = &j->a;
  ATT_FN(scores)(j, i, r0, br, c0, bc, p, pack);
  const char *dout = at(&a->dout, a->nb, i, r0, 0, j->esz), *v = at(&a->v, a->nb, i, c0, 0, j->esz);
  rt_gemm_block_run(&j->g, br, bc, a->Ev, dout, a->dout.rs, a->dout.cs, v, a->v.cs, a->v.rs, ds, BC, false, pack);
  const ATT_T *lse = (const ATT_T *)j->lse + i * a->L + r0;
  for (int64_t r = 0; r < br; r++) {
    ATT_T d = *(const ATT_T *)at(&a->dsum, a->nb, i, r0 + r, 0, j->esz);
    ATT_FN(grad_row)(p + r * BC, ds + r * BC, lse[r], d, (ATT_T)a->scale);
  }
}

/* dK_j and dV_j for batch i, keys [c0, c0 + bc): acc [bc, E + Ev]; with
 * dq (batch i's dQ [L, E], already summing the key blocks before c0),
 * dS_ij·K_j is added to it too (the one-sweep backward). */
static void ATT_FN(dkv_block)(const att_job *j, int64_t i, int64_t c0, int64_t bc, char *scratch, ATT_T *dq) {
  const rt_attention *a = &j->a;
  int64_t w = a->E + a->Ev;
  ATT_T *p = (ATT_T *)scratch, *ds = p + BR * BC, *acc = ds + BR * BC;
  void *pack = (char *)scratch + bwd_blocks_bytes(j);
  memset(acc, 0, sizeof *acc * (size_t)(bc * w));
  const char *k = at(&a->k, a->nb, i, c0, 0, j->esz);
  for (int64_t r0 = a->kind == RT_ATTENTION_CAUSAL ? c0 : 0; r0 < a->L; r0 += BR) {
    int64_t br = min64(BR, a->L - r0);
    ATT_FN(probs_and_grads)(j, i, r0, br, c0, bc, p, ds, pack);
    const char *q = at(&a->q, a->nb, i, r0, 0, j->esz), *dout = at(&a->dout, a->nb, i, r0, 0, j->esz);
    /* dV_j += Pᵀ·dO_i, dK_j += dSᵀ·Q_i */
    rt_gemm_block_run(&j->g, bc, a->Ev, br, p, 1, BC, dout, a->dout.rs, a->dout.cs, acc + a->E, w, true, pack);
    rt_gemm_block_run(&j->g, bc, a->E, br, ds, 1, BC, q, a->q.rs, a->q.cs, acc, w, true, pack);
    if (dq) rt_gemm_block_run(&j->g, br, a->E, bc, ds, BC, 1, k, a->k.rs, a->k.cs, dq + r0 * a->E, a->E, true, pack);
  }
  ATT_T *out = (ATT_T *)j->out + a->batches * a->L * a->E + (i * a->S + c0) * w;
  memcpy(out, acc, sizeof *acc * (size_t)(bc * w));
}

/* dQ_i for batch i, query rows [r0, r0 + br). */
static void ATT_FN(dq_block)(const att_job *j, int64_t i, int64_t r0, int64_t br, char *scratch) {
  const rt_attention *a = &j->a;
  ATT_T *p = (ATT_T *)scratch, *ds = p + BR * BC, *acc = ds + BR * BC;
  void *pack = (char *)scratch + bwd_blocks_bytes(j);
  memset(acc, 0, sizeof *acc * (size_t)(br * a->E));
  int64_t cend = a->kind == RT_ATTENTION_CAUSAL ? min64(a->S, r0 + br) : a->S;
  for (int64_t c0 = 0; c0 < cend; c0 += BC) {
    int64_t bc = min64(BC, cend - c0);
    ATT_FN(probs_and_grads)(j, i, r0, br, c0, bc, p, ds, pack);
    const char *k = at(&a->k, a->nb, i, c0, 0, j->esz);
    rt_gemm_block_run(&j->g, br, a->E, bc, ds, BC, 1, k, a->k.rs, a->k.cs, acc, a->E, true, pack);
  }
  memcpy((ATT_T *)j->out + (i * a->L + r0) * a->E, acc, sizeof *acc * (size_t)(br * a->E));
}

static void ATT_FN(dkv_chunk)(void *const *bufs, int64_t start, int64_t end) {
  att_job *j = bufs[0];
  graph_buffer *scratch = graph_buffer_alloc(j->scratch_bytes);
  if (!scratch) {
    atomic_store(&j->oom, true);
    return;
  }
  int64_t kb = (j->a.S + BC - 1) / BC;
  for (int64_t it = start; it < end; it++) {
    int64_t i = it / kb, c0 = it % kb * BC;
    ATT_FN(dkv_block)(j, i, c0, min64(BC, j->a.S - c0), scratch->data, NULL);
  }
  graph_buffer_release(scratch);
}

static void ATT_FN(dq_chunk)(void *const *bufs, int64_t start, int64_t end) {
  att_job *j = bufs[0];
  graph_buffer *scratch = graph_buffer_alloc(j->scratch_bytes);
  if (!scratch) {
    atomic_store(&j->oom, true);
    return;
  }
  int64_t qb = (j->a.L + BR - 1) / BR;
  for (int64_t it = start; it < end; it++) {
    int64_t i = it / qb, r0 = it % qb * BR;
    ATT_FN(dq_block)(j, i, r0, min64(BR, j->a.L - r0), scratch->data);
  }
  graph_buffer_release(scratch);
}

/* One sweep per batch: dQ, dK and dV of whole batches [start, end). */
static void ATT_FN(batch_chunk)(void *const *bufs, int64_t start, int64_t end) {
  att_job *j = bufs[0];
  graph_buffer *scratch = graph_buffer_alloc(j->scratch_bytes);
  if (!scratch) {
    atomic_store(&j->oom, true);
    return;
  }
  for (int64_t i = start; i < end; i++) {
    ATT_T *dq = (ATT_T *)j->out + i * j->a.L * j->a.E;
    memset(dq, 0, sizeof *dq * (size_t)(j->a.L * j->a.E));
    for (int64_t c0 = 0; c0 < j->a.S; c0 += BC)
      ATT_FN(dkv_block)(j, i, c0, min64(BC, j->a.S - c0), scratch->data, dq);
  }
  graph_buffer_release(scratch);
}

#undef ATT_FN
#undef ATT_CAT
#undef ATT_CAT2
#undef ATT_T
#undef ATT_LOG
#undef ATT_SFX
