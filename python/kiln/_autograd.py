"""Reverse-mode gradients from Python over kiln_grad.

Kiln differentiates the lazy graph itself: no tape, no flags. The package
keeps only what Torch's interface needs on top: `requires_grad` marks a
leaf (the tensors backward() fills), and a registry of the live leaves
(weak references) tells backward() what to differentiate with respect to.
Results of ops on a tensor that requires grad report requires_grad too.

Differences from Torch: backward() gives every live leaf with
requires_grad=True a `.grad`, zeros for a leaf the output does not depend
on (Torch leaves it None), because kiln_grad gives zeros for an unused
wrt and telling them apart would force the graph. Gradients are exact
graph functions: kiln.grad's results can be differentiated again.
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ._errors import check
from ._lib import lib
from ._tensor import Tensor, _handle, _wrap

_leaves: Dict[int, "weakref.ref[Tensor]"] = {}


def register_leaf(t: Tensor, on: bool) -> None:
    """Adds (on) or removes a leaf from the registry backward() reads."""
    key = id(t)
    if on:
        _leaves[key] = weakref.ref(t, lambda _r, k=key: _leaves.pop(k, None))
    else:
        _leaves.pop(key, None)


def live_leaves() -> List[Tensor]:
    """The live tensors marked requires_grad=True as leaves."""
    out = []
    for r in list(_leaves.values()):
        t = r()
        if t is not None and t._h is not None and t._rg and t._leaf:
            out.append(t)
    return out


TensorOrSeq = Union[Tensor, Sequence[Tensor]]


def _seq(x: Optional[TensorOrSeq]) -> List[Tensor]:
    if x is None:
        return []
    return [x] if isinstance(x, Tensor) else list(x)


def _array(ts: Sequence[Tensor]):
    return (ctypes.c_void_p * len(ts))(*[_handle(t) for t in ts])


def grad(outputs: TensorOrSeq, wrt: TensorOrSeq,
         cotangents: Optional[TensorOrSeq] = None) -> Tuple[Tensor, ...]:
    """Vector-Jacobian products (kiln_grad): for each wrt[j], the sum over
    outputs of (d outputs[i] / d wrt[j])^T cotangents[i], with wrt[j]'s
    sizes and dtype (zeros when no output depends on it). Without
    cotangents every output must have one element (cotangent 1). The
    results are lazy and differentiable again (second derivatives).
    Raises KilnDtypeError for non-float tensors, KilnShapeError for a
    cotangent of the wrong sizes. Torch: torch.autograd.grad(outputs, wrt,
    cotangents, create_graph=True, allow_unused=True)."""
    outs, ws, cots = _seq(outputs), _seq(wrt), _seq(cotangents)
    if not outs or not ws:
        raise ValueError("kiln.grad: outputs and wrt must not be empty")
    if cots and len(cots) != len(outs):
        raise ValueError(f"kiln.grad: {len(cots)} cotangents for "
                         f"{len(outs)} outputs")
    res = (ctypes.c_void_p * len(ws))()
    check(lib.kiln_grad(_array(outs), _array(cots) if cots else None,
                        len(outs), _array(ws), len(ws), res))
    return tuple(_wrap(h, True) for h in res)


def backward(t: Tensor, gradient: Optional[Tensor] = None) -> None:
    """Accumulates d t / d leaf into leaf.grad for every live leaf with
    requires_grad=True (see the module docstring). `gradient` is the
    cotangent (needed unless t has one element)."""
    leaves = live_leaves()
    if not leaves:
        raise RuntimeError("element 0 of tensors does not require grad and "
                           "does not have a grad_fn")
    gs = grad(t, leaves, None if gradient is None else gradient)
    for leaf, g in zip(leaves, gs):
        g = g.detach()
        leaf._grad = g if leaf._grad is None else (leaf._grad + g).detach()
