/* The passes sit below the runtime: its headers are out of reach. */
#include "kir.h"
#include "rt_internal.h"
