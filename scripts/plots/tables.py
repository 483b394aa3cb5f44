#!/usr/bin/env python3
"""Turns a benchmark's own output (stdin) into the whitespace table a gnuplot script of
scripts/plots/ reads (stdout): one row per x value, a header row naming the columns.

    tables.py eviction     < `strata-bench trace` JSON
    tables.py store-load   < host_tier_bench CSV (BM_StoreLoadByChunkSize, median aggregates)
    tables.py ttft         < ttft_bench.py --lengths JSON lines
    tables.py lookup       < controller_bench --latencies lines ("holders series quantile us")

Exits 1, saying why, when the input lacks what the table needs.
"""

import argparse
import csv
import json
import sys


def eviction(text):
    """Capacity (% of unique blocks), each policy's prefix-hit ratio, Belady's bound."""
    doc = json.loads(text)
    policies = list(doc["policies"])
    rows = [["capacity_percent", *policies, "belady"]]
    for c, capacity in enumerate(doc["capacities"]):
        rows.append([f"{100 * capacity['fraction']:g}",
                     *(f"{doc['policies'][p][c]['hit_ratio']:.4f}" for p in policies),
                     f"{doc['belady_block_hit_ratio'][c]:.4f}"])
    return rows


def store_load(text):
    """Chunk size (MiB), then GB/s: store and load without the checksum, store with it, load
    verified, memcpy of the same size; the medians of the repetitions."""
    columns = ["store_nocsum_GBps", "load_nocsum_GBps", "store_GBps", "load_GBps", "memcpy_GBps"]
    rows = [["chunk_MiB", *columns]]
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("name,"))
    for record in csv.DictReader(lines[header:]):
        if record["name"].endswith("_median") and not record["error_occurred"]:
            rows.append([f"{float(record['chunk_MiB']):g}",
                         *(f"{float(record[c]):.3f}" for c in columns)])
    rows[1:] = sorted(rows[1:], key=lambda row: float(row[0]))
    return rows


def ttft(text):
    """Prompt tokens, then seconds: vLLM alone (median of its repeats), vLLM + Strata the first
    time it sees the document, vLLM + Strata on a hit."""
    runs = {}
    for line in text.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            runs.setdefault(record["configuration"], []).append(record)
    alone, strata = runs.get("vllm", []), runs.get("strata-host", [])
    if not alone or len(alone) != len(strata):
        raise ValueError(f"want as many vllm as strata-host lines, have {len(alone)} and "
                         f"{len(strata)}")
    rows = [["prompt_tokens", "vllm_s", "strata_first_s", "strata_hit_s"]]
    for a, s in zip(alone, strata):
        rows.append([a["prompt_tokens"], a["again_s"], s["first_s"], s["again_s"]])
    return rows


def lookup(text):
    """Quantile, then each series' latency (us) at it, for the first holder mix of the file."""
    series = {}
    holders = None
    for line in text.splitlines():
        mix, name, quantile, us = line.split()
        holders = holders or mix
        if mix == holders:
            series.setdefault(name, []).append((quantile, us))
    names = ["floor", "alone", "ingest"]
    if any(name not in series for name in names):
        raise ValueError(f"want the series {names}, have {sorted(series)}")
    rows = [["quantile", *(f"{name}_us" for name in names)]]
    for i, (quantile, _) in enumerate(series["floor"]):
        rows.append([quantile, *(series[name][i][1] for name in names)])
    return rows


TABLES = {"eviction": eviction, "store-load": store_load, "ttft": ttft, "lookup": lookup}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(TABLES))
    args = parser.parse_args()
    try:
        rows = TABLES[args.table](sys.stdin.read())
    except (ValueError, KeyError, StopIteration, json.JSONDecodeError) as error:
        sys.exit(f"tables.py {args.table}: unexpected input: {error!r}")
    if len(rows) < 2:
        sys.exit(f"tables.py {args.table}: no rows in the input")
    for row in rows:
        print(" ".join(str(cell) for cell in row))


if __name__ == "__main__":
    main()
