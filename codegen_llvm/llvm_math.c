/*
 * llvm_math.c — branch-free F32 math for the CPU backend.
 *
 * llvm.exp/llvm.sin and libm calls (expf, tanhf, erff...) stop the loop
 * vectoriser, so a fused kernel such as tanh(y*1.0001+0.5) ran scalar. Here
 * each F32 transcendental is emitted inline as straight-line IR (fmuladd,
 * selects, integer bit tricks; no calls, no branches, no loops, no tables),
 * which the vectoriser turns into AVX-512/AVX2 code. F64 keeps libm.
 *
 * Method: range reduction + polynomials derived for this file with a
 * weighted Remez exchange (mpmath, relative error; coefficients rounded to
 * float or double). Polynomials use llvm.fmuladd (fused where the target has
 * FMA, fmul+fadd otherwise); no exactness argument below depends on fusing.
 *  exp, expm1: n = rint(x/ln2), r = x - n*ln2 (Cody-Waite, ln2 in 2 parts),
 *    e^r = 1 + r + r^2 P(r); result scaled by 2^(n/2) * 2^(n - n/2) so
 *    results in the subnormal range are rounded once (never flushed).
 *    expm1 = (c + r + r^2 P(r)) * 2^n with c = 1 - 2^-n exact.
 *  exp2: n = rint(x), 2^r = 1 + r Q(r), same scaling.
 *  log, log2, log1p: x = 2^e m, m in [sqrt(1/2), sqrt(2)), f = m - 1,
 *    log(1+f) = f - f^2/2 + f^3 P(f); log1p adds the rounding error of 1+x
 *    (Fast2Sum) to f.
 *  tanh: x + x^3 P(x^2) for |x| < 0.625, else 1 - 2/(e^2|x| + 1).
 *  erf: x + x P(x^2) for |x| < 0.875, else 1 - exp(Q(|x| - 0.875)) where Q
 *    fits log(erfc); +-1 beyond 3.925.
 *  sin, cos, tan: j = rint(x 2/pi), r = x - j pi/2 in double with pi/2 in
 *    four parts (25+25+25+53 bits: j*part exact for |j| < 2^28), then
 *    sin/cos/tan polynomials in float on |r| <= pi/4 and the quadrant j&3.
 *  pow: in double: log2|x| via s = f/(2+f), 2s + s^3 L(s^2); 2^(y log2|x|)
 *    via 1 + r Q(r) and an exponent-field scale; one rounding to float.
 *    Special cases follow C99 Annex F (pow(x,0) = pow(1,y) = 1, ...).
 *  atan2: in double: t = min/max of |x|,|y| (folded by pi/4 above
 *    tan(pi/8)), atan t = t + t^3 A(t^2), then octant fix-ups; one rounding.
 *
 * Special cases (as C99/glibc): NaN in -> NaN out; exp(-inf) = 0,
 * exp(+inf) = inf, overflow -> inf, underflow -> 0 with correctly rounded
 * subnormal results on the way (nothing is flushed to zero); log(0) = -inf,
 * log(<0) = NaN, log(inf) = inf; log1p(-1) = -inf; tanh -> +-1;
 * erf(+-inf) = +-1; signed zeros kept (sin(-0) = -0, ...).
 *
 * Accuracy: max distance in ulp to (float) of glibc's double result, i.e.
 * to the correctly rounded value (tests/test_math.c; KILN_MATH_STRIDE=1
 * checks every float — these maxima are from that exhaustive run, with FMA
 * (AVX-512, Zen 4) and again with FMA disabled (AVX2, fmul+fadd): the same):
 *   exp    1    all floats       sin    2    |x| < 4.2e8
 *   exp2   1    all floats       cos    2    |x| < 4.2e8
 *   expm1  1    all floats       tan    2    |x| < 4.2e8
 *   log    2    all floats       tanh   1    all floats
 *   log2   2    all floats       erf    1    all floats
 *   log1p  2    all floats       pow    1    4.2M random pairs + grid
 *                                atan2  1    4.2M random pairs + grid
 * (pow and atan2 round once from a double result accurate to ~2^-32, so
 * 1 ulp is also their analytical bound.) sin/cos/tan: the bound holds for
 * |x| < 2^28 pi/2 = 4.2e8, where the Cody-Waite reduction is exact; past
 * 2^29 it loses bits abruptly (~10% of [2^29, 2^30) is off by > 4 ulp,
 * results are meaningless past ~2^33): results stay finite and |sin|,
 * |cos| <= 1, but are not accurate. A table-based (Payne-Hanek) reduction
 * with gathers would fix that at roughly twice the cost.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "llvm_internal.h"

/* Emission state: a builder positioned in the kernel, and the types. */
typedef struct mb {
  LLVMBuilderRef b;
  LLVMModuleRef mod;
  LLVMContextRef ctx;
  LLVMTypeRef f32, f64, i32, i64;
  bool failed; /* an intrinsic could not be declared (a bug here) */
} mb;

