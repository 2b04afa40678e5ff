"""Per-domain bits per byte of a checkpoint on held-out text, and their macro average (Paloma).

A domain is one Parquet file `<heldout>/<domain>.parquet` with a `text` column. Its bits per byte
is the model's total negative log-likelihood of every document's tokens, in bits, divided by the
UTF-8 bytes of those documents; the macro average weighs every domain equally, so a large domain
cannot hide a small one.

Windowing (stated because it changes the number): each document is scored on its own, as the
sequence [EOS] + tokens(text). EOS is the token that precedes every document in the training
stream (datatrove appends it to each document), so the first token is predicted from the same
context training gave it; the text's tokens are the targets, each scored exactly once; the EOS
after the text is not scored (it encodes no byte). Documents longer than the model's context are
cut into non-overlapping windows of seq_len tokens (the training window): window k predicts
targets k*seq_len+1 .. (k+1)*seq_len from the seq_len tokens before them within the window, so a
later window starts without the earlier windows' context, as a training window does.

Noise reduction (docs/downstream.md): a checkpoint trained with `average_last` or `ema_decay`
holds `last/step<N>/`, `averaged/` and `ema/`; `averaging_bits_per_byte` scores each with the same
`bits_per_byte` and summarises them: the mean over the last checkpoints and their spread (the
within-run noise), the weight average's and the EMA's.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from datamask.errors import UserError
from datamask.shared import require, resolve_device


def read_heldout(heldout: Path, max_docs: int | None = None, flag: str = "--heldout"
                 ) -> dict[str, list[str]]:
    """{domain: texts} from `<heldout>/<domain>.parquet` (column `text`), domains sorted;
    `max_docs`: only each file's first documents (quick runs); `flag` names the folder's flag
    in errors."""
    if max_docs is not None and max_docs < 1:
        raise UserError(f"--heldout_docs must be at least 1, got {max_docs}")
    files = sorted(Path(heldout).glob("*.parquet"))
    if not files:
        raise UserError(f"{flag} {heldout}: no <domain>.parquet file in the folder")
    domains = {}
    for path in files:
        names = pq.read_schema(path).names
        if "text" not in names:
            raise UserError(f"{path}: no column 'text' (it has {', '.join(names)})")
        texts = pq.read_table(path, columns=["text"]).column("text").to_pylist()
        bad = next((i for i, t in enumerate(texts) if not t), None)
        if bad is not None:
            raise UserError(f"{path}: row {bad} has an empty or null text")
        domains[path.stem] = texts[:max_docs]
    return domains


def checkpoint_seq_len(checkpoint: Path) -> int:
    """The context the model was trained on: summary.json's model.seq_len (written by the train
    stage), else the config's max_position_embeddings."""
    summary = checkpoint / "summary.json"
    if summary.is_file():
        seq_len = json.loads(summary.read_text()).get("model", {}).get("seq_len")
        if seq_len:
            return int(seq_len)
    config = json.loads((checkpoint / "config.json").read_text())
    if "max_position_embeddings" not in config:
        raise UserError(f"{checkpoint}: neither summary.json's model.seq_len nor config.json's "
                        f"max_position_embeddings; pass seq_len")
    return int(config["max_position_embeddings"])


def doc_starts(lengths: np.ndarray) -> np.ndarray:
    """Where each document's start token sits when documents are laid end to end as
    [start] + tokens."""
    return np.cumsum(lengths + 1) - (lengths + 1)


