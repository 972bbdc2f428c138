"""`hearth bench`: measure a serving engine from the client side (Hearth's or any OpenAI-compatible one)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from engine import validation as valid

if TYPE_CHECKING:
    from engine.bench.runner import BenchRunner, RunPlan
    from engine.bench.servers import ServerInfo
    from engine.bench.workload import BenchRequest, LengthDist

DEFAULT_CONCURRENCY = "1,4,16"
DEFAULT_INPUT = "uniform:20-300"
DEFAULT_OUTPUT = "fixed:128"


_DESCRIPTION = (
    "Benchmark Hearth or any OpenAI-compatible server from the client side: time to first token, "
    "time per output token, inter-token latency and end-to-end latency (p50/p95/p99), throughput, "
    "the server's peak memory (when it runs on this machine) and the cost of a million output tokens. "
    "Writes bench.json, bench.md and PNG plots to --out. With neither --url nor --backend it starts "
    "`hearth serve` with --model (default: the starter model) and stops it at the end."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark a server: latency, throughput, memory, cost",
        description=_DESCRIPTION,
    )
    where = p.add_argument_group("server")
    _server_arguments(where)
    _compare_arguments(where)
    _load_arguments(p.add_argument_group("load"))
    _workload_arguments(p.add_argument_group("workload"))
    _report_arguments(p.add_argument_group("report"))
    p.set_defaults(run=run)


def _server_arguments(where: argparse._ArgumentGroup) -> None:
    """The server to measure: a running one (--url) or one bench starts here, and how to start it."""
    where.add_argument("--url", help="OpenAI base URL of a running server, e.g. http://127.0.0.1:8765/v1")
    where.add_argument(
        "--backend", "-b", help="start a local `hearth serve` on this backend (llamacpp, paged, mlx)"
    )
    where.add_argument(
        "--model",
        "-m",
        help="model to serve (local server) or to request (--url; default: the one it has loaded)",
    )
    where.add_argument("--api-key", help="bearer token for --url and --compare servers")
    where.add_argument("--parallel", type=valid.whole(valid.PARALLEL), help="local server: sequences decoded at once")
    where.add_argument("--ctx", type=valid.whole(valid.CTX), help="local server: context length per sequence")
    where.add_argument("--threads", type=valid.whole(valid.THREADS), help="local server: CPU threads")
    where.add_argument(
        "--speculative", metavar="MODE", help="local server: speculative decoding, auto, ngram or off"
    )


def _compare_arguments(where: argparse._ArgumentGroup) -> None:
    """More servers to measure against the first, their names, and the model file they all serve."""
    where.add_argument(
        "--compare",
        nargs="+",
        action="extend",
        default=[],
        metavar="URL",
        help="also run the same workload against these servers, interleaved level by level (A B A B)",
    )
    where.add_argument(
        "--label",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME",
        help="names of the servers, in order",
    )
    where.add_argument(
        "--model-file",
        type=Path,
        help="the model file the servers serve, to hash when a server cannot say (peers)",
    )


def _load_arguments(load: argparse._ArgumentGroup) -> None:
    """How hard the servers are driven: the levels, requests per level, warm-up and timeout."""
    load.add_argument(
        "--concurrency",
        default=DEFAULT_CONCURRENCY,
        help="requests kept in flight, one level each (default: %(default)s)",
    )
    load.add_argument(
        "--request-rate",
        help="instead of --concurrency: Poisson arrivals at these rates (req/s, comma-separated; inf)",
    )
    load.add_argument(
        "--requests", type=valid.whole(valid.COUNT, "requests"), help="requests per level (default: max(16, 4 x concurrency); 64 per rate)"
    )
    load.add_argument(
        "--warmup",
        type=valid.whole(valid.WholeNumber("warmup", 0, 10_000)),
        default=2,
        help="unmeasured requests sent to each server first (default: %(default)s)",
    )
    load.add_argument(
        "--timeout",
        type=valid.number(valid.SECONDS),
        default=600.0,
        help="seconds a request may wait between chunks (default: %(default)s)",
    )


def _workload_arguments(work: argparse._ArgumentGroup) -> None:
    """What is asked: the prompts, their lengths, and the sampling settings of each request."""
    work.add_argument(
        "--dataset", default="random", help="random, prefix-shared, or a FILE.jsonl (default: %(default)s)"
    )
    work.add_argument(
        "--input-len",
        default=DEFAULT_INPUT,
        help="prompt length in words: fixed:N, uniform:A-B, normal:MEAN,SD (default: %(default)s)",
    )
    work.add_argument(
        "--output-len",
        default=DEFAULT_OUTPUT,
        help="max_tokens per request, same forms (default: %(default)s)",
    )
    work.add_argument(
        "--prefix-len",
        type=valid.whole(valid.WholeNumber("prefix_len", 0, 1_000_000)),
        default=512,
        help="prefix-shared: words in the shared system prompt (default: %(default)s)",
    )
    work.add_argument(
        "--seed", type=valid.whole(valid.SEED), default=0, help="seed of the workload and of the arrivals (default: %(default)s)"
    )
    work.add_argument(
        "--temperature",
        type=valid.number(valid.TEMPERATURE),
        default=0.0,
        help="sampling temperature, 0 is greedy (default: %(default)s)",
    )
    work.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the model stop early (by default ignore_eos asks for exactly max_tokens tokens)",
    )
    work.add_argument(
        "--extra-body", help='JSON merged into every request, e.g. \'{"logit_bias": {"2": -100}}\''
    )


def _report_arguments(rep: argparse._ArgumentGroup) -> None:
    """Where the report goes and the figures behind its cost column."""
    from engine.bench.stats import DEFAULT_PRICE_PER_KWH, DEFAULT_WATTS

    rep.add_argument("--out", type=Path, help="folder for the report (default: bench-out/DATE-TIME)")
    rep.add_argument(
        "--json",
        action="store_true",
        help="print the report (bench.json) on stdout; the progress and the table go to stderr",
    )
    rep.add_argument(
        "--watts",
        type=valid.number(valid.Fraction("watts", 0.0, 100_000.0)),
        default=DEFAULT_WATTS,
        help="watts the machine draws under load, for the cost figure (default: %(default)s W)",
    )
    rep.add_argument(
        "--price-per-kwh",
        type=valid.number(valid.Fraction("price_per_kwh", 0.0, 1_000.0)),
        default=DEFAULT_PRICE_PER_KWH,
        help="electricity price per kWh, in your currency (default: %(default)s)",
    )


def _levels(text: str, name: str) -> tuple[float, ...]:
    from engine.bench.errors import BenchError

    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BenchError(f"{name} takes comma-separated numbers, e.g. 1,4,16; got '{text}'.") from None
    if not values or any(v <= 0 for v in values):
        raise BenchError(f"{name} takes numbers above 0; got '{text}'.")
    return values


def _plan(args: argparse.Namespace):
    from engine.bench.errors import BenchError
    from engine.bench.runner import RunPlan

    if args.request_rate:
        mode, levels = "rate", _levels(args.request_rate, "--request-rate")
        requests = tuple(args.requests or 64 for _ in levels)
    else:
        mode, levels = "concurrency", _levels(args.concurrency, "--concurrency")
        if any(v != int(v) for v in levels):
            raise BenchError("--concurrency takes whole numbers, e.g. 1,4,16.")
        requests = tuple(args.requests or max(16, 4 * int(v)) for v in levels)
    if args.requests is not None and args.requests < 1:
        raise BenchError("--requests must be at least 1.")
    if args.warmup < 0:
        raise BenchError("--warmup cannot be negative.")
    extra: dict = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except json.JSONDecodeError as exc:
            raise BenchError(f"--extra-body is not JSON ({exc.msg}).") from None
        if not isinstance(extra, dict):
            raise BenchError("--extra-body must be a JSON object.")
    return RunPlan(
        mode=mode,
        levels=levels,
        requests=requests,
        warmup=args.warmup,
        seed=args.seed,
        temperature=args.temperature,
        ignore_eos=args.ignore_eos,
        timeout=args.timeout,
        extra_body=tuple(extra.items()),
    )


class _Progress:
    """Rich progress bars, one per level and server, fed by the runner."""

    def __init__(self, progress) -> None:
        self.progress = progress
        self.tasks: dict[int, int] = {}
        self.warm: dict[str, int] = {}

    def warmup_started(self, server: str, total: int) -> None:
        self.progress.console.print(f"warming up {server} with {total} request(s)")

    def warmup_finished(self, server: str, results) -> None:
        failed = [r for r in results if not r.ok]
        if failed:
            self.progress.console.print(
                f"[yellow]warning: {len(failed)} of {len(results)} warm-up request(s) to {server} failed: "
                f"{failed[0].error}[/yellow]"
            )

    def level_started(self, run) -> None:
        self.tasks[id(run)] = self.progress.add_task(
            f"{run.server} @ {run.level:g}", total=run.requests_planned, failed=0
        )

    def request_done(self, run, result) -> None:
        failed = sum(not r.ok for r in run.results)
        self.progress.update(self.tasks[id(run)], advance=1, failed=failed)

    def level_finished(self, run) -> None:
        pass


def _start_local(args: argparse.Namespace, out: Path):
    from engine.worker.supervisor import WorkerSupervisor

    extra = []
    for flag, value in (
        ("--backend", args.backend),
        ("--parallel", args.parallel),
        ("--ctx", args.ctx),
        ("--threads", args.threads),
        ("--speculative", args.speculative),
    ):
        if value is not None:
            extra += [flag, str(value)]
    out.mkdir(parents=True, exist_ok=True)
    from engine.starter import STARTER_NAME

    # The model is named even when it is the starter one, so the worker loads it before the first request.
    sup = WorkerSupervisor(
        port=0,
        model=args.model or STARTER_NAME,
        extra_args=extra,
        log_path=out / "server.log",
        startup_timeout=600,
    )
    sup.start()
    return sup


def _with_local_facts(
    info: ServerInfo, *, pid: int | None, started_by_bench: bool, model_file: Path | None
) -> ServerInfo:
    """``info`` with its process and what only this machine can tell about its model (hash, quantization)."""
    import dataclasses

    from engine.bench.servers import complete_local_facts

    info = dataclasses.replace(info, pid=pid, started_by_bench=started_by_bench)
    return complete_local_facts(info, model_file=model_file)


def _refresh(info, args: argparse.Namespace, api_keys: dict):
    """Ask a Hearth server again once its model is loaded (a model loads on its first request)."""
    from engine.bench.errors import BenchError
    from engine.bench.servers import probe_server

    if info.kind != "hearth" or info.backend != "unknown":
        return info
    try:
        fresh = probe_server(info.url, label=info.label, api_key=api_keys.get(info.label), model=info.model)
    except BenchError:
        return info
    return _with_local_facts(
        fresh, pid=info.pid, started_by_bench=info.started_by_bench, model_file=args.model_file
    )


def run(args: argparse.Namespace) -> int:
    from engine.bench.runner import BenchRunner

    console = _console(args)
    plan = _plan(args)
    work = _workloads(args, plan)
    urls = _targets(args)
    out = args.out or Path("bench-out") / datetime.now().strftime("%Y%m%d-%H%M%S")
    started_at = datetime.now(UTC)
    with contextlib.ExitStack() as local_server:  # stops the server bench starts, whatever happens
        servers, api_keys = _open_servers(args, urls, out, console, local_server)
        runner = BenchRunner(servers, plan, work.measured, warmup_workload=work.warmup, api_keys=api_keys)
        interrupted = _run_levels(runner, args, api_keys, console)
        report = _report(runner, args, work, started_at, interrupted)
        _write_and_print(report, args, out, console)
    return _exit_code(report, interrupted)


def _console(args: argparse.Namespace):
    """Where the progress and the table go: stderr under --json (stdout holds the JSON alone)."""
    from rich.console import Console

    if args.json:
        return Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=160)
    return Console() if sys.stdout.isatty() else Console(width=160)


@dataclass(frozen=True, slots=True)
class _Workloads:
    """The requests of a run: the measured ones, the warm-up ones, and the lengths they were drawn from."""

    input_len: LengthDist
    output_len: LengthDist
    measured: list[BenchRequest]
    warmup: list[BenchRequest]


def _workloads(args: argparse.Namespace, plan: RunPlan) -> _Workloads:
    from engine.bench.workload import LengthDist, build_workload

    input_len, output_len = LengthDist.parse(args.input_len), LengthDist.parse(args.output_len)

    def requests(n: int, seed: int) -> list[BenchRequest]:
        return build_workload(
            args.dataset, n, input_len=input_len, output_len=output_len, seed=seed, prefix_len=args.prefix_len
        )

    # Fresh prompts for each level (a replayed one is answered from the prefix cache), except where the shared
    # prefix is the point.
    n = max(plan.requests) if args.dataset == "prefix-shared" else sum(plan.requests)
    # Warm-up prompts differ from the measured ones, so no measured prompt is already in a prefix cache.
    return _Workloads(input_len, output_len, requests(n, args.seed), requests(plan.warmup, args.seed + 1_000_003))


def _targets(args: argparse.Namespace) -> list[str | None]:
    """The servers' URLs in order, None for the one bench starts here; checks the server flags agree."""
    from engine.bench.errors import BenchError

    if args.url and args.backend:
        raise BenchError("Give --url (a running server) or --backend (start one here), not both.")
    if args.url and args.speculative:
        raise BenchError(
            "--speculative sets the server bench starts; for --url, send --extra-body '{\"speculative\": false}' instead."
        )
    urls: list[str | None] = [args.url] if args.url else [None]
    urls += args.compare
    if len(args.label) > len(urls):
        raise BenchError(
            f"{len(args.label)} labels for {len(urls)} servers; give one --label per server at most."
        )
    if len(set(args.label)) != len(args.label):
        raise BenchError("Each --label must be different.")
    return urls