/* ------------------------------------------------------- coefficients */

/* e^r = 1 + r + r^2 P(r), |r| <= ln2/2: rel. error 2^-28.3 */
static const double EXP_P[] = {0.4999999403953552, 0.1666652113199234, 0.04166838899254799,
                               0.008368710055947304, 0.001381461275741458};
/* 2^r = 1 + r Q(r), |r| <= 1/2: rel. error 2^-28.9 */
static const double EXP2_Q[] = {0.6931471824645996,  0.24022647738456726,   0.055503323674201965,
                                0.00961843691766262, 0.0013398873852565885, 0.00015353361959569156};
/* expm1(r) = r + r^2 P(r), |r| <= ln2/2: rel. error 2^-32 */
static const double EXPM1_P[] = {0.5,
                                 0.1666666567325592,
                                 0.041666362434625626,
                                 0.008333389647305012,
                                 0.0013940617209300399,
                                 0.00019845877250190824};
/* log(1+f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2)-1, sqrt(2)-1]: 2^-27.4 */
static const double LOG_P[] = {0.3333333134651184,   -0.2500081956386566, 0.20001226663589478,
                               -0.16623356938362122, 0.14201755821704865, -0.13160185515880585,
                               0.12761594355106354,  -0.07634509354829788};
/* tanh x = x + x^3 P(x^2), |x| <= 0.625: rel. error 2^-30 */
static const double TANH_P[] = {-0.3333333432674408,  0.1333327740430832,    -0.05395244061946869,
                                0.021716546267271042, -0.008188934996724129, 0.0021354982163757086};
/* erf x = x + x P(x^2), |x| <= 0.875: rel. error 2^-32.2 (P(0) = 2/sqrt(pi) - 1
 * so that the leading term is exact) */
static const double ERF_P[] = {0.12837916612625122,   -0.37612634897232056, 0.11283732950687408,
                               -0.026861583814024925, 0.005206747446209192, -0.000821110385004431,
                               8.6753920186311e-05};
/* log(erfc x) = Q(x - 0.875), x in [0.875, 3.925]: error in erf 2^-33 */
static const double ERF_Q[] = {-1.5328243970870972,   -2.4302196502685547,    -0.8265406489372253,
                               -0.04690490663051605,  0.011358948424458504,   -0.002222278621047735,
                               0.0003018183633685112, -2.0451350792427547e-05};
/* sin r = r + r^3 S(r^2), |r| <= pi/4: rel. error 2^-35.8 */
static const double SIN_S[] = {-0.1666666716337204, 0.008333330042660236, -0.00019839333253912628,
                               2.717350753300707e-06};
/* cos r = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4: rel. error 2^-30.9 */
static const double COS_C[] = {0.0416666604578495, -0.0013887719251215458, 2.4463883164571598e-05};
/* tan r = r + r^3 T(r^2), |r| <= pi/4: rel. error 2^-30 */
static const double TAN_T[] = {0.3333333432674408,    0.1333334594964981,   0.05396224185824394,
                               0.021948877722024918,  0.008402704261243343, 0.00495425658300519,
                               -0.000645623542368412, 0.00209232559427619};
/* double: log(1+f) = 2s + s^3 L(s^2), s = f/(2+f), |s| <= 0.1716: 2^-42.4 */
static const double DLOG_L[] = {0.6666666666823725, 0.39999997233120144, 0.28572034674774266,
                                0.22176399433454444, 0.19610120063238365};
/* double: 2^r = 1 + r Q(r), |r| <= 1/2: rel. error 2^-34.3 */
static const double DEXP2_Q[] = {0.6931471807045322,   0.2402265106656317,    0.0555041036599153,
                                 0.009618038131714706, 0.0013333935055014762, 0.0001546675643891588,
                                 1.519615683589898e-05};
/* double: atan t = t + t^3 A(t^2), |t| <= tan(pi/8): rel. error 2^-32.8 */
static const double DATAN_A[] = {-0.33333333262644954, 0.19999957675121224,  -0.14282957427338766,
                                 0.11050485759957407,  -0.08483976953338013, 0.04723175564764989};

#define NCOEF(a) ((int)(sizeof(a) / sizeof *(a)))

