"""The benchmark entry points: configs, one side-by-side run at a short length, the printed table."""

from functools import partial

import pytest

from hf_efficient.bench.compare import compare, format_table
from hf_efficient.bench.grid import entries
from hf_efficient.bench.measure import measure
from hf_efficient.bench.sizes import BENCHMARK_SIZE, benchmark_configs, build_model


def test_benchmark_configs_use_the_benchmark_size_and_reject_unknown_families():
    configs = benchmark_configs(1024, ["hfe_roberta", "hfe_linformer"])
    assert sorted(configs) == ["hfe_linformer", "hfe_roberta"]
    for config in configs.values():
        assert {name: getattr(config, name) for name in BENCHMARK_SIZE} == BENCHMARK_SIZE
        assert config.max_sequence_length >= 1024
    assert configs["hfe_linformer"].projected_length == 256
    with pytest.raises(ValueError, match="no_such_family"):
        benchmark_configs(1024, ["no_such_family"])


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
    assert "hfe_longformer" in table and " - " in table
    assert "hfe_bigbird      failed: out of memory" in table


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
