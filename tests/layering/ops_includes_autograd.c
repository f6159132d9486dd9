/* The op layer sits below autograd: gradient internals are out of reach. */
#include "ops.h"
#include "autograd.h"
