/* Above the runtime, only its narrow interface (runtime.h) is visible:
 * the kernel IR, the passes and the code generators are not. */
#include "runtime.h"
#include "kir.h"