static const double LOG2E = 1.4426950216293335;       /* float(1/ln2) */
static const double LOG2E_LO = 1.925963033500011e-08; /* 1/ln2 - LOG2E */
static const double LN2_HI = 0.693145751953125;       /* 15 bits: n*LN2_HI exact */
static const double LN2_LO = 1.428606765330187e-06;
static const double PIO2_1 = 1.5707963109016418; /* pi/2 in 25+25+25+53 bits */
static const double PIO2_2 = 1.5893254712295857e-08;
static const double PIO2_3 = 6.123233932053594e-17;
static const double PIO2_4 = 6.36831716351095e-25;
static const double TWO_OVER_PI = 0.6366197723675814;
static const double PI_D = 3.141592653589793, PI_2_D = 1.5707963267948966, PI_4_D = 0.7853981633974483;

/* ------------------------------------------------------------ helpers */

static LLVMValueRef kf(mb *m, double v) { return LLVMConstReal(m->f32, v); }
static LLVMValueRef kd(mb *m, double v) { return LLVMConstReal(m->f64, v); }
static LLVMValueRef ki(mb *m, int v) { return LLVMConstInt(m->i32, (unsigned long long)(int64_t)v, 1); }
static LLVMValueRef kl(mb *m, int64_t v) { return LLVMConstInt(m->i64, (unsigned long long)v, 1); }
/* A float constant of x's type (f32 or f64). */
static LLVMValueRef kt(LLVMValueRef x, double v) { return LLVMConstReal(LLVMTypeOf(x), v); }

static LLVMValueRef add(mb *m, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(m->b, a, b, ""); }
static LLVMValueRef sub(mb *m, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(m->b, a, b, ""); }
static LLVMValueRef mul(mb *m, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFMul(m->b, a, b, ""); }
static LLVMValueRef quot(mb *m, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFDiv(m->b, a, b, ""); }
static LLVMValueRef sel(mb *m, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(m->b, c, a, b, "");
}
static LLVMValueRef fcmp(mb *m, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(m->b, p, a, b, "");
}
static LLVMValueRef icmp(mb *m, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildICmp(m->b, p, a, b, "");
}
static LLVMValueRef isnan_(mb *m, LLVMValueRef x) { return fcmp(m, LLVMRealUNO, x, x); }

/* Calls llvm.<name> overloaded on the type of args[0]. */
static LLVMValueRef intrin(mb *m, const char *name, LLVMValueRef *args, unsigned n) {
  LLVMTypeRef t = LLVMTypeOf(args[0]);
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) {
    m->failed = true;
    return LLVMGetUndef(t);
  }
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m->mod, id, &t, 1);
  return LLVMBuildCall2(m->b, LLVMIntrinsicGetType(m->ctx, id, &t, 1), fn, args, n, "");
}
static LLVMValueRef intrin1(mb *m, const char *name, LLVMValueRef a) { return intrin(m, name, &a, 1); }
static LLVMValueRef fabs_(mb *m, LLVMValueRef a) { return intrin1(m, "llvm.fabs", a); }
static LLVMValueRef rint_(mb *m, LLVMValueRef a) { return intrin1(m, "llvm.roundeven", a); }
static LLVMValueRef copysign_(mb *m, LLVMValueRef mag, LLVMValueRef sgn) {
  LLVMValueRef args[2] = {mag, sgn};
  return intrin(m, "llvm.copysign", args, 2);
}
/* a*b + c, fused where the target has FMA. */
static LLVMValueRef fma_(mb *m, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return intrin(m, "llvm.fmuladd", args, 3);
}

/* c[0] + x (c[1] + x (c[2] + ...)) in x's type. */
static LLVMValueRef horner(mb *m, LLVMValueRef x, const double *c, int n) {
  LLVMValueRef acc = kt(x, c[n - 1]);
  for (int i = n - 2; i >= 0; i--) acc = fma_(m, acc, x, kt(x, c[i]));
  return acc;
}

/* x limited to [lo, hi]; NaN becomes lo (so later float→int is defined). */
static LLVMValueRef clamp(mb *m, LLVMValueRef x, double lo, double hi) {
  LLVMValueRef t = sel(m, fcmp(m, LLVMRealOGE, x, kt(x, lo)), x, kt(x, lo));
  return sel(m, fcmp(m, LLVMRealOGT, t, kt(x, hi)), kt(x, hi), t);
}

static LLVMValueRef to_i32(mb *m, LLVMValueRef x) { return LLVMBuildFPToSI(m->b, x, m->i32, ""); }
static LLVMValueRef bits32(mb *m, LLVMValueRef x) { return LLVMBuildBitCast(m->b, x, m->i32, ""); }
static LLVMValueRef from_bits32(mb *m, LLVMValueRef i) { return LLVMBuildBitCast(m->b, i, m->f32, ""); }

/* 2^k as a float, k an i32 in [-126, 127]. */
static LLVMValueRef pow2i(mb *m, LLVMValueRef k) {
  LLVMValueRef e = LLVMBuildAdd(m->b, k, ki(m, 127), "");
  return from_bits32(m, LLVMBuildShl(m->b, e, ki(m, 23), ""));
}

