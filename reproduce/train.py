"""Stage 4, train: a Llama-style causal LM (transformers) on a tokenized selection.

The whole loop is `train` below, nanoGPT style: windows of seq_len + 1 tokens from datatrove's
DatatroveFolderDataset, AdamW, linear warm-up then cosine decay, gradient clipping.

The token budget is the same for every method: max_steps x grad_accum x batch_size windows of
seq_len + 1 tokens. The windows are read epoch by epoch, each epoch a fresh seeded permutation of
all of them, so a selection with fewer tokens than the budget is repeated whole (never sampled
unevenly) and one with more is cut; summary.json records the epochs, the tokens seen and the
unique tokens seen. The seed sets the model's initialisation and the window order (not the
selection). Same seed, data and thread count give bitwise the same checkpoint on a CPU; the
thread count (`threads`) changes the floating-point sums, hence the weights, so it is recorded.
The checkpoint is a save_pretrained folder (model + tokenizer) that lm-eval's `hf` model loads as
`pretrained=<folder>`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch

from datamask.data import write_json_atomic
from datamask.errors import UserError
from datamask.shared import require, resolve_device

from .common import atomic_folder
from .tokenize import EOS

CONFIGS = Path(__file__).parent / "configs"


# The defaults of both classes are configs/demo.yaml's (the default --config), so a YAML that
# leaves a key out gets the demo's value.
@dataclass
class ModelConfig:
    hidden_size: int = 128
    intermediate_size: int = 344
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    seq_len: int = 256
    tie_word_embeddings: bool = True
    # Positions the checkpoint declares (lm-eval truncates inputs to it). RoPE has no learned
    # positions, so it may exceed seq_len; evaluation beyond seq_len is extrapolation.
    max_position_embeddings: int = 512


@dataclass
class TrainConfig:
    batch_size: int = 8
    grad_accum: int = 1
    max_steps: int = 150
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 15
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    threads: int = 0  # torch CPU threads; 0 leaves torch's default (one per core)
    log_every: int = 10


def load_config(name_or_path: str,
                overrides: dict | None = None) -> tuple[ModelConfig, TrainConfig]:
    """A config by name (reproduce/configs/NAME.yaml) or path, then `overrides` (key: value, for
    either section). Unknown keys are errors, not silently ignored."""
    yaml = require("yaml", "train configs")
    path = Path(name_or_path)
    if not path.is_file():
        path = CONFIGS / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml")))
        raise UserError(f"--config {name_or_path}: no such file or named config ({known})")
    raw = yaml.safe_load(path.read_text()) or {}
    sections = {"model": ModelConfig, "train": TrainConfig}
    values = {name: dict(raw.get(name) or {}) for name in sections}
    for key, value in (overrides or {}).items():
        owner = next((s for s, cls in sections.items()
                      if key in {f.name for f in fields(cls)}), None)
        if owner is None:
            raise UserError(f"--set {key}: not a model or train setting")
        values[owner][key] = value
    built = []
    for name, cls in sections.items():
        unknown = set(values[name]) - {f.name for f in fields(cls)}
        if unknown:
            raise UserError(f"{path}: unknown {name} setting(s) {', '.join(sorted(unknown))}")
        built.append(cls(**values[name]))
    return built[0], built[1]


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to lr, then cosine decay to min_lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - 1 - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def token_budget(model_cfg: ModelConfig, cfg: TrainConfig) -> int:
    """Tokens every run reads, whatever its selection holds."""
    return cfg.max_steps * cfg.grad_accum * cfg.batch_size * (model_cfg.seq_len + 1)


def window_order(n_windows: int, n_reads: int, seed: int) -> np.ndarray:
    """The window each of `n_reads` training sequences reads: whole epochs, each a seeded
    permutation of every window, cut at `n_reads`."""
    rng = np.random.default_rng(seed)
    epochs = -(-n_reads // n_windows)
    return np.concatenate([rng.permutation(n_windows) for _ in range(epochs)])[:n_reads]


def train(tokens: Path, tokenizer: Path, output: Path, model_cfg: ModelConfig,
          cfg: TrainConfig, progress: bool = True) -> dict:
    """Train from scratch on the .ds files under `tokens`; save to `output` atomically."""
    transformers = require("transformers", "train")
    dataset_mod = require("datatrove.utils.dataset", "train")
    tk = require("tokenizers", "train")
    from tqdm.auto import tqdm

    if not tokenizer.is_file():
        raise UserError(f"--tokenizer {tokenizer}: no such file")
    if not any(tokens.rglob("*.ds")):
        raise UserError(f"--tokens {tokens}: no .ds token files (run the tokenize stage first)")
    vocab = tk.Tokenizer.from_file(str(tokenizer)).get_vocab_size()
    token_size = 4 if vocab > np.iinfo(np.uint16).max + 1 else 2
    data = dataset_mod.DatatroveFolderDataset(str(tokens), seq_len=model_cfg.seq_len,
                                              token_size=token_size)
    if len(data) == 0:
        raise UserError(f"--tokens {tokens}: fewer than seq_len + 1 = {model_cfg.seq_len + 1} "
                        f"tokens; lower seq_len or select more data")

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.dtype]
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_hidden_layers=model_cfg.num_hidden_layers,
        num_attention_heads=model_cfg.num_attention_heads,
        num_key_value_heads=model_cfg.num_key_value_heads,
        max_position_embeddings=max(model_cfg.max_position_embeddings, model_cfg.seq_len + 1),
        tie_word_embeddings=model_cfg.tie_word_embeddings,
        eos_token_id=tk.Tokenizer.from_file(str(tokenizer)).token_to_id(EOS), bos_token_id=None)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.weight_decay)
    reads_per_step = cfg.grad_accum * cfg.batch_size
    order = window_order(len(data), cfg.max_steps * reads_per_step, cfg.seed)

    log, started = [], time.time()
    model.train()
    bar = tqdm(range(cfg.max_steps), desc=f"train {output.name}", disable=not progress,
               mininterval=1.0)
    for step in bar:
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        total = 0.0
        for micro in range(cfg.grad_accum):
            first = step * reads_per_step + micro * cfg.batch_size
            rows = order[first:first + cfg.batch_size].tolist()
            batch = torch.stack([data[i]["input_ids"] for i in rows]).to(device)
            loss = model(input_ids=batch, labels=batch).loss / cfg.grad_accum  # shifts inside
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % cfg.log_every == 0 or step == cfg.max_steps - 1:
            log.append({"step": step, "lr": lr, "loss": total, "elapsed_s": time.time() - started})
            bar.set_postfix(loss=f"{total:.3f}", refresh=False)
    bar.close()

    wall = time.time() - started
    window = model_cfg.seq_len + 1
    summary = {"parameters": sum(p.numel() for p in model.parameters()), "vocab_size": vocab,
               "seed": cfg.seed, "windows": len(data), "tokens_in_data": len(data) * window,
               "tokens_seen": token_budget(model_cfg, cfg),
               "unique_tokens_seen": len(np.unique(order)) * window,
               "epochs": round(len(order) / len(data), 4), "final_loss": log[-1]["loss"],
               "train_wall_s": round(wall, 3),
               "tokens_per_s": round(token_budget(model_cfg, cfg) / wall, 1),
               "torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
               "device": str(device), "tokens": str(tokens), "model": asdict(model_cfg),
               "train": asdict(cfg), "output": str(output)}
    with atomic_folder(output) as tmp:
        model.save_pretrained(tmp)
        transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer), eos_token=EOS,
                                             pad_token=EOS).save_pretrained(tmp)
        (tmp / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
        write_json_atomic(summary, tmp / "summary.json")
    return summary
