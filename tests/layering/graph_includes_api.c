/* A graph-layer file may not see the public API's declarations (only
 * kiln/types.h): this include must fail. */
#include "graph.h"
#include "kiln/kiln.h"
