"""`make bench-prepare`: the prepare and tokenize stages' throughput, where prepare's time goes,
and whether a faster embedding backend selects the same rows.

On a pool built offline (or --pool), measured side by side in one process, medians of --repeats
rounds with the worker counts and backends interleaved in each round (on a shared machine read
the ratios): prepare's documents/s and embedding-model tokens/s (after truncation to the model's
max_seq_length) per worker count; the embedding model's and the quality scorer's share of
prepare's time; the model's achieved FLOP/s, 2 x (encoder parameters) x tokens, against an fp32
GEMM of the model's feed-forward shape on the same threads; the heuristic quality scorer against
datatrove's filters run one by one on the same documents (--only scorer: that table alone);
the rates per core that bound a GPU node (--only per_core: this process pinned to one core, the
transformer's tokenizer on whole texts and on texts cut as prepare cuts them, and the heuristic
scorer, documents/s);
tokenize's MB/s of selected text; with --tokenize_scale N1 N2, tokenize on N1 and N2 documents
made from the pool's texts, its start-up and per-document rate read from the two (--only
tokenize_scale: that table alone);
for each sentence-transformers backend (ONNX, ONNX int8) its speed against torch fp32, the cosine
of its embeddings to fp32's, and the overlap of the selection made from its rows with fp32's at
the same seed, against the overlap between fp32 selections at different seeds (the noise); and a
projection of prepare + tokenize for --documents on --nodes nodes like this one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from datamask.errors import UserError
from datamask.shared import require

from reproduce.bench import work_folder
from reproduce.bench.objectives import _median_seconds
from reproduce.pipeline.common import parquet_files
from reproduce.pipeline.embedders import Embedder, default_embedding_model
from reproduce.pipeline.prepare import HeuristicQuality, PrepareConfig, prepare
from reproduce.pipeline.quality import HeuristicScorer, reference_score
from reproduce.pipeline.select import SelectConfig, run_select
from reproduce.pipeline.tokenize import TokenizeConfig, run_tokenize, train_tokenizer
from reproduce.pool.build import PoolConfig, build_pool

BACKENDS = ("onnx", "onnx-int8")
ONNX = "the ONNX embedding backends"
ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class HiddenStates(torch.nn.Module):
    """The transformer's last hidden states, called by keyword (what the ONNX exporter traces)."""

    def __init__(self, transformer: torch.nn.Module):
        super().__init__()
        self.transformer = transformer

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state


def export_onnx(embedder: Embedder, folder: Path, names: list[str]) -> dict[str, Path]:
    """The embedding model's transformer exported to ONNX (and quantised to int8 weights,
    dynamically: onnxruntime's quantize_dynamic); {backend: model file}."""
    require("onnx", ONNX)
    quantization = require("onnxruntime.quantization", ONNX)
    folder.mkdir(parents=True, exist_ok=True)
    sample = embedder.model.tokenizer(["a sample", "a longer sample text"], padding=True,
                                      return_tensors="pt")
    files = {"onnx": folder / "model.onnx", "onnx-int8": folder / "model-int8.onnx"}
    torch.onnx.export(HiddenStates(embedder.model[0].auto_model.eval()),
                      tuple(sample[name] for name in ENCODER_INPUTS), str(files["onnx"]),
                      input_names=list(ENCODER_INPUTS), output_names=["hidden"],
                      dynamic_axes={name: {0: "texts", 1: "tokens"}
                                    for name in (*ENCODER_INPUTS, "hidden")},
                      opset_version=17, dynamo=False)
    if "onnx-int8" in names:
        quantization.quantize_dynamic(str(files["onnx"]), str(files["onnx-int8"]),
                                      weight_type=quantization.QuantType.QInt8)
    return {name: files[name] for name in names}


