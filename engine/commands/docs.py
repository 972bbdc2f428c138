"""`hearth docs`: collections of your documents, indexed for search and for chats (`hearth chat --docs`)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from engine import validation as valid


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "docs",
        help="index your documents for search and chat",
        description="Collections of files and folders (PDF, Markdown, HTML, text, source code, Word), indexed "
        "for keyword and vector search. `hearth chat --docs NAME` answers from them with citations.",
    )
    cmds = p.add_subparsers(dest="docs_command", metavar="ACTION", required=True)

    add = cmds.add_parser("add", help="add files or folders to a collection (made if new) and index them")
    add.add_argument("name", help="the collection")
    add.add_argument("paths", nargs="+", help="files and folders")
    add.add_argument("--model", help="embedding model: all-MiniLM-L6-v2 (default) or a GGUF embedding model's name")
    add.add_argument("--no-embed", action="store_true", help="index for keyword search only, for now")
    add.add_argument("--json", action="store_true", help="print the result as JSON")
    add.set_defaults(run=run_add)

    ls = cmds.add_parser("list", help="the collections, their files and what failed")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(run=run_list)

    search = cmds.add_parser("search", help="the passages that best match a query")
    search.add_argument("name", help="the collection")
    search.add_argument("query")
    search.add_argument("--k", type=valid.whole(valid.COUNT, "k"), default=5, help="how many passages (default 5)")
    search.add_argument("--mode", choices=("auto", "keyword", "vector", "hybrid"), default="auto")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(run=run_search)

    rm = cmds.add_parser("rm", help="remove a collection from the index (your files stay)")
    rm.add_argument("name", help="the collection")
    rm.set_defaults(run=run_rm)

    model = cmds.add_parser("model", help="change a collection's embedding model (its vectors are made again)")
    model.add_argument("name", help="the collection")
    model.add_argument("model", help="all-MiniLM-L6-v2 or a GGUF embedding model's name")
    model.set_defaults(run=run_model)

    share = cmds.add_parser(
        "share", help="let chats made with an inference key (`hearth serve --api-key`) use a collection"
    )
    share.add_argument("name", help="the collection")
    share.add_argument("--off", action="store_true", help="stop sharing it: only the admin key may use it")
    share.set_defaults(run=run_share)


def _service(embed: bool = True):
    from engine.documents import BackendEmbedder, DocumentIndex, DocumentService

    return DocumentService(DocumentIndex.default(), BackendEmbedder.open if embed else None, watch=False)


class _ProgressLine:
    """One line on stderr, rewritten in place on a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def show(self, p, final: bool = False) -> None:
        now = time.monotonic()
        if not final and (not self.tty or now - self.last < 0.2):
            return
        self.last = now
        text = f"{p.phase}: {p.files_done}/{p.files_total} files, {p.chunks} new chunks"
        if p.to_embed:
            text += f", {p.embedded}/{p.to_embed} embedded ({p.embeddings_per_s:.1f}/s)"
        if p.paused:
            text += " [paused]"
        if self.tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def run_add(args: argparse.Namespace) -> int:
    service = _service(embed=not args.no_embed)
    line = _ProgressLine()
    try:
        info = service.add(args.name, args.paths, model=args.model)
        job = service.job(info.name)
        if job is None:
            print(f"hearth: indexing of '{info.name}' did not start; run the command again.", file=sys.stderr)
            return 1
        try:
            while not job.join(0.2):
                line.show(job.progress)
        except KeyboardInterrupt:
            job.control.cancel()
            job.join()
            print("\nhearth: stopped; run the same command again to go on from here.", file=sys.stderr)
            return 130
        progress = job.progress
        line.show(progress, final=True)
        if progress.phase == "failed":
            print(f"hearth: {progress.message}", file=sys.stderr)
            return 1
        info = service.index.info(info.name)
        if args.json:
            print(json.dumps({**info.as_dict(), "progress": progress.as_dict()}, indent=2))
        else:
            print(f"{info.name}: {info.files} files, {info.chunks} chunks, {info.embedded} embedded ({info.model})")
            for f in info.failed:
                print(f"  failed: {f.path}: {f.reason}")
        return 0
    finally:
        service.close()


