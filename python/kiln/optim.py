"""kiln.optim: torch.optim's SGD, Adam and AdamW over Kiln's C optimizers
(kiln_sgd, kiln_adam). step() records each parameter's update lazily, as
one fused kernel per parameter, from the parameters' .grad (filled by
backward()); state_dict()/load_state_dict() go through the C library's
safetensors state files (kiln_optimizer_save / kiln_optimizer_load), which
restore a run bit-exactly.
"""
from __future__ import annotations

import ctypes
import os
import tempfile
from typing import Dict, Iterable, List, Optional, Tuple

from ._creation import zeros_like
from ._errors import check, take_error
from ._io import load as _load_file
from ._io import save as _save_file
from ._lib import lib
from ._tensor import Tensor, _handle

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]


class Optimizer:
    """An optimizer over a fixed list of parameters (a C kiln_optimizer,
    which holds a reference to each). `lr` reads and sets the learning
    rate (param_groups[0]["lr"] in Torch)."""

    def __init__(self, params: Iterable[Tensor]) -> None:
        self.params: List[Tensor] = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        self._arr = (ctypes.c_void_p * len(self.params))(
            *[_handle(p) for p in self.params])
        self._opt: Optional[int] = None

    def _made(self, ptr: Optional[int]) -> None:
        if not ptr:
            raise take_error()
        self._opt = ptr

    def step(self) -> None:
        """Records the update of every parameter from its .grad (a
        parameter without .grad is updated with a zero gradient, where
        Torch skips it)."""
        grads = [p.grad if p.grad is not None else zeros_like(p)
                 for p in self.params]
        arr = (ctypes.c_void_p * len(grads))(*[_handle(g) for g in grads])
        check(lib.kiln_optimizer_step(self._opt, arr))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops every parameter's .grad (Torch's default set_to_none)."""
        for p in self.params:
            p.grad = None

    @property
    def lr(self) -> float:
        """The learning rate later steps use."""
        return lib.kiln_optimizer_lr(self._opt)

    @lr.setter
    def lr(self, value: float) -> None:
        check(lib.kiln_optimizer_set_lr(self._opt, float(value)))

    def save(self, path: "os.PathLike[str] | str") -> None:
        """Writes the state (step, lr, hyper-parameters, buffers) to a
        safetensors file (kiln_optimizer_save)."""
        check(lib.kiln_optimizer_save(self._opt, os.fsencode(path)))

    def load(self, path: "os.PathLike[str] | str") -> None:
        """Restores a state written by save() into an optimizer of the same
        kind, hyper-parameters and parameter sizes (kiln_optimizer_load)."""
        check(lib.kiln_optimizer_load(self._opt, os.fsencode(path)))

    def state_dict(self) -> Dict[str, Tensor]:
        """The state as named tensors (the entries of the save() file:
        "step", "lr", hyper-parameters, "state.<j>.exp_avg"...)."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "state.safetensors")
            self.save(path)
            return _load_file(path)

    def load_state_dict(self, state: Dict[str, Tensor]) -> None:
        """Restores a state_dict() (through a safetensors file)."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "state.safetensors")
            _save_file(state, path)
            self.load(path)

    def close(self) -> None:
        """Frees the C optimizer and its state now."""
        opt, self._opt = self._opt, None
        if opt:
            lib.kiln_optimizer_free(opt)

    def __del__(self) -> None:
        if getattr(self, "_opt", None) and lib is not None:
            lib.kiln_optimizer_free(self._opt)
            self._opt = None


class SGD(Optimizer):
    """torch.optim.SGD (dampening 0): momentum, weight decay, Nesterov."""

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3,
                 momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False) -> None:
        super().__init__(params)
        self._made(lib.kiln_sgd(self._arr, len(self.params), lr, momentum,
                                weight_decay, nesterov))


class Adam(Optimizer):
    """torch.optim.Adam (amsgrad and maximize off)."""

    _decoupled = False

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(params)
        self._made(lib.kiln_adam(self._arr, len(self.params), lr, betas[0],
                                 betas[1], eps, weight_decay,
                                 self._decoupled))


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay (default 0.01)."""

    _decoupled = True

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)
