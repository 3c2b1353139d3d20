"""Seeded PRNG identical to tests/ts_prng.h (splitmix64), vectorised with numpy."""
import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1


def next_u64(seed: int, count: int) -> np.ndarray:
    """The first `count` outputs of splitmix64 seeded with `seed` (state += GOLDEN each step)."""
    with np.errstate(over="ignore"):
        i = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(seed & M64) + i * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def u32(seed: int, count: int) -> np.ndarray:
    return (next_u64(seed, count) >> np.uint64(32)).astype(np.uint32)


def uniform(seed: int, count: int) -> np.ndarray:
    """Uniform f32 in [-1, 1), as ts_prng_uniform."""
    v = (u32(seed, count) >> np.uint32(8)).astype(np.int64) - (1 << 23)
    return (v.astype(np.float32) * np.float32(1.0 / (1 << 23))).astype(np.float32)


def bits_f32(seed: int, count: int) -> np.ndarray:
    return u32(seed, count).view(np.float32)


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & M64
    return h