/* v * 2^k for k in [-252, 254], in two exact-power steps so that only the
 * last multiplication rounds (subnormal results are rounded once). */
static LLVMValueRef scale2(mb *m, LLVMValueRef v, LLVMValueRef k) {
  LLVMValueRef k1 = LLVMBuildAShr(m->b, k, ki(m, 1), "");
  LLVMValueRef k2 = LLVMBuildSub(m->b, k, k1, "");
  return mul(m, mul(m, v, pow2i(m, k1)), pow2i(m, k2));
}

/* ---------------------------------------------------------- exp family */

/* n = rint(x/ln2) and r = x - n ln2 for finite |x| <= 152 (n*LN2_HI is
 * exact and x - n*LN2_HI is exact by Sterbenz). */
static LLVMValueRef exp_reduce(mb *m, LLVMValueRef x, LLVMValueRef *n) {
  *n = rint_(m, mul(m, x, kf(m, LOG2E)));
  LLVMValueRef r = sub(m, x, mul(m, *n, kf(m, LN2_HI)));
  return fma_(m, *n, kf(m, -LN2_LO), r);
}

/* e^x for x already clamped to [-104, 89] (overflow/underflow happen in
 * the final scaling). */
static LLVMValueRef exp_core(mb *m, LLVMValueRef x) {
  LLVMValueRef n, r = exp_reduce(m, x, &n);
  LLVMValueRef p = horner(m, r, EXP_P, NCOEF(EXP_P));
  LLVMValueRef e = add(m, fma_(m, mul(m, r, r), p, r), kf(m, 1.0));
  return scale2(m, e, to_i32(m, n));
}

static LLVMValueRef m_exp(mb *m, LLVMValueRef x) {
  LLVMValueRef r = exp_core(m, clamp(m, x, -104.0, 89.0));
  r = sel(m, fcmp(m, LLVMRealOGT, x, kf(m, 88.72283172607422)), kf(m, INFINITY), r);
  return sel(m, isnan_(m, x), x, r);
}

static LLVMValueRef m_exp2(mb *m, LLVMValueRef x) {
  LLVMValueRef xc = clamp(m, x, -151.0, 129.0);
  LLVMValueRef n = rint_(m, xc), r = sub(m, xc, n);
  LLVMValueRef p = fma_(m, r, horner(m, r, EXP2_Q, NCOEF(EXP2_Q)), kf(m, 1.0));
  LLVMValueRef res = scale2(m, p, to_i32(m, n));
  res = sel(m, fcmp(m, LLVMRealOGE, x, kf(m, 128.0)), kf(m, INFINITY), res);
  return sel(m, isnan_(m, x), x, res);
}

/* expm1 x = (c + r + r^2 P(r)) 2^n, c = 1 - 2^-n (exact for the n where it
 * matters; 2^-n is capped at 2^30, beyond which c rounds to 1 anyway). */
static LLVMValueRef m_expm1(mb *m, LLVMValueRef x) {
  LLVMValueRef n, r = exp_reduce(m, clamp(m, x, -30.0, 89.0), &n);
  LLVMValueRef k = to_i32(m, n);
  LLVMValueRef h = mul(m, mul(m, r, r), horner(m, r, EXPM1_P, NCOEF(EXPM1_P)));
  LLVMValueRef nk = LLVMBuildNeg(m->b, k, "");
  nk = LLVMBuildSelect(m->b, icmp(m, LLVMIntSLT, nk, ki(m, -30)), ki(m, -30), nk, "");
  LLVMValueRef c = sub(m, kf(m, 1.0), pow2i(m, nk));
  LLVMValueRef res = scale2(m, add(m, add(m, c, r), h), k);
  res = sel(m, fcmp(m, LLVMRealOLT, fabs_(m, x), kf(m, 0x1p-25)), x, res);
  res = sel(m, fcmp(m, LLVMRealOGT, x, kf(m, 88.72283172607422)), kf(m, INFINITY), res);
  return sel(m, isnan_(m, x), x, res);
}

/* ---------------------------------------------------------- log family */

/* u = 2^e m with m in [sqrt(1/2), sqrt(2)) for finite u > 0 (subnormals
 * are scaled by 2^23 first); returns f = m - 1 (exact), *e as a float. */
