"""`make gpu-bench`: prepare's transformer and datamask select on one CUDA device, in minutes.

A prepared script for a lent GPU, measured on the corpus that `make bench-corpus` builds from a
demo pool (its seed and 20,000-document shards; --documents of it, 100,000 by default: whole
shards of the million-document corpus):
- prepare's transformer (`Embedder`, all-MiniLM-L6-v2 as prepare loads it, on --device) at each
  of --precisions (fp32 and the half precisions, bench-precision's candidates) and each of
  --batch_sizes: its documents/s over all --documents with the embedding alone, and of the whole
  prepare work (embedding and the heuristic quality scorer, bench-static's `timed_passes`) over
  the first --prepare_documents; torch.cuda.max_memory_allocated per row (the model's weights
  included), and the batch prepare would fit to the card per precision. prepare hands the
  embedder calls of at least --chunk rows and eight encoder batches (the window it sorts by
  length), and each row is timed with those calls;
- the static route (`StaticEmbedder`, the distilled model) beside it on the same documents, which
  runs on the CPU whatever --device;
- datamask select (select's defaults, on --device) on --select_rows rows at select ratio 0.1:
  wall seconds, the selector's own seconds, steps run, peak GPU memory. Its rows are seeded
  Gaussian rows of 384 dimensions (the transformer's width) scaled to unit length, with a seeded
  uniform quality in [0, 5) (the heuristic scorer's range), not the corpus's vectors tiled: tiled
  vectors would be exact duplicates, which change what the learner does, and the static model's
  are 256-d.
The whole prepare pass is bound by the scorer, which runs on one CPU core at a few hundred
documents/s: over all 100,000 documents it would take minutes per batch size, hence the shorter
--prepare_documents. --parts picks which of these run (a machine without spaCy or model2vec leaves
out the whole pass or the static route). results.json (the card's name under machine) and
results.md are rewritten after each part, so a run cut short keeps what it measured. Without
CUDA (and --device cuda) it prints one line, writes nothing and exits 0; --device cpu runs the same
code on the CPU for a smoke test (tiny sizes), marked as no GPU measurement.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

COMMAND = "gpu-bench"
NO_CUDA = f"{COMMAND}: no CUDA device here (torch sees none); nothing measured"
RESULTS = Path("reproduce/results/gpu-bench")
CPU_RESULTS = Path("runs/gpu-bench/cpu")  # a CPU smoke run is no GPU measurement: kept out of git
SHARD_DOCUMENTS = 20_000  # bench-corpus's default shard: whole shards are its corpus's own
SELECT_DIM = 384  # all-MiniLM-L6-v2's width, what prepare writes by default
QUALITY_HIGH = 5.0  # the heuristic scorer's scores lie in [0, 5)
MIB = 2**20
PARTS = ("transformer", "static", "whole", "select")  # --parts, in the order they run


def build_parser() -> argparse.ArgumentParser:
    from reproduce.bench.corpus import EMBED_CHUNK
    from reproduce.cli import StageParser
    from reproduce.pipeline.common import POSITIVE, SEED

    parser = StageParser(prog="python -m reproduce.bench.gpu",
                         description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=Path,
                        help="a built demo pool (`datamask pipeline pool --output DIR --seed 0 "
                             "--max_mb_per_domain 0.5 --heldout_chars 40000 --task_articles "
                             "60`); every part but select reads it")
    parser.add_argument("--device", default="cuda",
                        help="cuda or cuda:N; cpu only for a smoke run, which measures no GPU "
                             "(default: %(default)s)")
    parser.add_argument("--documents", type=POSITIVE, default=100_000,
                        help="corpus documents both routes embed (default: %(default)s)")
    parser.add_argument("--prepare_documents", type=POSITIVE, default=10_000,
                        help="the first documents of the whole prepare passes, embedding and "
                             "heuristic scorer (default: %(default)s)")
    parser.add_argument("--batch_sizes", type=POSITIVE, nargs="+", default=[32, 128, 512],
                        help="the transformer's encoder batches (default: %(default)s)")
    parser.add_argument("--chunk", type=POSITIVE, default=EMBED_CHUNK,
                        help="rows per embedding call, prepare's (default: %(default)s)")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16", "fp16"],
                        help="the transformer's precisions, each a row per batch size (default: "
                             "fp32 bf16 fp16; on --device cpu fp32 bf16: fp16 is a GPU's)")
    parser.add_argument("--max_seq_length", type=POSITIVE,
                        help="the transformer's tokens per document (default: the model's, 256)")
    parser.add_argument("--static_model", default="static",
                        help="the static route: static (distilled once, cached) or static:DIR "
                             "(`make distil`) (default: %(default)s)")
    parser.add_argument("--select_rows", type=POSITIVE, default=1_000_000,
                        help="rows datamask selects from (default: %(default)s)")
    parser.add_argument("--select_ratio", type=float, default=0.1,
                        help="(default: %(default)s)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="what to measure: each route's embedding, the whole prepare pass "
                             "of each (the scorer included), select; a GPU machine without "
                             "spaCy or model2vec leaves out whole or static (default: all)")
    parser.add_argument("--repeats", type=POSITIVE, default=1,
                        help="timed passes per route; medians shown (default: %(default)s)")
    parser.add_argument("--shard_documents", type=POSITIVE, default=SHARD_DOCUMENTS,
                        help="documents per corpus shard (default: %(default)s, bench-corpus's)")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="the corpus's and the select rows' seed (default: %(default)s)")
    parser.add_argument("--work", type=Path,
                        help="folder for the corpus, kept for a rerun (default: temporary)")
    parser.add_argument("--results", type=Path,
                        help="results.json and results.md (default: reproduce/results/gpu-bench/"
                             "<card>/; runs/gpu-bench/cpu with --device cpu)")
    parser.set_defaults(func=run)
    return parser


def cuda_wanted(device: str) -> bool:
    return device.startswith("cuda")


def check_flags(args: argparse.Namespace) -> None:
    """Every flag checked before anything is built or loaded."""
    from datamask.data import check_ratio
    from datamask.errors import UserError
    from datamask.paths import check_folder_output
    from datamask.shared import check_device
    from reproduce.bench.corpus import check_corpus, pool_config
    from reproduce.pipeline.embedders import check_precision, check_static_model

    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        raise UserError(f"--device must be cuda, cuda:N or cpu (a smoke run), got "
                        f"{args.device!r}")
    check_device(args.device)
    if args.precisions is None:
        args.precisions = ["fp32", "bf16"] + (["fp16"] if cuda_wanted(args.device) else [])
    if "transformer" in args.parts:
        for precision in args.precisions:
            check_precision(precision, args.device)
    check_ratio(args.select_ratio)
    if "whole" in args.parts and not {"transformer", "static"} & set(args.parts):
        raise UserError("--parts whole times the embedding routes' whole prepare pass: name "
                        "transformer or static beside it")
    if embedding_parts(args):
        if args.pool is None:
            raise UserError(f"--pool is needed to measure {' and '.join(embedding_parts(args))}")
        if not args.pool.is_dir():
            raise UserError(f"--pool {args.pool}: no such folder; build one with `make pool`")
        pool_config(args.pool)  # refuses a folder that is no built pool
    if args.work is not None and embedding_parts(args):
        check_folder_output("--work", args.work)
        check_corpus(args.pool, args.work / "corpus", args.documents, args.shard_documents,
                     args.seed)
    if args.results is not None:
        check_folder_output("--results", args.results)
    check_static_model(args.static_model, "--static_model")


def embedding_parts(args: argparse.Namespace) -> list[str]:
    return [part for part in args.parts if part != "select"]


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


class Memory:
    """torch.cuda's peak allocated bytes over a `with` block on a CUDA device; None on the CPU."""

    def __init__(self, device: str):
        self.cuda = cuda_wanted(device)
        self.device, self.peak_mib = device, None

    @contextmanager
    def peak(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        yield self
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak_mib = round(torch.cuda.max_memory_allocated(self.device) / MIB, 1)


def say(started: float, text: str) -> None:
    print(f"{COMMAND}: {text} ({time.perf_counter() - started:.0f} s in)", flush=True)


def prepare_rows(args, out: dict, table, path: Path, started: float, save) -> None:
    """The transformer at each batch size and the static route: embedding alone over the whole
    table, then the whole prepare work over its first --prepare_documents."""
    from reproduce.bench.static import timed_passes
    from reproduce.pipeline.embedders import Embedder, StaticEmbedder

    head = table.slice(0, min(args.prepare_documents, len(table)))
    out["prepare"] = {"documents": len(table),
                      "prepare_documents": len(head) if "whole" in args.parts else 0,
                      "rows": []}
    routes = []
    if "transformer" in args.parts:
        t0 = time.perf_counter()
        loaded = {p: Embedder(device=args.device, max_seq_length=args.max_seq_length,
                              batch_size=None, precision=p).load() for p in args.precisions}
        first = loaded[args.precisions[0]]
        out["prepare"]["transformer"] = {
            "model": first.identity["model"], "max_seq_length": first.identity["max_seq_length"],
            "load_s": round(time.perf_counter() - t0, 2),
            "fitted_batch": {p: e.fitted_batch for p, e in loaded.items()}}
        routes += [(f"transformer {p}, batch {size}", e, size, None)
                   for p, e in loaded.items() for size in args.batch_sizes]
    if "static" in args.parts:
        t0 = time.perf_counter()
        static = StaticEmbedder(args.static_model).load()  # `static`: distilled on first use
        out["prepare"]["static"] = {"model": static.identity["model"],
                                    "load_s": round(time.perf_counter() - t0, 2)}
        routes.append(("static (distilled)", static, static.batch_size, args.chunk))
    say(started, "models loaded (" + ", ".join(
        f"{name} {model['load_s']:.1f} s" for name, model in out["prepare"].items()
        if name in ("transformer", "static")) + ")")
    for name, embedder, size, chunk in routes:
        embedder.batch_size = size  # one loaded model per precision, its batch set per route
        chunk = chunk or max(args.chunk, embedder.call_rows)  # prepare's calls at this batch
        device = embedder.device
        embedder(table.slice(0, chunk).column("text").to_pylist())  # warm-up, untimed
        memory = Memory(device)
        with memory.peak():
            vectors, alone = timed_passes({name: embedder}, table, path, args.repeats, chunk,
                                          scorer=None)
        say(started, f"{name} on {device}: embedding alone {alone[name]:,.1f} documents/s over "
                     f"{len(table):,}")
        whole = None
        if "whole" in args.parts:
            _, passes = timed_passes({name: embedder}, head, path, args.repeats, chunk)
            whole = round(passes[name], 1)
            say(started, f"{name}: whole prepare {whole:,.1f} documents/s over {len(head):,}")
        out["prepare"]["rows"].append({
            "route": name, "device": device, "precision": embedder.precision,
            "batch_size": size, "chunk": chunk,
            "dim": int(vectors[name].shape[1]),
            "embedding_docs_per_s": round(alone[name], 1),
            "whole_prepare_docs_per_s": whole,
            "peak_gpu_mib": memory.peak_mib})
        save()


def select_row(args, out: dict, started: float, save) -> dict:
    """datamask select at select's defaults on --select_rows seeded unit rows."""
    import gc

    import numpy as np
    import torch

    from datamask.data import Dataset
    from datamask.selectors import make_selector
    from reproduce.bench.blocks import unit_rows

    gc.collect()  # the transformer's weights go before select's peak is read
    if cuda_wanted(args.device):
        torch.cuda.empty_cache()
    rng = np.random.default_rng([args.seed, 384])
    n = args.select_rows
    data = Dataset(np.arange(n, dtype=np.int64),
                   rng.uniform(0.0, QUALITY_HIGH, n).astype(np.float32),
                   unit_rows(rng.standard_normal((n, SELECT_DIM), dtype=np.float32)))
    say(started, f"select: {n:,} rows drawn; datamask on {args.device}")
    selector = make_selector("datamask", device=args.device, progress=False)
    memory = Memory(args.device)
    with memory.peak():
        t0 = time.perf_counter()
        selection = selector.select(data, args.select_ratio)
        wall = time.perf_counter() - t0
    out["select"] = {
        "rows": n, "dim": SELECT_DIM, "select_ratio": args.select_ratio,
        "selected": int(selection.selected.sum()), "device": args.device,
        "features": f"seeded Gaussian rows (seed [{args.seed}, 384]) of {SELECT_DIM} dimensions "
                    f"scaled to unit length; quality seeded uniform in [0, {QUALITY_HIGH:g})",
        "wall_s": round(wall, 2), "selector_s": round(selection.wall_time_s, 2),
        "steps_run": selection.run.get("steps_run"),
        "stop_reason": selection.run.get("stop_reason"),
        "algorithm": selection.params.get("algorithm"), "peak_gpu_mib": memory.peak_mib}
    say(started, f"select: {wall:,.1f} s wall, {out['select']['steps_run']} steps")
    save()
    return out


def notes(out: dict) -> list[str]:
    lines = []
    if not out["gpu_measurement"]:
        lines.append("--device cpu: a smoke run of the code path, not a GPU measurement.")
    parts = out["flags"]["parts"]
    if "static" in parts:
        lines.append("The static route runs on the CPU whatever --device (a table lookup and a "
                     "mean); its peak GPU memory is not measured.")
    if "whole" not in parts:
        lines.append("Whole prepare not measured (--parts without whole): '-'.")
    lines += [
        "Embedding alone: the route's embedder over every document, in calls of the row's "
        "chunk. Whole prepare: the same plus the heuristic quality scorer (one CPU core, a "
        "fresh one each pass), as bench-static's timed_passes times it, over the first "
        "documents only.",
        "Rows per call: prepare's at that batch, at least 256 and eight encoder batches (the "
        "window sentence-transformers' order sorts by length before padding each batch).",
        "Peak GPU memory: torch.cuda.max_memory_allocated during the embedding-alone pass or "
        "select, the model's weights included.",
    ]
    if "select" in out:
        lines.append(f"select's rows: {out['select']['features']}; datamask at select's "
                     f"defaults ({out['select']['algorithm']}); wall s includes the "
                     f"certificate after the timed run, selector s does not.")
    if not out["finished"]:
        lines.append("Unfinished: the run stopped before every part was measured.")
    return lines


def markdown(out: dict) -> str:
    m, flags = out["machine"], out["flags"]
    card = m["gpu"] or "no GPU (CPU smoke run)"
    lines = [f"# `make gpu-bench`: {card}", "",
             f"{out['date']}; {card}, {m['cpu']} ({m['cores']} cores), torch {m['torch']}; "
             f"--device {flags['device']}; {out['wall_s']:,.0f} s wall.", ""]
    if "corpus" in out:
        c = out["corpus"]
        lines += [f"Corpus: {c['documents']:,} documents of bench-corpus's corpus (seed "
                  f"{c['seed']}, shards of {c['shard_documents']:,}), built in "
                  f"{c['build_s']:,.1f} s.", ""]
    if "prepare" in out:
        p = out["prepare"]
        if "transformer" in p:
            fits = ", ".join(f"{k} {v:,}" for k, v in p["transformer"]["fitted_batch"].items())
            lines += [f"The batch prepare fits to {card} when --batch_size is not given: {fits}.",
                      ""]
        lines += [f"| route | device | batch | rows per call | embedding alone, documents/s "
                  f"({p['documents']:,}) | whole prepare, documents/s ({p['prepare_documents']:,}"
                  f") | peak GPU MiB |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in p["rows"]:
            peak = "-" if r["peak_gpu_mib"] is None else f"{r['peak_gpu_mib']:,.0f}"
            whole = ("-" if r["whole_prepare_docs_per_s"] is None
                     else f"{r['whole_prepare_docs_per_s']:,.1f}")
            lines.append(f"| {r['route']} | {r['device']} | {r['batch_size']} | {r['chunk']} | "
                         f"{r['embedding_docs_per_s']:,.1f} | "
                         f"{whole} | {peak} |")
        lines.append("")
    if "select" in out:
        s = out["select"]
        peak = "-" if s["peak_gpu_mib"] is None else f"{s['peak_gpu_mib']:,.0f}"
        lines += ["| select | rows | dims | selected | wall s | selector s | steps | stop | "
                  "peak GPU MiB |", "|---|---:|---:|---:|---:|---:|---:|---|---:|",
                  f"| datamask on {s['device']} | {s['rows']:,} | {s['dim']} | "
                  f"{s['selected']:,} | {s['wall_s']:,.1f} | {s['selector_s']:,.1f} | "
                  f"{s['steps_run']} | {s['stop_reason']} | {peak} |", ""]
    lines += [f"- {note}" for note in notes(out)]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> None:
    import torch

    if cuda_wanted(args.device) and not torch.cuda.is_available():
        print(NO_CUDA, flush=True)
        return
    check_flags(args)
    from datamask.data import write_json_atomic, write_text_atomic
    from datamask.shared import machine

    started = time.perf_counter()
    info = machine(args.device)
    gpu = cuda_wanted(args.device)
    results = args.results or (RESULTS / slug(info["gpu"]) if gpu else CPU_RESULTS)
    out = {"machine": info, "gpu_measurement": gpu,
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                     if k != "func"},
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "finished": False}

    def save() -> None:
        out["wall_s"] = round(time.perf_counter() - started, 1)
        results.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, results / "results.json")
        write_text_atomic(markdown(out), results / "results.md")

    say(started, f"{info['gpu'] or 'CPU (smoke run, no GPU measurement)'}; results in {results}")
    if embedding_parts(args):
        embedding_rows(args, out, started, save)
    if "select" in args.parts:
        select_row(args, out, started, save)
    out["finished"] = True
    save()
    print(markdown(out), end="", flush=True)


def embedding_rows(args: argparse.Namespace, out: dict, started: float, save) -> None:
    """The corpus built from the pool, then each embedding route's rows."""
    from reproduce.bench.corpus import build_corpus
    from reproduce.bench.static import shard_table

    with tempfile.TemporaryDirectory() as scratch:
        folder = (args.work or Path(scratch)) / "corpus"
        t0 = time.perf_counter()
        build_corpus(args.pool, folder, args.documents, args.shard_documents, args.seed, COMMAND)
        out["corpus"] = {"documents": args.documents, "shard_documents": args.shard_documents,
                         "seed": args.seed, "pool": str(args.pool),
                         "build_s": round(time.perf_counter() - t0, 2)}
        say(started, f"corpus: {args.documents:,} documents")
        shards = folder / "fineweb"
        table = shard_table(shards)
        path = sorted(shards.glob("*.parquet"))[0]  # the scorers' shard argument (unread)
        prepare_rows(args, out, table, path, started, save)


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "python -m reproduce.bench.gpu")


if __name__ == "__main__":
    sys.exit(main())
