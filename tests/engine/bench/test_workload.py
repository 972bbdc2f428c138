"""The workload a benchmark sends: lengths drawn as asked, the same requests for the same seed, and
clear errors for a bad distribution or dataset file. Percentiles as numpy computes them."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from engine.bench.errors import BenchError
from engine.bench.stats import cost_per_million, percentile
from engine.bench.workload import LengthDist, build_workload


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("fixed:128", 128, 128), ("64", 64, 64), ("uniform:20-300", 20, 300), ("normal:200,50", 1, 10_000)],
)
def test_lengths_fall_in_their_distribution(text, low, high):
    dist = LengthDist.parse(text)
    rng = random.Random(1)
    values = [dist.sample(rng) for _ in range(2000)]
    assert low <= min(values) and max(values) <= high
    if dist.kind == "uniform":
        assert min(values) < 40 and max(values) > 280  # the whole range is used
    if dist.kind == "normal":
        assert abs(np.mean(values) - 200) < 5 and abs(np.std(values) - 50) < 5


@pytest.mark.parametrize("text", ["uniform:300-20", "fixed:0", "normal:200", "poisson:3", "fixed:abc", ""])
def test_a_bad_distribution_is_refused_with_its_text(text):
    with pytest.raises(BenchError) as err:
        LengthDist.parse(text)
    assert f"'{text}'" in str(err.value)


def test_the_same_seed_gives_the_same_requests_and_another_seed_others():
    kw = {"input_len": LengthDist.parse("uniform:20-60"), "output_len": LengthDist.parse("uniform:8-32")}
    a = build_workload("random", 20, seed=7, **kw)
    assert a == build_workload("random", 20, seed=7, **kw)
    assert a != build_workload("random", 20, seed=8, **kw)
    for r in a:
        (msg,) = r.messages
        assert len(msg["content"].split()) == r.input_len and 20 <= r.input_len <= 60
        assert 8 <= r.max_tokens <= 32
    assert len({r.messages[0]["content"] for r in a}) == 20


def test_prefix_shared_requests_share_one_long_system_prompt_and_ask_distinct_questions():
    reqs = build_workload(
        "prefix-shared",
        6,
        input_len=LengthDist.parse("fixed:10"),
        output_len=LengthDist.parse("fixed:16"),
        seed=0,
        prefix_len=300,
    )
    systems = {r.messages[0]["content"] for r in reqs}
    assert len(systems) == 1 and len(systems.pop().split()) > 300
    assert len({r.messages[1]["content"] for r in reqs}) == 6


def test_a_jsonl_dataset_is_read_in_order_and_reused(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [
        {"prompt": "first", "max_tokens": 5},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "second"}]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    reqs = build_workload(
        str(path), 3, input_len=LengthDist.parse("8"), output_len=LengthDist.parse("fixed:9"), seed=0
    )
    assert [r.messages[-1]["content"] for r in reqs] == ["first", "second", "first"]
    assert [r.max_tokens for r in reqs] == [5, 9, 5]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "d.jsonl:1 is not JSON"),
        ('{"text": "x"}', "needs a non-empty 'prompt'"),
        ("", "has no requests"),
    ],
)
def test_a_bad_dataset_names_the_file_and_line(tmp_path, content, expected):
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(BenchError, match=expected):
        build_workload(
            str(path), 2, input_len=LengthDist.parse("8"), output_len=LengthDist.parse("8"), seed=0
        )


def test_percentiles_match_numpy_and_cost_follows_throughput():
    rng = random.Random(3)
    xs = [rng.expovariate(1.0) for _ in range(101)]
    for q in (50, 95, 99):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None
    # 100 tokens/s for a million tokens: 10,000 s = 2.78 h; at 36 W that is 0.1 kWh.
    cost = cost_per_million(100.0, watts=36.0, price_per_kwh=0.5)
    assert cost["kwh_per_million_output_tokens"] == pytest.approx(0.1)
    assert cost["cost_per_million_output_tokens"] == pytest.approx(0.05)


def test_each_level_sends_prompts_no_earlier_level_sent_unless_the_prefix_is_shared():
    from engine.bench.runner import BenchRunner, RunPlan

    workload = build_workload("random", 10, input_len=LengthDist.parse("fixed:8"), output_len=LengthDist.parse("fixed:4"),
                              seed=0)  # fmt: skip
    runner = BenchRunner([], RunPlan(mode="concurrency", levels=(1, 4), requests=(4, 6)), workload)
    assert runner.level_requests(0, 4) == workload[:4] and runner.level_requests(1, 6) == workload[4:10]
    shared = workload[:6]  # prefix-shared: as many as the largest level, the same for each
    runner = BenchRunner([], RunPlan(mode="concurrency", levels=(1, 4), requests=(4, 6)), shared)
    assert runner.level_requests(1, 6) == shared
