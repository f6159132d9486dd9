/*
 * status.c — the names of kiln_status codes. The status enum is kiln.h's
 * (every layer returns it); its names live here, below the API, so that
 * passes and the runtime can put them in messages without calling a
 * public function (api/errors.c's kiln_status_name forwards here).
 */
#include "graph.h"

const char *graph_status_name(kiln_status s) {
  switch (s) {
  case KILN_OK: return "KILN_OK";
  case KILN_ERR_ARG: return "KILN_ERR_ARG";
  case KILN_ERR_SHAPE: return "KILN_ERR_SHAPE";
  case KILN_ERR_DTYPE: return "KILN_ERR_DTYPE";
  case KILN_ERR_OOM: return "KILN_ERR_OOM";
  case KILN_ERR_DEVICE: return "KILN_ERR_DEVICE";
  case KILN_ERR_COMPILE: return "KILN_ERR_COMPILE";
  case KILN_ERR_IO: return "KILN_ERR_IO";
  case KILN_ERR_UNSUPPORTED: return "KILN_ERR_UNSUPPORTED";
  case KILN_ERR_INDEX: return "KILN_ERR_INDEX";
  }
  return "KILN_ERR_UNKNOWN";
}
