"""The benchmark entry points: configs, one side-by-side run at a short length, the printed tables, options."""

import argparse
import math
from functools import partial

import pytest
import torch

import hf_efficient
from hf_efficient.bench import grid
from hf_efficient.bench import measure as measure_module
from hf_efficient.bench.compare import compare, format_table
from hf_efficient.bench.grid import (
    WINDOWS,
    IdentityAttention,
    build_floor,
    build_windows,
    entries,
    format_compiled_tables,
    format_tables,
    window_starts,
)
from hf_efficient.bench.measure import LiveTensorBytes, Measurement, measure, measure_compiled
from hf_efficient.bench.sizes import BENCHMARK_SIZE, benchmark_configs, build_model
from hf_efficient.cli import build_parser, main
from tests.families import tiny_config


def test_benchmark_configs_use_the_benchmark_size_and_reject_unknown_families():
    configs = benchmark_configs(1024, ["hfe_roberta", "hfe_linformer"])
    assert sorted(configs) == ["hfe_linformer", "hfe_roberta"]
    for config in configs.values():
        assert {name: getattr(config, name) for name in BENCHMARK_SIZE} == BENCHMARK_SIZE
        assert config.max_sequence_length >= 1024
    assert configs["hfe_linformer"].projected_length == 256
    with pytest.raises(ValueError, match="no_such_family"):
        benchmark_configs(1024, ["no_such_family"])


@pytest.mark.parametrize("size, overrides, layers", [("minilm", {}, 6), ("benchmark", {"num_hidden_layers": 3}, 3)])
def test_benchmark_configs_fit_a_per_layer_pattern_to_the_depth(size, overrides, layers):
    config = benchmark_configs(1024, ["hfe_reformer"], size, **overrides)["hfe_reformer"]
    assert config.num_hidden_layers == layers
    assert config.layer_attention_types == (["chunked_local", "lsh"] * layers)[:layers]


def test_compare_measures_each_family_beside_dense():
    rows = compare(128, ["hfe_roberta", "hfe_reformer"], repeats=1, device="cpu")
    assert [row["family"] for row in rows] == ["hfe_roberta", "hfe_reformer"]
    assert all(row["error"] is None and row["seconds"] > 0 and row["peak_mib"] >= 0 for row in rows)
    table = format_table(rows, 128)
    assert "hfe_roberta" in table.splitlines()[-2] and "1.00x" in table.splitlines()[-2]


def test_table_without_dense_shows_no_ratio():
    rows = [{"family": "hfe_longformer", "seconds": 2.0, "peak_mib": 100.0, "error": None},
            {"family": "hfe_bigbird", "seconds": 0.0, "peak_mib": 0.0, "error": "out of memory"}]
    table = format_table(rows, 32768)
    assert "nan" not in table
    assert "| hfe_longformer | 2.000 | - | 100 | - |" in table
    assert "| hfe_bigbird | failed: out of memory |" in table


def test_grid_measures_the_selected_families_with_their_own_references_only():
    selected = entries(4096, ["hfe_reformer"], references=True)
    assert {"hfe_roberta", "hfe_reformer", "hfe_reformer 4 hashes", "transformers Reformer 1 hash",
            "transformers Reformer 4 hashes"} <= set(selected)
    assert not any("Longformer" in name or "BigBird" in name or "linformer" in name for name in selected)
    assert not any(name.startswith("transformers") for name in entries(4096, ["hfe_reformer"], references=False))


def test_cpu_time_is_measured_on_one_thread_and_only_on_cpu():
    factory = partial(build_model, benchmark_configs(64, ["hfe_roberta"])["hfe_roberta"])
    result = measure(factory, 64, backward=True, repeats=1, cpu_time=True)
    assert result.error is None and result.seconds > 0
    with pytest.raises(ValueError, match="cpu_time"):
        measure(factory, 64, device="cuda", cpu_time=True)


def test_the_floor_is_not_in_the_users_attention_registry():
    from hf_efficient import ATTENTION_REGISTRY

    assert "bench_identity" not in ATTENTION_REGISTRY and IdentityAttention not in ATTENTION_REGISTRY.values()
    model = build_floor(64)
    assert all(isinstance(layer.attention.self, IdentityAttention) for layer in model.encoder.layer)


