"""``hqa data list`` / ``hqa data pull [NAME…|all|demo]`` (hqa/data/store.py)."""

from __future__ import annotations

import argparse
import json
import sys

from hqa.cli import args as shared
from hqa.errors import HQAError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", choices=["list", "pull"])
    sp.add_argument("names", nargs="*", metavar="NAME",
                    help="pull: datasets to fetch (hqa data list; a family such as mintaka names all its splits), "
                         "'all', or 'demo' (what the knowledge pack needs); default all")
    sp.add_argument("--json", action="store_true", help="list: as JSON")
    sp.add_argument("--verify", action="store_true", help="list: hash every present file (slower)")
    sp.add_argument("--quiet", action="store_true", help="pull: no progress bar")


def run(args: argparse.Namespace) -> int:
    return (_list if args.action == "list" else _pull)(args, shared.settings(args))


def _list(args: argparse.Namespace, settings) -> int:
    """Every dataset hqa knows: origin, license, size, how many of its files are present and their checksums."""
    from hqa.data import store

    root, base = store.data_dir(settings), store.mirror(settings)
    known = store.datasets()
    rows = []
    for ds in known.values():
        states = [store.file_status(f, root, verify=args.verify) for f in ds.files]
        present = sum(s != "missing" for s in states)
        pinned = sum(f.sha256 is not None for f in ds.files)
        sha = ("WRONG" if "WRONG" in states else f"{pinned}/{len(ds.files)} pinned" if pinned else
               "recorded on first download" if not any(s.startswith("ok") for s in states) else "recorded")
        rows.append({"name": ds.name, "origin": ds.origin, "paths": [f.path for f in ds.files],
                     "license": ds.license, "size": ds.size, "files": len(ds.files), "present": present,
                     "sha256": sha, "what": ds.what})
    if args.json:
        print(json.dumps({"data_dir": str(root), "mirror": base, "datasets": rows}, indent=2))
        return 0
    print(f"data directory: {root}" + (f"   mirror: {base}" if base else "   mirror: none"))
    print(f"{'dataset':<25} {'present':>7} {'size':>8}  {'sha256':<27} origin repository @ commit: path  [license]")
    for r in rows:
        size = (f"{r['size'] / 1e6:.1f} MB" if r["size"] >= 1e5 else f"{r['size'] / 1e3:.0f} kB") if r["size"] else "?"
        path = (r["paths"][0] or "-") if len(r["paths"]) == 1 else f"{r['files']} files ({r['paths'][0]} …)"
        print(f"{r['name']:<25} {str(r['present']) + '/' + str(r['files']):>7} {size:>8}  {r['sha256']:<27} "
              f"{r['origin']}: {path}  [{r['license']}]")
    return 0


def _pull(args: argparse.Namespace, settings) -> int:
    """The datasets named (all, or what the knowledge pack needs) fetched from the mirror or their origin."""
    from hqa.data import store

    root = store.data_dir(settings)
    known = store.datasets()
    names = args.names or ["all"]
    if "all" in names:
        names = list(known)
    elif "demo" in names:
        names = [n for n in names if n != "demo"] + store.pack_inputs()
    names = list(dict.fromkeys(n for name in names for n in family(name, known)))
    for name in names:
        store.dataset(name)  # an unknown name fails before anything is fetched
    got: dict[str, str] = {}
    failed = []
    for name in names:  # one dataset that cannot be fetched does not stop the others
        try:
            got.update(store.pull([name], progress=not args.quiet and sys.stderr.isatty(), settings=settings))
        except HQAError as exc:
            failed.append(name)
            print(f"hqa: error: {exc}", file=sys.stderr)
    print(f"{len(names) - len(failed)} dataset(s), {len(got)} file(s) in {root}: "
          f"{sum(v == 'present' for v in got.values())} already present and checked, "
          f"{sum(v == 'mirror' for v in got.values())} from the mirror, {sum(v == 'origin' for v in got.values())} "
          f"from their origin" + (f"; not fetched: {', '.join(failed)}" if failed else ""))
    return 2 if failed else 0  # a dataset not fetched is a refusal (exit 2), as everywhere else


def family(name: str, known) -> list[str]:
    """A dataset name as given, or — a name that is no dataset but the family of some (``mintaka``,
    ``qald9plus-wikidata``) — every split of that family (``mintaka/test``, ``mintaka/dev``, ``mintaka/train``)."""
    if name in known:
        return [name]
    splits = [k for k in known if k.startswith(name.rstrip("/") + "/")]
    return splits or [name]  # an unknown name is refused with the list of known ones
