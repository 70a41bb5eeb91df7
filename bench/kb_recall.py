#!/usr/bin/env python3
"""Recall of planted passages in a knowledge base built from the shared corpus (docs/knowledge-base.md).

Writes each passage of bench/kb_recall/planted.jsonl into its own file, adds the corpus
(/work/shared/data/corpus/*.txt by default) and the planted files to a fresh base with
`edgegemma kb add` (-m MODEL: with vectors; without: BM25 only), runs `kb search --json -k 10` for
each planted query and reports recall@1/@5/@10, overall and by query kind ("keyword": the query
shares rare words with its passage; "paraphrase": it shares almost none).

  bench/kb_recall.py [--cli build/edgegemma] [-m MODEL] [--corpus DIR] [--keep DIR]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--cli", default=os.path.join(here, "..", "build", "edgegemma"))
ap.add_argument("-m", "--model", default="")
ap.add_argument("--corpus", default=os.environ.get("EDGEGEMMA_SHARED_DIR", "/work/shared") + "/data/corpus")
ap.add_argument("--keep", default="", help="build the base in this folder and keep it")
a = ap.parse_args()

work = a.keep or tempfile.mkdtemp(prefix="kb_recall.")
os.makedirs(os.path.join(work, "planted"), exist_ok=True)
db = os.path.join(work, "recall.db")
if os.path.exists(db):
    os.remove(db)
planted = [json.loads(l) for l in open(os.path.join(here, "kb_recall", "planted.jsonl")) if l.strip()]
files = []
for p in planted:
    f = os.path.join(work, "planted", p["id"] + ".txt")
    open(f, "w").write(p["passage"] + "\n")
    files.append(f)
corpus = sorted(os.path.join(a.corpus, n) for n in os.listdir(a.corpus) if n.endswith(".txt"))
model = ["-m", a.model] if a.model else []
t0 = time.time()
subprocess.run([a.cli, "kb", "add", db] + corpus + files + model, check=True, stdout=subprocess.DEVNULL)
t_add = time.time() - t0
info = json.loads(subprocess.run([a.cli, "kb", "info", db, "--json"], check=True, capture_output=True, text=True).stdout)

ranks = {}
t0 = time.time()
for p in planted:
    out = subprocess.run([a.cli, "kb", "search", db, p["query"], "-k", "10", "--json"] + model,
                         check=True, capture_output=True, text=True).stdout
    hits = json.loads(out)
    want = os.path.join(work, "planted", p["id"] + ".txt")
    rank = next((i + 1 for i, h in enumerate(hits) if os.path.realpath(h["source"]) == os.path.realpath(want)), 0)
    ranks[p["id"]] = rank
t_search = (time.time() - t0) / len(planted)

def recall(kind, k):
    sel = [p for p in planted if kind in ("all", p["kind"])]
    return sum(1 for p in sel if 0 < ranks[p["id"]] <= k) / len(sel), len(sel)

print(f"base: {info['chunks']} chunks from {info['files']} files, "
      f"{'vectors by ' + info['embedding_model'] if info['embedding_model'] else 'BM25 only'}; "
      f"add {t_add:.1f} s, {t_search * 1000:.0f} ms per search (CLI process included)")
for kind in ("all", "keyword", "paraphrase"):
    r1, n = recall(kind, 1)
    print(f"{kind:>10} ({n:2d} queries): recall@1 {r1:.2f}  @5 {recall(kind, 5)[0]:.2f}  @10 {recall(kind, 10)[0]:.2f}")
missed = [p["id"] + f"(rank {ranks[p['id']] or '>10'})" for p in planted if ranks[p["id"]] != 1]
print("not first:", ", ".join(missed) if missed else "none")
if not a.keep:
    shutil.rmtree(work)
