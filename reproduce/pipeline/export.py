"""Stage export: the documents a selection keeps, written back as a dataset of Parquet shards with
a dataset card, to share, inspect or tokenize elsewhere (as the paper released FineWeb-Mask).

Each input shard is one executor task's work (task r of N: shards r, r+N, ...; datatrove's local,
Ray or Slurm executor, reproduce/pipeline/engines.py): its rows are read with pyarrow, those the
selection marks `selected` (and a keep-list of the dedup stage, where given, keeps) are kept with
every column as it was, prepare's `quality_score` and the selection's `score` (as
`selection_score`) are added, and datatrove's ParquetWriter writes them in input order into a
folder of their own, train/STEM/ (STEM: the input shard's name), as 000_STEM.parquet,
001_STEM.parquet, ...: a file is closed at the first row group (--row_group_rows documents) that
takes it past --shard_mb. The folder is written under a temporary name and renamed into place
whole, so a shard is either finished or absent. Since a shard's files are a function of that
shard, the selection, the prepared rows, the keep-list and the two sizes alone, the bytes do not
depend on --tasks, --workers or the executor.

One merge task then checks that the files hold every kept id once and nothing else, draws the
figures (figures/: quality and length of the selected rows against the input's, the mix of a
metadata column such as FineWeb's `dump` or the pool's `domain`, the rows in the first two
principal components of their embeddings) and writes the dataset card README.md, whose YAML front
matter (configs with data_files, dataset_info with the features) lets `datasets.load_dataset`
read the folder offline; summary.json comes last. config.json records what the run read; a rerun
with the same skips the finished shards (logs/: datatrove's logs and completion markers) and a
finished run returns at once; anything else starts afresh.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import (FEATURE_COLUMN, QUALITY_COLUMN, atomic_output, read_dataset,
                           write_json_atomic, write_text_atomic)
from datamask.errors import UserError
from datamask.options import REQUIRED, Range, option, validate
from datamask.paths import check_paths, leave_as_found, remove_temporaries
from datamask.processes import children_die_with_parent
from datamask.shared import require

from .common import (atomic_folder, check_distinct_files, check_prepared, check_text_shard,
                     file_stats, parquet_files, read_schema, selection_file)
from .dedup import KEEP_FILE, read_ids, read_removed, removed_ids
from .engines import Executed, check_executor, engine_session, run_then_merge, start_or_resume, task_files

datatrove_base = require("datatrove.pipeline.base", "export")

# train/STEM/NNN_STEM.parquet, one folder per input shard: the folder named after the split is what
# `datasets.load_dataset("parquet", data_dir=OUTPUT)` reads, and nothing else there
DATA = "train"
FIGURES = "figures"
CARD = "README.md"
SUMMARY = "summary.json"
SCORE_COLUMN = "selection_score"  # the selection's `score`, beside prepare's quality_score
ADDED = (QUALITY_COLUMN, SCORE_COLUMN)
MIX_COLUMNS = ("domain", "dump")  # --mix's default: the first of these the shards hold
NO_MIX = "none"
FIGURE_ROWS = 50_000  # input rows the quality, length and embedding figures draw, at most
MIX_BARS = 12  # values of the mix column drawn; the rest as one bar
SELECTED_COLOUR, INPUT_COLOUR = "tab:orange", "tab:grey"


@dataclass(kw_only=True)
class Export(Executed):
    """What an export reads and writes, and how: `datamask pipeline export`'s flags, help and
    range checks come from these fields; one that breaks a check is refused when made."""

    input: Path = option(REQUIRED, "folder of FineWeb Parquet shards")
    selection: Path = option(REQUIRED, "selection.parquet from the select stage, or the folder "
                                       "holding it")
    prepared: Path = option(REQUIRED, "the folder prepare wrote from these shards (quality, "
                                      "embeddings)")
    output: Path = option(REQUIRED, "folder for train/ (the shards), README.md (the dataset "
                                    "card) and figures/")
    keep: Path | None = option(None, "a keep-list of these shards (`dedup`'s output folder): "
                                     "the documents it removes are left out")
    shard_mb: float = option(512.0, "MiB per Parquet file: a file is closed at the first row "
                                    "group past it", within=Range(0.0, open_low=True))
    row_group_rows: int = option(1000, "documents per Parquet row group", within=Range(1))
    # None: the first of MIX_COLUMNS the shards hold; NO_MIX: none
    mix: str | None = option(None, "the column whose mix the card draws; none: no mix figure",
                             metavar="COLUMN",
                             default_text="domain, else dump, where the shards hold one")
    tasks: int | None = option(None, "executor tasks", within=Range(1), flag=False)

    def __post_init__(self):
        validate(self)

    def command(self) -> str:
        """The command that writes this export (the executor's flags aside: they change nothing
        written), as the card quotes it."""
        words = ["datamask", "pipeline", "export", "--input", self.input,
                 "--selection", self.selection, "--prepared", self.prepared,
                 *(["--keep", self.keep] if self.keep else []),
                 "--shard_mb", f"{self.shard_mb:g}", "--row_group_rows", self.row_group_rows,
                 *(["--mix", self.mix] if self.mix else []), "--output"]
        return " ".join(shlex.quote(str(w)) for w in words) + " DIR"


def kept_selection(selection: Path, keep: Path | None) -> pa.Table:
    """The selection's selected rows that the keep-list in folder `keep` (None: none) does not
    remove: (id as text, score)."""
    table = pq.read_table(selection, columns=["id", "selected", "score"])
    table = table.filter(table.column("selected"))
    chosen = pa.table({"id": table.column("id").cast(pa.string()),
                       "score": table.column("score")})
    if keep is None:
        return chosen
    return chosen.filter(pc.invert(pc.is_in(chosen.column("id"), value_set=read_removed(keep))))


def output_schema(shard: pa.Schema, quality: pa.DataType, score: pa.DataType) -> pa.Schema:
    """The shard's columns as they are, then the two added; without the shard's schema metadata,
    which describes its own columns (a `huggingface` entry would make `datasets` expect those)."""
    return shard.remove_metadata().append(pa.field(QUALITY_COLUMN, quality)) \
        .append(pa.field(SCORE_COLUMN, score))


def row_as_written(writer, document) -> dict:
    """datatrove's ParquetWriter adapter: the row the document carries, every column of it."""
    return document.metadata


