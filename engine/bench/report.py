"""The benchmark's report: one JSON file with every figure and the whole set-up, a Markdown summary,
PNG plots, and a table in the terminal.

The JSON is the record; the Markdown, the plots and the table are read from it, so they can be made
again from a saved ``bench.json`` (:func:`write_outputs`).
"""

from __future__ import annotations

import json
import logging
import math
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import __version__
from engine.bench.runner import BenchRunner, LevelRun
from engine.bench.stats import summarize

log = logging.getLogger(__name__)

JSON_NAME = "bench.json"
MARKDOWN_NAME = "bench.md"
PLOT_NAMES = ("throughput.png", "ttft.png", "tpot.png", "latency_distribution.png")
RATIO_FIGURES = (
    ("output_throughput", ("output_throughput_tok_s",)),
    ("ttft_p50", ("ttft_s", "p50")),
    ("ttft_p99", ("ttft_s", "p99")),
    ("tpot_p50", ("tpot_s", "p50")),
    ("tpot_p99", ("tpot_s", "p99")),
)


def hardware_facts() -> dict[str, Any]:
    """This machine, from the catalog's detection where it exists, else from platform and psutil."""
    try:
        from engine.hardware import detect_hardware

        return {"source": "engine.hardware", **detect_hardware().to_dict()}
    except Exception:  # detection is young code: a benchmark must still run and say what it knows
        log.debug("engine.hardware unavailable", exc_info=True)
    import psutil

    freq = psutil.cpu_freq()
    return {
        "source": "platform+psutil",
        "os": f"{platform.system()} {platform.release()}",
        "cpu": {
            "model": platform.processor() or platform.machine(),
            "arch": platform.machine(),
            "cores_physical": psutil.cpu_count(logical=False),
            "cores_logical": psutil.cpu_count(logical=True),
            "max_mhz": freq.max if freq else None,
        },
        "ram_total": psutil.virtual_memory().total,
        "gpus": [],
    }


def _get(d: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def level_entry(run: LevelRun, *, mode: str, watts: float, price_per_kwh: float) -> dict[str, Any]:
    return {
        "server": run.server,
        "mode": mode,
        "level": json_level(run.level),
        "complete": run.complete,
        "requests_planned": run.requests_planned,
        "peak_rss_bytes": run.peak_rss_bytes,
        **summarize(run.results, duration=run.duration, watts=watts, price_per_kwh=price_per_kwh),
    }


def ratios(results: Sequence[dict], servers: Sequence[str]) -> list[dict[str, Any]]:
    """Each other server against the first, level by level: B/A for throughput, TTFT and TPOT."""
    if len(servers) < 2:
        return []
    by_key = {(r["server"], r["level"]): r for r in results}
    out = []
    base = servers[0]
    for r in results:
        if r["server"] == base:
            continue
        a = by_key.get((base, r["level"]))
        if a is None:
            continue
        entry: dict[str, Any] = {"level": r["level"], "server": r["server"], "baseline": base}
        for name, path in RATIO_FIGURES:
            x, y = _get(r, path), _get(a, path)
            entry[name] = (x / y) if x is not None and y else None
        out.append(entry)
    return out


def build_report(
    runner: BenchRunner,
    *,
    parameters: dict[str, Any],
    hardware: dict[str, Any],
    watts: float,
    price_per_kwh: float,
    started_at: datetime,
    interrupted: bool,
) -> dict[str, Any]:
    """Everything measured and the whole set-up, as one JSON-serialisable dict."""
    mode = runner.plan.mode
    results = [level_entry(run, mode=mode, watts=watts, price_per_kwh=price_per_kwh) for run in runner.levels]
    labels = [s.label for s in runner.servers]
    return {
        "tool": "hearth bench",
        "hearth_version": __version__,
        "python": sys.version.split()[0],
        "started_at": started_at.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "interrupted": interrupted,
        "setup": {
            "servers": [s.to_dict() for s in runner.servers],
            "hardware": hardware,
            "parameters": parameters,
            "mode": mode,
            "cost_model": {
                "watts": watts,
                "price_per_kwh": price_per_kwh,
                "note": "cost = watts x time to generate a million output tokens at the measured throughput x price",
            },
        },
        "warmup": {
            label: {
                "requests": len(rs),
                "failed": sum(not r.ok for r in rs),
                "output_tokens": sum(r.output_tokens for r in rs if r.ok),
                "prompt_tokens": sum(r.prompt_tokens or 0 for r in rs if r.ok),
            }
            for label, rs in runner.warmups.items()
        },
        "results": results,
        "ratios": ratios(results, labels),
        "requests": [
            {"server": run.server, "level": json_level(run.level), **r.to_dict()}
            for run in runner.levels
            for r in run.results
        ],
    }


# -- text ----------------------------------------------------------------------------------------


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}" if x >= 0.1 else f"{x * 1000:.1f}"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _mib(x: int | None) -> str:
    return "unknown" if x is None else f"{x / 2**20:.0f} MiB"


