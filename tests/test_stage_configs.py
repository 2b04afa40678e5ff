"""prepare's and evaluate's settings as one type each (PrepareConfig, EvaluateConfig): a bad value
is refused when the config is made, naming its flag; the command lines keep every flag, its
defaults and its list kind; prepare's --device is checked against the executor, not by its
name."""

from pathlib import Path

import pytest

from datamask.errors import UserError
from datamask.options import given
from eval.run import EvaluateConfig
from reproduce.cli import build_parser
from reproduce.pipeline.engines import cluster_flags
from reproduce.pipeline.prepare import PrepareConfig, embedder_of

PREPARE_FLAGS = {"--input", "--output", "--embedding_model", "--prefix", "--max_seq_length",
                 "--batch_size", "--precision", "--device", "--quality", "--quality_model",
                 "--quality_label", "--scores", "--no_progress", "--executor", "--workers",
                 "--tasks", "--slurm_partition", "--slurm_time", "--cpus_per_task",
                 "--mem_per_cpu_gb", "--gpus_per_task", "--venv_path", "--ray_address"}
EVALUATE_FLAGS = {"--checkpoints", "--tasks", "--heldout", "--outside", "--heldout_docs",
                  "--output", "--data_dir", "--batch_size", "--device", "--limit",
                  "--num_fewshot"}


def stage_parser(name: str):
    return build_parser()._subparsers._group_actions[0].choices[name]


@pytest.mark.parametrize("name,flags", [("prepare", PREPARE_FLAGS), ("evaluate", EVALUATE_FLAGS)])
def test_the_help_lists_every_flag_as_before(name, flags, capsys):
    parser = stage_parser(name)
    assert {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"} == flags
    parser.print_help()
    text = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "`datamask select` takes auto" in text  # the pipeline's --device cpu, said so


def test_the_list_flags_keep_their_kinds():
    actions = {a.dest: a for a in stage_parser("prepare")._actions}
    assert (actions["input"].nargs, actions["input"].required) == ("+", True)
    actions = {a.dest: a for a in stage_parser("evaluate")._actions}
    assert (actions["checkpoints"].nargs, actions["tasks"].nargs) == ("+", "*")


def config_of(cls, argv: list[str], **extra):
    args = build_parser().parse_args(argv)
    return cls(**given(args, cls), **extra)


def test_the_command_lines_make_the_configs_with_the_defaults_as_before():
    argv = ["prepare", "--input", "a", "b", "--output", "out"]
    config = config_of(PrepareConfig, argv, cluster=cluster_flags(build_parser().parse_args(argv)))
    assert config.input == (Path("a"), Path("b")) and config.output == Path("out")
    assert (config.device, config.precision, config.quality, config.prefix) == \
        ("cpu", "fp32", "auto", "")
    assert (config.batch_size, config.max_seq_length, config.tasks, config.workers) == \
        (None, None, None, 1)
    assert (config.quality_label, config.no_progress) == ("__label__hq", False)
    assert config.cluster["gpus_per_task"] == 0
    config = config_of(EvaluateConfig, ["evaluate", "--checkpoints", "c", "--tasks",
                                        "--heldout", "h", "--output", "o"])
    assert (config.tasks, config.batch_size, config.device, config.limit) == ((), 32, "cpu", None)
    config = config_of(EvaluateConfig, ["evaluate", "--checkpoints", "c", "--tasks", "x", "y",
                                        "--output", "o"])
    assert config.tasks == ("x", "y") and config.heldout is None


PREPARE = dict(input=["in"], output="out")


@pytest.mark.parametrize("values,message", [
    ({"batch_size": 0}, "--batch_size must be at least 1, got 0"),
    ({"max_seq_length": -1}, "--max_seq_length must be at least 1, got -1"),
    ({"precision": "fp8"}, "--precision must be one of fp32, bf16, fp16, got 'fp8'"),
    ({"quality": "best"}, "--quality must be one of auto, score, heuristic, fasttext"),
    ({"tasks": 0}, "--tasks must be at least 1, got 0"),
    ({"workers": 0}, "--workers must be at least 1, got 0"),
    ({"input": "in"}, "--input must be a list of"),
    ({"no_progress": "yes"}, "--no_progress must be true or false"),
])
def test_prepare_config_refuses_a_bad_value_naming_its_flag(values, message):
    with pytest.raises(UserError, match=message):
        PrepareConfig(**{**PREPARE, **values})


def test_prepare_checks_its_device_against_the_executor_not_by_its_name():
    # with --gpus_per_task each task embeds on its own GPU: --device is not this machine's
    config = PrepareConfig(**PREPARE, device="cuda:7", cluster={"gpus_per_task": 1})
    assert embedder_of(config).device == "cpu"  # the model is checked here on the CPU
    with pytest.raises(UserError, match="--device must be auto, cpu, cuda or cuda:N, got 'mps'"):
        embedder_of(PrepareConfig(**PREPARE, device="mps"))
    with pytest.raises(UserError, match="--executor ray task sees no GPU without "
                                        "--gpus_per_task"):
        embedder_of(PrepareConfig(**PREPARE, device="cuda", executor="ray"))


EVALUATE = dict(checkpoints=["ckpt"], output="out", heldout="heldout")


@pytest.mark.parametrize("values,message", [
    ({"batch_size": 0}, "--batch_size must be at least 1, got 0"),
    ({"limit": 0}, "--limit must be at least 1, got 0"),
    ({"num_fewshot": -1}, "--num_fewshot must be at least 0, got -1"),
    ({"heldout_docs": 0}, "--heldout_docs must be at least 1, got 0"),
    ({"tasks": "bbc_cloze"}, "--tasks must be a list of texts"),
    ({"device": None}, "--device must be text"),
    ({"heldout": None}, "evaluate: give --tasks, --heldout or both"),
    ({"heldout": None, "tasks": ["bbc_cloze"], "outside": "elsewhere"},
     "--outside is a second held-out target: give --heldout too"),
])
def test_evaluate_config_refuses_a_bad_value_naming_its_flag(values, message):
    with pytest.raises(UserError, match=message):
        EvaluateConfig(**{**EVALUATE, **values})


def test_evaluate_takes_the_devices_lm_eval_takes():
    assert EvaluateConfig(**EVALUATE, device="mps").device == "mps"  # not the selectors' check