static LLVMValueRef log_reduce(mb *m, LLVMValueRef u, LLVMValueRef *e) {
  LLVMValueRef den = fcmp(m, LLVMRealOLT, u, kf(m, 0x1p-126));
  LLVMValueRef us = sel(m, den, mul(m, u, kf(m, 0x1p23)), u);
  LLVMValueRef t = LLVMBuildSub(m->b, bits32(m, us), ki(m, 0x3f3504f3), "");
  LLVMValueRef ei = LLVMBuildAShr(m->b, t, ki(m, 23), "");
  ei = LLVMBuildSub(m->b, ei, LLVMBuildSelect(m->b, den, ki(m, 23), ki(m, 0), ""), "");
  *e = LLVMBuildSIToFP(m->b, ei, m->f32, "");
  LLVMValueRef mb_ = LLVMBuildAdd(m->b, LLVMBuildAnd(m->b, t, ki(m, 0x7fffff), ""), ki(m, 0x3f3504f3), "");
  return sub(m, from_bits32(m, mb_), kf(m, 1.0));
}

/* log(1+f) - f = -f^2/2 + f^3 P(f). */
static LLVMValueRef log_tail(mb *m, LLVMValueRef f) {
  LLVMValueRef z = mul(m, f, f);
  return fma_(m, mul(m, f, z), horner(m, f, LOG_P, NCOEF(LOG_P)), mul(m, z, kf(m, -0.5)));
}

/* e ln2 + f + y, summed as (e LN2_HI + f) + (y + e LN2_LO). */
static LLVMValueRef log_sum(mb *m, LLVMValueRef e, LLVMValueRef f, LLVMValueRef y) {
  LLVMValueRef hi = fma_(m, e, kf(m, LN2_HI), f); /* e*LN2_HI exact */
  return add(m, hi, fma_(m, e, kf(m, LN2_LO), y));
}

/* Special values shared by log, log2, log1p: at x == zero_at the result is
 * -inf, below it NaN; +inf stays +inf; NaN stays. */
static LLVMValueRef log_special(mb *m, LLVMValueRef x, LLVMValueRef r, double zero_at) {
  r = sel(m, fcmp(m, LLVMRealOEQ, x, kf(m, INFINITY)), x, r);
  r = sel(m, fcmp(m, LLVMRealOLT, x, kf(m, zero_at)), kf(m, NAN), r);
  r = sel(m, fcmp(m, LLVMRealOEQ, x, kf(m, zero_at)), kf(m, -INFINITY), r);
  return sel(m, isnan_(m, x), x, r);
}

static LLVMValueRef m_log(mb *m, LLVMValueRef x) {
  LLVMValueRef e, f = log_reduce(m, x, &e);
  return log_special(m, x, log_sum(m, e, f, log_tail(m, f)), 0.0);
}

/* log2 x = e + (f + y) log2(e), with log2(e) in two parts. */
static LLVMValueRef m_log2(mb *m, LLVMValueRef x) {
  LLVMValueRef e, f = log_reduce(m, x, &e), y = log_tail(m, f);
  LLVMValueRef lo = fma_(m, f, kf(m, LOG2E_LO), mul(m, y, kf(m, LOG2E + LOG2E_LO)));
  LLVMValueRef r = add(m, fma_(m, f, kf(m, LOG2E), e), lo);
  return log_special(m, x, r, 0.0);
}

/* log1p x: u = 1 + x rounded, d its rounding error (Fast2Sum), then
 * log(u + d) = e ln2 + log(1 + f + d 2^-e). */
static LLVMValueRef m_log1p(mb *m, LLVMValueRef x) {
  LLVMValueRef one = kf(m, 1.0), u = add(m, one, x);
  LLVMValueRef small = fcmp(m, LLVMRealOLE, fabs_(m, x), one);
  LLVMValueRef d = sel(m, small, sub(m, x, sub(m, u, one)), sub(m, one, sub(m, u, x)));
  LLVMValueRef e, f = log_reduce(m, u, &e);
  LLVMValueRef ne = LLVMBuildNeg(m->b, to_i32(m, clamp(m, e, -126.0, 126.0)), "");
  f = fma_(m, d, pow2i(m, ne), f);
  LLVMValueRef r = log_sum(m, e, f, log_tail(m, f));
  r = sel(m, fcmp(m, LLVMRealOLT, fabs_(m, x), kf(m, 0x1p-24)), x, r);
  return log_special(m, x, r, -1.0);
}

/* ----------------------------------------------------------- tanh, erf */

static LLVMValueRef m_tanh(mb *m, LLVMValueRef x) {
  LLVMValueRef a = fabs_(m, x), z = mul(m, x, x);
  LLVMValueRef small = fma_(m, mul(m, x, z), horner(m, z, TANH_P, NCOEF(TANH_P)), x);
  LLVMValueRef e = exp_core(m, clamp(m, add(m, a, a), 0.0, 20.0));
  LLVMValueRef big = sub(m, kf(m, 1.0), quot(m, kf(m, 2.0), add(m, e, kf(m, 1.0))));
  LLVMValueRef r = sel(m, fcmp(m, LLVMRealOLT, a, kf(m, 0.625)), small, copysign_(m, big, x));
  r = sel(m, fcmp(m, LLVMRealOLT, a, kf(m, 0x1p-12)), x, r); /* keeps -0 */
  return sel(m, isnan_(m, x), x, r);
}