def windows(lengths: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows over documents laid end to end as [start] + tokens each.

    `lengths`: tokens per document (without the start token). Returns (first, size) per window:
    `first` indexes the window's first input token in the concatenated sequences, `size` is the
    number of targets it scores (inputs first..first+size-1, targets first+1..first+size)."""
    per_doc = -(-lengths // seq_len)  # ceil; an empty document has no window
    doc_of = np.repeat(np.arange(len(lengths)), per_doc)
    k = np.arange(per_doc.sum()) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
    first = doc_starts(lengths)[doc_of] + k * seq_len
    size = np.minimum(seq_len, lengths[doc_of] - k * seq_len)
    return first, size


@torch.inference_mode()
def total_nll(model, flat: np.ndarray, first: np.ndarray, size: np.ndarray, batch_size: int,
              device: torch.device) -> float:
    """Sum of -ln p(target) over every window, in nats (float64). Windows are batched longest
    first; a shorter window is right-padded, which a causal model never attends to, and its
    padded targets are dropped."""
    order = np.argsort(-size, kind="stable")
    padded = np.concatenate([flat, np.zeros(int(size.max()) + 1, dtype=flat.dtype)])
    total = torch.zeros((), dtype=torch.float64, device=device)
    for lo in range(0, len(order), batch_size):
        rows = order[lo:lo + batch_size]
        width = int(size[rows].max())
        index = first[rows, None] + np.arange(width + 1)[None, :]
        tokens = torch.as_tensor(padded[index], dtype=torch.long, device=device)
        logits = model(input_ids=tokens[:, :-1]).logits.float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:],
                                                reduction="none")
        scored = torch.as_tensor(np.arange(width)[None, :] < size[rows, None], device=device)
        total += nll.masked_select(scored).double().sum()
    return float(total)


def load_checkpoint(checkpoint: Path, device: torch.device):
    """(model in eval mode on `device`, its tokenizer) from a save_pretrained folder."""
    transformers = require("transformers", "bits per byte")
    if not (checkpoint / "config.json").is_file():
        raise UserError(f"--checkpoints {checkpoint}: not a save_pretrained folder "
                        f"(no config.json)")
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    return model.to(device).eval(), tokenizer


def bits_per_byte(checkpoint: Path, heldout: Path, batch_size: int = 16, device: str = "auto",
                  seq_len: int | None = None, max_docs: int | None = None) -> dict:
    """{"domains": {domain: {bits_per_byte, nll_bits, bytes, tokens, documents}}, "macro":
    mean over domains of bits_per_byte, "seq_len", "windowing"} for one checkpoint."""
    if batch_size < 1:
        raise UserError(f"--batch_size must be at least 1, got {batch_size}")
    domains = read_heldout(heldout, max_docs)
    torch_device = resolve_device(device)
    model, tokenizer = load_checkpoint(Path(checkpoint), torch_device)
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else \
        tokenizer.eos_token_id
    if start is None:
        raise UserError(f"{checkpoint}: the tokenizer has neither a BOS nor an EOS token to "
                        f"start a document with")
    seq_len = seq_len or checkpoint_seq_len(Path(checkpoint))
    scores = {}
    for domain, texts in domains.items():
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        first, size = windows(lengths, seq_len)
        flat = np.full(int(lengths.sum()) + len(ids), start, dtype=np.int64)
        is_text = np.ones(len(flat), dtype=bool)
        is_text[doc_starts(lengths)] = False
        flat[is_text] = np.concatenate([np.asarray(x, dtype=np.int64) for x in ids])
        nats = total_nll(model, flat, first, size, batch_size, torch_device)
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        scores[domain] = {"bits_per_byte": nats / math.log(2) / n_bytes,
                          "nll_bits": nats / math.log(2), "bytes": n_bytes,
                          "tokens": int(lengths.sum()), "documents": len(texts)}
    return {"domains": scores,
            "macro": float(np.mean([s["bits_per_byte"] for s in scores.values()])),
            "seq_len": seq_len,
            "windowing": f"each document alone as [{tokenizer.convert_ids_to_tokens(start)}] + "
                         f"tokens, non-overlapping windows of {seq_len} tokens, every text "
                         f"token scored once"}


LAST_STEP = re.compile(r"step(\d+)")


def averaging_checkpoints(checkpoint: Path) -> dict:
    """The weight-averaging checkpoints the train stage kept inside `checkpoint`, where present:
    {"last": [(step, folder), ...] by step, "averaged": folder, "ema": folder}."""
    checkpoint = Path(checkpoint)
    found = {}
    last = sorted((int(m.group(1)), d) for d in (checkpoint / "last").glob("step*")
                  if (m := LAST_STEP.fullmatch(d.name)) and d.is_dir())
    if last:
        found["last"] = last
    for kind in ("averaged", "ema"):
        if (checkpoint / kind).is_dir():
            found[kind] = checkpoint / kind
    for folder in [d for _, d in last] + [found[k] for k in ("averaged", "ema") if k in found]:
        if not (folder / "config.json").is_file():
            raise UserError(f"{folder}: not a save_pretrained folder (no config.json); "
                            f"retrain {checkpoint} or remove the folder")
    return found


def averaging_bits_per_byte(checkpoint: Path, heldout: Path, batch_size: int = 16,
                            device: str = "auto", max_docs: int | None = None) -> dict:
    """Bits per byte of the averaging checkpoints inside `checkpoint` (none: {}), each in
    bits_per_byte's shape: "bpb_last" [one per kept checkpoint, with its "step"],
    "bpb_last_mean" (macro and each domain's bits_per_byte averaged over them, "n"),
    "bpb_last_sd" (sample sd of their macro; None for one), "bpb_averaged", "bpb_ema"."""
    found = averaging_checkpoints(checkpoint)

    def score(folder: Path) -> dict:
        return bits_per_byte(folder, heldout, batch_size, device, max_docs=max_docs)

    out = {}
    if "last" in found:
        out["bpb_last"] = [{"step": step, **score(folder)} for step, folder in found["last"]]
        macro = np.array([s["macro"] for s in out["bpb_last"]])
        domains = out["bpb_last"][0]["domains"]
        out["bpb_last_mean"] = {
            "macro": float(macro.mean()), "n": len(macro),
            "domains": {d: {"bits_per_byte": float(np.mean(
                [s["domains"][d]["bits_per_byte"] for s in out["bpb_last"]]))} for d in domains}}
        out["bpb_last_sd"] = float(macro.std(ddof=1)) if len(macro) > 1 else None
    for kind in ("averaged", "ema"):
        if kind in found:
            out[f"bpb_{kind}"] = score(found[kind])
    return out
