/* The two code generators are siblings: neither sees the other. */
#include "llvm_backend.h"
#include "cuda_backend.h"