def run_list(args: argparse.Namespace) -> int:
    service = _service(embed=False)
    try:
        infos = service.infos()
        if args.json:
            print(json.dumps([i.as_dict() for i in infos], indent=2))
            return 0
        if not infos:
            print("No collections yet; add one with `hearth docs add NAME PATH...`.")
            return 0
        for i in infos:
            pending = f", {i.embeddings_pending} to embed" if i.embeddings_pending else ""
            shared = ", shared" if i.shared else ""
            print(f"{i.name}: {i.files} files, {i.chunks} chunks{pending} ({i.model}{shared})")
            for s in i.sources:
                print(f"  {s}")
            for f in i.failed:
                print(f"  failed: {f.path}: {f.reason}")
        return 0
    finally:
        service.close()


def run_search(args: argparse.Namespace) -> int:
    service = _service(embed=args.mode != "keyword")
    try:
        hits, modes = service.search([args.name], args.query, k=args.k, mode=args.mode)
        if args.json:
            print(json.dumps({"mode": modes[args.name], "hits": [h.as_dict() for h in hits]}, indent=2))
            return 0
        if not hits:
            print("No passage matches.")
            return 0
        for rank, h in enumerate(hits, start=1):
            place = f" ({h.place})" if h.place else ""
            print(f"{rank}. {h.path}{place}  score {h.score:.4f}")
            text = " ".join(h.text.split())
            print(f"   {text[:300]}{'...' if len(text) > 300 else ''}")
        print(f"[{modes[args.name]} search]", file=sys.stderr)
        return 0
    finally:
        service.close()


def run_rm(args: argparse.Namespace) -> int:
    service = _service(embed=False)
    try:
        service.remove(args.name)
        print(f"Removed collection {args.name} (your files are untouched).")
        return 0
    finally:
        service.close()


def run_model(args: argparse.Namespace) -> int:
    service = _service()
    line = _ProgressLine()
    try:
        info = service.set_model(args.name, args.model)
        job = service.job(info.name)
        if job is None:
            print(f"hearth: indexing of '{info.name}' did not start; run the command again.", file=sys.stderr)
            return 1
        while not job.join(0.2):
            line.show(job.progress)
        line.show(job.progress, final=True)
        if job.progress.phase == "failed":
            print(f"hearth: {job.progress.message}", file=sys.stderr)
            return 1
        info = service.index.info(args.name)
        print(f"{info.name}: {info.embedded}/{info.chunks} chunks embedded with {info.model}")
        return 0
    finally:
        service.close()


def run_share(args: argparse.Namespace) -> int:
    service = _service(embed=False)
    try:
        service.set_shared(args.name, not args.off)
        if args.off:
            print(f"Collection {args.name} is no longer shared; only the admin key may use it.")
        else:
            print(f"Collection {args.name} is shared: chats made with an inference key may use it.")
        return 0
    finally:
        service.close()


# -- `hearth chat --docs NAME`: the prompt from a collection, the answer's sources after it ----------------
class ChatDocs:
    """Retrieval for a terminal chat: each question gets the passages of the attached collections.

    Args:
        names: The collections.
        backend: The chat model's backend (its tokenizer measures the budget).
        max_tokens: Tokens kept free for the answer.
    """

    def __init__(self, names: list[str], backend, max_tokens: int | None) -> None:
        self.service = _service()
        for name in names:
            self.service.index.get(name)  # an unknown name fails before the model answers
        self.names = names
        self.backend = backend
        try:
            n_ctx = int(backend.info.n_ctx)
        except Exception:  # a remote model says nothing of its context
            n_ctx = 4096
        self.budget = max(200, min(3000, n_ctx - (max_tokens or 512) - 256))
        self.sources: tuple = ()

    def _count(self, text: str) -> int:
        tokenize = getattr(self.backend, "tokenize", None)
        if tokenize is None:
            from engine.documents.prompt import approx_tokens

            return approx_tokens(text)
        return len(tokenize(text))

    def system(self, question: str, extra: str | None) -> str:
        """The system message for ``question``: the user's own system prompt, then the sources."""
        ctx = self.service.context(self.names, question, budget_tokens=self.budget, count_tokens=self._count)
        self.sources = ctx.sources
        return f"{extra}\n\n{ctx.system}" if extra else ctx.system

    def print_sources(self, answer: str) -> None:
        from engine.documents.prompt import cited

        if not self.sources:
            print("Sources: none matched the question.")
            return
        used = {s.number for s in cited(answer, self.sources)}
        print("Sources:")
        for s in self.sources:
            score = f"  score {s.score:.4f}" if s.score is not None else ""
            mark = "  (cited)" if s.number in used else ""
            print(f"  {s.label}{score}{mark}  {s.path}")

    def close(self) -> None:
        self.service.close()