static LLVMValueRef m_erf(mb *m, LLVMValueRef x) {
  LLVMValueRef a = fabs_(m, x);
  LLVMValueRef small = fma_(m, x, horner(m, mul(m, x, x), ERF_P, NCOEF(ERF_P)), x);
  LLVMValueRef t = sub(m, clamp(m, a, 0.875, 3.925), kf(m, 0.875));
  LLVMValueRef q = horner(m, t, ERF_Q, NCOEF(ERF_Q));
  LLVMValueRef big = sub(m, kf(m, 1.0), exp_core(m, clamp(m, q, -104.0, 0.0)));
  big = sel(m, fcmp(m, LLVMRealOGT, a, kf(m, 3.925)), kf(m, 1.0), big);
  LLVMValueRef r = sel(m, fcmp(m, LLVMRealOLT, a, kf(m, 0.875)), small, copysign_(m, big, x));
  return sel(m, isnan_(m, x), x, r);
}

/* ---------------------------------------------------------------- trig */

/* x = j pi/2 + r; returns r (float, |r| <= pi/4 clamped so that huge |x|
 * stays finite), *z = r^2 rounded from double and *q = j mod 4. */
static LLVMValueRef trig_reduce(mb *m, LLVMValueRef x, LLVMValueRef *z, LLVMValueRef *q) {
  LLVMValueRef xd = LLVMBuildFPExt(m->b, x, m->f64, "");
  LLVMValueRef j = rint_(m, mul(m, xd, kd(m, TWO_OVER_PI)));
  LLVMValueRef r = sub(m, xd, mul(m, j, kd(m, PIO2_1)));
  r = sub(m, r, mul(m, j, kd(m, PIO2_2)));
  r = sub(m, r, mul(m, j, kd(m, PIO2_3)));
  r = sub(m, r, mul(m, j, kd(m, PIO2_4)));
  r = sel(m, fcmp(m, LLVMRealOGT, r, kd(m, 0.7854)), kd(m, 0.7854), r);
  r = sel(m, fcmp(m, LLVMRealOLT, r, kd(m, -0.7854)), kd(m, -0.7854), r);
  LLVMValueRef jq = sub(m, j, mul(m, kd(m, 4.0), intrin1(m, "llvm.floor", mul(m, j, kd(m, 0.25)))));
  *q = to_i32(m, clamp(m, jq, 0.0, 3.0));
  *z = LLVMBuildFPTrunc(m->b, mul(m, r, r), m->f32, "");
  return LLVMBuildFPTrunc(m->b, r, m->f32, "");
}

/* sin(x) (want_cos false) or cos(x) from sin r, cos r and the quadrant. */
static LLVMValueRef m_sincos(mb *m, LLVMValueRef x, bool want_cos) {
  LLVMValueRef z, q, r = trig_reduce(m, x, &z, &q);
  LLVMValueRef s = fma_(m, mul(m, r, z), horner(m, z, SIN_S, NCOEF(SIN_S)), r);
  LLVMValueRef c =
      fma_(m, mul(m, z, z), horner(m, z, COS_C, NCOEF(COS_C)), fma_(m, z, kf(m, -0.5), kf(m, 1.0)));
  LLVMValueRef odd = icmp(m, LLVMIntNE, LLVMBuildAnd(m->b, q, ki(m, 1), ""), ki(m, 0));
  LLVMValueRef v = want_cos ? sel(m, odd, s, c) : sel(m, odd, c, s);
  /* sin: negate in quadrants 2, 3; cos: in quadrants 1, 2. */
  LLVMValueRef qs = want_cos ? LLVMBuildAdd(m->b, q, ki(m, 1), "") : q;
  LLVMValueRef sign = LLVMBuildShl(m->b, LLVMBuildAnd(m->b, qs, ki(m, 2), ""), ki(m, 30), "");
  LLVMValueRef res = from_bits32(m, LLVMBuildXor(m->b, bits32(m, v), sign, ""));
  if (!want_cos) res = sel(m, fcmp(m, LLVMRealOLT, fabs_(m, x), kf(m, 0x1p-12)), x, res);
  return res;
}

static LLVMValueRef m_tan(mb *m, LLVMValueRef x) {
  LLVMValueRef z, q, r = trig_reduce(m, x, &z, &q);
  LLVMValueRef t = fma_(m, mul(m, r, z), horner(m, z, TAN_T, NCOEF(TAN_T)), r);
  LLVMValueRef odd = icmp(m, LLVMIntNE, LLVMBuildAnd(m->b, q, ki(m, 1), ""), ki(m, 0));
  LLVMValueRef res = sel(m, odd, quot(m, kf(m, -1.0), t), t);
  return sel(m, fcmp(m, LLVMRealOLT, fabs_(m, x), kf(m, 0x1p-12)), x, res);
}

