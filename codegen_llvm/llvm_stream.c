/*
 * llvm_stream.c — streaming (nontemporal) stores on the CPU.
 *
 * A kernel IR STORE flagged nontemporal writes an output too large for the
 * caches: a plain store first reads each line it writes (write-allocate),
 * so W1 of bench/ moved 6 units of memory traffic for its 5. x86 streams
 * vector stores with MOVNTPS and friends, which need the vector's own
 * alignment, and LLVM's loop vectoriser refuses a loop whose nontemporal
 * store it cannot prove aligned. So the flag is carried through the
 * optimiser by a marker instead, and set only afterwards:
 *  - lowering tags each flagged store with a TBAA access tag of type
 *    "kiln stream" under its own root (no alias conclusion follows from
 *    it: every other access is untagged), which survives vectorisation, and tells LLVM the buffer is
 *    64-byte aligned (llvm.assume with an "align" bundle; kir.h's contract);
 *  - the first parallel range, when innermost, starts each chunk at a
 *    multiple of 64 elements, so the vectorised loop's stores are aligned
 *    and LLVM's alignment-from-assumptions pass marks them so;
 *  - after the pipeline, llvm_stream_mark sets !nontemporal on the tagged
 *    vector stores whose alignment covers their size. Scalar remainders
 *    and anything LLVM could not prove aligned stay plain stores.
 */
#include <string.h>

#include <llvm-c/Target.h>

#include "llvm_internal.h"

static const char tag_name[] = "kiln stream";

/* The access tag !{T, T, i64 0} of the scalar type T = !{!"kiln stream",
 * R, i64 0} under its own root R = !{!"kiln stream"} (metadata nodes are
 * uniqued, so building it again yields the same value). */
static LLVMValueRef stream_tag(LLVMContextRef ctx) {
  LLVMMetadataRef name = LLVMMDStringInContext2(ctx, tag_name, sizeof tag_name - 1);
  LLVMMetadataRef root = LLVMMDNodeInContext2(ctx, &name, 1);
  LLVMMetadataRef zero = LLVMValueAsMetadata(LLVMConstInt(LLVMInt64TypeInContext(ctx), 0, false));
  LLVMMetadataRef type_ops[3] = {name, root, zero};
  LLVMMetadataRef type = LLVMMDNodeInContext2(ctx, type_ops, 3);
  LLVMMetadataRef tag_ops[3] = {type, type, zero};
  return LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, tag_ops, 3));
}

static unsigned kind(LLVMContextRef ctx, const char *name) {
  return LLVMGetMDKindIDInContext(ctx, name, (unsigned)strlen(name));
}

void llvm_stream_tag_store(LLVMValueRef store) {
  LLVMContextRef ctx = LLVMGetTypeContext(LLVMTypeOf(store));
  LLVMSetMetadata(store, kind(ctx, "tbaa"), stream_tag(ctx));
}

bool llvm_assume_aligned(LLVMBuilderRef b, LLVMModuleRef mod, LLVMValueRef ptr, unsigned align) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  unsigned id = LLVMLookupIntrinsicID("llvm.assume", 11);
  if (!id) return false;
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
  LLVMTypeRef fty = LLVMIntrinsicGetType(ctx, id, NULL, 0);
  LLVMValueRef bundle_args[2] = {ptr, LLVMConstInt(LLVMInt64TypeInContext(ctx), align, false)};
  LLVMOperandBundleRef bundle = LLVMCreateOperandBundle("align", 5, bundle_args, 2);
  LLVMValueRef yes = LLVMConstInt(LLVMInt1TypeInContext(ctx), 1, false);
  LLVMBuildCallWithOperandBundles(b, fty, fn, &yes, 1, &bundle, 1, "");
  LLVMDisposeOperandBundle(bundle);
  return true;
}

/* Size in bytes of a store's value when it is a vector, else 0. */
static unsigned long long vector_bytes(LLVMModuleRef mod, LLVMValueRef store) {
  LLVMTypeRef t = LLVMTypeOf(LLVMGetOperand(store, 0));
  if (LLVMGetTypeKind(t) != LLVMVectorTypeKind) return 0;
  return LLVMStoreSizeOfType(LLVMGetModuleDataLayout(mod), t);
}

int llvm_stream_mark(LLVMModuleRef mod) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMValueRef tag = stream_tag(ctx);
  unsigned tbaa = kind(ctx, "tbaa"), nt = kind(ctx, "nontemporal");
  LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(ctx), 1, false));
  LLVMValueRef nt_node = LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, &one, 1));
  int marked = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
      for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i)) {
        if (!LLVMIsAStoreInst(i) || LLVMGetMetadata(i, tbaa) != tag) continue;
        unsigned long long bytes = vector_bytes(mod, i);
        if (bytes >= 16 && (bytes & (bytes - 1)) == 0 && LLVMGetAlignment(i) >= bytes) {
          LLVMSetMetadata(i, nt, nt_node);
          marked++;
        }
      }
  return marked;
}