def shard_writer(folder: Path, stem: str, schema: pa.Schema, export: Export):
    """datatrove's ParquetWriter for one input shard's rows: files NNN_STEM.parquet in `folder`,
    each closed at the first row group that takes it past --shard_mb."""
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.logging import logger

    # it warns that a name without ${rank} may be written by two tasks at once: here one task
    # writes each shard's name, which must not change with the tasks
    logger.disable("datatrove.pipeline.writers.disk_base")
    try:
        return ParquetWriter(str(folder), output_filename=stem.replace("$", "$$") + ".parquet",
                             adapter=row_as_written, schema=schema,
                             batch_size=export.row_group_rows,
                             max_file_size=max(1, round(export.shard_mb * 2**20)))
    finally:
        logger.enable("datatrove.pipeline.writers.disk_base")


def write_shard(source: Path, prepared: Path, chosen: pa.Table, folder: Path,
                export: Export) -> int:
    """The kept rows of shard `source`, in its order, with their quality (from the prepared shard,
    row for row the same ids) and selection score, as Parquet files in `folder`; their count."""
    from datatrove.data import Document

    quality = pq.read_table(prepared, columns=[QUALITY_COLUMN]).column(0)
    schema = output_schema(read_schema(source), quality.type, chosen.schema.field("score").type)
    start = written = 0
    with shard_writer(folder, source.stem, schema, export) as writer:
        for batch in pq.ParquetFile(source).iter_batches(batch_size=export.row_group_rows):
            at = pc.index_in(batch.column("id").cast(pa.string()), value_set=chosen.column("id"))
            kept = pc.is_valid(at)
            rows = pa.Table.from_batches([batch]).filter(kept)
            rows = rows.append_column(QUALITY_COLUMN, quality.slice(start, len(batch)).filter(kept))
            rows = rows.append_column(SCORE_COLUMN, chosen.column("score").take(at.filter(kept)))
            for row in rows.to_pylist():
                writer.write(Document(text=row["text"] or "", id=str(row["id"]), metadata=row))
            start, written = start + len(batch), written + len(rows)
    return written


