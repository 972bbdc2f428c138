"""Document collections: indexing throughput, search latency on 10,000 chunks, and retrieval quality.

Three parts, one run:

1. Indexing: PDFs of many pages parsed and chunked into the index (pages/s, chunks/s), then the question
   corpus embedded with the default model through llama.cpp (embeddings/s).
2. Latency on a 10,000-chunk collection: keyword (FTS5 BM25), vector (query vector given), and hybrid
   (both, fused by reciprocal rank, the query embedded each time), p50/p95 over the questions. Vector and
   hybrid twice: with the collection's vectors held in memory (what a search gets once indexing is done)
   and with sqlite-vec's own scan for every query (what it gets while vectors are being written).
   The filler chunks are generated text; their vectors are random unit vectors unless --embed-filler
   (embedding 10,000 chunks takes long on 2 cores): search cost does not depend on what vectors hold.
3. Quality: recall@5 of a question set written for the benchmark corpus (questions in other words than the
   documents use), keyword-only against hybrid, over the corpus plus the 10,000 filler chunks.

Goals (issue 20): hybrid p95 under 50 ms; hybrid recall@5 >= 0.9.

    .venv/bin/python benchmarks/docs_bench.py [--filler 10000] [--pages 200] [--embed-filler]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The benchmark corpus: (file, heading, passage). Markdown files get the headings; manual.pdf gets pages.
CORPUS = {
    "heat_pump_manual.pdf": [
        ("Warranty", "The outdoor unit and the compressor are covered for seven years from installation when "
         "the unit is serviced once a year by a certified installer."),
        ("Defrost", "In freezing weather the unit runs a defrost cycle every forty minutes; steam rising from the "
         "fan during this cycle is normal."),
        ("Noise", "A humming sound at start-up comes from the inverter and fades within two minutes."),
        ("Error codes", "Error E4 means the refrigerant pressure is low: switch the unit off and call the installer."),
        ("Filters", "Rinse the indoor air filter under lukewarm water every four weeks and let it dry in the shade."),
    ],
    "sourdough.md": [
        ("Starter", "Feed the starter with equal weights of rye flour and water each morning; it is ready when it "
         "doubles in six hours."),
        ("Autolyse", "Mix flour and water and leave them for an hour before adding salt and starter, so the "
         "gluten develops on its own."),
        ("Shaping", "Fold the dough over itself four times at thirty-minute intervals, then shape it into a tight "
         "ball on an unfloured counter."),
        ("Baking", "Bake in a covered cast-iron pot at 250 degrees for twenty minutes, then uncover and lower the "
         "oven to 220 degrees for twenty-five more."),
        ("Storage", "Keep the loaf cut side down on a wooden board; it stays fresh for three days without a bag."),
    ],
    "bicycle.md": [
        ("Tyres", "Road tyres are inflated to between 80 and 100 psi; wider touring tyres need only 50 to 70 psi."),
        ("Chain", "Clean the chain with a degreaser every 300 kilometres and apply one drop of oil to each roller."),
        ("Brakes", "Replace rim brake pads when the grooves on their surface are no longer visible."),
        ("Gears", "If the chain skips on the smallest sprocket, turn the barrel adjuster a quarter turn "
         "anticlockwise."),
        ("Saddle", "At the right saddle height the knee is slightly bent when the pedal is at its lowest point."),
    ],
    "city_council.md": [
        ("Waste", "Household glass is collected on the first Tuesday of every month; bottles go out without lids."),
        ("Parking", "Residents apply for a parking permit online and pay 45 euros a year per car."),
        ("Libraries", "The central library opens until nine in the evening on Thursdays and is closed on Sundays."),
        ("Swimming", "The outdoor pool opens on the first of June and children under six swim free."),
        ("Trees", "Cutting down a tree wider than thirty centimetres on private land requires a permit from the "
         "parks department."),
    ],
    "python_tips.md": [
        ("Virtual environments", "Create an isolated environment with python -m venv .venv and activate it before "
         "installing packages."),
        ("Dataclasses", "Adding frozen=True to a dataclass makes its instances immutable and hashable."),
        ("Profiling", "Run python -m cProfile -s cumtime script.py to see which functions take the most time."),
        ("Typing", "Use the X | None syntax instead of Optional[X] in Python 3.10 and later."),
        ("Testing", "Parametrize a pytest test with @pytest.mark.parametrize to run it against several inputs."),
    ],
    "first_aid.md": [
        ("Burns", "Cool a burn under cold running water for twenty minutes; do not use ice or butter."),
        ("Nosebleeds", "Lean forward, not back, and pinch the soft part of the nose for ten minutes."),
        ("Bee stings", "Scrape the sting out sideways with a fingernail or a card rather than squeezing it."),
        ("Sprains", "Rest the joint, apply an ice pack wrapped in cloth, and keep the limb raised."),
        ("Choking", "Give up to five sharp blows between the shoulder blades with the heel of your hand."),
    ],
}

# Written for the corpus, in other words than it uses: (question, file, heading).
QUESTIONS = [
    ("How many years of guarantee does the heat pump have?", "heat_pump_manual.pdf", "Warranty"),
    ("Why is there vapour coming out of my outdoor unit in winter?", "heat_pump_manual.pdf", "Defrost"),
    ("The machine makes a buzzing noise when it switches on, is that a problem?", "heat_pump_manual.pdf", "Noise"),
    ("What does the E4 code on the display mean?", "heat_pump_manual.pdf", "Error codes"),
    ("How often should I wash the filter?", "heat_pump_manual.pdf", "Filters"),
    ("How do I keep my levain alive?", "sourdough.md", "Starter"),
    ("Should I rest the flour and water before adding salt?", "sourdough.md", "Autolyse"),
    ("How do I form the loaf before proofing?", "sourdough.md", "Shaping"),
    ("What oven temperature and time for the bread?", "sourdough.md", "Baking"),
    ("How long does the bread keep and how should I store it?", "sourdough.md", "Storage"),
    ("What pressure should I pump my road bike tyres to?", "bicycle.md", "Tyres"),
    ("How do I lubricate the bike chain?", "bicycle.md", "Chain"),
    ("When are brake pads worn out?", "bicycle.md", "Brakes"),
    ("My chain keeps jumping on the small cog, what do I adjust?", "bicycle.md", "Gears"),
    ("How high should the seat be?", "bicycle.md", "Saddle"),
    ("When do they pick up glass bottles?", "city_council.md", "Waste"),
    ("How much does a residents' parking permit cost?", "city_council.md", "Parking"),
    ("Is the library open late on any day?", "city_council.md", "Libraries"),
    ("When does the open-air swimming pool open for the season?", "city_council.md", "Swimming"),
    ("Do I need permission to fell a big tree in my garden?", "city_council.md", "Trees"),
    ("How do I set up an isolated environment for a project's packages?", "python_tips.md", "Virtual environments"),
    ("How do I make a dataclass immutable?", "python_tips.md", "Dataclasses"),
    ("How can I find out which functions are slow?", "python_tips.md", "Profiling"),
    ("What is the modern way to write an optional type hint?", "python_tips.md", "Typing"),
    ("How do I run one test with many different inputs?", "python_tips.md", "Testing"),
    ("What is the right way to treat a scald?", "first_aid.md", "Burns"),
    ("What should I do when my nose is bleeding?", "first_aid.md", "Nosebleeds"),
    ("How do I remove a bee sting?", "first_aid.md", "Bee stings"),
    ("I twisted my ankle, what should I do?", "first_aid.md", "Sprains"),
    ("Someone is choking on food, how do I help?", "first_aid.md", "Choking"),
]

FILLER_WORDS = (
    "archive council record meeting minutes budget road school harbour market festival museum river bridge "
    "railway station tower garden hospital committee report survey census parish chapel mill factory canal "
    "warehouse theatre orchestra season league harvest weather storm flood drought map boundary district"
).split()


def write_corpus(root: Path) -> None:
    from fpdf import FPDF

    for name, sections in CORPUS.items():
        if name.endswith(".pdf"):
            pdf = FPDF()
            for heading, text in sections:
                pdf.add_page()
                pdf.set_font("Helvetica", "B", 16)
                pdf.cell(0, 10, heading, new_x="LMARGIN", new_y="NEXT")
                pdf.set_font("Helvetica", size=12)
                pdf.multi_cell(0, 7, text)
            pdf.output(str(root / name))
        else:
            title = name.removesuffix(".md").replace("_", " ").title()
            body = "\n\n".join(f"## {h}\n\n{t}" for h, t in sections)
            (root / name).write_text(f"# {title}\n\n{body}\n")


def write_pdf_pages(path: Path, pages: int, rng: random.Random) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for p in range(pages):
        pdf.add_page()
        paragraphs = [_filler_sentences(rng, 6) for _ in range(4)]
        pdf.multi_cell(0, 6, f"Page {p + 1}\n\n" + "\n\n".join(paragraphs))
    pdf.output(str(path))


def _filler_sentences(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        words = rng.sample(FILLER_WORDS, 9)
        out.append(f"The {words[0]} of the {words[1]} was recorded with the {words[2]} near the {words[3]} "
                   f"in {rng.randint(1820, 1990)}, after the {words[4]} and the {words[5]} {words[6]}.")
    return " ".join(out)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filler", type=int, default=10_000, help="filler chunks in the latency collection")
    parser.add_argument("--pages", type=int, default=200, help="PDF pages for the indexing throughput")
    parser.add_argument("--embed-filler", action="store_true", help="embed the filler with the model too")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the questions for latency")
    parser.add_argument("--threads", type=int, default=1, help="threads for the embedding model")
    args = parser.parse_args()

    import numpy as np

    from engine.documents import BackendEmbedder, DocumentIndex, Indexer
    from engine.documents.chunking import chunk_sections
    from engine.documents.search import keyword_search, search, vector_search
    from engine.documents.types import Section
    from engine.documents.vectors import VectorCache

    rng = random.Random(20)
    work = Path(tempfile.mkdtemp(prefix="docs-bench-"))
    index = DocumentIndex(work / "documents.db")
    embedder = BackendEmbedder.open(n_threads=args.threads)

    # 1. indexing throughput: parsing + chunking + FTS rows, then embeddings
    pdfs = work / "pdfs"
    pdfs.mkdir()
    per_file = 50
    for i in range(max(1, args.pages // per_file)):
        write_pdf_pages(pdfs / f"report_{i}.pdf", per_file, rng)
    index.create("throughput", "all-MiniLM-L6-v2")
    index.add_sources("throughput", [pdfs])
    t0 = time.perf_counter()
    progress = Indexer(index, None).run("throughput")
    parse_s = time.perf_counter() - t0
    pages = (args.pages // per_file) * per_file
    print(f"indexing: {pages} PDF pages, {progress.chunks} chunks in {parse_s:.2f} s: "
          f"{pages / parse_s:.1f} pages/s, {progress.chunks / parse_s:.1f} chunks/s (parse, chunk, keyword index)")

    corpus = work / "corpus"
    corpus.mkdir()
    write_corpus(corpus)
    index.create("bench", "all-MiniLM-L6-v2")
    index.add_sources("bench", [corpus])
    progress = Indexer(index, embedder).run("bench")
    print(f"embedding: {progress.embedded} chunks at {progress.embeddings_per_s:.1f} embeddings/s "
          f"(all-MiniLM-L6-v2 f16 on llama.cpp, {args.threads} thread(s))")

    # 2. the 10,000-chunk collection: the corpus plus filler
    coll = index.get("bench")
    filler_files = max(1, args.filler // 100)
    dim = coll.dim
    added = 0
    for f in range(filler_files):
        n = min(100, args.filler - added)
        if n <= 0:
            break
        sections = [Section(_filler_sentences(rng, 3), heading=f"Record {f}.{j}") for j in range(n)]
        chunks = chunk_sections(sections)
        path = str(work / f"filler_{f}.md")
        index.write_file(coll, path, mtime=0.0, size=0, sha256="-", kind="markdown", title=None, pages=0, chunks=chunks)
        added += len(chunks)
    pending = index.pending(coll, args.filler + 1000)
    if args.embed_filler:
        for i in range(0, len(pending), 16):
            batch = pending[i:i + 16]
            coll = index.write_vectors(coll, list(zip([r[0] for r in batch], embedder.embed([r[1] for r in batch]),
                                                      strict=True)))
    else:
        vecs = np.random.default_rng(20).standard_normal((len(pending), dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        coll = index.write_vectors(coll, [(r[0], v.tolist()) for r, v in zip(pending, vecs, strict=True)])
    total = index.info("bench").chunks
    index.warm_vectors(coll)  # as the document service does when an indexing run finishes
    scan_index = DocumentIndex(work / "documents.db", vectors=VectorCache(max_bytes=0))  # sqlite-vec for every query
    print(f"latency collection: {total} chunks ({added} filler, vectors "
          f"{'embedded' if args.embed_filler else 'random unit'})")

    def embed_query(q: str):
        return embedder.embed([q])[0]

    qvecs = {q: embed_query(q) for q, _, _ in QUESTIONS}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    timings: dict[str, list[float]] = {
        "keyword": [], "vector": [], "vector, scan": [], "query embedding": [], "hybrid": [], "hybrid, scan": [],
    }
    for _ in range(args.rounds):
        for q, _, _ in QUESTIONS:
            t = time.perf_counter()
            keyword_search(index, coll, q, 5)
            timings["keyword"].append(time.perf_counter() - t)
            t = time.perf_counter()
            vector_search(index, coll, qvecs[q], 5)
            timings["vector"].append(time.perf_counter() - t)
            t = time.perf_counter()
            vector_search(scan_index, coll, qvecs[q], 5)
            timings["vector, scan"].append(time.perf_counter() - t)
            t = time.perf_counter()
            embed_query(q)
            timings["query embedding"].append(time.perf_counter() - t)
            t = time.perf_counter()
            search(index, coll, q, k=5, embed_query=embed_query, mode="hybrid")
            timings["hybrid"].append(time.perf_counter() - t)
            t = time.perf_counter()
            search(scan_index, coll, q, k=5, embed_query=embed_query, mode="hybrid")
            timings["hybrid, scan"].append(time.perf_counter() - t)
    for name, values in timings.items():
        ms = [v * 1000 for v in values]
        print(f"search {name:>15}: p50 {statistics.median(ms):6.1f} ms   p95 {percentile(ms, 0.95):6.1f} ms")
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(load average {load_before:.1f} before the latency runs, {load_after:.1f} after, on {os.cpu_count()} cores)")
    for held, scan in (("vector", "vector, scan"), ("hybrid", "hybrid, scan")):
        ratio = statistics.median(timings[scan]) / statistics.median(timings[held])
        print(f"{held}: sqlite-vec's scan takes {ratio:.1f}x as long as the vectors held in memory (p50)")

    # 3. recall@5, keyword-only against hybrid, over the same collection
    def recall(mode: str) -> float:
        found = 0
        for q, file, heading in QUESTIONS:
            hits, _ = search(index, coll, q, k=5, embed_query=lambda text, q=q: qvecs[q], mode=mode)
            if any(Path(h.path).name == file and (h.heading == heading or _pdf_page_of(file, heading) == h.page)
                   for h in hits):
                found += 1
        return found / len(QUESTIONS)

    same = sum(
        [h.chunk_id for h in search(index, coll, q, k=5, embed_query=lambda text, q=q: qvecs[q], mode="hybrid")[0]]
        == [h.chunk_id for h in search(scan_index, coll, q, k=5, embed_query=lambda text, q=q: qvecs[q], mode="hybrid")[0]]
        for q, _, _ in QUESTIONS
    )
    print(f"hybrid top 5, vectors in memory and sqlite-vec's scan: the same for {same} of {len(QUESTIONS)} questions")
    kw, hy = recall("keyword"), recall("hybrid")
    print(f"recall@5 over {len(QUESTIONS)} questions: keyword {kw:.2f}, hybrid {hy:.2f} "
          f"({hy / kw if kw else float('inf'):.2f}x)")
    embedder.close()
    scan_index.close()
    index.close()
    return 0


def _pdf_page_of(file: str, heading: str) -> int | None:
    if not file.endswith(".pdf"):
        return None
    return 1 + [h for h, _ in CORPUS[file]].index(heading)


if __name__ == "__main__":
    sys.exit(main())