class OnnxModel:
    """A mean-pooling sentence-transformers model (all-MiniLM-L6-v2) with its transformer run by
    onnxruntime: its tokenizer, then the exported file, then mean pooling and unit length, texts
    batched longest first as sentence-transformers batches them. The part of SentenceTransformer
    that Embedder calls."""

    def __init__(self, model, path: Path):
        ort = require("onnxruntime", ONNX)
        self.tokenizer, self.max_seq_length = model.tokenizer, model.max_seq_length
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str], batch_size: int, **normalised_numpy) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")
        vectors = np.empty((len(texts), 0), np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start:start + batch_size]
            batch = self.tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                   max_length=self.max_seq_length, return_tensors="np")
            hidden = self.session.run(None, {name: batch[name] for name in ENCODER_INPUTS})[0]
            mask = batch["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            if not vectors.size:
                vectors = np.empty((len(texts), pooled.shape[1]), np.float32)
            vectors[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return vectors


class BackendEmbedder(Embedder):
    """prepare's embedder with its transformer run by onnxruntime from `onnx_file`."""

    def __init__(self, model: str, onnx_file: Path, **options):
        self.onnx_file = onnx_file
        super().__init__(model, **options)

    @cached_property
    def model(self):
        return OnnxModel(Embedder(self.model_name, max_seq_length=self.max_seq_length).model,
                         self.onnx_file)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.model.encode([self.prefix + t for t in texts], self.encoder_batch)


def model_tokens(embedder: Embedder, texts: list[str]) -> int:
    """Tokens the model reads: each text's, truncated to its max_seq_length."""
    ids = embedder.model.tokenizer(texts, truncation=True,
                                   max_length=embedder.model.max_seq_length)["input_ids"]
    return sum(map(len, ids))


def encoder_parameters(embedder: Embedder) -> int:
    """The weights every token passes through: the transformer's encoder layers (attention,
    feed-forward, layer norms); not the embedding lookups, nor the pooler (one vector per text,
    unused by mean pooling)."""
    transformer = embedder.model[0].auto_model
    return sum(p.numel() for name, p in transformer.named_parameters()
               if name.startswith("encoder."))


def gemm_flops(rows: int, width: int, inner: int, repeats: int) -> float:
    """fp32 FLOP/s of (rows, width) @ (width, inner) on this process's torch threads."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(rows, width, generator=gen), torch.randn(width, inner, generator=gen)
    return 2 * rows * width * inner / _median_seconds(lambda: a @ b, repeats, torch.device("cpu"))


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def embed_all(embedder: Embedder, texts: list[str], chunk: int) -> np.ndarray:
    """The texts embedded in prepare's chunks."""
    return np.concatenate([embedder(texts[i:i + chunk]) for i in range(0, len(texts), chunk)])


def scorer_speed(texts: list[str], repeats: int, chunk: int) -> str:
    """The heuristic quality scorer against its definition, datatrove's filters run one by one
    (reference_score), on the same texts, alternating in each round; a fresh scorer each round,
    so its chunk cache starts empty (inside a prepare task it carries over from batch to batch).
    Returns the table."""
    reference, fast, scores = [], [], {}
    for _ in range(repeats):
        scorer = HeuristicScorer()
        reference.append(seconds(lambda: scores.update(old=np.array(
            [reference_score(t, scorer.filters, scorer.stops) for t in texts], np.float32))))
        fast.append(seconds(lambda: scores.update(new=np.concatenate(
            [scorer(texts[i:i + chunk]) for i in range(0, len(texts), chunk)]))))
    old, new = statistics.median(reference), statistics.median(fast)
    equal = int(np.sum(scores["old"] == scores["new"]))
    return (f"| heuristic quality scorer, {len(texts):,} documents, median of {repeats} | s | "
            f"documents/s |\n|---|---|---|\n"
            f"| datatrove's filters one by one (reference_score) | {old:.1f} | "
            f"{len(texts) / old:.1f} |\n"
            f"| one split per chunk (HeuristicScorer, empty cache, batches of {chunk}) | "
            f"{new:.1f} | {len(texts) / new:.1f} |\n"
            f"| speed-up | {old / new:.1f}x | |\n"
            f"| scores equal to datatrove's, float for float | {equal:,} of {len(texts):,} | |")


def per_core(texts: list[str], repeats: int, max_seq_length: int | None) -> str:
    """This process pinned to its first core, then on `texts` in the encoder's batches of 32,
    alternating in each round: the transformer's tokenizer on the whole texts (what
    sentence-transformers' encode does) and on texts cut as prepare cuts them (`features`, its
    exact cut), and the heuristic scorer (a fresh one each round); documents/s, medians. What a
    GPU node's cores can feed its GPU: each rate times the cores given to it."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    embedder = Embedder(max_seq_length=max_seq_length).load()
    size = embedder.encoder_batch
    batches = [texts[i:i + size] for i in range(0, len(texts), size)]
    runs = {"tokenizer, whole texts": lambda: [embedder.model.preprocess(b) for b in batches],
            f"tokenizer, cut to {embedder.cut_budget:,} characters (exact)":
                lambda: [embedder.features(b) for b in batches],
            "heuristic quality scorer": lambda: HeuristicScorer()(texts)}
    HeuristicScorer()(texts[:2])  # spaCy's and datatrove's imports, untimed
    embedder.features(batches[0])  # the tokenizer's first call, untimed
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(seconds(fn))
    mean_chars = sum(map(len, texts)) / len(texts)
    lines = [f"| one core, {len(texts):,} documents of {mean_chars:,.0f} characters on average, "
             f"median of {repeats} | documents/s |", "|---|---:|"]
    lines += [f"| {name} | {len(texts) / statistics.median(t):,.1f} |"
              for name, t in times.items()]
    return "\n".join(lines)


def tokenize_scale(texts: list[str], sizes: list[int], tokenizer: Path, work: Path,
                   repeats: int) -> str:
    """tokenize (one task, one worker) on each of `sizes` documents, the pool's texts taken in
    turn under new ids, all selected, sizes alternating in each round; the start-up and the
    per-document rate are the line through the two medians. Returns the table."""
    inputs = {}
    for n in sizes:
        folder = work / f"scale-{n}"
        rows = {"id": [f"scale-{i}" for i in range(n)],
                "text": [texts[i % len(texts)] for i in range(n)]}
        for shard in range(8):
            (folder / "fineweb").mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({k: v[shard::8] for k, v in rows.items()}),
                           folder / "fineweb" / f"{shard:03d}.parquet")
        pq.write_table(pa.table({"id": rows["id"], "selected": [True] * n}),
                       folder / "selection.parquet")
        inputs[n] = folder
    took = {n: [] for n in sizes}
    for round_ in range(repeats):
        for n, folder in inputs.items():
            took[n].append(seconds(lambda: run_tokenize(TokenizeConfig(
                input=folder / "fineweb", selection=folder / "selection.parquet",
                tokenizer=tokenizer, output=folder / f"tokens-{round_}", tasks=1, workers=1))))
    (small, t_small), (large, t_large) = ((n, statistics.median(took[n])) for n in sizes)
    rate = (large - small) / (t_large - t_small)
    rows = "".join(f"| {n:,} | {statistics.median(took[n]):.1f} | "
                   f"{n / statistics.median(took[n]):.1f} |\n" for n in sizes)
    return (f"| tokenize, documents (1 task, 1 worker, median of {repeats}) | s | documents/s |\n"
            f"|---|---|---|\n{rows}"
            f"| start-up (the line's value at 0 documents) | {t_small - small / rate:.1f} | |\n"
            f"| per document (the line's slope) | | {rate:.1f} |")


def selected_ids(selection_folder: Path) -> set[str]:
    table = pq.read_table(selection_folder / "selection.parquet", columns=["id", "selected"])
    return set(table.filter(table.column("selected")).column("id").to_pylist())


def text_mb(table: pa.Table) -> float:
    """MB of UTF-8 text in the table's `text` column."""
    return pc.sum(pc.binary_length(table.column("text").cast(pa.binary()))).as_py() / 1e6


def overlap(a: set, b: set) -> float:
    return len(a & b) / max(len(a), 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=Path,
                        help="a built pool folder (its fineweb/ shards); default: build one")
    parser.add_argument("--max_mb_per_domain", type=float, default=0.15,
                        help="the size of the pool built when --pool is not given")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the tables show medians")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="local executor workers (= tasks) to time prepare and tokenize with")
    parser.add_argument("--max_seq_length", type=int, help="default: the model's own")
    parser.add_argument("--chunk", type=int, default=256, help="prepare's rows per embedding call")
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--method", default="datamask",
                        help="the selector whose selections are compared (datamask: Pair_simi)")
    parser.add_argument("--select_ratio", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1],
                        help="fp32 selection seeds (the first is every backend's seed)")
    parser.add_argument("--documents", type=float, default=1e8, help="the projection's corpus")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--scorer_documents", type=int,
                        help="the scorer table's documents: N spread over the pool (default: all)")
    parser.add_argument("--tokenize_scale", type=int, nargs=2, metavar=("N1", "N2"),
                        help="also time tokenize on N1 and N2 documents made from the pool's "
                             "texts: its start-up and per-document rate")
    parser.add_argument("--only", choices=["scorer", "tokenize_scale", "per_core"],
                        help="print that table alone: the quality scorer against datatrove's "
                             "filters, tokenize's start-up and rate (needs --tokenize_scale), "
                             "or the tokenizer's and scorer's documents/s on one core")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with work_folder(args.work) as work:
        run(args, work)


