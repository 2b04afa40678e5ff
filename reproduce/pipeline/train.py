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

Under `torchrun --nproc_per_node N` the same loop runs data-parallel: gloo on CPU, nccl on CUDA
(one GPU per local rank). `batch_size` is per rank, so a step reads batch_size x N x grad_accum
windows; the window order is the same seeded permutation as one process's, and each micro-batch
of the global order is cut into N consecutive slices, one per rank, so what the N ranks read in a
step is exactly what one process with batch_size x N reads in it. `parallel: ddp` replicates the
model (DistributedDataParallel, gradients averaged); `parallel: fsdp` shards parameters, gradients
and optimizer state across ranks (FSDP2 `fully_shard` per decoder layer and on the root), for the
models that do not fit one device. One process (no torchrun) is the plain loop, unchanged.

Noise reduction (off by default, docs/downstream.md): `average_last` n > 0 keeps the weights
after steps max_steps-1, max_steps-1-average_every, ... (n of them) as `last/step<N>/` and their
uniform mean as `averaged/`; `ema_decay` d > 0 keeps an exponential moving average of the weights
(started at the weights after the first step, so the random initialisation never enters it; then
ema = d x ema + (1 - d) x weights after every optimizer step) as `ema/`. Each is a save_pretrained
folder with the tokenizer and a small summary.json, inside the one atomic checkpoint folder. The
kept weights wait in host memory (n copies of the model) until the end; the EMA is one float32
copy on the training device, kept per shard under FSDP. Under torchrun every rank gathers a
sharded (FSDP) tensor with the others; rank 0 averages and saves.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
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
    # Under torchrun (world size > 1): "ddp" replicates the model, "fsdp" shards it (FSDP2).
    parallel: str = "ddp"
    # Noise reduction: keep the weights of the last `average_last` steps spaced `average_every`
    # apart (last/step<N>/) and their mean (averaged/); an EMA of the weights (ema/). 0: off.
    average_last: int = 0
    average_every: int = 10
    ema_decay: float = 0.0


PARALLEL = ("ddp", "fsdp")


def load_config(name_or_path: str,
                overrides: dict | None = None) -> tuple[ModelConfig, TrainConfig]:
    """A config by name (reproduce/pipeline/configs/NAME.yaml) or path, then `overrides` (key: value, for
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
    if built[1].parallel not in PARALLEL:
        raise UserError(f"{path}: train.parallel must be one of {', '.join(PARALLEL)}, got "
                        f"{built[1].parallel!r}")
    return built[0], built[1]


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to lr, then cosine decay to min_lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - 1 - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def kept_steps(cfg: TrainConfig) -> list[int]:
    """The steps after which `average_last` keeps the weights, ascending, the last step last."""
    if cfg.average_last < 0 or cfg.average_every < 1:
        raise UserError(f"train.average_last must be >= 0 and train.average_every >= 1, got "
                        f"{cfg.average_last} and {cfg.average_every}")
    if not 0.0 <= cfg.ema_decay < 1.0:
        raise UserError(f"train.ema_decay must be in [0, 1), got {cfg.ema_decay}")
    steps = [cfg.max_steps - 1 - k * cfg.average_every for k in range(cfg.average_last)][::-1]
    if steps and steps[0] < 0:
        raise UserError(f"train.average_last={cfg.average_last} checkpoints "
                        f"train.average_every={cfg.average_every} steps apart need "
                        f"{cfg.max_steps - steps[0]} steps, max_steps is {cfg.max_steps}")
    return steps


def token_budget(model_cfg: ModelConfig, cfg: TrainConfig, world_size: int = 1) -> int:
    """Tokens every run reads, whatever its selection holds (batch_size is per rank)."""
    return cfg.max_steps * cfg.grad_accum * cfg.batch_size * world_size * (model_cfg.seq_len + 1)


def window_order(n_windows: int, n_reads: int, seed: int) -> np.ndarray:
    """The window each of `n_reads` training sequences reads: whole epochs, each a seeded
    permutation of every window, cut at `n_reads`."""
    rng = np.random.default_rng(seed)
    epochs = -(-n_reads // n_windows)
    return np.concatenate([rng.permutation(n_windows) for _ in range(epochs)])[:n_reads]


def rank_rows(order: np.ndarray, step: int, micro: int, cfg: TrainConfig, rank: int = 0,
              world_size: int = 1) -> np.ndarray:
    """The windows `rank` reads in micro-batch `micro` of `step`: its slice of that micro-batch
    of the global order (batch_size x world_size windows, cut in world_size consecutive slices),
    so the ranks together read what one process with batch_size x world_size reads."""
    global_batch = cfg.batch_size * world_size
    first = step * cfg.grad_accum * global_batch + micro * global_batch + rank * cfg.batch_size
    return order[first:first + cfg.batch_size]


@dataclass
class Ranks:
    """Where this process sits in a torchrun job (rank 0 of 1 without torchrun)."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_environment(cls) -> "Ranks":
        """The ranks torchrun set (RANK, WORLD_SIZE, LOCAL_RANK); 0 of 1 without it."""
        return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
                   int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def join_job(requested_device: str) -> tuple[Ranks, torch.device]:
    """The ranks torchrun set (RANK, WORLD_SIZE, LOCAL_RANK) and this rank's device; with more
    than one rank, the process group is started (nccl on CUDA, one GPU per local rank; gloo on
    CPU)."""
    ranks = Ranks.from_environment()
    device = resolve_device(requested_device)
    if not ranks.distributed:
        return ranks, device
    if device.type == "cuda":
        if ranks.local_rank >= torch.cuda.device_count():
            raise UserError(f"torchrun: local rank {ranks.local_rank} has no GPU (this machine "
                            f"has {torch.cuda.device_count()}); lower --nproc_per_node")
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return ranks, device


