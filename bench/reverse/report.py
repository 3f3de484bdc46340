"""The report of the reverse-index benchmark: the tables on stdout and the "Reverse index (issue 5)" generated
section of docs/benchmarks.md."""

from __future__ import annotations

from bench.common import doc_section, interference_blocks, machine_text, md_table, print_blocks, write_generated

DOC_BEGIN = "<!-- bench:reverse:generated:begin -->"
DOC_END = "<!-- bench:reverse:generated:end -->"
SECTION_TITLE = "## Reverse index (issue 5)"


def latency_table(lat: dict) -> str:
    pages = (("1", lat["page1"]), (f"{lat['deep_page']:,}", lat["deep"]))
    return md_table(["Page", "p50 (ms):", "p99 (ms):", "mean (ms):", "max (ms):", "fetches:"],
                    [*([label, s["p50_ms"], s["p99_ms"], s["mean_ms"], s["max_ms"], s["n"]] for label, s in pages),
                     [f"page {lat['deep_page']:,} / page 1", f"{lat['ratio_p50']}x", f"{lat['ratio_p99']}x", None,
                      None, None]])


def projector_table(pj: dict) -> str:
    cells = []
    for kind in ("uniform", "hot"):
        rs = [r for r in pj["rounds"] if r["kind"] == kind]
        cells.append([kind, f"{rs[0]['videos']:,}", ", ".join(f"{r['events_per_s']:,.0f}" for r in rs),
                      f"{pj['summary'][kind]['median_events_per_s']:,.0f}",
                      ", ".join(f"{r['applied']}/{r['stale'] + r['duplicates']}" for r in rs),
                      all(r["ok"] for r in rs)])
    cells.append(["hot / uniform", None, None, f"{pj['hot_over_uniform']}x", None, None])
    return md_table(["Workload", "videos:", "events/s per round", "median events/s:", "applied / stale+dup",
                     "sort rows ok"], cells)


def generated_section(result: dict) -> str:
    meta, spec, load, lat, pj = (result["meta"], result["machine"], result["load"], result["latency"],
                                 result["projector"])
    r0 = pj["rounds"][0]
    gens = ", ".join(f"{g['generation']} {g['status']} R={g['shards']}" for g in pj["live_generations"])
    machine = machine_text(spec, pg=("shared_buffers", "synchronous_commit"), stack=("python", "django"),
                           load=f"Load average at the start {spec.get('loadavg_at_start')}, at the end "
                                f"{meta.get('loadavg_at_end')}.")
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/reverse_bench.py", meta=meta, machine=machine, blocks=[
        *interference_blocks(meta),
        f"**1. Likers page, one video with {load['likers']:,} likers, limit {lat['limit']}**",
        f"Data: {load['likers']:,} `auth_user` rows (unusable passwords) inserted with one SQL statement; for each "
        f"user its reverse shard in generation {load['generation']} (R = {load['shards']}) from "
        "`counting.routing.reverse_shard`, and one `LikeReverseSort` entry plus one LIKED `LikeReverseProjection` row "
        "(version 1) on the count partition `placement[shard]` names, with distinct `liked_at` values (7 ms apart, "
        f"in a shuffled user order), bulk-inserted with `unnest` (load {load['load_seconds']} s). Likers per "
        f"shard: {', '.join(f'{n:,}' for n in load['per_shard'])}; per partition: "
        f"{', '.join(f'{a} {n:,}' for a, n in load['per_partition'].items())}. A public `VideoSnapshot` by the "
        "bench author; no privacy, ban or block rows (nothing hidden).",
        "Method: `counting.selectors.likers.likers_page_list` plus `likers_cursor_encode` (what the API view does "
        "after its permission check), called in-process as the author. The cursor was walked once from page 1 to "
        f"page {lat['deep_page']:,} ({lat['walk_pages']} pages in {lat['walk_seconds']} s; the page-"
        f"{lat['deep_page']:,} cursor is {lat['cursor_chars']} characters), then each page was fetched 3 times "
        f"untimed and {lat['reps']} times timed, sequentially (each repeat checked to return the same {lat['limit']}"
        " likers).",
        latency_table(lat),
        f"**2. Reverse projector throughput, backlog of {r0['events']:,} events per round**",
        f"Data: {r0['events']:,} crafted `LikeRelationChanged` envelopes per round, XADDed with "
        f"`publish_pipeline` (1,000 per round trip) into the {pj['stream_partitions']} bench stream partitions "
        f"before the clock starts. Pairs (user, video) drawn at random from {r0['events'] // 2:,} pairs over "
        f"{meta['event_users']:,} synthetic users; versions 1, 2, ... per pair, odd LIKED and even UNLIKED; "
        f"`stateChangedAt` increasing 1 ms per event. Uniform: {meta['uniform_videos']:,} videos; hot: one video. "
        f"Live generations: {gens}.",
        f"Method: {pj['consumers']} spawned processes, each running `consume_partition(ReverseIndexProjector(), "
        f"partition=p, batch_size={pj['batch_size']}, max_batches=10)` over half of the stream partitions until "
        "every one of its partitions returns nothing; events/s = backlog / (last process end - first process "
        f"start). {meta['rounds']} rounds each, uniform and hot alternating, fresh data each round (reverse tables "
        "and receipts truncated, stream keys and reverse checkpoints deleted). Each round checked: every event "
        "dispatched and applied once, and the sort entries equal the pairs whose last state is LIKED.",
        projector_table(pj),
    ])


def print_report(result: dict) -> None:
    print_blocks(latency_table(result["latency"]), projector_table(result["projector"]))


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading=f"{SECTION_TITLE}\n\nRun `./bench/reverse.sh`. bench/reverse_bench.py rewrites the "
                            "text between the `bench:reverse:generated` markers at the end of every run.")
