"""W9 on LangChain: BM25 (rank_bm25) and an in-memory vector store, fused
by EnsembleRetriever (weighted reciprocal rank fusion), over the corpus
`w9_corpus.py` wrote. Embeddings are the corpus's precomputed vectors,
looked up, so neither side's time includes computing them.

Prints one JSON line: index build times (each iteration builds both
retrievers from the documents), the queries' latencies (every query of
the last iteration), and recall@5 (the labelled source among the first
five results).

    python3 bench/peers/langchain_w9_retrieval.py DIR [--iters 3]
"""

import argparse
import json
import re
import struct
import time
from pathlib import Path

from langchain_classic.retrievers import EnsembleRetriever
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

K = 5


def vectors(path, dim):
    data = Path(path).read_bytes()
    size = 4 * dim
    return [list(struct.unpack(f"<{dim}f", data[i:i + size])) for i in range(0, len(data), size)]


class Precomputed(Embeddings):
    """The corpus's vectors, by text."""

    def __init__(self, table):
        self.table = table

    def embed_documents(self, texts):
        return [self.table[t] for t in texts]

    def embed_query(self, text):
        return self.table[text]


def words(text):
    # The same tokens as Weft's index sees: lower-cased runs of letters.
    return re.findall(r"\w+", text.lower())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--iters", type=int, default=3)
    a = p.parse_args()
    d = Path(a.dir)
    labelled = json.loads((d / "queries.json").read_text())
    dim, queries = labelled["dim"], labelled["queries"]
    records = [json.loads(line) for line in (d / "corpus.jsonl").read_text().splitlines()]
    docs = [Document(page_content=r["text"], metadata={"source": r["source"]}) for r in records]
    table = dict(zip((r["text"] for r in records), vectors(d / "vectors.f32", dim)))
    table.update(zip((q["query"] for q in queries), vectors(d / "query_vectors.f32", dim)))
    embeddings = Precomputed(table)
    builds, latencies, recall = [], [], None
    for _ in range(a.iters + 1):
        t0 = time.perf_counter()
        bm25 = BM25Retriever.from_documents(docs, k=K, preprocess_func=words)
        store = InMemoryVectorStore(embedding=embeddings)
        store.add_documents(docs)
        ensemble = EnsembleRetriever(
            retrievers=[bm25, store.as_retriever(search_kwargs={"k": K})], weights=[0.5, 0.5])
        builds.append(time.perf_counter() - t0)
        latencies, found = [], 0
        for q in queries:
            t0 = time.perf_counter()
            results = ensemble.invoke(q["query"])
            latencies.append(time.perf_counter() - t0)
            found += q["source"] in [r.metadata["source"] for r in results[:K]]
        recall = found / len(queries)
    print(json.dumps({
        "engine": "langchain",
        "workload": "w9",
        "docs": len(docs),
        "build_s": builds[1:],
        "query_s": latencies,
        "recall_at_5": recall,
    }))


main()
