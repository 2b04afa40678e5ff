"""`make bench-static`: embeddings for prepare, judged by a fidelity yardstick that the
transformer's own harmless variants must pass first (reproduce/results/static-embedding/
yardstick-plan-4.md: plan 3's families, candidates and rule, with the int8 transformer and the
static model fitted on a sample of the input among the rivals; plans 1 and 2 found no valid
yardstick, plan 3 found one).

On three families built offline (a demo pool, a BBC slice, a pool of technical reference text;
--family_seeds draws them), every route gives vectors for the same documents: the reference (the
transformer as prepare runs it), its harmless variants (centred, another select seed, lamb 0.45
and 0.55, one document per call, one torch thread: the same input), two known-bad embeddings
(random unit vectors; the static model with its token vectors shuffled) and the rivals (the
static model, the same centred, the transformer at 128 and at 64 tokens and with int8 linear
layers, the static model fitted with tokenlearn on 5%, 25% and 100% of the family, the fit's
cost counted in its speed). datamask selects
from each route's vectors (select's defaults, the same quality column), and once more from them
centred by their own corpus mean (origin-free); the selections are scored with the project's
Report on the reference's vectors (centred for the origin-free ones), and each candidate
yardstick is read as a share of the reference's (above random where a selection is scored). A
yardstick is valid when every harmless variant lands inside the band and every known-bad route
far below it; the valid one of plan 2's candidates with the widest gap judges the rivals. Beside
it, each timed route's whole-prepare documents/s (embedding and heuristic scorer over prepare's
chunks, interleaved passes, medians): on a shared machine read the ratios.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import Dataset, read_dataset, write_text_atomic
from datamask.errors import UserError
from datamask.report import Report
from datamask.selectors import make_selector
from datamask.shared import require

from reproduce.bench import work_folder
from reproduce.bench.blocks import unit_rows
from reproduce.pipeline.bbc import write_bbc_fineweb
from reproduce.pipeline.common import parquet_files
from reproduce.pipeline.embedders import STATIC, Embedder, StaticEmbedder
from reproduce.pipeline.prepare import HeuristicQuality, PrepareConfig, prepare
from reproduce.pool.build import PoolConfig, build_pool

LAMB = 0.5  # the reference's trade-off, and the report's
GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # a route's frontier
FRONTIER_LAMBS = (0.3, 0.5, 0.7)  # the reference's points the frontier yardstick reads
BAND = (0.95, 1.05)
BAD_CEILING = 0.5
SELECT_RATIO = 0.25
POOL_FLAGS = {"heldout_chars": 40_000, "task_articles": 60, "max_mb_per_domain": 0.5}
FAMILIES = ("pool", "BBC", "docs")
METRICS = ("Pair_simi", "DiSF", "Facility")
ORIGIN_FREE = ("Pair_simi", "DiSF")  # the joints that score the origin-free selections
PLAN = 4  # the plan this bench runs (its routes and families)
CANDIDATES_OF = 2  # the plan whose candidates the verdict chooses among
# the candidate yardsticks, each plan's in its order; `single`: one selection per route suffices;
# `plan`: the plan that proposed it (plan 1's are shown for comparison, not chosen from)
YARDSTICKS = {
    "origin-free Pair_simi at lamb 0.5": {"single": True, "plan": 2},
    "origin-free DiSF at lamb 0.5": {"single": True, "plan": 2},
    "origin-free neighbour recall": {"single": True, "plan": 2},
    "linear CKA": {"single": True, "plan": 2},
    "Pair_simi at lamb 0.5": {"single": True, "plan": 1},
    "DiSF at lamb 0.5": {"single": True, "plan": 1},
    "Facility at lamb 0.5": {"single": True, "plan": 1},
    "Pair_simi at matched quality": {"single": False, "plan": 1},
    "Pair_simi frontier": {"single": False, "plan": 1},
    "DiSF at matched quality": {"single": False, "plan": 1},
    "neighbour recall": {"single": True, "plan": 1},
}
CANDIDATES = [name for name, spec in YARDSTICKS.items() if spec["plan"] == CANDIDATES_OF]
FIT_SHARES = (0.05, 0.25, 1.0)  # the shares of a family the static model is fitted on


@dataclass(frozen=True)
class Route:
    """Vectors (a key of the family's vectors, optionally centred) and the trade-off and seed
    datamask selects with."""

    name: str
    kind: str  # reference, harmless, known-bad or rival
    vectors: str
    centred: bool = False
    lamb: float = LAMB
    seed: int = 0

    @property
    def same_vectors(self) -> bool:
        """Changes only the selection (seed or lamb): the reference's vectors as they are."""
        return self.vectors == "transformer" and not self.centred


ROUTES = (
    Route("transformer (reference)", "reference", "transformer"),
    Route("centred", "harmless", "transformer", centred=True),
    Route("transformer, 128 tokens", "rival", "transformer, 128 tokens"),  # input cut short
    Route("select seed 1", "harmless", "transformer", seed=1),
    Route("lamb 0.45", "harmless", "transformer", lamb=0.45),
    Route("lamb 0.55", "harmless", "transformer", lamb=0.55),
    Route("one document per call", "harmless", "transformer, batch 1"),
    Route("one torch thread", "harmless", "transformer, 1 thread"),
    Route("random unit vectors", "known-bad", "random"),
    Route("static, token vectors shuffled", "known-bad", "static, shuffled"),
    Route("static (distilled)", "rival", "static"),
    Route("static, centred", "rival", "static", centred=True),
    Route("transformer, 64 tokens", "rival", "transformer, 64 tokens"),
    Route("transformer, int8", "rival", "transformer, int8"),
    *(Route(f"static, fitted on {share:.0%}", "rival", f"static, fitted {share:.0%}")
      for share in FIT_SHARES),
)
REFERENCE = ROUTES[0]


class OneThread:
    """An embedder run with torch on one thread, the previous thread count restored after: the
    same fp32 model and inputs, other reduction orders."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self.embedder(texts)
        finally:
            torch.set_num_threads(before)


def int8(embedder: Embedder) -> Embedder:
    """The transformer with every linear layer's weights quantised to int8 and its activations
    per batch (torch's dynamic quantisation): the same tokenizer and input, other arithmetic."""
    import torch
    with warnings.catch_warnings(action="ignore"):  # the eager API's notice of its successor
        torch.ao.quantization.quantize_dynamic(embedder.model, {torch.nn.Linear},
                                               dtype=torch.qint8, inplace=True)
    return embedder


def fitted(base: StaticEmbedder, texts: list[str], targets: np.ndarray,
           seed: int) -> StaticEmbedder:
    """`base`'s static model trained further with tokenlearn's `train_model` on `texts`, the
    reference's vectors of them as targets (its defaults; the targets' PCA to at most as many
    dimensions as documents): its vectors learn where the transformer puts a document. `base` is
    left as it was."""
    import torch
    root = logging.getLogger()
    level = root.level
    train = require("tokenlearn.train", "bench-static's fitted static model")
    root.setLevel(level)  # tokenlearn.train sets the root logger to INFO when imported
    torch.manual_seed(seed)  # its output layer's start and its batches' order
    embedder = copy.copy(base)  # without the model (Embedder.__getstate__)
    embedder.model = train.train_model(base.model, texts, targets, device="cpu",
                                       pca_dims=min(256, len(texts)))
    return embedder


def sample(n: int, share: float, seed: int) -> np.ndarray:
    """A seeded `share` of n rows (at least 10, tokenlearn's held-out tenth), in random order."""
    size = min(n, max(10, round(share * n)))
    return np.random.default_rng(seed).permutation(n)[:size]


def embed_all(embedder, texts: list[str], chunk: int) -> np.ndarray:
    return np.concatenate([embedder(texts[i:i + chunk]) for i in range(0, len(texts), chunk)])


def embedders(seed: int) -> tuple[dict, dict]:
    """(timed, untimed) embedders by vectors key. The timed ones are prepare's routes and are
    timed as a whole prepare; the untimed ones only make the variants' vectors."""
    timed = {"transformer": Embedder().load(),
             "transformer, 128 tokens": Embedder(max_seq_length=128).load(),
             "transformer, 64 tokens": Embedder(max_seq_length=64).load(),
             "transformer, int8": int8(Embedder()), "static": StaticEmbedder(STATIC).load()}
    shuffled = StaticEmbedder(STATIC).load()
    table = shuffled.model.embedding  # a second load: the timed static model keeps its table
    shuffled.model.embedding = table[np.random.default_rng(seed).permutation(len(table))]
    return timed, {"transformer, batch 1": Embedder(batch_size=1).load(),
                   "transformer, 1 thread": OneThread(timed["transformer"]),
                   "static, shuffled": shuffled}


def families(work: Path, names: list[str], pool: Path | None, bbc_limit: int,
             seeds: tuple[int, int, int] = (0, 0, 1)) -> dict[str, Path]:
    """{name: FineWeb shard folder}, each built offline (the plan's commands); `seeds`: the
    pool's (where none is given), BBC's draw and the docs pool's."""
    found = {}
    if "pool" in names:
        if pool is None:
            pool = work / "pool"
            build_pool(pool, PoolConfig(seed=seeds[0], **POOL_FLAGS))
        found["pool"] = pool / "fineweb"
    if "BBC" in names:
        write_bbc_fineweb(work / "bbc", work / "bbc-tasks", limit=bbc_limit, seed=seeds[1])
        found["BBC"] = work / "bbc"
    if "docs" in names:  # a pool needs news for its tasks: built with it, its news rows dropped
        docs_pool = PoolConfig(seed=seeds[2], domains=["news", "docs", "reference"], **POOL_FLAGS)
        build_pool(work / "docs-pool", docs_pool)
        (work / "docs").mkdir()
        for shard in parquet_files([str(work / "docs-pool" / "fineweb")]):
            rows = pq.read_table(shard)
            pq.write_table(rows.filter(pc.field("domain") != "news"), work / "docs" / shard.name)
        found["docs"] = work / "docs"
    return found


def shard_table(shards: Path) -> pa.Table:
    files = parquet_files([str(shards)])
    return pa.concat_tables([pq.read_table(f, columns=["id", "text"]) for f in files])


def timed_passes(timed: dict, table: pa.Table, path: Path, repeats: int, chunk: int,
                 scorer=HeuristicQuality) -> tuple[dict, dict]:
    """Each timed embedder's whole-prepare work (its vectors and the quality scorer, `scorer()`
    made fresh each pass, over prepare's chunks), `repeats` interleaved passes: ({key: vectors of
    the first pass}, {key: documents/s, the median pass}). `scorer` None times the embedding
    alone."""
    vectors, seconds = {}, {key: [] for key in timed}
    for _ in range(repeats):
        for key, embedder in timed.items():
            fresh, parts = scorer() if scorer else None, []
            start = time.perf_counter()
            for i in range(0, len(table), chunk):
                batch = table.slice(i, chunk)
                parts.append(embedder(batch.column("text").to_pylist()))
                if fresh is not None:
                    fresh(batch, path)
            seconds[key].append(time.perf_counter() - start)
            vectors.setdefault(key, np.concatenate(parts))
    return vectors, {key: len(table) / statistics.median(s) for key, s in seconds.items()}


def centred(vectors: np.ndarray) -> np.ndarray:
    """The corpus mean subtracted, each row unit length again."""
    return unit_rows(vectors - vectors.mean(axis=0, dtype=np.float64).astype(np.float32))


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """Each row's k nearest other rows by cosine (rows are unit length)."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


def neighbour_recall(reference: np.ndarray, other: np.ndarray, k: int) -> float:
    """The share of each document's k reference neighbours that `other` also puts among its k
    nearest, averaged over documents."""
    ref, found = nearest(reference, k), nearest(other, k)
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ref, found)]))


def origin_free_recall(reference: np.ndarray, other: np.ndarray) -> float:
    """The chosen yardstick (plans 3 and 4): neighbour recall at the selection's k (1 /
    SELECT_RATIO) of `other` against `reference`, each centred by its own corpus mean."""
    return neighbour_recall(centred(reference), centred(other), round(1 / SELECT_RATIO))


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA (Kornblith et al. 2019) of two representations of the same rows: columns
    centred, ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F), from d x d products (never n x n);
    1 for the same vectors, blind to the origin and to an orthogonal rotation."""
    x = x - x.mean(axis=0, dtype=np.float64)
    y = y - y.mean(axis=0, dtype=np.float64)
    cross = np.linalg.norm(y.T @ x) ** 2
    return float(cross / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def standardised(report: Report, scores: dict) -> dict:
    """A selection's mean quality, and each metric's diversity and joint on the report's term
    scale (a random selection's value is 0 on it)."""
    out = {"quality": scores["quality"]}
    for metric in METRICS:
        scale = report.joint(metric).scale
        out[f"div_{metric}"] = (scores[metric] - scale.diversity_mean) / scale.diversity_std
        out[f"joint_{metric}"] = scores[f"joint_{metric}"]
    return out


def read_off(frontier: list[dict], quality: float, metric: str) -> tuple[float, bool]:
    """A frontier's standardised diversity at `quality`, by linear interpolation between the
    selections whose qualities bracket it; (the value, whether `quality` lies outside the
    frontier's range, where the nearest end is read)."""
    points = sorted(frontier, key=lambda p: p["quality"])
    qualities = [p["quality"] for p in points]
    value = float(np.interp(quality, qualities, [p[f"div_{metric}"] for p in points]))
    return value, not qualities[0] <= quality <= qualities[-1]


def yardsticks(route_points: dict[float, dict], reference_points: dict[float, dict],
               recall: float, free: dict, reference_free: dict, free_recall: float,
               cka: float) -> dict:
    """Every candidate yardstick of one route as a share of the reference's ({name: (share,
    flag)}), from its selections' standardised scores by lamb and the reference's, its
    origin-free selection's scores and the reference's, and the measures of its vectors alone
    (neighbour recall, the same on centred vectors, linear CKA)."""
    ref = reference_points[LAMB]
    # a lamb variant has one selection, and its frontier is the reference's read at another lamb
    own = route_points.get(LAMB) or next(iter(route_points.values()))
    frontier = list((route_points if len(route_points) > 1 else reference_points).values())
    out = {f"{m} at lamb 0.5": (own[f"joint_{m}"] / ref[f"joint_{m}"], False) for m in METRICS}
    for metric in ("Pair_simi", "DiSF"):
        value, outside = read_off(frontier, ref["quality"], metric)
        out[f"{metric} at matched quality"] = (value / ref[f"div_{metric}"], outside)
    reads = [read_off(frontier, reference_points[lamb]["quality"], "Pair_simi")
             + (reference_points[lamb]["div_Pair_simi"],) for lamb in FRONTIER_LAMBS]
    out["Pair_simi frontier"] = (float(np.mean([v / r for v, _, r in reads])),
                                 any(o for _, o, _ in reads))
    out["neighbour recall"] = (recall, False)
    out.update({f"origin-free {m} at lamb 0.5": (free[f"joint_{m}"] / reference_free[f"joint_{m}"],
                                                 False) for m in ORIGIN_FREE})
    out["origin-free neighbour recall"] = (free_recall, False)
    out["linear CKA"] = (cka, False)
    return out


def route_vectors(route: Route, vectors: dict) -> np.ndarray:
    return centred(vectors[route.vectors]) if route.centred else vectors[route.vectors]


def measure(name: str, shards: Path, timed: dict, untimed: dict, work: Path, args) -> list[dict]:
    """One family: a row per route, with every yardstick and, for timed routes, documents/s."""
    table = shard_table(shards)
    vectors, rates = timed_passes(timed, table, shards, args.repeats, args.chunk)
    texts = table.column("text").to_pylist()
    for key, embedder in untimed.items():
        vectors[key] = embed_all(embedder, texts, args.chunk)
    for share in FIT_SHARES:  # the fit's cost: the sample's transformer vectors and the training
        fit_texts = [texts[i] for i in sample(len(texts), share, args.seed)]
        start = time.perf_counter()
        targets = timed["transformer"](fit_texts)
        model = fitted(timed["static"], fit_texts, targets, args.seed)
        cost = time.perf_counter() - start
        key = f"static, fitted {share:.0%}"
        vectors[key] = embed_all(model, texts, args.chunk)
        rates[key] = len(texts) / (len(texts) / rates["static"] + cost)  # its lookup: static's
    vectors["random"] = unit_rows(np.random.default_rng(args.seed).standard_normal(
        (len(texts), vectors["transformer"].shape[1])).astype(np.float32))
    # the quality column as prepare writes it, and its row ids; rows aligned to the shards' texts
    prepared = work / f"{name}-prepared"
    prepare(PrepareConfig(input=[shards], output=prepared, chunk=args.chunk, no_progress=True),
            embedder=timed["static"], scorer=HeuristicQuality())
    rows = read_dataset(parquet_files([str(prepared)]))
    doc_ids = pa.concat_tables([pq.read_table(f, columns=["id"])
                                for f in parquet_files([str(prepared)])]).column("id")
    order = {doc: i for i, doc in enumerate(table.column("id").to_pylist())}
    at = np.array([order[doc] for doc in doc_ids.to_pylist()])
    vectors = {key: np.ascontiguousarray(v[at]) for key, v in vectors.items()}
    return judge(name, rows.ids, rows.quality, vectors, rates)


def judge(name: str, ids: np.ndarray, quality: np.ndarray, vectors: dict, rates: dict,
          routes=ROUTES, grid=GRID, options: dict | None = None) -> list[dict]:
    """A row per route: datamask's selections from its vectors (at its lamb, or over `grid`),
    scored on the reference's vectors; its origin-free selection (its vectors centred by their
    own mean, at its lamb), scored on the reference's centred vectors; and every yardstick;
    `options`: the learner's, beside lamb and seed."""
    reference = vectors[REFERENCE.vectors]
    report = Report(Dataset(ids, quality, reference), SELECT_RATIO, LAMB)
    reference_centred = centred(reference)
    free_report = Report(Dataset(ids, quality, reference_centred), SELECT_RATIO, LAMB,
                         metrics=ORIGIN_FREE)
    k = round(1 / SELECT_RATIO)

    def selected(features: np.ndarray, route: Route, lamb: float) -> np.ndarray:
        selector = make_selector("datamask", lamb=lamb, seed=route.seed, **(options or {}))
        return selector.select(Dataset(ids, quality, features), SELECT_RATIO).selected

    points = {route: {lamb: standardised(report, report(selected(route_vectors(route, vectors),
                                                                  route, lamb)))
                      for lamb in ([route.lamb] if route.lamb != LAMB else grid)}
              for route in routes}
    free = {}  # by (vectors, lamb, seed): a route already centred is centred from its raw vectors
    for route in routes:
        key = (route.vectors, route.lamb, route.seed)
        if key not in free:
            free[key] = free_report(selected(centred(vectors[route.vectors]), route, route.lamb))
    reference_free = free[(REFERENCE.vectors, REFERENCE.lamb, REFERENCE.seed)]
    out = []
    for route in routes:
        own = route_vectors(route, vectors)
        same = route.same_vectors
        recall = 1.0 if same else neighbour_recall(reference, own, k)
        free_recall = (1.0 if route.vectors == REFERENCE.vectors else
                       origin_free_recall(reference, vectors[route.vectors]))
        scores = free[(route.vectors, route.lamb, route.seed)]
        out.append({"family": name, "route": route.name, "kind": route.kind,
                    "documents": len(ids), "docs_per_s": rates.get(route.vectors),
                    "speedup": (rates[route.vectors] / rates[REFERENCE.vectors]
                                if route.vectors in rates and not route.same_vectors else None),
                    "by_construction": by_construction(route),
                    "yardsticks": yardsticks(points[route], points[REFERENCE], recall, scores,
                                             reference_free, free_recall,
                                             1.0 if same else linear_cka(reference, own)),
                    "points": {str(lamb): p for lamb, p in points[route].items()},
                    "origin_free": scores})
    return out


def by_construction(route: Route) -> list[str]:
    """The yardsticks a route scores 1 on by definition (they do not test the yardstick)."""
    if route.vectors != REFERENCE.vectors or route.kind == "reference":
        return []
    fixed = ["origin-free neighbour recall"]  # centred or not, the reference's vectors
    if (route.lamb, route.seed) == (REFERENCE.lamb, REFERENCE.seed):  # centred: the reference's
        fixed += [f"origin-free {m} at lamb 0.5" for m in ORIGIN_FREE]  # origin-free selection
    if route.same_vectors:
        fixed += ["neighbour recall", "linear CKA"]
        if route.lamb != LAMB:
            fixed += [y for y, spec in YARDSTICKS.items() if not spec["single"]]
    return fixed


def validity(rows: list[dict]) -> dict:
    """Each yardstick's plan, harmless range, highest known-bad score, the routes that broke it,
    and whether it is valid by the plans' rule (every harmless variant inside BAND, every
    known-bad at most BAD_CEILING)."""
    out = {}
    for name, spec in YARDSTICKS.items():
        harmless = [r for r in rows
                    if r["kind"] == "harmless" and name not in r["by_construction"]]
        bad = [r for r in rows if r["kind"] == "known-bad"]
        broke = [r["route"] for r in harmless
                 if not BAND[0] <= r["yardsticks"][name][0] <= BAND[1]]
        broke += [r["route"] for r in bad if r["yardsticks"][name][0] > BAD_CEILING]
        values = [r["yardsticks"][name][0] for r in harmless]
        bad_max = max(r["yardsticks"][name][0] for r in bad)
        out[name] = {"plan": spec["plan"], "harmless_min": min(values),
                     "harmless_max": max(values), "bad_max": bad_max, "valid": not broke,
                     "gap": BAND[0] - bad_max, "broken_by": list(dict.fromkeys(broke))}
    return out


def chosen(valid: dict) -> str | None:
    """The plan's choice among its own candidates: the widest gap; within 0.05 of it, one
    selection per route first, then the plan's order."""
    names = [n for n in CANDIDATES if valid[n]["valid"]]
    if not names:
        return None
    widest = max(valid[n]["gap"] for n in names)
    near = [n for n in names if valid[n]["gap"] >= widest - 0.05]
    return min(near, key=lambda n: (not YARDSTICKS[n]["single"], list(YARDSTICKS).index(n)))


def verdict(rows: list[dict]) -> tuple[str, str | None]:
    valid = validity(rows)
    yardstick = chosen(valid)
    if yardstick is None:
        broke = "; ".join(f"{n}: broken by {', '.join(valid[n]['broken_by'])} (harmless "
                          f"{valid[n]['harmless_min']:.3f}-{valid[n]['harmless_max']:.3f}, "
                          f"known-bad up to {valid[n]['bad_max']:.3f})" for n in CANDIDATES)
        return f"no valid yardstick ({broke}); no route is judged", None
    lines = [f"yardstick: {yardstick} (harmless {valid[yardstick]['harmless_min']:.3f}-"
             f"{valid[yardstick]['harmless_max']:.3f}, known-bad at most "
             f"{valid[yardstick]['bad_max']:.3f})"]
    lines += [f"{r['route']}: {r['worst']:.3f} at worst ({'passes' if r['faithful'] else 'fails'} "
              f"fidelity), {r['speedup']:.1f}x the transformer's whole prepare (median over "
              f"families); corpus-scale goal {'met' if r['goal'] else 'not met'}"
              for r in judged(rows, yardstick)]
    return "\n".join(lines), yardstick


def judged(rows: list[dict], yardstick: str) -> list[dict]:
    """Each rival on `yardstick`: its worst score over the families, its median whole-prepare
    speed-up over the transformer, whether it passes fidelity (at least the band's floor on every
    family) and the corpus-scale goal (fidelity at >= 30x)."""
    out = []
    for route in (r for r in ROUTES if r.kind == "rival"):
        mine = [r for r in rows if r["route"] == route.name]
        if not mine:  # a run of some families' rows may lack a rival
            continue
        worst = min(r["yardsticks"][yardstick][0] for r in mine)
        speeds = [r["speedup"] for r in mine if r["speedup"] is not None]
        speed = statistics.median(speeds) if speeds else float("nan")
        out.append({"route": route.name, "worst": worst, "speedup": speed,
                    "faithful": worst >= BAND[0], "goal": worst >= BAND[0] and speed >= 30})
    return out


def table(rows: list[dict]) -> str:
    names = list(YARDSTICKS)
    lines = ["| family | route | kind | docs/s (whole prepare) | x transformer | "
             + " | ".join(names) + " |", "|---|---|---|---:|---:|" + "---:|" * len(names)]
    for r in rows:
        cells = []
        for n in names:
            value, outside = r["yardsticks"][n]
            mark = "*" if n in r["by_construction"] else ("^" if outside else "")
            cells.append(f"{value:.3f}{mark}")
        speed = f"{r['docs_per_s']:,.1f}" if r["docs_per_s"] else "-"
        ratio = f"{r['speedup']:,.1f}" if r["speedup"] else "-"
        lines.append(f"| {r['family']} | {r['route']} | {r['kind']} | {speed} | {ratio} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def findings(rows: list[dict]) -> dict:
    """What `make findings` reads (validity.json): how many of the plan's candidates are valid
    (of how many), the chosen one ("none" where none is), each candidate's (every plan's)
    harmless range, highest known-bad and the routes that broke it, and the rivals as the chosen
    yardstick judges them (none where none is chosen)."""
    valid = validity(rows)
    yardstick = chosen(valid)
    routes = judged(rows, yardstick) if yardstick else []
    return {"plan": PLAN, "candidates_of": CANDIDATES_OF,
            "valid": sum(valid[n]["valid"] for n in CANDIDATES),
            "candidates": len(CANDIDATES), "yardstick": yardstick or "none",
            "rows": [{"yardstick": name, **v} for name, v in valid.items()],
            "routes": routes, "routes_judged": len(routes),
            "routes_meeting_goal": sum(r["goal"] for r in routes)}


def validity_table(rows: list[dict]) -> str:
    lines = ["| yardstick | plan | harmless variants | known-bad, highest | valid | broken by |",
             "|---|---|---|---:|---|---|"]
    for name, v in validity(rows).items():
        plan = f"{v['plan']}" + ("" if v["plan"] == CANDIDATES_OF else " (comparison)")
        lines.append(f"| {name} | {plan} | {v['harmless_min']:.3f} - {v['harmless_max']:.3f} | "
                     f"{v['bad_max']:.3f} | {'yes' if v['valid'] else 'no'} | "
                     f"{', '.join(v['broken_by']) or '-'} |")
    return "\n".join(lines)


def figure(rows: list[dict], yardstick: str | None, path: Path) -> None:
    """Speed against the yardstick, the harmless band drawn: each timed route's families; with
    no valid yardstick, against the plan's first candidate, marked."""
    valid = yardstick is not None
    yardstick = yardstick or CANDIDATES[0]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    ax.axvspan(*BAND, color="tab:green", alpha=0.15, label=f"band {BAND[0]}-{BAND[1]}")
    harmless = [r["yardsticks"][yardstick][0] for r in rows if r["kind"] == "harmless"
                and yardstick not in r["by_construction"]]
    ax.axvspan(min(harmless), max(harmless), color="tab:green", alpha=0.3,
               label="harmless variants")
    for route in ROUTES:
        mine = [r for r in rows if r["route"] == route.name and r["speedup"]]
        if mine or route.kind == "reference":
            mine = mine or [r for r in rows if r["route"] == route.name]
            ax.scatter([r["yardsticks"][yardstick][0] for r in mine],
                       [r["speedup"] or 1.0 for r in mine], label=route.name)
    ax.axhline(30, color="grey", linestyle="--", label="30x goal")
    ax.set_yscale("log")
    ax.set_xlabel(f"{yardstick} (share of the reference's)"
                  + ("" if valid else "\nnot a valid yardstick: the harmless variants leave the band"))
    ax.set_ylabel("whole-prepare documents/s, x transformer")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--pool", type=Path, help="a built demo pool (default: build one)")
    parser.add_argument("--bbc_limit", type=int, default=1000,
                        help="BBC articles drawn (default: %(default)s)")
    parser.add_argument("--work", type=Path, help="empty scratch folder (default: temporary)")
    parser.add_argument("--results", type=Path, help="write rows.json, table.md and figure.png")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; medians shown")
    parser.add_argument("--chunk", type=int, default=256, help="prepare's rows per embedding call")
    parser.add_argument("--seed", type=int, default=0,
                        help="the random vectors' and the shuffled table's seed")
    parser.add_argument("--family_seeds", type=int, nargs=3, default=[0, 0, 1],
                        metavar=("POOL", "BBC", "DOCS"),
                        help="seeds of the families built here: the pool's (without --pool), "
                             "BBC's draw, the docs pool's (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {args.repeats}")
    with work_folder(args.work) as work:
        timed, untimed = embedders(args.seed)
        rows = []
        for name, shards in families(work, args.families, args.pool, args.bbc_limit,
                                     tuple(args.family_seeds)).items():
            rows += measure(name, shards, timed, untimed, work, args)
            print(table(rows), flush=True)
        print("\n" + validity_table(rows))
        text, yardstick = verdict(rows)
        print(f"\nVerdict (yardstick-plan-{PLAN}.md):\n{text}")
        if args.results:
            args.results.mkdir(parents=True, exist_ok=True)
            write_text_atomic(json.dumps(rows, indent=1) + "\n", args.results / "rows.json")
            write_text_atomic(json.dumps(findings(rows), indent=1) + "\n",
                              args.results / "validity.json")
            write_text_atomic(f"{table(rows)}\n\n{validity_table(rows)}\n\nVerdict:\n{text}\n",
                              args.results / "table.md")
            figure(rows, yardstick, args.results / "figure.png")


if __name__ == "__main__":
    main()
