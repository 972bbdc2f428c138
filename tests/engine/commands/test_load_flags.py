"""The CLI's load-setting flags are the fields of ModelLoadSettings, one table: `hearth load` has each, and sends
them by the names POST /api/models/load reads; `hearth serve`, `daemon` and `chat` take theirs from the same."""

from __future__ import annotations

from dataclasses import fields

from engine.backends.speculative import SpeculativeOptions
from engine.cli import build_parser
from engine.commands import daemon, load_flags, serve
from engine.load_settings import ModelLoadSettings


def test_each_setting_has_one_flag_named_as_the_load_body_names_it():
    assert set(load_flags.FLAGS) == {f.name for f in fields(ModelLoadSettings)}
    assert [load_flags.flag(n) for n in ("n_ctx", "n_seq_max", "n_gpu_layers", "rope_orig_ctx")] == [
        "--ctx", "--parallel", "--gpu-layers", "--rope-orig-ctx"]  # fmt: skip


def test_hearth_load_sends_every_setting_by_its_wire_name():
    args = build_parser().parse_args(
        ["load", "m", "--ctx", "8192", "--parallel", "2", "--gpu-layers", "3", "--kv-type", "q8_0", "--threads", "1",
         "--batch", "64", "--no-flash-attn", "--rope-scale", "4", "--rope-orig-ctx", "4096", "--cpu-moe", "all",
         "--speculative", "ngram"]
    )  # fmt: skip
    settings = load_flags.given(args)
    assert settings == ModelLoadSettings(n_ctx=8192, n_seq_max=2, n_gpu_layers=3, kv_type="q8_0", n_threads=1, n_batch=64,
                                         flash_attn=False, rope_scale=4.0, rope_orig_ctx=4096, cpu_moe=-1,
                                         speculative="ngram")  # fmt: skip
    assert settings.to_wire() == {"ctx": 8192, "parallel": 2, "gpu_layers": 3, "kv_type": "q8_0", "flash_attn": False,
                                  "threads": 1, "batch": 64, "rope_scale": 4.0, "rope_orig_ctx": 4096, "cpu_moe": -1,
                                  "speculative": "ngram"}  # fmt: skip
    assert load_flags.given(build_parser().parse_args(["load", "m"])).is_empty


def test_serve_and_daemon_take_theirs_from_the_same_table():
    options = serve.load_options(build_parser().parse_args(["serve", "--ctx", "4096", "--parallel", "2", "--kv-type", "q8_0"]))
    assert (options.n_ctx, options.n_seq_max, options.kv_type, options.n_threads) == (4096, 2, "q8_0", None)
    assert options.speculative == SpeculativeOptions.parse("auto")
    assert serve.load_options(build_parser().parse_args(["serve", "--speculative", "off"])).speculative.mode == "off"
    args = build_parser().parse_args(["daemon", "up", "--idle-ttl", "10m", "--ctx", "4096", "--kv-type", "q8_0"])
    assert daemon._serve_args(args) == ("--idle-ttl", "600.0", "--ctx", "4096", "--kv-type", "q8_0")