def run(args: argparse.Namespace, work: Path) -> None:
    if args.tokenize_scale and not 0 < min(args.tokenize_scale) < max(args.tokenize_scale):
        raise UserError(f"--tokenize_scale {' '.join(map(str, args.tokenize_scale))}: two "
                        f"different positive numbers of documents")
    if args.only == "tokenize_scale" and not args.tokenize_scale:
        raise UserError("--only tokenize_scale needs --tokenize_scale N1 N2")
    pool = args.pool or work / "pool"
    if not args.pool:
        build_pool(pool, PoolConfig(max_mb_per_domain=args.max_mb_per_domain,
                                    heldout_chars=10_000, task_articles=10))  # held-out: unused
    shards = pool / "fineweb"
    table = pa.concat_tables([pq.read_table(p, columns=["id", "text"])
                              for p in parquet_files([str(shards)])])
    texts = table.column("text").to_pylist()
    picks = np.linspace(0, len(texts), min(args.scorer_documents or len(texts), len(texts)),
                        endpoint=False).astype(int)  # spread over the shards (and domains)
    scored = [texts[i] for i in picks]
    if args.only == "scorer":
        print(scorer_speed(scored, args.repeats, args.chunk))
        return
    if args.only == "per_core":
        print(per_core(scored, args.repeats, args.max_seq_length))
        return
    if args.only == "tokenize_scale":
        train_tokenizer([str(shards)], work / "tokenizer.json")
        print(tokenize_scale(texts, sorted(args.tokenize_scale), work / "tokenizer.json", work,
                             args.repeats))
        return
    pool_mb = text_mb(table)
    model = default_embedding_model()
    embedders = {"torch fp32": Embedder(model, max_seq_length=args.max_seq_length).load()}
    fp32 = embedders["torch fp32"]
    skipped = ""
    try:
        exported = export_onnx(fp32, work / "onnx", args.backends) if args.backends else {}
    except UserError as err:  # the backends are optional: say why, measure the rest
        exported, skipped = {}, str(err)
    embedders.update({name: BackendEmbedder(model, path, max_seq_length=args.max_seq_length)
                      for name, path in exported.items()})
    scorer = HeuristicQuality()
    tokens = model_tokens(fp32, texts)
    params = encoder_parameters(fp32)
    print(f"Pool: {len(texts):,} documents, {pool_mb:.2f} MB of text, "
          f"{len(parquet_files([str(shards)]))} shards; all-MiniLM-L6-v2 at max_seq_length "
          f"{fp32.model.max_seq_length}: {tokens:,} tokens ({tokens / len(texts):.0f} a document); "
          f"torch {torch.get_num_threads()} threads; medians of {args.repeats} rounds\n",
          flush=True)

    prepare_s = {w: [] for w in args.workers}
    embed_s = {name: [] for name in embedders}
    score_s, vectors = [], {}
    for round_ in range(args.repeats):
        for workers in args.workers:
            out = work / f"prepared-{workers}-{round_}"
            prepare_s[workers].append(seconds(lambda: prepare(
                PrepareConfig(input=[shards], output=out, chunk=args.chunk, no_progress=True,
                              workers=workers), embedder=fp32, scorer=scorer)))
        for name, embedder in embedders.items():
            start = time.perf_counter()
            vectors[name] = embed_all(embedder, texts, args.chunk)
            embed_s[name].append(time.perf_counter() - start)
        score_s.append(seconds(lambda: scorer(table, shards)))
    prepare_med = {w: statistics.median(s) for w, s in prepare_s.items()}
    embed_med = {name: statistics.median(s) for name, s in embed_s.items()}
    one_worker = prepare_med[min(args.workers)]

    # selections: fp32 at every seed, each backend at the first, on rows prepared by its embedder
    prepared = {"torch fp32": work / f"prepared-{min(args.workers)}-0"}
    for name, embedder in embedders.items():
        if name != "torch fp32":
            prepared[name] = work / f"prepared-{name}"
            prepare(PrepareConfig(input=[shards], output=prepared[name], chunk=args.chunk,
                                  no_progress=True), embedder=embedder, scorer=scorer)
    chosen = {}
    for name, folder in prepared.items():
        for seed in args.seeds if name == "torch fp32" else args.seeds[:1]:
            out = work / f"select-{name}-{seed}"
            run_select(SelectConfig(input=[str(folder)], output=out, method=args.method,
                                    select_ratio=args.select_ratio, seed=seed))
            chosen[name, seed] = selected_ids(out)

    tokenizer = work / "tokenizer.json"
    train_tokenizer([str(shards)], tokenizer)
    selection = work / f"select-torch fp32-{args.seeds[0]}" / "selection.parquet"
    reference = chosen["torch fp32", args.seeds[0]]
    keep = pc.is_in(table.column("id"), value_set=pa.array(list(reference)))
    selected_mb = text_mb(table.filter(keep))
    tokenize_s = {w: [] for w in args.workers}
    for round_ in range(args.repeats):
        for workers in args.workers:
            out = work / f"tokens-{workers}-{round_}"
            tokenize_s[workers].append(seconds(lambda: run_tokenize(TokenizeConfig(
                input=shards, selection=selection, tokenizer=tokenizer, output=out,
                tasks=workers, workers=workers))))
    tokenize_med = {w: statistics.median(s) for w, s in tokenize_s.items()}
    scale = (tokenize_scale(texts, sorted(args.tokenize_scale), tokenizer, work, args.repeats)
             if args.tokenize_scale else "")

    print("| stage | workers | s | documents/s | model tokens/s | text MB/s |")
    print("|---|---|---|---|---|---|")
    for workers, s in prepare_med.items():
        print(f"| prepare | {workers} | {s:.1f} | {len(texts) / s:.1f} | {tokens / s:,.0f} | "
              f"{pool_mb / s:.3f} |")
    n_selected = len(reference)
    for workers, s in tokenize_med.items():
        print(f"| tokenize ({n_selected:,} selected) | {workers} | {s:.1f} | "
              f"{n_selected / s:.1f} | - | {selected_mb / s:.3f} |")
    if scale:
        print(f"\n{scale}")

    achieved = 2 * params * tokens / embed_med["torch fp32"]
    hidden = fp32.model[0].auto_model.config
    rows = args.chunk * 128
    gemm = gemm_flops(rows, hidden.hidden_size, hidden.intermediate_size, args.repeats)
    print(f"\n| part of prepare ({min(args.workers)} worker, {one_worker:.1f} s) | s | share |")
    print("|---|---|---|")
    print(f"| embedding (torch fp32) | {embed_med['torch fp32']:.1f} | "
          f"{embed_med['torch fp32'] / one_worker:.0%} |")
    print(f"| quality scorer ({scorer.name}) | {statistics.median(score_s):.1f} | "
          f"{statistics.median(score_s) / one_worker:.0%} |")
    print(f"\n{scorer_speed(scored, args.repeats, args.chunk)}")
    print(f"\n| embedding model against the FLOP limit | |\n|---|---|\n"
          f"| encoder parameters counted (6 layers: attention, feed-forward, layer norms; not "
          f"the embedding lookups or pooler) | {params:,} |\n"
          f"| achieved: 2 x parameters x tokens / embedding s | {achieved / 1e9:.1f} GFLOP/s |\n"
          f"| fp32 GEMM ({rows} x {hidden.hidden_size} @ {hidden.hidden_size} x "
          f"{hidden.intermediate_size}, {torch.get_num_threads()} threads) | "
          f"{gemm / 1e9:.1f} GFLOP/s |\n| achieved / GEMM | {achieved / gemm:.0%} |")

    print(f"\n| embeddings | s | speed vs torch fp32 | cosine to fp32: min | median | "
          f"selection overlap with fp32 seed {args.seeds[0]} ({args.method}, "
          f"{args.select_ratio:g}) |")
    print("|---|---|---|---|---|---|")
    for seed in args.seeds[1:]:
        print(f"| torch fp32, seed {seed} (noise between seeds) | - | - | - | - | "
              f"{overlap(reference, chosen['torch fp32', seed]):.3f} |")
    for name in list(embedders)[1:]:
        cosine = np.sum(vectors[name] * vectors["torch fp32"], axis=1)
        print(f"| {name}, seed {args.seeds[0]} | {embed_med[name]:.1f} | "
              f"{embed_med['torch fp32'] / embed_med[name]:.2f}x | {cosine.min():.4f} | "
              f"{np.median(cosine):.4f} | {overlap(reference, chosen[name, args.seeds[0]]):.3f} |")
    for name in args.backends if skipped else []:
        print(f"| {name} | not measured: {skipped} | | | | |")

    node = max(args.workers, key=lambda w: len(texts) / prepare_med[w])
    prepare_rate = len(texts) / prepare_med[node]
    tokenize_rate = n_selected / tokenize_med[node]  # selected documents a second
    print(f"\nProjection (not a measurement): {args.documents:.0e} documents, "
          f"{args.select_ratio:g} of them selected, on N CPU nodes like this one (local executor, "
          f"{node} worker(s) a node: {prepare_rate:.1f} documents/s prepared, {tokenize_rate:.1f} "
          f"selected documents/s tokenized), linear in N; GPU nodes: unmeasured\n")
    print("| nodes | prepare h | tokenize h | prepare + tokenize h |")
    print("|---|---|---|---|")
    for n in args.nodes:
        prep_h = args.documents / (prepare_rate * n) / 3600
        tok_h = args.documents * args.select_ratio / (tokenize_rate * n) / 3600
        print(f"| {n} | {prep_h:,.0f} | {tok_h:,.1f} | {prep_h + tok_h:,.0f} |")


if __name__ == "__main__":
    main()
