"""Building the knowledge pack's dense index (its ~10k Wikipedia leads): wall time, CPU time and peak RSS, against the
first-run targets (90 s, 1.5 GB) and the figure measured before (about 8 minutes at 4.4 GB RSS on this project's
2-core machine, issue 38), plus whether the index still retrieves the same passages.

Each build runs in a fresh interpreter (``python -c``) into an empty temporary index folder, the way ``scripts/setup``
pays it (``Toolbox(settings).dense``: embedder load included); its peak RSS is that process's ``ru_maxrss``.

    python benchmarks/bench_leads_index.py [--n 0] [--float] [--baseline-commit 68915a3] [--compare 200]

- the default build: passages embedded as ``models.passage_embedder`` says (``auto``: the packaged MiniLM's int8
  copy), queries with the float MiniLM;
- ``--float``: also the build with float passages (``models.passage_embedder = ""``), the embedder before this change;
- ``--baseline-commit C``: also the build of commit C's own code (a temporary git worktree, same venv and pack; its
  ONNX export goes to a temporary cache folder so this machine's shared export is left alone);
- ``--n N``: N passages drawn (seeded) from the pack instead of all of them (a quick look; ratios to the targets are
  printed for the whole pack only);
- ``--compare Q``: the top-10 passages of the float and the default index for Q CompMix test questions: the share of
  each question's float top-k found in the default top-k, and of top-1 equal (needs ``--float``).

Prints one line per build with its ratios; writes benchmarks/results/leads_index.md.  The load average before and
after is printed too: the machine is shared, and wall time on a loaded machine says more about the load than the code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S, TARGET_MB = 90.0, 1536.0
BEFORE_S, BEFORE_MB = 480.0, 4.4 * 1024  # issue 38: about 8 minutes at 4.4 GB RSS for 10,220 passages

CHILD = r"""
import json, random, resource, sys, time
from pathlib import Path
args = json.loads(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
from hqa.config import load_settings
from hqa.data.jsonl import read_jsonl
from hqa.retrievers.dense import DenseRetriever
settings = load_settings()
passages = read_jsonl(settings.pack_dir / "passages.jsonl")
if args["n"]:
    random.Random(0).shuffle(passages)
    passages = passages[:args["n"]]
kw = {}
if args["passage_embedder"] is not None:  # a baseline commit's DenseRetriever does not know the argument
    kw["passage_embedder"] = args["passage_embedder"] or None
else:
    from hqa.retrievers import dense
    if hasattr(dense, "passage_embedder_for"):
        kw["passage_embedder"] = dense.passage_embedder_for(None, settings.models.passage_embedder)
r = DenseRetriever(passages, index_dir=args["index_dir"], **kw)
print(json.dumps({"n": len(passages), "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "passages": getattr(r, "passage_key", r.embedder_key), "loaded": r.loaded_from_disk}))
"""


def build(label: str, tree: Path, index_dir: Path, n: int, passage_embedder: str | None,
          cache_dir: Path | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), HQA_PATHS__ARTIFACTS=str(REPO / "artifacts"))
    if cache_dir is not None:
        env["HQA_CACHE_DIR"] = str(cache_dir)
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps({"n": n, "index_dir": str(index_dir),
                                                                     "passage_embedder": passage_embedder})],
                          cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{label}: build failed\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(label=label, load_before=load, load_after=os.getloadavg()[0])
    return out


def compare(float_dir: Path, new_dir: Path, questions: int) -> dict:
    """Top-k agreement of the float and the default index on CompMix test questions (both loaded from disk)."""
    sys.path.insert(0, str(REPO))
    from hqa.config import load_settings
    from hqa.data.datasets import load_dataset
    from hqa.data.jsonl import read_jsonl
    from hqa.retrievers.dense import DenseRetriever, passage_embedder_for

    settings = load_settings()
    passages = read_jsonl(settings.pack_dir / "passages.jsonl")
    old = DenseRetriever(passages, index_dir=float_dir)
    new = DenseRetriever(passages, index_dir=new_dir,
                         passage_embedder=passage_embedder_for(None, settings.models.passage_embedder))
    assert old.loaded_from_disk and new.loaded_from_disk
    qs = [r.question for r in load_dataset("compmix/test")][:questions]
    a, b = old.search_many(qs, k=10), new.search_many(qs, k=10)
    out = {"questions": len(qs)}
    for k in (1, 5, 10):
        out[f"overlap@{k}"] = sum(len({e.meta["id"] for e in x[:k]} & {e.meta["id"] for e in y[:k]}) / k
                                  for x, y in zip(a, b)) / max(len(qs), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=0, help="passages drawn from the pack (0 = all)")
    ap.add_argument("--float", action="store_true", help="also build with float passages (the embedder before)")
    ap.add_argument("--baseline-commit", help="also build with this commit's code")
    ap.add_argument("--compare", type=int, default=0, help="questions for the top-k agreement (needs --float)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hqa-leads-index-"))
    rows = []
    try:
        if args.baseline_commit:
            tree = work / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.baseline_commit], cwd=REPO,
                           check=True, capture_output=True)
            try:
                env = dict(os.environ, PYTHONPATH=str(tree), HQA_CACHE_DIR=str(work / "cache-baseline"))
                subprocess.run([sys.executable, "-m", "hqa.retrievers.embedding.onnx_minilm"], cwd=tree, env=env, check=True,
                               capture_output=True)  # its export made before the clock starts
                rows.append(build(f"commit {args.baseline_commit}", tree, work / "idx-baseline", args.n, None,
                                  cache_dir=work / "cache-baseline"))
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
        if args.float:
            rows.append(build("float passages (passage_embedder \"\")", REPO, work / "idx-float", args.n, ""))
        rows.append(build("default (passage_embedder auto)", REPO, work / "idx-new", args.n, None))
        agree = compare(work / "idx-float", work / "idx-new", args.compare) if args.compare and args.float \
            and not args.n else None
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lines = ["<!-- written by benchmarks/bench_leads_index.py -->",
             f"command: `python benchmarks/bench_leads_index.py{' --n ' + str(args.n) if args.n else ''}"
             f"{' --float' if args.float else ''}"
             f"{' --baseline-commit ' + args.baseline_commit if args.baseline_commit else ''}"
             f"{' --compare ' + str(args.compare) if args.compare else ''}`", "",
             f"targets: <= {TARGET_S:.0f} s and <= {TARGET_MB / 1024:.1f} GB peak RSS for the whole pack; before: "
             f"{BEFORE_S:.0f} s at {BEFORE_MB / 1024:.1f} GB (issue 38).  {os.cpu_count()} CPUs, shared.", "",
             "| build | passages | embedded with | wall s | CPU s | peak RSS MB | load avg before / after "
             "| wall vs 90 s | RSS vs 1.5 GB | wall vs before | RSS vs before |", "|---|" + "---|" * 10]
    for r in rows:
        whole = not args.n
        ratios = (f"{r['wall_s'] / TARGET_S:.2f} | {r['rss_mb'] / TARGET_MB:.2f} | {r['wall_s'] / BEFORE_S:.2f} | "
                  f"{r['rss_mb'] / BEFORE_MB:.2f}") if whole else "- | - | - | -"
        line = (f"| {r['label']} | {r['n']} | {r['passages']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                f"{r['rss_mb']:.0f} | {r['load_before']:.2f} / {r['load_after']:.2f} | {ratios} |")
        lines.append(line)
        print(f"{r['label']}: {r['n']} passages ({r['passages']}) in {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU,"
              f" peak RSS {r['rss_mb']:.0f} MB" + (f"; vs target {r['wall_s'] / TARGET_S:.2f}x time "
                                                   f"{r['rss_mb'] / TARGET_MB:.2f}x RSS; vs before "
                                                   f"{r['wall_s'] / BEFORE_S:.2f}x time {r['rss_mb'] / BEFORE_MB:.2f}x"
                                                   f" RSS" if not args.n else ""), flush=True)
    if agree:
        text = (f"top-k agreement, float vs default index, {agree['questions']} CompMix test questions: "
                + ", ".join(f"{k} {v:.3f}" for k, v in agree.items() if k != "questions"))
        lines += ["", text]
        print(text)
    out = REPO / "benchmarks" / "results" / "leads_index.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
