/*
 * handle.h — memory for the objects the public API hands out (tensors,
 * storages, optimizers, ONNX models), so that a stale or
 * foreign handle is an error at every entry point, never a read of freed
 * memory (as handle-based C APIs do it; internal, not kiln.h).
 *
 * Each kind of handle has its own region of address space, reserved once
 * and never given back, cut into fixed-size slots that only ever hold
 * objects of that kind: a slot keeps, in a header before the object,
 * whether the object is live and, once freed, how it died. So a handle is
 * classified by its address alone: outside the region (or not at a slot's
 * start) it was never such a handle; inside, the header says live or dead.
 * Slots are grouped into chunks of at least a page; a chunk whose every
 * slot is dead waits in a quarantine (FIFO) and is reused only after
 * graph_handle_quarantine[k] (256 for tensors) more chunks of the kind
 * died after it — in a loop that makes and frees tensors, about 3,800
 * tensor deaths: until then a stale handle is reported dead; after that
 * its slot may hold a new object, which the stale handle then aliases. Memory stays bounded by the live objects' chunks plus the
 * quarantine (2 MiB of tensor slots, 1 MiB of storages).
 *
 * Thread-safe: each thread allocates from a chunk of its own; frees from
 * any thread.
 */
#ifndef KILN_GRAPH_HANDLE_H
#define KILN_GRAPH_HANDLE_H

#include <stddef.h>

typedef enum graph_handle_kind {
  GRAPH_HANDLE_TENSOR,
  GRAPH_HANDLE_STORAGE,
  GRAPH_HANDLE_OPTIMIZER,
  GRAPH_HANDLE_ONNX_MODEL,
  GRAPH_HANDLE_KINDS /* (process groups are looked up in dist's table instead) */
} graph_handle_kind;

typedef enum graph_handle_state {
  GRAPH_HANDLE_LIVE,      /* a live object of the kind */
  GRAPH_HANDLE_DEAD,      /* freed; the death code says how */
  GRAPH_HANDLE_FOREIGN,   /* never an object of the kind */
} graph_handle_state;

/** A zeroed object of `size` bytes in a new slot of kind k's region; the
 *  first call for a kind fixes its slot size (later calls pass the same
 *  size). Counts as one GRAPH_FAULT_HOST allocation; NULL when out of
 *  memory or address space. */
void *graph_handle_alloc(graph_handle_kind k, size_t size);
/** Frees an object from graph_handle_alloc(k): its memory is cleared, its
 *  slot marked dead with `death` (the caller's code for how it died, e.g.
 *  a scope's depth) and not given to another object before its chunk
 *  leaves the quarantine. */
void graph_handle_free(graph_handle_kind k, void *p, int death);
/** What p is for kind k; for GRAPH_HANDLE_DEAD, *death (when non-NULL)
 *  receives the code graph_handle_free was given. Never reads memory
 *  outside the region, so any pointer may be asked about. */
graph_handle_state graph_handle_state_of(graph_handle_kind k, const void *p, int *death);
/** Dead chunks that wait before one of kind k is reused. */
extern const long long graph_handle_quarantine[GRAPH_HANDLE_KINDS];
/** Bytes of kind k's region ever handed out (its high-water mark): live
 *  objects' chunks plus the quarantine, for tests. */
size_t graph_handle_bytes(graph_handle_kind k);
/** Slots of kind k in use (allocated and not freed): for leak checks. */
long long graph_handle_live(graph_handle_kind k);

#endif /* KILN_GRAPH_HANDLE_H */