/* ----------------------------------------------------- pow (in double) */

/* log2 a for a double a = |x| of a float x (so a is normal or 0/inf/NaN;
 * those give garbage here and are selected by the caller). */
static LLVMValueRef dlog2(mb *m, LLVMValueRef a) {
  LLVMValueRef t = LLVMBuildSub(m->b, LLVMBuildBitCast(m->b, a, m->i64, ""), kl(m, 0x3fe6a09e667f3bcdLL), "");
  LLVMValueRef e = LLVMBuildSIToFP(m->b, LLVMBuildAShr(m->b, t, kl(m, 52), ""), m->f64, "");
  LLVMValueRef mant = LLVMBuildAnd(m->b, t, kl(m, 0xfffffffffffffLL), "");
  mant = LLVMBuildAdd(m->b, mant, kl(m, 0x3fe6a09e667f3bcdLL), "");
  LLVMValueRef f = sub(m, LLVMBuildBitCast(m->b, mant, m->f64, ""), kd(m, 1.0));
  LLVMValueRef s = quot(m, f, add(m, f, kd(m, 2.0)));
  LLVMValueRef z = mul(m, s, s);
  LLVMValueRef ln = fma_(m, mul(m, s, z), horner(m, z, DLOG_L, NCOEF(DLOG_L)), add(m, s, s));
  return fma_(m, ln, kd(m, 1.4426950408889634), e);
}

/* 2^t in double for any t (NaN → garbage, selected by the caller). */
static LLVMValueRef dexp2(mb *m, LLVMValueRef t) {
  LLVMValueRef tc = clamp(m, t, -200.0, 200.0);
  LLVMValueRef n = rint_(m, tc), r = sub(m, tc, n);
  LLVMValueRef p = fma_(m, r, horner(m, r, DEXP2_Q, NCOEF(DEXP2_Q)), kd(m, 1.0));
  LLVMValueRef k = LLVMBuildFPToSI(m->b, n, m->i64, "");
  LLVMValueRef sc = LLVMBuildShl(m->b, LLVMBuildAdd(m->b, k, kl(m, 1023), ""), kl(m, 52), "");
  return mul(m, p, LLVMBuildBitCast(m->b, sc, m->f64, ""));
}

static LLVMValueRef m_pow(mb *m, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef ax = LLVMBuildFPExt(m->b, fabs_(m, x), m->f64, "");
  LLVMValueRef yd = LLVMBuildFPExt(m->b, y, m->f64, "");
  LLVMValueRef l = dlog2(m, ax);
  l = sel(m, fcmp(m, LLVMRealOEQ, ax, kd(m, 0.0)), kd(m, -INFINITY), l);
  l = sel(m, fcmp(m, LLVMRealOEQ, ax, kd(m, INFINITY)), kd(m, INFINITY), l);
  l = sel(m, isnan_(m, ax), ax, l);
  LLVMValueRef t = mul(m, yd, l); /* NaN for 0*inf: |x| = 1 and y = inf */
  LLVMValueRef mag = LLVMBuildFPTrunc(m->b, dexp2(m, t), m->f32, "");
  /* y integer (inf counts) and odd (|y| < 2^24; larger floats are even) */
  LLVMValueRef yint = fcmp(m, LLVMRealOEQ, rint_(m, y), y);
  LLVMValueRef yi = to_i32(m, clamp(m, y, -0x1p24, 0x1p24));
  LLVMValueRef odd =
      LLVMBuildAnd(m->b, yint, LLVMBuildTrunc(m->b, yi, LLVMInt1TypeInContext(m->ctx), ""), "");
  LLVMValueRef neg = icmp(m, LLVMIntSLT, bits32(m, x), ki(m, 0));
  LLVMValueRef r = sel(m, LLVMBuildAnd(m->b, neg, odd, ""), LLVMBuildFNeg(m->b, mag, ""), mag);
  r = sel(m, isnan_(m, t), kf(m, NAN), r);
  /* x < 0 finite with y finite non-integer: NaN */
  LLVMValueRef xneg_fin = fcmp(m, LLVMRealOGT, x, kf(m, -INFINITY));
  xneg_fin = LLVMBuildAnd(m->b, xneg_fin, fcmp(m, LLVMRealOLT, x, kf(m, 0.0)), "");
  LLVMValueRef ynonint =
      LLVMBuildAnd(m->b, LLVMBuildNot(m->b, yint, ""), LLVMBuildNot(m->b, isnan_(m, y), ""), "");
  r = sel(m, LLVMBuildAnd(m->b, xneg_fin, ynonint, ""), kf(m, NAN), r);
  /* pow(-1, +-inf) = 1, pow(1, y) = 1, pow(x, +-0) = 1 (even for NaN) */
  LLVMValueRef yinf = fcmp(m, LLVMRealOEQ, fabs_(m, y), kf(m, INFINITY));
  r = sel(m, LLVMBuildAnd(m->b, fcmp(m, LLVMRealOEQ, x, kf(m, -1.0)), yinf, ""), kf(m, 1.0), r);
  r = sel(m, fcmp(m, LLVMRealOEQ, x, kf(m, 1.0)), kf(m, 1.0), r);
  return sel(m, fcmp(m, LLVMRealOEQ, y, kf(m, 0.0)), kf(m, 1.0), r);
}

