"""The paper's evaluation tasks: every Table 2 task name resolves in lm-eval's
registry offline, and the two local YAMLs (race_m, kqapro) load and score, through the project's
evaluate stage, on small fixtures in their datasets' own layouts:

- RACE (Hugging Face ehovy/race): one row per question with example_id, article, question,
  options (4 strings) and answer (a letter); Parquet files under <config>/<split>-*.parquet and a
  README whose `configs` name them, as in the hub repository (a local copy of it is what
  `hf download` writes).
- KQA Pro (the original release's val.json): a JSON list of question, sparql, program
  (function, dependencies, inputs), choices (10 strings) and answer (one of the choices).

The items are written here for the test, not taken from the datasets.
"""

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from eval.run import TASKS_DIR, EvaluateConfig, evaluate, task_manager
from reproduce.pipeline.tokenize import EOS

RACE_ARTICLE = ("Mia's class planted a garden behind the school in March. Each student looked "
                "after one row. By June the beans had grown taller than the fence, but the "
                "carrots were small because the rabbits kept eating their leaves.")
RACE_ROWS = [  # (question, options, answer letter)
    ("When did the class plant the garden?", ["In January", "In March", "In June", "In May"],
     "B"),
    ("What grew taller than the fence?", ["The carrots", "The fence", "The beans", "The trees"],
     "C"),
    ("Why were the carrots small?", ["Rabbits ate their leaves", "There was no rain",
                                      "Nobody watered them", "They were planted late"], "A"),
    ("How many rows did each student look after?", ["Three", "Two", "None", "One"], "D"),
]
KQA_ROWS = [  # (question, choices, answer)
    ("Which city is the capital of Norway?",
     ["Oslo", "Bergen", "Stockholm", "Helsinki", "Copenhagen", "Tromso", "Trondheim", "Reykjavik",
      "Stavanger", "Aarhus"], "Oslo"),
    ("How many legs does a spider have?",
     ["2", "4", "6", "8", "10", "12", "0", "1", "3", "5"], "8"),
    ("Which element has the chemical symbol Fe?",
     ["Fluorine", "Iron", "Lead", "Tin", "Gold", "Silver", "Zinc", "Copper", "Neon", "Argon"],
     "Iron"),
]


def write_race(root: Path) -> Path:
    repo = root / "ehovy" / "race"
    (repo / "middle").mkdir(parents=True)
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: middle\n  data_files:\n  - split: test\n"
        "    path: middle/test-*\n---\n")
    table = pa.table({
        "example_id": [f"middle{7000 + i}.txt" for i in range(len(RACE_ROWS))],
        "article": [RACE_ARTICLE] * len(RACE_ROWS),
        "answer": [answer for _, _, answer in RACE_ROWS],
        "question": [question for question, _, _ in RACE_ROWS],
        "options": [options for _, options, _ in RACE_ROWS]})
    pq.write_table(table, repo / "middle" / "test-00000-of-00001.parquet")
    return repo


def write_kqapro(root: Path) -> Path:
    rows = [{"question": question,
             "sparql": "SELECT DISTINCT ?e WHERE { ?e <pred:name> ?v . }",
             "program": [{"function": "FindAll", "dependencies": [], "inputs": []},
                         {"function": "What", "dependencies": [0], "inputs": []}],
             "choices": choices, "answer": answer}
            for question, choices, answer in KQA_ROWS]
    (root / "kqa_pro").mkdir()
    path = root / "kqa_pro" / "val.json"
    path.write_text(json.dumps(rows))
    return path


def tiny_checkpoint(folder: Path, texts: list[str]) -> Path:
    """An untrained 2-layer Llama with a 300-entry byte-level BPE tokenizer, saved as the train
    stage saves (save_pretrained model + tokenizer): enough to exercise the scoring."""
    tk = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, tk.trainers.BpeTrainer(
        vocab_size=300, special_tokens=[EOS], show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet()))
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=512, eos_token_id=tokenizer.token_to_id(EOS), bos_token_id=None))
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"),
                                         eos_token=EOS, pad_token=EOS).save_pretrained(folder)
    return folder


def test_every_table2_task_resolves_in_lm_eval_offline():
    with open(Path(TASKS_DIR).parent / "task_metrics.csv") as f:
        names = [row["task"] for row in csv.DictReader(f)]
    assert {"race", "race_m", "kqapro", "hellaswag", "mmlu", "social_iqa"} <= set(names)
    manager = task_manager(None, names)  # lm-eval's index plus eval/tasks, built offline
    assert [n for n in names if n not in manager.all_tasks] == []


def test_local_paper_tasks_read_their_datasets_layouts(tmp_path):
    write_race(tmp_path)
    write_kqapro(tmp_path)
    tasks = task_manager(str(tmp_path), ["race_m", "kqapro"]).load(["race_m", "kqapro"])["tasks"]
    race, kqa = tasks["race_m"], tasks["kqapro"]
    race_docs, kqa_docs = list(race.test_docs()), list(kqa.test_docs())
    assert len(race_docs) == len(RACE_ROWS) and len(kqa_docs) == len(KQA_ROWS)
    assert [race.doc_to_target(d) for d in race_docs] == [1, 2, 0, 3]
    assert race.doc_to_choice(race_docs[2])[0] == "Rabbits ate their leaves"
    assert race.doc_to_text(race_docs[0]) == (f"Article: {RACE_ARTICLE}\n\nQuestion: When did "
                                              f"the class plant the garden?\nAnswer:")
    assert [kqa.doc_to_target(d) for d in kqa_docs] == [0, 3, 1]
    assert len(kqa.doc_to_choice(kqa_docs[0])) == 10
    assert kqa.doc_to_text(kqa_docs[1]) == "Question: How many legs does a spider have?\nAnswer:"


def test_paper_tasks_score_through_the_evaluate_stage(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_race(data)
    write_kqapro(data)
    texts = [RACE_ARTICLE] + [q for q, _, _ in RACE_ROWS + KQA_ROWS]
    ckpt = tiny_checkpoint(tmp_path / "tiny" / "seed0", texts)
    [record] = evaluate(EvaluateConfig(checkpoints=[ckpt], tasks=["race_m", "kqapro"],
                                       output=tmp_path / "results", data_dir=data, batch_size=4))
    assert record["n-samples"]["race_m"]["effective"] == len(RACE_ROWS)
    assert record["n-samples"]["kqapro"]["effective"] == len(KQA_ROWS)
    for task, n in (("race_m", len(RACE_ROWS)), ("kqapro", len(KQA_ROWS))):
        acc = record["results"][task]["acc,none"]
        assert acc * n == pytest.approx(round(acc * n))  # a count of right answers over n
        assert 0 < record["continuous"][task]["correct_prob_norm"] < 1
        assert record["continuous"][task]["n"] == n
    saved = json.loads((tmp_path / "results" / "tiny.seed0.json").read_text())
    assert saved["results"]["kqapro"] == record["results"]["kqapro"]


def test_kqapro_without_its_file_names_the_missing_path(tmp_path):
    with pytest.raises(Exception, match="kqa_pro/val.json"):
        task_manager(str(tmp_path), ["kqapro"]).load(["kqapro"])
