"""``hqa runs``: the MLflow runs (compile, evaluate, compare with its arms) and the compiled programs;
``hqa runs merge SHARD... --out DIR``: shard folders of ``hqa evaluate --shard i/N`` joined into one run folder
(:func:`hqa.jobs.shards.merge_runs`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hqa.cli import args as shared


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--limit", type=int, default=50, help="most runs listed (newest first)")
    sp.add_argument("--json", action="store_true")
    actions = sp.add_subparsers(dest="action", metavar="merge")
    merge = actions.add_parser("merge", help="join the shard folders of hqa evaluate --shard i/N into one run folder "
                                             "(checked: the same run, every shard, no question twice or missing)")
    merge.add_argument("shards", nargs="+", help="the shard run folders (all N of them)")
    merge.add_argument("--out", required=True, help="the merged run folder")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "merge":
        return merge(args)
    from hqa.artifacts.store import list_artifacts
    from hqa.tracking.registry import list_runs

    settings = shared.settings(args)
    runs = list_runs(settings, max_results=args.limit)
    if args.json:
        print(json.dumps({"runs": runs, "programs": list_artifacts(settings.artifacts_dir / "programs")},
                         indent=2, default=str))
        return 0
    print(f"MLflow store: {settings.tracking_uri}  (UI: mlflow ui --backend-store-uri {settings.tracking_uri})")
    for r in runs:  # compile, evaluate and compare runs (a compare's arms indented under it)
        metrics = ", ".join(f"{k}={v:.3f}" if not k.endswith(("_n", "_errors")) else f"{k}={int(v)}"
                            for k, v in r["headline"].items())
        rec = r.get("record") or {}
        what = " ".join(f"{k[4:]}={rec[k]}" for k in ("hqa.lm", "hqa.reranker", "hqa.git_commit") if rec.get(k))
        indent = "  " if r.get("parent") else ""
        stopped = "  (stopped at its budget)" if rec.get("hqa.stopped") else ""  # finished over fewer rows
        print(f"{indent}{r['start']}  {r['run_id'][:8]}  {r['status']:<9} {r['job'] or '-':<8} {r['name']}  "
              f"{metrics or '(no metrics)'}" + (f"  [{what}]" if what else "") + stopped)
    programs = list_artifacts(settings.artifacts_dir / "programs")
    if programs:
        print("\ncompiled programs:")
        for m in programs:
            print(f"  {settings.artifacts_dir / 'programs' / m.get('name', '?')}  {m.get('program')} / "
                  f"{m.get('optimizer')}  {m.get('metrics', {})}")
    return 0


def merge(args: argparse.Namespace) -> int:
    from hqa.jobs.shards import merge_runs
    from hqa.schemas.run_folder import RunFolder

    done = merge_runs([Path(p) for p in args.shards], Path(args.out))
    print(RunFolder(done["folder"]).summary_md.read_text(encoding="utf-8"))
    print(f"merged {done['shards']} shards, {done['n']} questions -> {done['folder']} (predictions.jsonl, summary.md, "
          "summary.json, run-info.json)")
    return 0