def parallelise(model: torch.nn.Module, ranks: Ranks, device: torch.device,
                parallel: str) -> torch.nn.Module:
    """The module the loop calls: the model itself on one rank; DDP-wrapped, or sharded in place
    by FSDP2 (each decoder layer, then the root: embeddings, final norm and head)."""
    if not ranks.distributed:
        return model
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                   else None)


def gradient_sync(module: torch.nn.Module, enabled: bool):
    """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP2) on all micro-batches of a
    step but the last: the accumulated gradient is the same, communicated once."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(enabled)
        return contextlib.nullcontext()
    if isinstance(module, torch.nn.parallel.DistributedDataParallel) and not enabled:
        return module.no_sync()
    return contextlib.nullcontext()


def peak_memory_mib(device: torch.device) -> float:
    """This process's peak memory: CUDA's max allocated bytes on a GPU, else the peak resident
    set (ru_maxrss, which counts the interpreter and libraries too)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def all_ranks(value, ranks: Ranks) -> list:
    """[value of rank 0, rank 1, ...] on every rank."""
    if not ranks.distributed:
        return [value]
    out = [None] * ranks.world_size
    torch.distributed.all_gather_object(out, value)
    return out


def full_state_dict(module: torch.nn.Module, ranks: Ranks) -> dict | None:
    """The whole model's weights for save_pretrained: gathered from the shards (a collective
    every rank joins) under FSDP, else read from the local replica; None means the model's own."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(module, FSDPModule):
        return None

    weights = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True,
                                                                    cpu_offload=True))
    # Only rank 0 receives the weights (the others get {}). Gathering copies tied parameters
    # apart (embeddings and head); share them again so that save_pretrained writes them once, as
    # it does for the unsharded model.
    first_name = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if weights:
            weights[name] = weights[first_name.setdefault(id(param), name)]
    return weights


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy of the whole tensor: a sharded (FSDP2 DTensor) one is all-gathered first, a
    collective every rank joins."""
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu", copy=True)