/* ---------------------------------------------------- atan2 (in double) */

static LLVMValueRef m_atan2(mb *m, LLVMValueRef y, LLVMValueRef x) {
  LLVMValueRef ax = LLVMBuildFPExt(m->b, fabs_(m, x), m->f64, "");
  LLVMValueRef ay = LLVMBuildFPExt(m->b, fabs_(m, y), m->f64, "");
  LLVMValueRef inf = kd(m, INFINITY), one = kd(m, 1.0);
  LLVMValueRef both_inf =
      LLVMBuildAnd(m->b, fcmp(m, LLVMRealOEQ, ax, inf), fcmp(m, LLVMRealOEQ, ay, inf), "");
  ax = sel(m, both_inf, one, ax);
  ay = sel(m, both_inf, one, ay);
  LLVMValueRef swap = fcmp(m, LLVMRealOGT, ay, ax);
  LLVMValueRef num = sel(m, swap, ax, ay), den = sel(m, swap, ay, ax);
  den = sel(m, fcmp(m, LLVMRealOEQ, den, kd(m, 0.0)), one, den); /* atan2(+-0, +-0) */
  /* above tan(pi/8): atan(n/d) = pi/4 + atan((n-d)/(n+d)); both exact in
   * double since n/d is in (0.41, 1] */
  LLVMValueRef big = fcmp(m, LLVMRealOGT, num, mul(m, den, kd(m, 0.41421356237309503)));
  LLVMValueRef t = quot(m, sel(m, big, sub(m, num, den), num), sel(m, big, add(m, num, den), den));
  LLVMValueRef z = mul(m, t, t);
  LLVMValueRef a = fma_(m, mul(m, t, z), horner(m, z, DATAN_A, NCOEF(DATAN_A)), t);
  a = sel(m, big, add(m, a, kd(m, PI_4_D)), a);
  a = sel(m, swap, sub(m, kd(m, PI_2_D), a), a);
  a = sel(m, icmp(m, LLVMIntSLT, bits32(m, x), ki(m, 0)), sub(m, kd(m, PI_D), a), a);
  return copysign_(m, LLVMBuildFPTrunc(m->b, a, m->f32, ""), y);
}

/* ------------------------------------------------------------- entry */

LLVMValueRef llvm_math_f32(LLVMBuilderRef b, LLVMModuleRef mod, kir_op op, LLVMValueRef a, LLVMValueRef c,
                           bool *failed) {
  mb m = {.b = b, .mod = mod, .ctx = LLVMGetModuleContext(mod)};
  m.f32 = LLVMFloatTypeInContext(m.ctx);
  m.f64 = LLVMDoubleTypeInContext(m.ctx);
  m.i32 = LLVMInt32TypeInContext(m.ctx);
  m.i64 = LLVMInt64TypeInContext(m.ctx);
  LLVMValueRef r;
  switch (op) {
  case KIR_EXP: r = m_exp(&m, a); break;
  case KIR_EXP2: r = m_exp2(&m, a); break;
  case KIR_EXPM1: r = m_expm1(&m, a); break;
  case KIR_LOG: r = m_log(&m, a); break;
  case KIR_LOG2: r = m_log2(&m, a); break;
  case KIR_LOG1P: r = m_log1p(&m, a); break;
  case KIR_TANH: r = m_tanh(&m, a); break;
  case KIR_ERF: r = m_erf(&m, a); break;
  case KIR_SIN: r = m_sincos(&m, a, false); break;
  case KIR_COS: r = m_sincos(&m, a, true); break;
  case KIR_TAN: r = m_tan(&m, a); break;
  case KIR_POW: r = m_pow(&m, a, c); break;     /* pow(a, c) */
  case KIR_ATAN2: r = m_atan2(&m, a, c); break; /* atan2(a, c): a is y */
  default: return NULL;
  }
  if (m.failed && failed) *failed = true;
  return r;
}