def _open_servers(
    args: argparse.Namespace, urls: list[str | None], out: Path, console, local_server: contextlib.ExitStack
) -> tuple[list[ServerInfo], dict[str, str]]:
    """Start the local server if one is wanted, and find out what each server is; prints one line per server."""
    servers: list[ServerInfo] = []
    api_keys: dict[str, str] = {}
    for i, url in enumerate(urls):
        label = args.label[i] if i < len(args.label) else None
        taken = {s.label for s in servers} | set(args.label)
        info, key = _open_server(args, i, url, label, taken, out, console, local_server)
        servers.append(info)
        if key:
            api_keys[info.label] = key
        console.print(
            f"{info.label}: {info.kind} (version {info.version}) at {info.url}, model {info.model}, backend {info.backend}, "
            f"pid {info.pid if info.pid is not None else 'unknown'}"
        )
    return servers, api_keys


def _open_server(
    args: argparse.Namespace,
    i: int,
    url: str | None,
    label: str | None,
    taken: set[str],
    out: Path,
    console,
    local_server: contextlib.ExitStack,
) -> tuple[ServerInfo, str | None]:
    """Server ``i`` (started here when ``url`` is None) and its API key; named after its kind without a label."""
    import dataclasses

    from engine.bench.servers import probe_server
    from engine.bench.stats import find_listening_pid

    started = url is None
    pid = None
    if url is None:
        console.print(
            f"starting hearth serve ({args.backend or 'backend chosen per model'}, {args.model or 'starter model'})"
        )
        sup = _start_local(args, out)
        local_server.callback(sup.stop)
        url, pid, key = sup.base_url, sup.pid, sup.api_key
    else:
        key = args.api_key
    info = probe_server(url, label=label or f"server{i + 1}", api_key=key, model=args.model)
    if pid is None:
        pid = find_listening_pid(url)
    info = _with_local_facts(info, pid=pid, started_by_bench=started, model_file=args.model_file)
    if label is None:
        base = info.kind if info.kind != "unknown" else "server"
        info = dataclasses.replace(info, label=base if base not in taken else f"{base}-{i + 1}")
    return info, key