@pytest.mark.parametrize("argv, problem", [
    (["bench", "--lengths", "-5"], "--lengths: must be a positive integer, got -5"),
    (["bench", "--families", "no_such_family"], "unknown family 'no_such_family'"),
    (["bench", "--window_overlap", "512"], "must be below the window"),
    (["bench", "--dtype", "int8"], "--dtype: invalid choice: 'int8'"),
    (["bench", "--dtype", "float32", "bfloat16", "--lengths", "32"], "side by side with --inference only"),
    (["bench-pipelines", "--doc_stride", "512"], "must be below the window"),
    (["bench-pipelines", "--lengths", "600", "--tokenizer", "/no/such/folder"], "/no/such/folder"),
    (["bench-memory", "--long_length", "-1"], "must be 0 or more, got -1"),
    (["bench-memory", "--families", "no_such_family"], "unknown family"),
    (["compare", "--length", "-1"], "--length: must be a positive integer"),
    (["compare", "--families", "no_such_family"], "unknown family"),
])
def test_bad_bench_options_end_in_one_error_line_and_exit_code_2(argv, problem, capsys):
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and problem in error.splitlines()[-1]


def test_bench_options_have_help_and_underscore_spellings_with_dashed_aliases():
    parser = build_parser("bench", "bench-memory", "bench-pipelines", "compare")
    commands = next(action for action in parser._actions if action.dest == "command").choices
    for name in ("bench", "bench-memory", "bench-pipelines", "compare"):
        shown = [action for action in commands[name]._actions if action.help != argparse.SUPPRESS]
        assert all(action.help for action in shown), name
        assert not any("-" in option[2:] for action in shown for option in action.option_strings), name
    assert parser.parse_args(["bench", "--cpu-time", "--no-references"]).cpu_time
    assert parser.parse_args(["bench-memory", "--long-length", "0"]).long_length == 0


def test_windows_are_cut_as_a_tokenizer_with_stride_cuts_them_without_padding():
    assert window_starts(512, 512, 128) == [0]
    assert window_starts(1024, 512, 128) == [0, 384, 512]  # tokenizer: [0, 512), [384, 896), [768, 1024)
    assert window_starts(2048, 512, 128) == [0, 384, 768, 1152, 1536]
    assert len(window_starts(4096, 512, 128)) == 11 and window_starts(4096, 512, 0)[-1] == 4096 - 512
    output = build_windows(700, 128).eval()(torch.randint(5, 100, (1, 700)))
    assert output.last_hidden_state.shape == (2, 512, BENCHMARK_SIZE["hidden_size"])


def test_grid_measures_windows_above_one_window_and_global_tokens_for_longformer_only():
    assert WINDOWS not in entries(512, ["hfe_linformer"], references=False)
    assert WINDOWS in entries(1024, ["hfe_linformer"], references=False)
    assert not any("global" in name for name in entries(1024, ["hfe_linformer"], False, global_tokens=[16]))
    assert "hfe_longformer, 16 global tokens" in entries(1024, ["hfe_longformer"], False, global_tokens=[0, 16])
    compiled = entries(4096, ["hfe_longformer", "hfe_reformer"], False, global_tokens=[16], yardsticks=False)
    assert list(compiled) == ["hfe_roberta", "hfe_longformer", "hfe_reformer", "hfe_longformer, 16 global tokens"]


def test_grid_tables_print_each_model_over_the_windows():
    def row(seconds: float, peak_mib: float) -> dict[str, Measurement]:
        return {"forward": Measurement(seconds / 4, peak_mib), "forward+backward": Measurement(seconds, peak_mib)}

    rows = {"hfe_roberta": row(4.0, 100.0), WINDOWS: row(2.0, 200.0), "hfe_longformer": row(1.0, 50.0)}
    table = format_tables({2048: rows})
    assert "| fwd / windows | fwd+bwd / windows | memory / windows |" in table
    assert table.splitlines()[-1].endswith("| 0.50x | 0.50x | 0.25x |")
    del rows[WINDOWS]
    assert format_tables({2048: rows}).splitlines()[-1].endswith("| - | - | - |")


def test_live_tensor_bytes_count_new_storages_alive_at_once_not_views_or_inputs():
    weights = torch.ones(256, 1024)  # 1 MiB, allocated before counting
    with LiveTensorBytes() as counter:
        first = weights * 2
        view = first.t()
        weights.add_(1)
        second = first + 1
        del first, view, second
        third = weights * 3
    assert counter.peak == 2 * 2**20 and counter.live == 2**20
    del third
    assert counter.live == 0


def eager_compile(calls: list, model, compile=torch.compile):
    """`torch.compile` with dynamo's no-op backend: the bench's plumbing without minutes of code generation."""
    calls.append(model)
    return compile(model, backend="eager")


def tiny_dense() -> torch.nn.Module:
    return hf_efficient.FAMILIES["hfe_roberta"].models["Model"](tiny_config("hfe_roberta"), add_pooling_layer=False)


