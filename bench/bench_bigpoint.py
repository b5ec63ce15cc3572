"""A measured point at a million chunks and more, beside tantivy and SQLite FTS5 (issue 44).

Corpora, streamed straight out of Debian's source tarballs in ``/usr/src``
(no extraction), each file split on whitespace into the 180-word windows with
a 90-word stride of ``corpus.py`` (each window its own source), in tarball
order, cut at ``--limit`` windows:

- ``linux``: the ``.c``, ``.h``, ``.rst`` and ``.txt`` files of
  ``linux-source-6.1`` (``apt-get install linux-source-6.1``): 1,089,914
  windows in all (6.1.176-1), so ``--limit 2000000`` takes every one;
- ``debian-src``: every text file (no NUL byte) of ``linux-source-6.1``
  (1,200,494 windows), then ``gcc-12-source``, then ``glibc-source``: at
  least 2M windows (the way to the 2M point; not measured yet: a build of
  1M windows took 17 minutes on the shared machine).

The windows are written once, one per line, to ``WORK/CORPUS-LIMIT/``
(windows hold no newline), with 500 queries of 2-6 words drawn with
``random.Random(0)`` by ``corpus.queries`` (which picks windows by index:
the file is read at those offsets, nothing is held whole).

Each step runs in its own process, reading the windows file line by line:

- ``segments``: clanker_rag's index as 20 commits: a fresh build
  (``KnowledgeBase(chunk_size=None)``, ``add_texts``, ``save``) of every window
  but the last ``19 * --slice``, which is clanker_rag's build figure (wall, CPU
  with workers, peak resident), then 19 commits of ``--slice`` windows each
  (load, ``add_texts``, ``save(merge=False)``): 20 unmerged segments. The later
  segments are small (2,000 windows each by default: 3.5 % of the linux
  corpus, inside the share the merge policy leaves unmerged) because a load
  replays every segment after the first;
- ``merge``: a copy of that folder merged by ``clanker-rag optimize DIR``
  (wall): the merged index, with the same content;
- ``build``: tantivy (one indexing thread, ``en_stem``, text stored, merges
  waited for), FTS5 (``porter unicode61``, one transaction, then FTS5's
  ``optimize``), bm25s (numpy; it holds every token list and the texts in
  memory: 1.36 GB peak at 200k windows, 7.7 GB at 1.09M);
- ``query``: ``--rounds`` rounds of cold query runs, engines alternating
  (order rotated each round): load (timed), the 500 queries once each, top-10
  with texts, per-query latency (FTS5 stops after ``--fts5-budget`` seconds);
  ``/proc/self/status`` (VmRSS, RssFile, RssShmem) before the engine is
  imported, after load and after the queries; the load average at the start;
  a digest of every top 10, scores included (the merged and the segmented
  index must agree);
- ``commit``: a one-file commit (load, ``add_texts`` of one window-sized file,
  save) into a hard-linked copy of the merged index (so later query runs still
  read one segment), and one document committed to copies of tantivy's and
  FTS5's folders;
- ``fresh`` (not by default): one build of every window by clanker_rag.

    python bench/bench_bigpoint.py --corpus linux --limit 2000000
    python bench/bench_bigpoint.py --corpus linux --limit 200000 --engines clanker_rag,tantivy,fts5,bm25s

Writes ``bench/results/bigpoint-CORPUS-LIMIT.json`` (merged across
invocations, so ``--steps build`` and ``--steps segments,merge`` may run side
by side); keeps the folders in WORK (``--work``, default
``/work/tmp/bigpoint``) for later steps; ``--clean`` removes them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

N_QUERIES = 500
SEGMENTS = 20
SRC = Path("/usr/src")
CORPORA: dict[str, tuple[list[str], tuple[str, ...] | None]] = {
    # tarballs (globs under /usr/src) and the file suffixes kept (None: every text file)
    "linux": (["linux-source-6.1.tar.xz"], (".c", ".h", ".rst", ".txt")),
    "debian-src": (["linux-source-6.1.tar.xz", "gcc-12/gcc-*.tar.xz", "glibc/glibc-*.tar.xz"], None),
}
QUERY_ENGINES = ["clanker_rag", "clanker_rag-20seg", "tantivy", "fts5", "bm25s"]
ONE_FILE = "one-file-commit.txt"


# -- corpus ---------------------------------------------------------------------------------------
def tar_windows(tarballs: list[Path], suffixes: tuple[str, ...] | None) -> Iterator[str]:
    """The windows of the tarballs' files, streamed member by member (symlinks and binaries skipped)."""
    for tarball in tarballs:
        with tarfile.open(tarball, "r|*") as tf:
            for member in tf:
                if not member.isfile() or (suffixes is not None and not member.name.endswith(suffixes)):
                    continue
                fh = tf.extractfile(member)
                if fh is None:
                    continue
                raw = fh.read()
                if suffixes is None and b"\0" in raw:
                    continue
                yield from corpus.text_windows(raw.decode("utf-8", errors="replace"))


