/*
 * kiln/types.h — the types every layer of Kiln shares: the element types
 * (kiln_dtype), devices, status codes, the dimension limit, the opaque
 * handle types and the profiler's kernel record. Public (kiln/kiln.h
 * includes it) and the bottom of the internal layering: the graph layer
 * and everything above it may include this header, while the function
 * declarations of kiln/kiln.h are visible to the API layer and above only
 * (docs/internals.md, "Layers").
 */
#ifndef KILN_TYPES_H
#define KILN_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest number of dimensions a tensor may have. */
#define KILN_MAX_DIMS 16

/** Opaque, reference-counted tensor handle (a view of a storage). */
typedef struct kiln_tensor kiln_tensor;
/** Opaque, reference-counted flat storage. */
typedef struct kiln_storage kiln_storage;

/** Element types. Torch names: Bool, Byte=U8, Char=I8, Short=I16, Int=I32,
 *  Long=I64, Half=F16, BFloat16=BF16, Float=F32, Double=F64. F16 and BF16
 *  compute in F32 and round (to nearest even) when stored. */
typedef enum kiln_dtype {
  KILN_BOOL = 0,
  KILN_U8 = 1,
  KILN_I8 = 2,
  KILN_I16 = 3,
  KILN_I32 = 4,
  KILN_I64 = 5,
  KILN_F16 = 6,
  KILN_BF16 = 7,
  KILN_F32 = 8,
  KILN_F64 = 9,
  KILN_DTYPE_COUNT = 10
} kiln_dtype;

/** Devices. */
typedef enum kiln_device { KILN_CPU = 0, KILN_CUDA = 1 } kiln_device;

/** Status codes: KILN_OK or a negative error. */
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERR_ARG = -1,         /* bad argument: NULL, out-of-range dim, ... */
  KILN_ERR_SHAPE = -2,       /* sizes that do not fit the op */
  KILN_ERR_DTYPE = -3,       /* dtype the op does not accept */
  KILN_ERR_OOM = -4,         /* an allocation failed */
  KILN_ERR_DEVICE = -5,      /* device unavailable or mismatched */
  KILN_ERR_COMPILE = -6,     /* kernel compilation failed */
  KILN_ERR_IO = -7,          /* file error */
  KILN_ERR_UNSUPPORTED = -8, /* not implemented for these arguments */
  KILN_ERR_INDEX = -9        /* index out of range */
} kiln_status;

/** The record of one kernel run. Fields may be added after these, never
 *  renamed. Strings are static or owned by Kiln (valid until the next
 *  kiln_profile_begin). Bytes count each buffer element read or written
 *  once; times in nanoseconds. */
typedef struct kiln_kernel_record {
  const char *name;      /* what was fused, e.g. "E_mul_add_relu_16777216" */
  const char *backend;   /* "llvm", "cuda", "blas", ... */
  int n_ops;             /* graph ops fused into this kernel */
  int64_t numel;         /* elements in its iteration space */
  int64_t bytes_read;    /* bytes moved from/to memory, counted once */
  int64_t bytes_written;
  int64_t flops;
  int64_t compile_ns;    /* 0 on a cache hit */
  int64_t run_ns;
  bool cache_hit;        /* no compile: in memory, or loaded from the disk cache */
  int threads;
  int64_t load_ns;       /* > 0 when this run's code was loaded from the
                            on-disk kernel cache (KILN_CACHE_DIR): the time
                            to read, check and link it, in ns (then
                            cache_hit is true and compile_ns 0); else 0 */
} kiln_kernel_record;

#ifdef __cplusplus
}
#endif

#endif /* KILN_TYPES_H */
