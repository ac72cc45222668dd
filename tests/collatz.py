"""The Collatz loop used by the loop tests: a cyclic job with a known answer."""

from __future__ import annotations


def collatz_steps(n: int) -> int:
    """The oracle: steps until ``n`` reaches 1."""
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def collatz_step(state: tuple[int, int, int]) -> tuple[int, int, int]:
    """One trip around the loop: ``(origin, value, steps so far)`` -> the next value."""
    origin, n, steps = state
    return origin, (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