class Lines(Sequence[str]):
    """The windows file's lines by index, read at their offsets (for ``corpus.queries``)."""

    def __init__(self, path: Path, offsets: array) -> None:
        self.fh = path.open("rb")
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        start, end = self.offsets[i], self.offsets[i + 1]
        self.fh.seek(start)
        return self.fh.read(end - start - 1).decode("utf-8")


def prepare(name: str, limit: int, data: Path) -> dict[str, Any]:
    """The windows file, its line offsets, the queries and the one-file-commit text, once."""
    meta_file = data / "corpus.json"
    if meta_file.exists():
        meta: dict[str, Any] = json.loads(meta_file.read_text())
        return meta
    data.mkdir(parents=True, exist_ok=True)
    globs, suffixes = CORPORA[name]
    tarballs = []
    for pattern in globs:
        found = sorted(SRC.glob(pattern))
        if not found:
            raise SystemExit(f"{SRC / pattern} not found: apt-get install the Debian source package")
        tarballs += found
    t0 = time.perf_counter()
    offsets = array("q", [0])
    words = 0
    exhausted = True
    with (data / "windows.txt").open("wb") as out:
        for window in tar_windows(tarballs, suffixes):
            if len(offsets) > limit:
                exhausted = False
                break
            line = window.encode("utf-8") + b"\n"
            out.write(line)
            offsets.append(offsets[-1] + len(line))
            words += window.count(" ") + 1
    (data / "offsets.bin").write_bytes(offsets.tobytes())
    lines = Lines(data / "windows.txt", offsets)
    (data / "queries.json").write_text(json.dumps(corpus.queries(lines, N_QUERIES)))
    # One small file for the one-file commit: a window's words, the size of a short source file.
    (data / ONE_FILE).write_text(lines[len(lines) // 3])
    meta = {
        "corpus": name,
        "tarballs": [str(t) for t in tarballs],
        "windows": len(lines),
        "all_windows": exhausted,
        "words": words,
        "bytes": offsets[-1],
        "prepare_s": time.perf_counter() - t0,
    }
    meta_file.write_text(json.dumps(meta, indent=1))
    return meta


def read_offsets(data: Path) -> array:
    offsets = array("q")
    offsets.frombytes((data / "offsets.bin").read_bytes())
    return offsets


def stream(data: Path, start: int = 0, stop: int | None = None) -> Iterator[tuple[str, str]]:
    """``(window, its number)`` for windows ``start:stop``, read line by line."""
    offsets = read_offsets(data)
    stop = len(offsets) - 1 if stop is None else stop
    with (data / "windows.txt").open("rb") as fh:
        fh.seek(offsets[start])
        for i in range(start, stop):
            yield fh.readline()[:-1].decode("utf-8"), str(i)


# -- measures inside a child ----------------------------------------------------------------------
def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of this process, bytes."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) * 1024
    return out


def cpu_children() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def cpu_so_far() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def peak_mb() -> dict[str, float]:
    """Peak resident set of this process and of the largest child waited for (MB)."""
    return {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def fts5_connect(folder: str) -> Any:
    import sqlite3

    return sqlite3.connect(os.path.join(folder, "fts.db"))


def fts5_match(q: str) -> str:
    # Every word its own quoted string, OR'd: a bag-of-words query like the others' (FTS5's default is AND).
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in q.split())


def tantivy_schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
    return builder.build()


def step_build(engine: str, folder: str, data: Path) -> dict[str, Any]:
    t0, c0 = time.perf_counter(), cpu_so_far()
    added = t0
    if engine == "clanker_rag":
        from clanker_rag import KnowledgeBase

        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts(stream(data))
        added = time.perf_counter()
        kb.save(folder)
    elif engine == "tantivy":
        import tantivy

        index = tantivy.Index(tantivy_schema(), path=folder)
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for text, _ in stream(data):
            writer.add_document(tantivy.Document(body=text))
        added = time.perf_counter()
        writer.commit()
        writer.wait_merging_threads()
    elif engine == "fts5":
        con = fts5_connect(folder)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='porter unicode61')")
        with con:
            con.executemany("INSERT INTO docs(rowid, body) VALUES (?, ?)", ((int(i), t) for t, i in stream(data)))
        added = time.perf_counter()
        with con:
            con.execute("INSERT INTO docs(docs) VALUES('optimize')")
        con.close()
    elif engine == "bm25s":
        import bm25s
        import Stemmer

        texts = [t for t, _ in stream(data)]
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
        retriever = bm25s.BM25(backend="numpy")
        retriever.index(tokens, show_progress=False)
        added = time.perf_counter()
        retriever.save(folder, corpus=texts)
    else:
        raise SystemExit(f"unknown engine {engine}")
    end = time.perf_counter()
    return {"build_s": end - t0, "add_s": added - t0, "build_cpu_s": cpu_so_far() - c0, **peak_mb()}


def step_commit(folder: str, data: Path, part: int, slice_size: int) -> dict[str, Any]:
    """Commit ``part`` of SEGMENTS: the first a fresh save of every window but the last
    ``(SEGMENTS - 1) * slice_size``, then each a load, ``add_texts`` of the next ``slice_size``
    windows and ``save(merge=False)``."""
    from clanker_rag import KnowledgeBase

    n = len(read_offsets(data)) - 1
    first = n - (SEGMENTS - 1) * slice_size
    start, stop = (0, first) if part == 0 else (first + (part - 1) * slice_size, first + part * slice_size)
    t0, c0 = time.perf_counter(), cpu_so_far()
    if part == 0:
        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts(stream(data, start, stop))
        added = time.perf_counter()
        kb.save(folder)
    else:
        kb = KnowledgeBase.load(folder)
        kb.add_texts(stream(data, start, stop))
        added = time.perf_counter()
        kb.save(merge=False)
    end = time.perf_counter()
    return {
        "s": end - t0,
        "add_s": added - t0,
        "cpu_s": cpu_so_far() - c0,
        "windows": stop - start,
        "segments": kb.segments,
        **peak_mb(),
    }


def step_one_file(engine: str, folder: str, data: Path) -> dict[str, Any]:
    text = (data / ONE_FILE).read_text()
    t0 = time.perf_counter()
    if engine.startswith("clanker_rag"):
        from clanker_rag import KnowledgeBase

        kb = KnowledgeBase.load(folder)
        loaded = time.perf_counter()
        kb.add_texts([(text, "one-file-commit")])
        kb.save()
    elif engine == "tantivy":
        import tantivy

        index = tantivy.Index.open(folder)
        loaded = time.perf_counter()
        writer = index.writer(heap_size=50_000_000, num_threads=1)
        writer.add_document(tantivy.Document(body=text))
        writer.commit()
        writer.wait_merging_threads()
    elif engine == "fts5":
        con = fts5_connect(folder)
        loaded = time.perf_counter()
        with con:
            con.execute("INSERT INTO docs(body) VALUES (?)", (text,))
        con.close()
    else:
        raise SystemExit(f"no one-file commit for {engine}")
    end = time.perf_counter()
    return {"commit_s": end - t0, "after_load_s": end - loaded}


def step_query(engine: str, folder: str, data: Path, budget: float) -> dict[str, Any]:
    qs = json.loads((data / "queries.json").read_text())
    load_avg = os.getloadavg()[0]
    base = status()
    t0 = time.perf_counter()
    if engine.startswith("clanker_rag"):
        from clanker_rag import KnowledgeBase

        kb = KnowledgeBase.load(folder)

        def search(q: str) -> list[tuple[str, float, str]]:
            return [(h.source, h.score, h.text) for h in kb.search(q, k=10)]

    elif engine == "tantivy":
        import tantivy

        index = tantivy.Index.open(folder)
        index.reload()
        searcher = index.searcher()

        def search(q: str) -> list[tuple[str, float, str]]:
            query = index.parse_query(q, ["body"])
            hits = searcher.search(query, 10).hits
            return [("", score, searcher.doc(addr)["body"][0]) for score, addr in hits]

    elif engine == "fts5":
        con = fts5_connect(folder)
        sql = "SELECT rowid, rank, body FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT 10"

        def search(q: str) -> list[tuple[str, float, str]]:
            return [(str(r), s, b) for r, s, b in con.execute(sql, (fts5_match(q),))]

    elif engine == "bm25s":
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25.load(folder, load_corpus=True, show_progress=False)

        def search(q: str) -> list[tuple[str, float, str]]:
            tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
            if not tokens.vocab:
                return []
            docs, scores = retriever.retrieve(tokens, k=10, show_progress=False, n_threads=0)
            return [("", float(s), d["text"] if isinstance(d, dict) else d) for d, s in zip(docs[0], scores[0])]

    else:
        raise SystemExit(f"unknown engine {engine}")
    load = time.perf_counter() - t0
    after_load = status()
    latencies = []
    digest = hashlib.sha256()
    hits = 0
    c1, t1 = time.process_time(), time.perf_counter()
    for q in qs:
        s = time.perf_counter()
        top = search(q)
        latencies.append(time.perf_counter() - s)
        hits += len(top)
        digest.update(json.dumps([(src, round(score, 4)) for src, score, _ in top]).encode())
        if time.perf_counter() - t1 > budget:
            break
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    after = status()
    latencies.sort()
    mb = 1 / 2**20

    def grown(when: dict[str, int], key: str) -> float:
        return (when[key] - base[key]) * mb

    return {
        "load_avg": load_avg,
        "load_s": load,
        "queries": len(latencies),
        "qps": len(latencies) / wall,
        "qps_cpu": len(latencies) / cpu if cpu else 0.0,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "rss_after_load_mb": grown(after_load, "VmRSS"),
        "file_after_load_mb": grown(after_load, "RssFile") + grown(after_load, "RssShmem"),
        "rss_mb": grown(after, "VmRSS"),
        "file_mb": grown(after, "RssFile") + grown(after, "RssShmem"),
        "anon_mb": grown(after, "RssAnon"),
        "rss_total_mb": after["VmRSS"] * mb,
        "hits": hits,
        "top_digest": digest.hexdigest()[:16],
    }


# -- the parent -----------------------------------------------------------------------------------
def run_child(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def rounded(d: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in d.items()}


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="debian-src")
    parser.add_argument("--limit", type=int, default=2_000_000)
    parser.add_argument("--engines", default="clanker_rag,tantivy,fts5", help="of clanker_rag,tantivy,fts5,bm25s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slice", type=int, default=2000, help="windows each of the 19 later commits adds")
    parser.add_argument("--steps", default="segments,merge,build,query,commit", help="and fresh: one build of all")
    parser.add_argument("--fts5-budget", type=float, default=120.0, help="seconds of FTS5 queries per run")
    parser.add_argument("--work", default="/work/tmp/bigpoint")
    parser.add_argument("--clean", action="store_true", help="remove the work folder at the end")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "build":
            out = step_build(rest[0], rest[1], Path(rest[2]))
        elif kind == "commit":
            out = step_commit(rest[0], Path(rest[1]), int(rest[2]), int(rest[3]))
        elif kind == "one-file":
            out = step_one_file(rest[0], rest[1], Path(rest[2]))
        else:
            out = step_query(rest[0], rest[1], Path(rest[2]), float(rest[3]))
        print(json.dumps(out))
        return

    data = Path(args.work) / f"{args.corpus}-{args.limit}"
    meta = prepare(args.corpus, args.limit, data)
    print(
        f"corpus {args.corpus}: {meta['windows']:,} windows ({meta['words']:,} words,"
        f" {meta['bytes'] / 2**30:.2f} GiB; all of the corpus: {meta['all_windows']}); load {load_avg()}",
        flush=True,
    )
    engines = args.engines.split(",")
    steps = args.steps.split(",")
    results_file = HERE / "results" / f"bigpoint-{args.corpus}-{args.limit}.json"
    results: dict[str, Any] = json.loads(results_file.read_text()) if results_file.exists() else {}
    results["corpus"] = meta

    def folder(engine: str) -> Path:
        return data / engine

    def save_results() -> None:
        # Two invocations may run at once (e.g. --steps build beside --steps segments): merge into the file.
        results_file.parent.mkdir(exist_ok=True)
        on_disk = json.loads(results_file.read_text()) if results_file.exists() else {}
        for key, value in results.items():
            if isinstance(value, dict) and isinstance(on_disk.get(key), dict) and key != "corpus":
                on_disk[key].update(value)
            else:
                on_disk[key] = value
        tmp = results_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(on_disk, indent=1) + "\n")
        os.replace(tmp, results_file)

    if "segments" in steps and "clanker_rag" in engines:
        seg = folder("clanker_rag-20seg")
        shutil.rmtree(seg, ignore_errors=True)
        commits = []
        before = load_avg()
        for part in range(SEGMENTS):
            commits.append(run_child("commit", str(seg), str(data), str(part), str(args.slice)))
            print(f"commit {part}", json.dumps(rounded(commits[-1])), f"load {load_avg()}", flush=True)
        results.setdefault("build", {})["clanker_rag"] = {
            "build_s": commits[0]["s"],
            "add_s": commits[0]["add_s"],
            "build_cpu_s": commits[0]["cpu_s"],
            "windows": commits[0]["windows"],
            "peak_rss_mb": commits[0]["peak_rss_mb"],
            "peak_child_rss_mb": commits[0]["peak_child_rss_mb"],
            "load_before": before,
        }
        results["segments"] = {
            "commits_s": sum(c["s"] for c in commits),
            "commits_cpu_s": sum(c["cpu_s"] for c in commits),
            "last_commit_s": commits[-1]["s"],
            "each_s": [round(c["s"], 2) for c in commits],
            "each_cpu_s": [round(c["cpu_s"], 2) for c in commits],
            "segments": commits[-1]["segments"],
            "peak_rss_mb": max(c["peak_rss_mb"] for c in commits),
            "folder_mb": folder_mb(seg),
            "load_before": before,
            "load_after": load_avg(),
        }
        print("segments", json.dumps(results["segments"]), flush=True)
        save_results()
    if "merge" in steps and "clanker_rag" in engines:
        # The merged index is the segmented one after `clanker-rag optimize DIR` (timed), on a copy.
        shutil.rmtree(folder("clanker_rag"), ignore_errors=True)
        shutil.copytree(folder("clanker_rag-20seg"), folder("clanker_rag"), ignore=shutil.ignore_patterns(".lock"))
        before = load_avg()
        t0, c0 = time.perf_counter(), cpu_children()
        subprocess.run([sys.executable, "-m", "clanker_rag", "optimize", str(folder("clanker_rag"))], check=True)
        results["optimize"] = {
            "s": time.perf_counter() - t0,
            "cpu_s": cpu_children() - c0,
            "load_before": before,
            "load_after": load_avg(),
            "folder_mb": folder_mb(folder("clanker_rag")),
        }
        print("optimize", json.dumps(rounded(results["optimize"])), flush=True)
        save_results()
    if "build" in steps:
        for engine in [e for e in engines if e != "clanker_rag"]:
            shutil.rmtree(folder(engine), ignore_errors=True)
            folder(engine).mkdir()
            before = load_avg()
            r = run_child("build", engine, str(folder(engine)), str(data))
            r.update(load_before=before, load_after=load_avg(), folder_mb=folder_mb(folder(engine)))
            results.setdefault("build", {})[engine] = r
            print("build", engine, json.dumps(rounded(r)), flush=True)
            save_results()
    if "query" in steps:
        queried = [e for e in QUERY_ENGINES if e in engines or (e == "clanker_rag-20seg" and "clanker_rag" in engines)]
        queried = [e for e in queried if folder(e).is_dir()]  # e.g. a point built without the segments step
        runs: dict[str, list[dict[str, Any]]] = {e: [] for e in queried}
        for r in range(args.rounds):
            order = queried[r % len(queried) :] + queried[: r % len(queried)]
            for engine in order:
                budget = args.fts5_budget if engine == "fts5" else 1e9
                out = run_child("query", engine, str(folder(engine)), str(data), str(budget))
                runs[engine].append(out)
                print(
                    f"round {r + 1} {engine}: " + json.dumps(rounded(out)),
                    flush=True,
                )
        results["query_runs"] = runs
        results["query"] = {
            e: {k: statistics.median(run[k] for run in rs) for k in rs[0] if k != "top_digest"}
            for e, rs in runs.items()
        }
        if "clanker_rag-20seg" in runs:
            results["segments_equal_merged"] = [x["top_digest"] for x in runs["clanker_rag"]] == [
                x["top_digest"] for x in runs["clanker_rag-20seg"]
            ]
        save_results()
    if "commit" in steps:
        for engine in [e for e in ("clanker_rag", "tantivy", "fts5") if e in engines]:
            # Into a copy whose files are hard links of the built ones (no engine here rewrites a
            # file in place: each writes new files or, for SQLite, is copied for real), so the
            # folders that later query runs read stay as built.
            work = folder(engine).with_name(folder(engine).name + "-commit")
            shutil.rmtree(work, ignore_errors=True)
            linked = engine != "fts5"
            shutil.copytree(folder(engine), work, copy_function=os.link if linked else shutil.copy2)
            before = load_avg()
            try:
                r = run_child("one-file", engine, str(work), str(data))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            r["load_avg"] = before
            results.setdefault("one_file_commit", {})[engine] = r
            print("one-file commit", engine, json.dumps(r), flush=True)
        save_results()
    if "fresh" in steps and "clanker_rag" in engines:
        # One fresh build of every window (add_texts, save), for the build time and its peak memory.
        fresh_folder = folder("clanker_rag-fresh")
        shutil.rmtree(fresh_folder, ignore_errors=True)
        fresh_folder.mkdir()
        before = load_avg()
        r = run_child("build", "clanker_rag", str(fresh_folder), str(data))
        r.update(load_before=before, load_after=load_avg(), folder_mb=folder_mb(fresh_folder))
        results.setdefault("build", {})["clanker_rag"] = r
        print("fresh build clanker_rag", json.dumps(rounded(r)), flush=True)
        save_results()
    summary(results)
    if args.clean:
        shutil.rmtree(data, ignore_errors=True)


def summary(results: dict[str, Any]) -> None:
    build, query = results.get("build", {}), results.get("query", {})
    print(f"\n{results['corpus']['windows']:,} windows")
    heads = ("build s", "cpu s", "MB", "load s", "q/s", "p50 ms", "p99 ms", "RSS MB", "file MB")
    print(f"{'engine':18} " + " ".join(f"{h:>8}" for h in heads))
    for engine in QUERY_ENGINES:
        b = build.get(engine, {})
        q = query.get(engine, {})
        if not b and not q:
            continue
        print(
            f"{engine:18} {b.get('build_s', 0):8.1f} {b.get('build_cpu_s', 0):8.1f} {b.get('folder_mb', 0):8.0f}"
            f" {q.get('load_s', 0):8.3f} {q.get('qps', 0):8.1f} {q.get('p50_ms', 0):8.1f} {q.get('p99_ms', 0):8.1f}"
            f" {q.get('rss_mb', 0):8.0f} {q.get('file_mb', 0):8.0f}"
        )


if __name__ == "__main__":
    main()