def parameter_copies(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{name: host copy} of every (untied) parameter, gathered from the shards under FSDP."""
    return {name: host_copy(param) for name, param in model.named_parameters()}


def checkpoint_weights(model: torch.nn.Module, params: dict[str, torch.Tensor]) -> dict:
    """The state dict save_pretrained writes for `params` ({name: tensor} per untied parameter),
    in the model's dtype: every tied name shares its first name's tensor, so the tied embedding
    and head are written once, as for the model itself."""
    dtype = next(model.parameters()).dtype
    cast = {name: tensor.to(dtype) for name, tensor in params.items()}
    first_name = {}
    return {name: cast[first_name.setdefault(id(param), name)]
            for name, param in model.named_parameters(remove_duplicate=False)}


def mean_weights(kept: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The uniform mean of several weight sets, summed in float64."""
    return {name: torch.stack([k[name].double() for k in kept]).mean(0) for name in kept[0]}


def train(tokens: Path, tokenizer: Path, output: Path, model_cfg: ModelConfig,
          cfg: TrainConfig, progress: bool = True) -> dict:
    """Train from scratch on the .ds files under `tokens`; save to `output` atomically."""
    transformers = require("transformers", "train")
    dataset_mod = require("datatrove.utils.dataset", "train")
    tk = require("tokenizers", "train")
    from tqdm.auto import tqdm

    to_keep = set(kept_steps(cfg))  # refuses a bad averaging setting before any work
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
    ranks, device = join_job(cfg.device)
    torch.manual_seed(cfg.seed)  # every rank builds the same initial weights
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
    parameters = sum(p.numel() for p in model.parameters())
    module = parallelise(model, ranks, device, cfg.parallel)
    optimizer = torch.optim.AdamW(module.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.weight_decay)
    budget = token_budget(model_cfg, cfg, ranks.world_size)
    order = window_order(len(data), budget // (model_cfg.seq_len + 1), cfg.seed)
    kept, ema = {}, None

    log, started = [], time.time()
    module.train()
    bar = tqdm(range(cfg.max_steps), desc=f"train {output.name}",
               disable=not progress or ranks.rank != 0, mininterval=1.0)
    for step in bar:
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        total = 0.0
        for micro in range(cfg.grad_accum):
            rows = rank_rows(order, step, micro, cfg, ranks.rank, ranks.world_size).tolist()
            batch = torch.stack([data[i]["input_ids"] for i in rows]).to(device)
            with gradient_sync(module, micro == cfg.grad_accum - 1):
                loss = module(input_ids=batch, labels=batch).loss / cfg.grad_accum  # shifts inside
                loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cfg.ema_decay:
            with torch.no_grad():
                if ema is None:  # the weights after the first step, not the initialisation
                    ema = {n: p.detach().float().clone() for n, p in model.named_parameters()}
                else:
                    for name, param in model.named_parameters():
                        ema[name].lerp_(param.detach().float(), 1.0 - cfg.ema_decay)
        if step in to_keep:
            copies = parameter_copies(model)  # every rank joins the gathering under FSDP
            if ranks.rank == 0:
                kept[step] = copies
        if step % cfg.log_every == 0 or step == cfg.max_steps - 1:
            if ranks.distributed:  # the global batch's loss: the mean of equal-sized rank means
                total = float(np.mean(all_ranks(total, ranks)))
            log.append({"step": step, "lr": lr, "loss": total, "elapsed_s": time.time() - started})
            bar.set_postfix(loss=f"{total:.3f}", refresh=False)
    bar.close()

    wall = time.time() - started
    window = model_cfg.seq_len + 1
    memory = all_ranks(round(peak_memory_mib(device), 1), ranks)
    summary = {"parameters": parameters, "vocab_size": vocab,
               "seed": cfg.seed, "windows": len(data), "tokens_in_data": len(data) * window,
               "tokens_seen": budget,
               "unique_tokens_seen": len(np.unique(order)) * window,
               "epochs": round(len(order) / len(data), 4), "final_loss": log[-1]["loss"],
               "train_wall_s": round(wall, 3),
               "tokens_per_s": round(budget / wall, 1),
               "world_size": ranks.world_size,
               "parallel": cfg.parallel if ranks.distributed else "none",
               "peak_memory_mib_per_rank": memory,
               "peak_memory_kind": "cuda max allocated" if device.type == "cuda"
               else "process max resident set",
               "torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
               "device": str(device), "tokens": str(Path(tokens).absolute()),
               "model": asdict(model_cfg), "train": asdict(cfg), "output": str(output)}
    steps = sorted(to_keep)
    summary["extra_checkpoints"] = {f"last/step{s}": {"kind": "last", "step": s} for s in steps}
    if steps:
        summary["extra_checkpoints"]["averaged"] = {"kind": "averaged", "steps": steps}
    if cfg.ema_decay:
        summary["extra_checkpoints"]["ema"] = {"kind": "ema", "decay": cfg.ema_decay}
    extra_weights = {f"last/step{s}": kept[s] for s in steps if s in kept}  # rank 0's
    if extra_weights:
        extra_weights["averaged"] = mean_weights(list(extra_weights.values()))
    if ema is not None:
        extra_weights["ema"] = {name: host_copy(tensor) for name, tensor in ema.items()}
    weights = full_state_dict(module, ranks)
    if ranks.rank == 0:
        saved_tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_file=str(tokenizer), eos_token=EOS, pad_token=EOS)
        with atomic_folder(output) as tmp:
            model.save_pretrained(tmp, state_dict=weights)
            saved_tokenizer.save_pretrained(tmp)
            (tmp / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
            for folder, about in summary["extra_checkpoints"].items():
                model.save_pretrained(tmp / folder,
                                      state_dict=checkpoint_weights(model, extra_weights[folder]))
                saved_tokenizer.save_pretrained(tmp / folder)
                # what evaluate reads from a checkpoint: the training context and seed
                write_json_atomic({**about, "model": asdict(model_cfg), "train": asdict(cfg)},
                                  tmp / folder / "summary.json")
            write_json_atomic(summary, tmp / "summary.json")
    if ranks.distributed:
        torch.distributed.barrier()  # the checkpoint is complete before any rank returns
        torch.distributed.destroy_process_group()
    return summary