def _level_name(report: dict) -> str:
    return "concurrency" if report["setup"]["mode"] == "concurrency" else "req/s"


def json_level(x: float) -> float | str:
    """A level as JSON can hold it: an unlimited request rate is the string "inf" (JSON has no infinity)."""
    return "inf" if math.isinf(x) else x


def _level_text(x: float | str) -> str:
    return f"{float(x):g}"


def _cached(r: dict) -> str:
    """The share of a level's prompt tokens the server's prefix cache held, or "-" where it does not say."""
    rate = r.get("prefix_cache_hit_rate")
    return "-" if rate is None else f"{rate:.0%}"


def _drafts(r: dict) -> str:
    """Speculative decoding's tokens: "drafted/kept keep%", or "-" where the server does not report them."""
    drafted, kept = r.get("draft_tokens"), r.get("accepted_draft_tokens")
    if drafted is None or kept is None:
        return "-"
    return f"{drafted}/{kept}" + (f" {kept / drafted:.0%}" if drafted else "")


ROW_HEADERS = (
    "server",
    "level",
    "ok",
    "failed",
    "out tok/s",
    "req/s",
    "TTFT p50/p95/p99 ms",
    "TPOT p50/p95/p99 ms",
    "ITL p50/p99 ms",
    "E2E p50/p99 s",
    "peak RSS",
    "cost/Mtok",
    "drafted/kept",
    "prefix cache",
)


def result_row(r: dict) -> list[str]:
    t, p, i, e = r["ttft_s"], r["tpot_s"], r["itl_s"], r["e2e_s"]
    return [
        r["server"],
        _level_text(r["level"]) + ("" if r["complete"] else " (partial)"),
        str(r["completed"]),
        str(r["failed"]),
        _num(r["output_throughput_tok_s"]),
        _num(r["request_throughput_req_s"], ".2f"),
        f"{_ms(t['p50'])} / {_ms(t['p95'])} / {_ms(t['p99'])}",
        f"{_ms(p['p50'])} / {_ms(p['p95'])} / {_ms(p['p99'])}",
        f"{_ms(i['p50'])} / {_ms(i['p99'])}",
        f"{_num(e['p50'], '.2f')} / {_num(e['p99'], '.2f')}",
        _mib(r["peak_rss_bytes"]),
        _num(r["cost_per_million_output_tokens"], ".3f"),
        _drafts(r),
        _cached(r),
    ]


