"""A fixed one-minute window per key, counted in the cache: the guest form's
limit per client address and the door's per staff user. Per process unless
CACHES points at a shared cache."""

from django.core.cache import cache


def over_limit(key: str, limit: int) -> bool:
    """Count one more request for key; True once the minute's count passes
    limit (0: no limit)."""
    if not limit:
        return False
    cache.add(key, 0, timeout=60)
    try:
        return cache.incr(key) > limit
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=60)
        return False