def test_compiled_measurement_times_both_models_and_the_compilation_apart(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", partial(eager_compile, calls))
    result = measure_compiled(tiny_dense, 32, backward=True, repeats=1, same_process=True)
    eager, compiled = result["eager"], result["compiled"]
    assert len(calls) == 1 and eager.error is None and compiled.error is None
    assert eager.seconds > 0 and compiled.seconds > 0 and compiled.compile_seconds > 0 and eager.compile_seconds is None
    assert eager.peak_mib > 0 and math.isnan(compiled.peak_mib)


def test_bfloat16_runs_the_forward_under_autocast():
    seen = []

    def recording() -> torch.nn.Module:
        model = tiny_dense()
        model.register_forward_hook(lambda *_: seen.append(torch.get_autocast_dtype("cpu")
                                                           if torch.is_autocast_enabled("cpu") else None))
        return model

    assert measure(recording, 32, backward=True, repeats=1, same_process=True, dtype=torch.bfloat16).error is None
    assert measure(recording, 32, backward=False, repeats=1, same_process=True).error is None
    assert seen[0] == torch.bfloat16 and seen[-1] is None


def test_bench_compile_prints_eager_and_compiled_side_by_side(monkeypatch):
    monkeypatch.setattr(torch, "compile", partial(eager_compile, []))
    monkeypatch.setattr(measure_module, "MIN_TOTAL_SECONDS", 0.0)
    monkeypatch.setattr(grid, "entries", lambda *args: {"tiny dense": tiny_dense})
    args = build_parser("bench").parse_args(["bench", "--compile", "--dtype", "bfloat16", "--lengths", "32", "--same-process",
                                      "--repeats", "1"])
    assert args.compile and args.dtype == ["bfloat16"]
    results = grid.run_grid(args.lengths, None, False, args.repeats, "cpu", same_process=True,
                            dtypes=[grid.DTYPES[args.dtype[0]]], compiled=args.compile)
    assert sorted(results[32]["tiny dense"]) == ["forward", "forward compiled", "forward+backward",
                                                 "forward+backward compiled"]
    table = format_compiled_tables(results).splitlines()
    assert table[0] == "### 32 tokens, eager and compiled" and table[-1].startswith("| tiny dense |")
    assert table[-1].count("x |") == 2


def test_compiled_tables_give_the_gain_of_compiling():
    def measured(seconds: float, compile_seconds: float | None = None) -> Measurement:
        return Measurement(seconds, 1.0, compile_seconds=compile_seconds)

    rows = {"hfe_roberta": {"forward": measured(1.0), "forward+backward": measured(3.0),
                            "forward compiled": measured(0.5, 20.0), "forward+backward compiled": measured(4.0, 50.0)}}
    assert format_compiled_tables({4096: rows}).splitlines()[-1] == (
        "| hfe_roberta | 1.000 | 0.500 | 2.00x | 3.000 | 4.000 | 0.75x | 20 / 50 |")


def test_bench_inference_measures_eval_forwards_per_batch_size(monkeypatch, capsys):
    batches = []
    real_step = measure_module.step

    def step(model, input_ids, backward, dtype):
        batches.append((input_ids.shape[0], backward, model.training))
        real_step(model, input_ids, backward, dtype)

    monkeypatch.setattr(measure_module, "step", step)
    monkeypatch.setattr(measure_module, "MIN_TOTAL_SECONDS", 0.0)
    assert main(["bench", "--inference", "--batch_sizes", "1", "3", "--lengths", "600", "--families", "hfe_longformer",
                 "--no_references", "--global_tokens", "--same_process", "--repeats", "1"]) == 0
    assert {batch for batch, _, _ in batches} == {1, 3} and not any(backward or training for _, backward, training in batches)
    table = capsys.readouterr().out.split("### 600 tokens, inference (eval-mode forward)")[1].splitlines()
    assert table[2] == "| model | batch 1 docs/s | vs windows | batch 3 docs/s | vs windows |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[4:] if line.startswith("|")}
    assert set(rows) >= {"hfe_roberta", WINDOWS, "hfe_longformer"}
    assert rows[WINDOWS].endswith("| 1.00x |")


def test_inference_tables_give_documents_per_second_against_the_windows():
    rows = {WINDOWS: {"inference, batch 1": Measurement(0.5, 1.0), "inference, batch 8": Measurement(2.0, 1.0)},
            "hfe_longformer": {"inference, batch 1": Measurement(0.25, 1.0), "inference, batch 8": Measurement(1.0, 1.0)}}
    assert grid.format_inference_tables({4096: rows}).splitlines()[-1] == "| hfe_longformer | 4.00 | 2.00x | 8.00 | 2.00x |"


def test_documents_are_cut_to_the_length_question_and_specials_included(tmp_path):
    from hf_efficient.bench.pipelines import QUESTION, document
    from tests.tiny_checkpoints import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)
    assert 590 <= len(tokenizer(QUESTION, document(tokenizer, 600, QUESTION))["input_ids"]) <= 600
    assert 590 <= len(tokenizer(document(tokenizer, 600))["input_ids"]) <= 600