def _loop_factory():
    """uvloop's event loop where it is installed (Hearth's server runs on it too): at hundreds of streams the
    client's own share of the CPU is part of what is measured on this machine."""
    try:
        from uvloop import new_event_loop
    except ImportError:
        return None
    return new_event_loop


def _run_levels(runner: BenchRunner, args: argparse.Namespace, api_keys: dict, console) -> bool:
    """Run every level with progress bars; whether Ctrl-C cut the run short (else the servers' facts are
    asked again, now that their models are loaded)."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    interrupted = False
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        runner.observer = _Progress(progress)
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as loop:
                loop.run(runner.run())
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        console.print("[yellow]Interrupted: reporting what was measured so far.[/yellow]")
    else:
        runner.servers = [_refresh(s, args, api_keys) for s in runner.servers]
    return interrupted


def _parameters(args: argparse.Namespace, plan: RunPlan, work: _Workloads) -> dict:
    """The run's settings as the report records them: every flag but the API key, and what they came to."""
    from engine.bench.report import json_level

    parameters = {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("run", "api_key")
    }
    parameters.update(
        mode=plan.mode,
        levels=[json_level(v) for v in plan.levels],
        requests_per_level=list(plan.requests),
        input_len=str(work.input_len) if args.dataset in ("random", "prefix-shared") else "from the dataset",
        output_len=str(work.output_len),
        api_key_given=bool(args.api_key),
    )
    return parameters


def _report(
    runner: BenchRunner, args: argparse.Namespace, work: _Workloads, started_at: datetime, interrupted: bool
) -> dict:
    from engine.bench.report import build_report, hardware_facts

    return build_report(
        runner,
        parameters=_parameters(args, runner.plan, work),
        hardware=hardware_facts(),
        watts=args.watts,
        price_per_kwh=args.price_per_kwh,
        started_at=started_at,
        interrupted=interrupted,
    )


def _write_and_print(report: dict, args: argparse.Namespace, out: Path, console) -> None:
    """bench.json, bench.md and the plots into ``out``; the table on the console; the JSON on stdout (--json)."""
    from engine.bench.report import print_table, write_outputs

    paths = write_outputs(report, out)
    print_table(report, console)
    console.print(f"report: {paths['json']}, {paths['markdown']} and plots in {out}")
    if args.json:
        print(json.dumps(report, indent=2, default=str))


def _exit_code(report: dict, interrupted: bool) -> int:
    """130 after Ctrl-C, 1 when no request succeeded (said on stderr), else 0."""
    if interrupted:
        return 130
    if not any(r["completed"] for r in report["results"]):
        print("hearth: no request succeeded; see the errors in the report.", file=sys.stderr)
        return 1
    return 0