def markdown(report: dict) -> str:
    """A Markdown summary of ``report``."""
    setup = report["setup"]
    params = setup["parameters"]
    hw = setup["hardware"]
    cpu = hw.get("cpu") or {}
    lines = [
        "# hearth bench",
        "",
        f"Hearth {report['hearth_version']}, {report['started_at']}"
        + (" — **interrupted: partial results**" if report["interrupted"] else ""),
        "",
        "## Set-up",
        "",
        "| server | URL | engine | version | model | quantization | backend | backend version | file sha256 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in setup["servers"]:
        lines.append(
            f"| {s['label']} | {s['url']} | {s['kind']} | {s['version']} | {s['model']} | {s['quantization']} | "
            f"{s['backend']} | {s['backend_version']} | {s['model_sha256'][:16]} |"
        )
    gpus = hw.get("gpu_summary") or (", ".join(g.get("name", "?") for g in hw.get("gpus", [])) or "no GPU")
    gpus = gpus.rstrip(".")
    lines += [
        "",
        f"Hardware: {hw.get('os', '?')}; CPU {cpu.get('model', '?')} ({cpu.get('cores_physical', '?')} cores, "
        f"{cpu.get('cores_logical', '?')} threads); RAM {_mib(hw.get('ram_total'))}; {gpus}.",
        "",
        f"Workload: dataset {params.get('dataset')}, input {params.get('input_len')}, output {params.get('output_len')}, "
        f"seed {params.get('seed')}, {_level_name(report)} {params.get('levels')}, requests per level "
        f"{params.get('requests_per_level')}, warm-up {params.get('warmup')} per server, temperature "
        f"{params.get('temperature')}, ignore_eos {params.get('ignore_eos')}.",
        "",
        f"Cost assumes {setup['cost_model']['watts']:g} W at {setup['cost_model']['price_per_kwh']:g} per kWh.",
        "",
        "## Results",
        "",
        "| " + " | ".join(ROW_HEADERS) + " |",
        "|" + "---|" * len(ROW_HEADERS),
    ]
    for r in report["results"]:
        lines.append("| " + " | ".join(result_row(r)) + " |")
    if any(r.get("draft_tokens") for r in report["results"]):
        lines += ["", "drafted/kept: the tokens speculative decoding drafted, those kept, and the share kept "
                  "(the server's usage.completion_tokens_details)."]  # fmt: skip
    lines += ["", "prefix cache: the share of each level's prompt tokens the server's prefix cache held "
              "(usage.prompt_tokens_details.cached_tokens); first-token times compare only where these do. Each "
              "level sends prompts no earlier level sent, except with the prefix-shared dataset."]  # fmt: skip
    if report["ratios"]:
        lines += [
            "",
            "## Ratios (server / baseline)",
            "",
            "| level | server | baseline | throughput | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for q in report["ratios"]:
            lines.append(
                f"| {_level_text(q['level'])} | {q['server']} | {q['baseline']} | "
                + " | ".join(_ratio(q[k]) for k, _ in RATIO_FIGURES)
                + " |"
            )
    failures = [
        (r["server"], r["level"], msg, n) for r in report["results"] for msg, n in r["errors"].items()
    ]
    if failures:
        lines += ["", "## Failed requests", ""]
        lines += [f"- {srv} at {_level_text(lvl)}: {n} x {msg}" for srv, lvl, msg, n in failures]
    short = [
        r
        for r in report["results"]
        if r["requested_tokens_delivered"] is not None and r["requested_tokens_delivered"] < 0.99
    ]
    if short:
        lines += ["", "## Note", ""]
        lines += [
            f"- {r['server']} at {_level_text(r['level'])} gave {r['requested_tokens_delivered']:.0%} of the output "
            "tokens asked for (it stops at end-of-sequence: ignore_eos is not honoured)."
            for r in short
        ]
    lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in PLOT_NAMES]
    return "\n".join(lines) + "\n"


TERMINAL_HEADERS = (
    "server",
    "level",
    "ok",
    "failed",
    "out tok/s",
    "req/s",
    "TTFT p50/p99 ms",
    "TPOT p50/p99 ms",
    "ITL p99 ms",
    "E2E p99 s",
    "peak RSS",
    "cost/Mtok",
    "drafted/kept",
    "prefix cache",
)


def terminal_row(r: dict) -> list[str]:
    t, p = r["ttft_s"], r["tpot_s"]
    return [
        r["server"],
        _level_text(r["level"]) + ("" if r["complete"] else "*"),
        str(r["completed"]),
        str(r["failed"]),
        _num(r["output_throughput_tok_s"]),
        _num(r["request_throughput_req_s"], ".2f"),
        f"{_ms(t['p50'])}/{_ms(t['p99'])}",
        f"{_ms(p['p50'])}/{_ms(p['p99'])}",
        _ms(r["itl_s"]["p99"]),
        _num(r["e2e_s"]["p99"], ".2f"),
        _mib(r["peak_rss_bytes"]),
        _num(r["cost_per_million_output_tokens"], ".3f"),
        _drafts(r),
        _cached(r),
    ]


def print_table(report: dict, console=None) -> None:
    """The results (and ratios) as rich tables; the full percentiles are in the Markdown and JSON."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    title = "hearth bench" + (" (interrupted: * marks a partial level)" if report["interrupted"] else "")
    table = Table(title=title)
    for h in TERMINAL_HEADERS:
        table.add_column(h, justify="left" if h == "server" else "right")
    for r in report["results"]:
        table.add_row(*terminal_row(r), style="red" if r["failed"] else None)
    console.print(table)
    if report["ratios"]:
        rt = Table(title="ratios (server / baseline)")
        for h in ("level", "server", "throughput", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"):
            rt.add_column(h, justify="right")
        for q in report["ratios"]:
            rt.add_row(
                _level_text(q["level"]),
                f"{q['server']} / {q['baseline']}",
                *(
                    _ratio(q[k])
                    for k in ("output_throughput", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")
                ),
            )
        console.print(rt)
    failed = sum(r["failed"] for r in report["results"])
    if failed:
        console.print(f"[red]{failed} request(s) failed[/red]; reasons in the JSON and the Markdown summary.")


# -- plots ---------------------------------------------------------------------------------------


def write_plots(report: dict, out: Path) -> list[Path]:
    """PNG plots of ``report`` in ``out``: throughput, TTFT and TPOT percentiles against the level,
    and the distribution of per-request latencies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    servers = [s["label"] for s in report["setup"]["servers"]]
    levels = sorted({r["level"] for r in report["results"]}, key=float)
    xs = {lvl: i for i, lvl in enumerate(levels)}
    xlabel = "concurrent requests" if report["setup"]["mode"] == "concurrency" else "request rate (req/s)"
    paths = []

    def axis(ax, title: str, ylabel: str) -> None:
        ax.set_xticks(range(len(levels)), [_level_text(v) for v in levels])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)

    def series(server: str, path: Sequence[str], scale: float = 1.0):
        pts = [(xs[r["level"]], _get(r, path)) for r in report["results"] if r["server"] == server]
        pts = [(x, y * scale) for x, y in pts if y is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in servers:
        x, y = series(s, ("output_throughput_tok_s",))
        ax.plot(x, y, marker="o", label=s)
    axis(ax, "Output throughput", "output tokens/s (all requests)")
    ax.legend()
    paths.append(_save(fig, out / PLOT_NAMES[0]))

    for name, key, title in (
        (PLOT_NAMES[1], "ttft_s", "Time to first token"),
        (PLOT_NAMES[2], "tpot_s", "Time per output token"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, s in enumerate(servers):
            color = f"C{i}"
            for q, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
                x, y = series(s, (key, q), 1000.0)
                ax.plot(x, y, style, marker="o", color=color, label=f"{s} {q}")
        axis(ax, title, "milliseconds")
        ax.legend(fontsize="small")
        paths.append(_save(fig, out / name))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / max(1, len(servers))
    for panel, (key, title) in zip(
        axes, (("ttft_s", "Time to first token"), ("e2e_s", "End-to-end latency")), strict=True
    ):
        for i, s in enumerate(servers):
            data, pos = [], []
            for lvl in levels:
                vals = [
                    r[key]
                    for r in report["requests"]
                    if r["server"] == s and r["level"] == lvl and r["ok"] and r[key] is not None
                ]
                if vals:
                    data.append(vals)
                    pos.append(xs[lvl] - 0.4 + width * (i + 0.5))
            if data:
                box = panel.boxplot(
                    data, positions=pos, widths=width * 0.9, patch_artist=True, manage_ticks=False
                )
                for patch in box["boxes"]:
                    patch.set_facecolor(f"C{i}")
                    patch.set_alpha(0.5)
            panel.plot([], [], color=f"C{i}", linewidth=8, alpha=0.5, label=s)
        axis(panel, title + " per request", "seconds")
        panel.set_xlim(-0.6, len(levels) - 0.4)
        panel.legend(fontsize="small")
    paths.append(_save(fig, out / PLOT_NAMES[3]))
    return paths


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(report: dict, out: Path) -> dict[str, Path]:
    """Write the JSON, the Markdown and the plots of ``report`` into ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / JSON_NAME, "markdown": out / MARKDOWN_NAME}
    paths["json"].write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(report), encoding="utf-8")
    for p in write_plots(report, out):
        paths[p.stem] = p
    return paths
