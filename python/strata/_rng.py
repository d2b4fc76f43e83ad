"""RNGState: the process's global random generators (Python, NumPy, torch's
CPU generator and every device's) as one stateful entry of a strata.torch
state."""

import random
import warnings
from typing import Any, Dict, List

import numpy
import torch

# The RNGState keys that are not device types.
_HOST_GENERATORS = ("python", "numpy", "torch")


def _device_module(kind: str) -> Any:
    """torch's module for a device type (torch.cuda, torch.xpu, ...), or None."""
    try:
        if hasattr(torch, "get_device_module"):
            return torch.get_device_module(kind)
        return getattr(torch, kind, None)
    except (AttributeError, RuntimeError):  # a device type this torch does not know
        return None


def _device_generators() -> Dict[str, Any]:
    """Device type -> its torch module, for every device type present here
    whose generators torch exposes: CUDA, XPU and MPS, and the accelerator
    torch.accelerator reports (which may be another, e.g. a plug-in's)."""
    kinds = ["cuda", "xpu", "mps"]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        kinds.insert(0, accelerator.current_accelerator().type)
    found = {}
    for kind in dict.fromkeys(kinds):
        module = _device_module(kind)
        available = getattr(module, "is_available", None)
        if callable(getattr(module, "get_rng_state", None)) and callable(available) \
                and available():
            found[kind] = module
    return found


def _get_device_states(module: Any) -> List[torch.Tensor]:
    if hasattr(module, "get_rng_state_all"):
        return module.get_rng_state_all()
    return [module.get_rng_state()]  # one device (MPS)


def _device_count(module: Any) -> int:
    return module.device_count() if hasattr(module, "device_count") else 1


def _set_device_states(module: Any, states: List[torch.Tensor]) -> None:
    if hasattr(module, "set_rng_state_all"):
        module.set_rng_state_all(states)  # devices 0..len(states)-1
    elif states:
        module.set_rng_state(states[0])


class RNGState:
    """The process's global random generators as one stateful entry: Python's
    `random`, NumPy's global generator, torch's CPU generator, and the
    generators of every device of every device type present (CUDA, XPU, MPS,
    the accelerator torch reports), one list per device type.

    Restoring generators of a device type this process does not have, or of
    more devices than it has, restores the others and warns (RuntimeWarning)
    about the ones left out; it never fails for that.
    """

    def state_dict(self) -> Dict[str, Any]:
        out = {"python": random.getstate(), "numpy": numpy.random.get_state(),
               "torch": torch.get_rng_state()}
        for kind, module in _device_generators().items():
            out[kind] = _get_device_states(module)
        return out

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        random.setstate(state["python"])
        numpy.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        here = _device_generators()
        for kind, states in state.items():
            if kind in _HOST_GENERATORS:
                continue
            module = here.get(kind)
            count = 0 if module is None else _device_count(module)
            if len(states) > count:
                warnings.warn(f"RNGState: the checkpoint has the generator states of "
                              f"{len(states)} {kind} device(s), this process has {count} "
                              f"{kind} device(s): the states of the others are not restored",
                              RuntimeWarning, stacklevel=2)
            if count:
                _set_device_states(module, states[:count])
