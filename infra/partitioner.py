"""Kafka's default partitioner (murmur2 of the key), for a whole batch of keys at once.

The Java client and kafka-python put a keyed record on `murmur2(key) & 0x7fffffff % partitions`.
Doing that once per record in pure Python costs microseconds per message; here the hash runs over
a batch of keys as numpy uint32 arithmetic (which wraps modulo 2^32 exactly like the Java ints),
so records land on exactly the partitions any other Kafka client would choose for those keys.
"""
from __future__ import annotations

import numpy as np

_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)


def _murmur2_same_length(data: np.ndarray) -> np.ndarray:
    """murmur2 of each row of `data` (n x L uint8): uint32 hashes, Java's arithmetic."""
    n, length = data.shape
    h = np.full(n, (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    words = data[:, : length - length % 4].astype(np.uint32)
    for i in range(0, length - length % 4, 4):
        k = words[:, i] | (words[:, i + 1] << 8) | (words[:, i + 2] << 16) | (words[:, i + 3] << 24)
        k *= _M
        k ^= k >> 24
        k *= _M
        h *= _M
        h ^= k
    tail = length & ~3
    extra = length % 4
    if extra:
        if extra >= 3:
            h ^= data[:, tail + 2].astype(np.uint32) << 16
        if extra >= 2:
            h ^= data[:, tail + 1].astype(np.uint32) << 8
        h ^= data[:, tail].astype(np.uint32)
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return h


def murmur2_many(keys: list[bytes]) -> np.ndarray:
    """Kafka's murmur2 of every key (as uint32), keys of any lengths."""
    n = len(keys)
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    for length in np.unique(lengths):
        idx = np.flatnonzero(lengths == length)
        if len(idx) == n:
            group = keys
        else:
            group = [keys[i] for i in idx]
        if length == 0:
            data = np.zeros((len(idx), 0), dtype=np.uint8)
        else:
            data = np.frombuffer(b"".join(group), dtype=np.uint8).reshape(len(idx), int(length))
        out[idx] = _murmur2_same_length(data)
    return out


def partitions_for(keys: list[bytes], n_partitions: int) -> np.ndarray:
    """The partition (0 .. n_partitions-1) Kafka's default partitioner picks for each key."""
    return (murmur2_many(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64) % n_partitions