def test_bench_pipelines_times_each_family_against_the_dense_512_token_model(monkeypatch, tmp_path, capsys):
    from tests.tiny_checkpoints import build_tokenizer

    build_tokenizer(tmp_path)
    monkeypatch.setattr(measure_module, "MIN_TOTAL_SECONDS", 0.0)
    markdown = tmp_path / "pipelines.md"
    assert main(["bench-pipelines", "--lengths", "600", "--families", "hfe_longformer", "--tokenizer", str(tmp_path),
                 "--repeats", "1", "--markdown", str(markdown)]) == 0
    legend, tables = markdown.read_text().split("\n\n", 1)
    out = capsys.readouterr().out
    assert out.startswith(legend) and tables in out
    qa, classification = tables.split("### extractive-question-answering, 600 tokens")[1].split(
        "### text-classification, 600 tokens")
    assert "| hfe_roberta, 512 tokens, windows sharing 128 tokens | " in qa and qa.count("| 1.00x |") >= 1
    assert "| hfe_roberta, 512 tokens, the first 512 tokens (truncation) | " in classification
    assert "| hfe_longformer, whole document | " in qa and "| hfe_longformer, whole document | " in classification


def test_inference_measures_each_dtype_side_by_side():
    modes = grid.grid_modes([1, 8], [torch.float32, torch.bfloat16])
    assert list(modes) == ["inference, batch 1, float32", "inference, batch 8, float32", "inference, batch 1, bfloat16",
                           "inference, batch 8, bfloat16"]
    assert modes["inference, batch 8, bfloat16"] == (False, 8, torch.bfloat16)
    assert list(grid.grid_modes([1])) == ["inference, batch 1"]  # one dtype: named in the legend only
    rows = {WINDOWS: {mode: Measurement(2.0, 1.0) for mode in modes},
            "hfe_longformer": {mode: Measurement(1.0, 1.0) for mode in modes}}
    table = grid.format_inference_tables({4096: rows}).splitlines()
    assert table[2].startswith("| model | batch 1, float32 docs/s | vs windows | batch 8, float32 docs/s |")
    assert table[-1] == "| hfe_longformer | 1.00 | 2.00x | 8.00 | 2.00x | 1.00 | 2.00x | 8.00 | 2.00x |"
    rows["hfe_longformer"]["inference, batch 1, bfloat16"] = Measurement(float("nan"), float("nan"), "RuntimeError: scatter")
    assert grid.format_inference_tables({4096: rows}).splitlines()[-1] == (
        "| hfe_longformer | 1.00 | 2.00x | 8.00 | 2.00x | failed: RuntimeError: scatter | - | 8.00 | 2.00x |")


def test_the_step_profile_splits_each_step_and_counts_the_kernels_work_against_the_pattern():
    """scripts/profile_step.py: the floor runs no attention kernel; Longformer-style's blocked kernel computes three
    blocks of half its window per query in training (nine of an eighth in inference), more than its band allows;
    BlockBERT's blocks of 512 compute only the pattern; the windows compute their overlap twice. The least step a
    pattern allows lies above the floor, the more keys the higher (where it lies against the measured step is a
    timing, which a busy machine moves: the benchmark's table reports it)."""
    from tests.script_loader import load_script

    profile_step = load_script("profile_step")
    for training, longformer_keys in ((True, 3 * 128), (False, 9 * 32)):
        results = {r["row"]: r for r in profile_step.measure(1024, "benchmark", 1, training, batch_size=2)}
        floor, windows = results[grid.FLOOR], results[grid.WINDOWS]
        longformer, blockbert = results["hfe_longformer"], results["hfe_blockbert"]
        assert floor["attention kernel"] == 0 and floor["computed"] == 0 and floor["pattern"] is None
        for r in results.values():
            assert math.isclose(sum(r[part] for part in profile_step.PARTS), 1.0)
        assert longformer["computed"] == longformer_keys and 200 < longformer["pattern"] <= 257
        assert blockbert["computed"] == blockbert["pattern"] == 512
        assert windows["computed"] == 3 * 512 * 512 / 1024 and windows["pattern"] is None  # windows at 0, 384, 512
        assert floor["least"] == 1 and floor["rate"] is None
        for r in (longformer, blockbert):
            assert 1 < r["least"] and r["rate"] > 0
        assert longformer["least"] < blockbert["least"] < windows["least"]
    table = profile_step.table(1024, "benchmark", list(results.values())).splitlines()
    assert table[0] == "### 1024 tokens, benchmark size" and len(table) == 4 + len(results)
    assert table[4].startswith(f"| {grid.FLOOR} | 1.00 (")
