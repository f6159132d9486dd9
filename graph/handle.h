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
 *
 * A slot is handed out once: a stale handle is reported dead however long
 * ago it died, never taken for a newer object. Slots are grouped into
 * chunks of at least a page; a chunk whose every slot is dead waits in a
 * quarantine (FIFO, graph_handle_quarantine[k] chunks: for tensors the
 * last ~3,800 deaths in a loop that makes and frees them), where each slot
 * keeps its death code; after that the chunk's memory is returned to the
 * system and its slots read as dead with GRAPH_HANDLE_DEATH_UNKNOWN. So
 * memory stays bounded by the live objects' chunks, the quarantine (2 MiB
 * of tensor slots, 1 MiB of storages) and a batch being returned; the
 * address space used grows by a slot per object ever made (512 bytes a
 * tensor, of 32 TiB reserved: 2^36 tensors). Should a process use it up,
 * returned chunks are taken again, oldest address first, and from then on
 * a handle stale since before that may alias a newer object.
 *
 * Memory is taken and returned in 2 MiB transparent huge pages where the
 * kernel gives them (THP "always" or "madvise"); without them each 4 KiB
 * page is populated and returned on its own (slower), and kernels
 * that keep empty page tables after MADV_DONTNEED keep one byte of page
 * table per tensor ever made.
 *
 * Thread-safe: each thread allocates from a chunk of its own; frees from
 * any thread.
 */
#ifndef KILN_GRAPH_HANDLE_H
#define KILN_GRAPH_HANDLE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/** The death code of a slot whose chunk left the quarantine. */
#define GRAPH_HANDLE_DEATH_UNKNOWN INT_MIN

typedef enum graph_handle_kind {
  GRAPH_HANDLE_TENSOR,
  GRAPH_HANDLE_STORAGE,
  GRAPH_HANDLE_OPTIMIZER,
  GRAPH_HANDLE_ONNX_MODEL,
  GRAPH_HANDLE_TEST, /* for the handle tests alone */
  GRAPH_HANDLE_KINDS /* (process groups are looked up in dist's table instead) */
} graph_handle_kind;

typedef enum graph_handle_state {
  GRAPH_HANDLE_LIVE,      /* a live object of the kind */
  GRAPH_HANDLE_DEAD,      /* freed; the death code says how, where still known */
  GRAPH_HANDLE_FOREIGN,   /* never an object of the kind */
} graph_handle_state;

/** A zeroed object of `size` bytes in a new slot of kind k's region; the
 *  first call for a kind fixes its slot size (later calls pass the same
 *  size). Counts as one GRAPH_FAULT_HOST allocation; NULL when out of
 *  memory or address space. */
void *graph_handle_alloc(graph_handle_kind k, size_t size);
/** Frees an object from graph_handle_alloc(k): its memory is cleared, its
 *  slot marked dead with `death` (the caller's code for how it died, e.g.
 *  a scope's depth; not GRAPH_HANDLE_DEATH_UNKNOWN) and never given to
 *  another object (but after the wrap, above). */
void graph_handle_free(graph_handle_kind k, void *p, int death);
/** What p is for kind k; for GRAPH_HANDLE_DEAD, *death (when non-NULL)
 *  receives the code graph_handle_free was given, or
 *  GRAPH_HANDLE_DEATH_UNKNOWN once its chunk left the quarantine (also for
 *  the rare slot of such a chunk that a thread ended before handing out).
 *  Never reads memory outside the region, so any pointer may be asked
 *  about. */
graph_handle_state graph_handle_state_of(graph_handle_kind k, const void *p, int *death);
/** Dead chunks of kind k whose slots keep their death codes. */
extern const long long graph_handle_quarantine[GRAPH_HANDLE_KINDS];
/** Bytes of kind k's region ever handed out (address space used). */
size_t graph_handle_bytes(graph_handle_kind k);
/** Bytes of kind k's region handed out and not returned to the system:
 *  live objects' chunks, the quarantine and the batch being returned. */
size_t graph_handle_resident(graph_handle_kind k);
/** Slots of kind k in use (allocated and not freed): for leak checks. */
long long graph_handle_live(graph_handle_kind k);

/** For tests: caps kind k's region at `bytes` (at least 16 MiB), before
 *  its first allocation; false after it. */
bool graph_handle_limit(graph_handle_kind k, size_t bytes);

#endif /* KILN_GRAPH_HANDLE_H */