class ExportShards(datatrove_base.PipelineStep):
    """Task r of N: the kept rows of input shards r, r+N, ..., each into train/STEM/ under a
    temporary name, renamed into place whole; a shard whose folder is there is done."""

    name = "export selected documents"
    type = "💽 - WRITER"

    def __init__(self, files: list[str], prepared: str, export: Export):
        super().__init__()
        self.files, self.prepared, self.export = files, prepared, export

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        chosen = None  # read in the task, once, where a shard is left to write
        for source in map(Path, task_files(self.files, rank, world_size)):
            done = Path(self.export.output) / DATA / source.stem
            if done.is_dir():
                continue
            if chosen is None:
                chosen = kept_selection(self.export.selection, self.export.keep)
            remove_temporaries(done)  # what a killed attempt at this shard left
            with self.track_time("shard"), atomic_folder(done) as tmp:
                written = write_shard(source, Path(self.prepared) / source.name, chosen, tmp,
                                      self.export)
            self.stat_update("documents", value=written)
        yield from data or ()


@dataclass
class FigureRows:
    """What the figures draw: a seeded sample of the input rows (their quality, length in
    characters, unit embedding and whether kept) and the mix column's counts over every row."""

    quality: np.ndarray
    length: np.ndarray
    features: np.ndarray
    kept: np.ndarray
    rows: int
    mix: dict[str, list[int]]  # value -> [input rows, kept rows]


def figure_rows(files: list[Path], prepared: Path, chosen: pa.Array, mix: str | None,
                sample: int = FIGURE_ROWS, seed: int = 0) -> FigureRows:
    """Each shard and its prepared rows read once; the sample is each row with probability
    sample / rows, drawn from a seeded generator in shard order."""
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    rng, share = np.random.default_rng(seed), min(1.0, sample / max(rows, 1))
    parts, mixed = [], {}
    for source in files:
        prepared_rows = read_dataset([prepared / source.name])
        names = pq.read_schema(prepared / source.name).names
        extra = ["id"] + (["text_length"] if "text_length" in names else [])
        side = pq.read_table(prepared / source.name, columns=extra)
        kept = pc.is_in(side.column("id").cast(pa.string()), value_set=chosen).to_numpy(
            zero_copy_only=False)
        wanted = [c for c in (mix, None if "text_length" in names else "text") if c]
        shard = pq.read_table(source, columns=wanted) if wanted else None
        length = (side.column("text_length") if "text_length" in names
                  else pc.utf8_length(shard.column("text").fill_null(""))).to_numpy()
        drawn = rng.random(len(kept)) < share
        features = prepared_rows.features[drawn]
        parts.append((prepared_rows.quality[drawn], length[drawn],
                      features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True),
                                            1e-12), kept[drawn]))
        if mix:
            values = np.asarray(shard.column(mix).cast(pa.string()).fill_null("(none)")
                                .to_numpy(zero_copy_only=False), dtype=object)
            for value, count in zip(*np.unique(values, return_counts=True)):
                mixed.setdefault(value, [0, 0])[0] += int(count)
            for value, count in zip(*np.unique(values[kept], return_counts=True)):
                mixed[value][1] += int(count)
    quality, length, features, kept = (np.concatenate(p) for p in zip(*parts))
    return FigureRows(quality.astype(np.float64), length.astype(np.float64), features, kept,
                      rows, mixed)


