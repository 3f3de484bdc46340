"""Operator-level services that span every app (the top layer may import them all)."""

from __future__ import annotations

from collections.abc import Callable

from counting.services.bootstrap import count_projection_bootstrap
from counting.services.count_cache.layers import count_cache_generation_bootstrap
from counting.services.reverse.rebuild import reverse_index_bootstrap
from likes_project.eventlog.services import stream_contract_ensure
from relations.services.contracts import relation_shard_contract_ensure
from relations.services.relation_cache import cache_generation_bootstrap


def contracts_ensure(say: Callable[[str], None] = lambda line: None) -> None:
    """Create the frozen contracts and first generations every part needs, where missing: the relation
    shard contract, the stream partitioning, the count projection (bucket space, generation, sealed
    manifest, routes, fences), the count cache, the relation cache and the reverse index. Idempotent:
    what exists is kept as it is (a contract is never changed in place)."""
    ensured = relation_shard_contract_ensure()
    say(f"relation shard contract v{ensured.version} {'created' if ensured.created else 'present'}")
    stream = stream_contract_ensure()
    say(f"stream contract v{stream.version}: {stream.partitions} partitions")
    boot = count_projection_bootstrap()
    say(f"count projection generation {boot.generation} (bucket space v{boot.bucket_space_version}, "
        f"manifest {boot.manifest_id}) {'created' if boot.created else 'present'}")
    count_cache = count_cache_generation_bootstrap()
    if count_cache is not None:
        say(f"count cache generation {count_cache.generation} ({count_cache.status})")
    cache_gen = cache_generation_bootstrap()
    say(f"relation cache generation {cache_gen.generation} ({cache_gen.status})")
    rev = reverse_index_bootstrap()
    say(f"reverse index generation {rev.generation} ({rev.status})")
