"""SyncBatchNorm's tolerances against a float64 reference, and the check that collects misses.

|ours - reference| <= atol + rtol * |reference|, as (rtol, atol), by the input's dtype:
  float64:  1e-9 / 1e-9   everything
  float32:  1e-4 / 1e-5   output, grad_input, running stats; grad_weight/bias sums over ranks 1e-4 / 1e-4
  float16:  1e-2 / 1e-2   output and grad_input (stored in float16); float32 statistics as float32
  bfloat16: 2e-2 / 6e-2   output and grad_input (stored in bfloat16); float32 statistics as float32
"""

from __future__ import annotations

import torch

Tolerance = tuple[float, float]  # (rtol, atol)

# Tensors stored in the input dtype (output, grad_input).
VALUE_TOL: dict[torch.dtype, Tolerance] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 6e-2),
}
# float32/float64 statistics (running mean and variance).
STAT_TOL: dict[torch.dtype, Tolerance] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-4, 1e-5),
    torch.bfloat16: (1e-4, 1e-5),
}
# grad_weight / grad_bias summed over ranks (sums of many products: a looser absolute bound in float32).
GRAD_SUM_TOL: dict[torch.dtype, Tolerance] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-4, 1e-4),
    torch.bfloat16: (1e-4, 1e-4),
}


def close(failures: list[str], what: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> None:
    """Append to failures what differs (shape, or the largest difference) beyond tol; nothing if close."""
    a, e = actual.detach().double(), expected.detach().double()
    if a.shape != e.shape:
        failures.append(f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}")
    elif not torch.allclose(a, e, rtol=tol[0], atol=tol[1]):
        failures.append(f"{what}: max |diff| {(a - e).abs().max().item():.3g} (rtol {tol[0]}, atol {tol[1]})")