def draw_figures(figures: FigureRows, mix: str | None, folder: Path) -> list[str]:
    """PNG files in `folder` (matplotlib's file-only backend), each written atomically; their
    names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(exist_ok=True)
    kept, drawn = figures.kept, len(figures.kept)
    sampled = f"a sample of {drawn:,} of the {figures.rows:,} input rows" \
        if drawn < figures.rows else f"all {figures.rows:,} input rows"
    names = []

    def save(fig, name: str) -> None:
        with atomic_output(folder / name) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    length = np.log10(np.maximum(figures.length, 1))
    for ax, values, label in ((axes[0], figures.quality, "quality score (prepare's)"),
                              (axes[1], length, "length, log10 characters")):
        bins = np.histogram_bin_edges(values, bins=40)
        ax.hist(values, bins=bins, density=True, color=INPUT_COLOUR, alpha=0.55,
                label=f"input ({drawn:,})")
        ax.hist(values[kept], bins=bins, density=True, histtype="step", linewidth=1.8,
                color=SELECTED_COLOUR, label=f"selected ({int(kept.sum()):,})")
        ax.set_xlabel(label)
        ax.set_ylabel("density")
        ax.legend(fontsize=8)
    fig.suptitle(f"Quality and length of the selected rows against the input ({sampled})",
                 fontsize=10)
    save(fig, "quality-length.png")

    if mix and figures.mix:
        order = sorted(figures.mix, key=lambda v: (-figures.mix[v][0], v))
        shown = order[:MIX_BARS]
        counts = np.array([figures.mix[v] for v in shown], np.float64)
        if len(order) > MIX_BARS:
            shown.append(f"{len(order) - MIX_BARS} others")
            counts = np.vstack([counts, np.sum([figures.mix[v] for v in order[MIX_BARS:]],
                                               axis=0)])
        share = counts / np.maximum(counts.sum(axis=0), 1)
        y = np.arange(len(shown))
        fig, ax = plt.subplots(figsize=(7, 0.9 + 0.38 * len(shown)))
        ax.barh(y - 0.2, share[:, 0], height=0.4, color=INPUT_COLOUR, label="input")
        ax.barh(y + 0.2, share[:, 1], height=0.4, color=SELECTED_COLOUR, label="selected")
        ax.set_yticks(y, [str(v) for v in shown], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"share of the rows (input {int(counts[:, 0].sum()):,}, selected "
                      f"{int(counts[:, 1].sum()):,})")
        ax.set_title(f"The {mix} mix, input against selected", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        save(fig, "mix.png")

    if drawn >= 3:
        centred = figures.features - figures.features.mean(axis=0)
        _, strength, axes_t = np.linalg.svd(centred, full_matrices=False)
        xy = centred @ axes_t[:2].T
        explained = strength[:2] ** 2 / max((strength ** 2).sum(), 1e-12)
        fig, ax = plt.subplots(figsize=(6.2, 5.6))
        size = 4 if drawn > 5000 else 10
        ax.scatter(*xy[~kept].T, s=size, color="lightgrey", label=f"not selected "
                   f"({int((~kept).sum()):,})", rasterized=True)
        ax.scatter(*xy[kept].T, s=size, color=SELECTED_COLOUR, label=f"selected "
                   f"({int(kept.sum()):,})", rasterized=True)
        ax.set_xlabel(f"PC1 ({explained[0]:.0%} of the variance)")
        ax.set_ylabel(f"PC2 ({explained[1]:.0%} of the variance)")
        ax.set_title(f"The embeddings in their first two principal components\n({sampled})",
                     fontsize=10)
        ax.legend(fontsize=8, markerscale=2)
        save(fig, "embedding-map.png")
    return names


def card_text(export: Export, counts: dict, schema: pa.Schema, files: int, size: int,
              figures: list[str], mix: str | None, selected_by: dict) -> str:
    """README.md: YAML front matter that `datasets` reads (the data files, their features and
    size), then the counts, the command, how to load it, the figures."""
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard, DatasetCardData

    name = Path(export.output).name
    card = DatasetCardData(pretty_name=name)
    MetadataConfigs({"default": {"data_files": [
        {"split": "train", "path": f"{DATA}/*/*.parquet"}]}}).to_dataset_card_data(card)
    splits = SplitDict()
    splits.add(SplitInfo(name="train", num_examples=counts["written"]))
    DatasetInfosDict({"default": DatasetInfo(features=Features.from_arrow_schema(schema),
                                             splits=splits, download_size=size)}) \
        .to_dataset_card_data(card)
    method = ""
    if selected_by.get("method"):
        method = (f" by `{selected_by['method']}` at select_ratio "
                  f"{selected_by.get('select_ratio')}")
    removed = [f"| selected, removed by the keep-list `{export.keep}` | "
               f"{counts['removed_by_keep']:,} |"] if export.keep else []
    lines = [
        f"# {name}",
        "",
        f"The documents of the Parquet shards `{export.input}` that the selection "
        f"`{export.selection}` keeps{method}"
        + (", less those the keep-list removes" if export.keep else "") +
        f", one folder per input shard under `{DATA}/`. Every column of the shards is kept as it "
        f"was; two are added: `{QUALITY_COLUMN}` (the prepare stage's quality score, "
        f"`{export.prepared}`) and `{SCORE_COLUMN}` (the selector's score for the row).",
        "",
        "| rows | count |",
        "|---|---|",
        f"| input | {counts['input']:,} |",
        f"| selected | {counts['selected']:,} |",
        *removed,
        f"| written | {counts['written']:,} ({counts['written'] / max(counts['input'], 1):.1%} "
        f"of the input) |",
        "",
        f"{files} Parquet files, {size / 2**20:,.1f} MiB in all: {export.row_group_rows:,} rows "
        f"per row group, a file closed at the first row group past {export.shard_mb:g} MiB.",
        "",
        "## How it was written",
        "",
        "```",
        export.command(),
        "```",
        "",
        "## Loading",
        "",
        "```python",
        "import datasets",
        "rows = datasets.load_dataset(\"DIR\", split=\"train\")  # the card's data files",
        "rows = datasets.load_dataset(\"parquet\", data_dir=\"DIR\", split=\"train\")",
        "",
        "from datatrove.pipeline.readers import ParquetReader",
        f"documents = ParquetReader(\"DIR/{DATA}\")()",
        "```",
        "",
        "## Figures",
        "",
    ]
    titles = {"quality-length.png": "quality and length, selected against input",
              "mix.png": f"the {mix} mix", "embedding-map.png": "the embedding map"}
    lines += [f"![{titles[name]}]({FIGURES}/{name})\n" for name in figures]
    if "mix.png" not in figures:
        lines.append(f"No mix figure: {no_mix_reason(mix)}.\n")
    body = "\n".join(lines)
    return str(DatasetCard(f"---\n{card.to_yaml()}\n---\n\n{body}"))


def no_mix_reason(mix: str | None) -> str:
    if mix is None:
        return f"the shards have none of the columns {', '.join(MIX_COLUMNS)} (--mix names one)"
    return "--mix none"


class WriteCard(datatrove_base.PipelineStep):
    """One task: the written files checked to hold every kept id once and no other, then the
    figures, README.md and, last, summary.json. A finished export is not written again."""

    name = "write the dataset card"
    type = "💽 - WRITER"

    def __init__(self, files: list[str], prepared: str, export: Export, mix: str | None,
                 summary: dict):
        super().__init__()
        self.files, self.prepared, self.export = files, prepared, export
        self.mix, self.summary = mix, summary

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.export.output)
        if not (out / SUMMARY).exists():
            for name in (CARD, SUMMARY):
                remove_temporaries(out / name)  # what a killed merge left
            chosen = kept_selection(self.export.selection, self.export.keep).column("id")
            shards = check_written(out, [Path(f) for f in self.files], chosen)
            written = sum(s["rows"] for s in shards.values())
            files = [name for s in shards.values() for name in s["files"]]
            size = sum(s["bytes"] for s in shards.values())
            schema = pq.read_schema(out / files[0])
            figures = draw_figures(figure_rows([Path(f) for f in self.files],
                                               Path(self.prepared), chosen, self.mix),
                                   self.mix, out / FIGURES)
            counts = {**self.summary["counts"], "written": written}
            write_text_atomic(card_text(self.export, counts, schema, len(files), size, figures,
                                        self.mix, self.summary["selected_by"]), out / CARD)
            write_json_atomic({**self.summary, "counts": counts, "files": len(files),
                               "bytes": size, "shards": shards, "figures": figures,
                               "stage_wall_s": round(time.time() - self.summary["started_at"],
                                                     3)}, out / SUMMARY)
            self.stat_update("documents", value=written)
        yield from data or ()


def check_written(out: Path, files: list[Path], chosen: pa.Array) -> dict:
    """Per input shard, the files written and their rows; refused unless together they hold
    every id of `chosen` once and no other."""
    shards, ids = {}, []
    for source in files:
        folder = out / DATA / source.stem
        written = sorted(folder.glob("*.parquet"))
        shards[source.name] = {
            "rows": sum(pq.read_metadata(p).num_rows for p in written),
            "files": [str(p.relative_to(out)) for p in written],
            "bytes": sum(p.stat().st_size for p in written)}
        ids += [pq.read_table(p, columns=["id"]).column("id").cast(pa.string()) for p in written]
    found = pa.chunked_array([c for part in ids for c in part.chunks], pa.string())
    if len(found) != len(chosen) or len(pc.unique(found)) != len(found) or \
            not pc.all(pc.is_in(found, value_set=chosen)).as_py():
        raise UserError(f"{out / DATA}: the files hold {len(found)} rows for the {len(chosen)} "
                        f"kept ids, not each once; delete the output folder and rerun")
    return shards


def check_selection(selection: Path, ids: pa.ChunkedArray, input_folder: Path) -> pa.Table:
    """The selection's rows must be the rows of the shards (`ids`: theirs, without a repeat):
    refused, naming it, where some selected ids are in no shard, or where it lists other rows
    (a selection of other shards). Its (id, selected, score) as read."""
    names = read_schema(selection, "--selection").names
    if "score" not in names:
        raise UserError(f"--selection {selection}: no column 'score' (a selection.parquet of "
                        f"`reproduce select` has id, selected and score)")
    table = pq.read_table(selection, columns=["id", "selected", "score"])
    listed = table.column("id").cast(pa.string())
    if listed.null_count or table.column("selected").null_count:
        raise UserError(f"--selection {selection}: a null id or selected value")
    chosen = listed.filter(table.column("selected"))
    missing = chosen.filter(pc.invert(pc.is_in(chosen, value_set=ids)))
    if len(missing):
        raise UserError(f"--selection {selection}: {len(missing)} of its {len(chosen)} selected "
                        f"ids are in no shard of --input {input_folder} (first: {missing[0]}); "
                        f"give the shards the selection was made from")
    if len(listed) != len(ids) or len(pc.unique(listed)) != len(listed) or \
            not pc.all(pc.is_in(ids, value_set=listed)).as_py():
        shared = pc.sum(pc.is_in(listed, value_set=ids)).as_py() or 0
        raise UserError(f"--selection {selection}: a selection of another input: it lists "
                        f"{len(listed)} rows, --input {input_folder} holds {len(ids)} ({shared} "
                        f"in both); select the rows prepare made of these shards")
    return table


def check_prepared_rows(files: list[Path], prepared: Path) -> list[Path]:
    """The prepared shard of each input shard (prepare writes one of the same name), holding
    the same ids in the same order; refused, naming it, otherwise."""
    if not Path(prepared).is_dir():
        raise UserError(f"--prepared {prepared}: not a folder; give the folder prepare wrote "
                        f"from these shards")
    found = []
    for source in files:
        path = Path(prepared) / source.name
        if not path.is_file():
            raise UserError(f"--prepared {prepared}: no {source.name}, the prepared rows of "
                            f"--input's {source.name}; give the folder prepare wrote from these "
                            f"shards")
        check_prepared([path])
        ours = pq.read_table(path, columns=["id"]).column("id").cast(pa.string())
        theirs = pq.read_table(source, columns=["id"]).column("id").cast(pa.string())
        if not ours.equals(theirs):
            raise UserError(f"--prepared {path}: its rows are not those of {source} (prepare "
                            f"keeps every input row, in order); prepare these shards again")
        found.append(path)
    return found


def check_shards(files: list[Path]) -> pa.Schema:
    """FineWeb shards (text, id) of one schema, none already holding a column export adds."""
    first = None
    for path in files:
        check_text_shard(path)
        schema = read_schema(path).remove_metadata()
        clash = [c for c in ADDED if c in schema.names]
        if clash:
            raise UserError(f"{path}: already has a column '{clash[0]}', which export adds")
        if first is None:
            first = (path, schema)
        elif not schema.equals(first[1]):
            raise UserError(f"{path}: its columns ({schema.names}, {schema.types}) are not those "
                            f"of {first[0]}; a dataset's shards share one schema")
    return first[1]


def choose_mix(mix: str | None, schema: pa.Schema, first: Path) -> str | None:
    """The mix figure's column: --mix (refused where the shards lack it), none for --mix none,
    else the first of MIX_COLUMNS the shards hold (None: no figure)."""
    if mix == NO_MIX:
        return None
    if mix is None:
        return next((c for c in MIX_COLUMNS if c in schema.names), None)
    if mix not in schema.names or mix in ("text", "id"):
        raise UserError(f"--mix {mix}: not a metadata column of the shards ({first} has "
                        f"{schema.names}); name one, or --mix none")
    return mix


def run_export(export: Export) -> dict:
    """Write the selected documents of `export.input` as a dataset in `export.output`; returns
    summary.json's content (for Slurm, which returns at submission, the submission). Everything
    is checked before any work; a rerun of a finished export returns at once."""
    check_executor(export.executor, export.workers, export.cluster)
    if not export.shard_mb > 0:
        raise UserError(f"--shard_mb must be greater than 0, got {export.shard_mb:g}")
    if export.row_group_rows < 1:
        raise UserError(f"--row_group_rows must be at least 1, got {export.row_group_rows}")
    input_folder, output = Path(export.input), Path(export.output)
    if not input_folder.is_dir():
        raise UserError(f"--input {input_folder}: not a folder; give the folder of FineWeb "
                        f"Parquet shards the selection was made from")
    files = parquet_files([str(input_folder)])
    selection = selection_file(export.selection)
    check_distinct_files(files)
    schema = check_shards(files)
    stems = [f.stem for f in files]
    if len(set(stems)) != len(stems):
        raise UserError(f"--input {input_folder}: two shards share a name; each names its folder")
    prepared_files = check_prepared_rows(files, export.prepared)
    keep = Path(export.keep) if export.keep else None
    check_paths({"--input": [input_folder, *files], "--selection": selection,
                 "--prepared": [export.prepared, *prepared_files], "--keep": keep},
                folders={"--output": output})
    mix = choose_mix(export.mix, schema, files[0])
    ids = read_ids(files, "--input")
    if keep is not None:  # a keep-list of other rows is refused
        removed_ids(keep, ids, f"--input {input_folder}")
    table = check_selection(selection, ids, input_folder)
    selected = int(pc.sum(table.column("selected")).as_py() or 0)
    chosen = kept_selection(selection, keep)
    if not len(chosen):
        kept = " that the keep-list (--keep) keeps" if keep else ""
        raise UserError(f"--selection {selection}: selects no row{kept}; there is nothing to "
                        f"export")
    tasks = min(export.workers if export.tasks is None else export.tasks, len(files))
    # absolute paths: cluster workers do not start in this folder
    export = replace(export, input=input_folder.absolute(), selection=selection.absolute(),
                     prepared=Path(export.prepared).absolute(), output=output.absolute(),
                     keep=keep.absolute() if keep else None, tasks=tasks)
    config = {"inputs": file_stats(files), "prepared": file_stats(prepared_files),
              "selection": file_stats([selection]),
              "keep": file_stats([keep / KEEP_FILE]) if keep else None,
              "shard_mb": export.shard_mb, "row_group_rows": export.row_group_rows, "mix": mix}
    counts = {"input": len(ids), "selected": selected,
              "removed_by_keep": selected - len(chosen) if keep else 0}
    summary = {"input": str(export.input), "selection": str(export.selection),
               "prepared": str(export.prepared), "keep": str(keep.absolute()) if keep else None,
               "settings": {"shard_mb": export.shard_mb, "row_group_rows": export.row_group_rows,
                            "mix": mix},
               "counts": counts, "selected_by": selected_by(selection), "executor": export.executor,
               "tasks": tasks, "started_at": time.time(), "output": str(output)}
    with leave_as_found([output], keep_on_interrupt=[output]):
        output.mkdir(parents=True, exist_ok=True)
        start_or_resume(output / "config.json", config,
                        [output / name for name in (DATA, FIGURES, "logs", CARD, SUMMARY)])
        if not (output / SUMMARY).is_file():  # else a finished run: no executor is started
            with engine_session(export):
                children_die_with_parent()  # a kill -9 of this command leaves no executor behind
                absolute = [str(f.absolute()) for f in files]
                jobs = run_then_merge(
                    export,
                    [([ExportShards(absolute, str(export.prepared), export)], tasks, "shard")],
                    [WriteCard(absolute, str(export.prepared), export, mix, summary)],
                    export.output / "logs", "export")
            if jobs:  # Slurm: submitted; the merge job writes the card and summary.json
                return {"submitted": True, "tasks": tasks, **jobs, "output": str(output)}
    return json.loads((output / SUMMARY).read_text())


def selected_by(selection: Path) -> dict:
    """The selector and ratio the select stage recorded beside the selection (its summary.json),
    where it did."""
    path = Path(selection).parent / "summary.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: record[k] for k in ("method", "select_ratio") if k in record}
