"""Carry what a GPU machine without network needs: pack it here into parts of a chosen size, unpack it there.

    python3 tools/airgap/airgap.py wheels --lock FILE --dest DIR [--python-version 3.12] [--platform P ...]
    python3 tools/airgap/airgap.py pack --out DIR [--part-mb 60] [--xz] [--lock FILE ...] [--wheels DIR ...]
        [--model DIR [--bf16]] [--data DIR] [--commit REV] [--dir NAME=PATH ...]
    python3 tools/airgap/airgap.py unpack PART_DIR ... --dest DIR [--site DIR]
    python3 tools/airgap/airgap.py status --dest DIR

`pack` writes one tar of the named components (model/, data/, wheels/, commit/, NAME/) cut into DIR/part01,
DIR/part02, ...: each folder holds its slice and a MANIFEST.json with every slice's sha256 and the whole tar's.
`unpack` takes the part folders as they arrive, in any order and over several calls: each is checked against its
sha256 and kept under DEST/.parts; once all are there, the tar is joined, checked, unpacked into DEST, and the
wheels/ it holds are installed with `pip install --no-index --no-deps --target DEST/site`. See README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wheels import download, fail  # noqa: E402  (a sibling file of this script, not a package)

MiB = 1 << 20
BLOCK = 4 * MiB


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


# ---- pack (the machine with network) ----
def bf16_copy(model: str, dest: str) -> str:
    """The model folder with its safetensors weights cast to bf16 (half the bytes of fp32) and config.json saying so."""
    import torch  # only for --bf16
    from safetensors.torch import load_file, save_file

    shutil.copytree(model, dest)
    for name in os.listdir(dest):
        if name.endswith(".safetensors"):
            weights = load_file(os.path.join(dest, name))
            cast = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()}
            save_file({k: v.contiguous() for k, v in cast.items()}, os.path.join(dest, name), metadata={"format": "pt"})
    config_path = os.path.join(dest, "config.json")
    if os.path.isfile(config_path):
        config = json.load(open(config_path))
        config["torch_dtype"] = "bfloat16"
        if "dtype" in config:
            config["dtype"] = "bfloat16"
        json.dump(config, open(config_path, "w"), indent=2)
    return dest


def commit_copy(rev: str, dest: str) -> str:
    """`git archive REV` unpacked, with the commit's short hash in .commit: the code of a run, frozen."""
    os.makedirs(dest)
    archive = subprocess.run(["git", "archive", "--format=tar", rev], capture_output=True)
    if archive.returncode != 0:
        fail(f"--commit {rev}: git archive failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    short = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True)
    open(os.path.join(dest, ".commit"), "w").write(short.stdout)
    return dest


def components(args: argparse.Namespace, tmp: str) -> dict[str, str]:
    """Component name -> folder on this machine, in the order they are packed."""
    found: dict[str, str] = {}
    if args.lock or args.wheels:
        wheel_dir = os.path.join(tmp, "wheels")
        os.makedirs(wheel_dir)
        cache = args.cache or os.path.join(args.out, ".wheel-cache")
        paths = [
            w for lock in args.lock for w in download(lock, cache, args.python_version, args.platform, index(args))
        ]
        for folder in args.wheels:
            paths += [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".whl")]
        for path in paths:  # links, not copies: the tar follows them
            os.symlink(os.path.abspath(path), os.path.join(wheel_dir, os.path.basename(path)))
        found["wheels"] = wheel_dir
    if args.model:
        found["model"] = bf16_copy(args.model, os.path.join(tmp, "model")) if args.bf16 else args.model
    if args.data:
        found["data"] = args.data
    if args.commit:
        found["commit"] = commit_copy(args.commit, os.path.join(tmp, "commit"))
    for item in args.dir:
        name, sep, path = item.partition("=")
        if not sep or not name or "/" in name or name in found or name == "site":
            fail(f"--dir {item!r}: give NAME=PATH, NAME one new folder name (not site, wheels, model, data, commit)")
        found[name] = path
    for name, path in found.items():
        if not os.path.isdir(path):
            fail(f"{name}: {path} is not a folder")
    if not found:
        fail("nothing to pack: name at least one of --lock, --wheels, --model, --data, --commit, --dir")
    return found


def write_tar(found: dict[str, str], path: str, xz: bool) -> None:
    """One tar of every component under its name; --xz pipes it through xz -9 on every core (wheels re-zipped
    uncompressed shrink several times more under xz than as they come)."""
    with open(path, "wb") as out:
        squeeze = subprocess.Popen(["xz", "-9", "-T0", "-c"], stdin=subprocess.PIPE, stdout=out) if xz else None
        # dereference: the files themselves, not links (wheels/ links to the download cache, a hub model's
        # snapshot folder links to its blobs)
        with tarfile.open(fileobj=squeeze.stdin if squeeze else out, mode="w|", dereference=True) as tar:
            for name, folder in found.items():
                tar.add(folder, arcname=name)
        if squeeze:
            squeeze.stdin.close()
            if squeeze.wait() != 0:
                fail("xz failed while packing")


def pack(args: argparse.Namespace) -> None:
    if args.part_mb <= 0:
        fail(f"--part-mb {args.part_mb}: give a positive size in MiB")
    part_bytes = int(args.part_mb * MiB)
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):
        if old.startswith("part") and os.path.isdir(os.path.join(args.out, old)):
            shutil.rmtree(os.path.join(args.out, old))
    name = args.name or os.path.basename(os.path.abspath(args.out))
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        found = components(args, tmp)
        payload = os.path.join(tmp, "payload")
        write_tar(found, payload, args.xz)
        size = os.path.getsize(payload)
        count = max(1, -(-size // part_bytes))
        parts = []
        with open(payload, "rb") as src:
            for index in range(1, count + 1):
                folder = os.path.join(args.out, f"part{index:02d}")
                os.makedirs(folder)
                slice_path = os.path.join(folder, f"payload.{index:02d}")
                with open(slice_path, "wb") as dst:
                    left = part_bytes
                    while left and (block := src.read(min(BLOCK, left))):
                        dst.write(block)
                        left -= len(block)
                parts.append({"file": os.path.basename(slice_path), "size": os.path.getsize(slice_path)})
                parts[-1]["sha256"] = sha256(slice_path)
        manifest = {
            "name": name,
            "sha256": sha256(payload),
            "size": size,
            "components": list(found),
            "parts": parts,
        }
    for index in range(1, count + 1):
        json.dump(manifest, open(os.path.join(args.out, f"part{index:02d}", "MANIFEST.json"), "w"), indent=1)
    print(f"airgap: {name}: {', '.join(found)} in {count} part(s) of <= {args.part_mb:g} MiB ({size / MiB:.1f} MiB)")
    for index in range(1, count + 1):
        print(os.path.join(args.out, f"part{index:02d}"))


def index(args: argparse.Namespace) -> list[str]:
    return ["--no-index", "--find-links", args.find_links] if args.find_links else []


# ---- unpack (the GPU machine) ----
def unpack(args: argparse.Namespace) -> None:
    manifests = [read_manifest(folder) for folder in args.parts]
    if len({m["sha256"] for m in manifests}) > 1:
        fail("the parts given belong to different packs: unpack each pack's parts in its own call")
    manifest = manifests[0]
    name, whole = manifest["name"], manifest["sha256"]
    done = os.path.join(args.dest, ".airgap", f"{whole}.done")
    if os.path.isfile(done):
        print(f"airgap: {name}: already unpacked in {args.dest}")
        return
    stage = os.path.join(args.dest, ".airgap", whole)
    os.makedirs(stage, exist_ok=True)
    for folder in args.parts:
        for part in manifest["parts"]:
            if os.path.isfile(os.path.join(folder, part["file"])):
                check_part(os.path.join(folder, part["file"]), part, name, len(manifest["parts"]))
                shutil.copyfile(os.path.join(folder, part["file"]), os.path.join(stage, part["file"]))
    missing = [f"part{p['file'].rsplit('.', 1)[1]}" for p in manifest["parts"] if not here(stage, p)]
    if missing:
        have = len(manifest["parts"]) - len(missing)
        print(f"airgap: {name}: {have} of {len(manifest['parts'])} parts here; still to come: {', '.join(missing)}")
        return
    payload = os.path.join(stage, "payload")
    digest = hashlib.sha256()
    with open(payload, "wb") as out:
        for part in manifest["parts"]:
            with open(os.path.join(stage, part["file"]), "rb") as src:
                while block := src.read(BLOCK):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != whole:
        shutil.rmtree(stage)
        fail(f"{name}: the joined parts' sha256 is not the manifest's; copy all its parts again")
    for component in manifest["components"]:
        shutil.rmtree(os.path.join(args.dest, component), ignore_errors=True)
    with tarfile.open(payload, "r:*") as tar:  # the "data" filter (Python >= 3.11.4): nothing lands outside DEST
        tar.extractall(args.dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    shutil.rmtree(stage)
    installed = ""
    if "wheels" in manifest["components"]:
        site = args.site or os.path.join(args.dest, "site")
        wheels = sorted(os.path.join(args.dest, "wheels", f) for f in os.listdir(os.path.join(args.dest, "wheels")))
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        quiet = {**os.environ, "PIP_ROOT_USER_ACTION": "ignore"}  # a GPU machine's root user is no mistake here
        result = subprocess.run(
            [*pip, "--disable-pip-version-check", "--upgrade", "--target", site, *wheels], env=quiet
        )
        if result.returncode != 0:
            fail(f"{name}: pip install --target {site} failed (its output is above)")
        installed = f"; {len(wheels)} wheel(s) installed into {site} (put it on PYTHONPATH)"
    open(done, "w").write(json.dumps(manifest) + "\n")
    print(f"airgap: {name}: unpacked {', '.join(manifest['components'])} into {args.dest}{installed}")


def here(stage: str, part: dict) -> bool:
    return os.path.isfile(os.path.join(stage, part["file"]))


def read_manifest(folder: str) -> dict:
    path = os.path.join(folder, "MANIFEST.json")
    if not os.path.isfile(path):
        fail(f"{folder}: no MANIFEST.json; give the part folders that pack wrote (part01, part02, ...)")
    return json.load(open(path))


def check_part(path: str, part: dict, name: str, count: int) -> None:
    if os.path.getsize(path) != part["size"] or sha256(path) != part["sha256"]:
        index = int(part["file"].rsplit(".", 1)[1])
        fail(f"{name}: part {index} of {count} ({path}) does not match its sha256; copy that part again")


def status(args: argparse.Namespace) -> None:
    """What each pack in DEST has: unpacked, or how many parts are here. Exit 1 while a pack is incomplete."""
    root = os.path.join(args.dest, ".airgap")
    entries = sorted(os.listdir(root)) if os.path.isdir(root) else []
    if not entries:
        print(f"airgap: nothing in {args.dest} yet")
        raise SystemExit(1)
    incomplete = False
    for entry in entries:
        if entry.endswith(".done"):
            manifest = json.loads(open(os.path.join(root, entry)).read())
            print(f"airgap: {manifest['name']}: unpacked ({', '.join(manifest['components'])})")
        else:
            incomplete = True
            print(f"airgap: a pack {entry[:12]}: {len(os.listdir(os.path.join(root, entry)))} part(s) here, not all")
    raise SystemExit(1 if incomplete else 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    target = argparse.ArgumentParser(add_help=False)
    target.add_argument("--python-version", help="the target's Python, e.g. 3.12 (default: this one's)")
    target.add_argument("--platform", action="append", default=[], help="a wheel platform tag the target takes")
    target.add_argument("--find-links", help="take wheels and sdists from this folder only, not from an index")
    get = sub.add_parser("wheels", parents=[target], help="download a lock list's wheels for the target")
    get.add_argument("--lock", required=True, help="lines 'name==version [sha256]'")
    get.add_argument("--dest", required=True)
    put = sub.add_parser("pack", parents=[target], help="pack components into parts of --part-mb")
    put.add_argument("--out", required=True, help="folder for part01, part02, ... (old parts there are removed)")
    put.add_argument("--name", help="the pack's name in messages (default: the --out folder's name)")
    put.add_argument("--part-mb", type=float, default=60.0, help="the most MiB in one part (default 60)")
    put.add_argument("--xz", action="store_true", help="compress the tar with xz -9")
    put.add_argument("--lock", action="append", default=[], help="a lock list: its wheels go into wheels/")
    put.add_argument("--cache", help="where --lock downloads are kept (default: OUT/.wheel-cache)")
    put.add_argument("--wheels", action="append", default=[], help="a folder of .whl files for wheels/")
    put.add_argument("--model", help="a model folder (config.json, safetensors, tokenizer) as model/")
    put.add_argument("--bf16", action="store_true", help="cast the model's safetensors weights to bf16")
    put.add_argument("--data", help="a data folder (e.g. train.parquet, test.parquet) as data/")
    put.add_argument("--commit", help="git archive of this revision, run from this folder, as commit/")
    put.add_argument("--dir", action="append", default=[], help="NAME=PATH: any other folder, as NAME/")
    take = sub.add_parser("unpack", help="take part folders; with all of them here, check, unpack, install")
    take.add_argument("parts", nargs="+", help="part folders written by pack")
    take.add_argument("--dest", required=True)
    take.add_argument("--site", help="pip --target for the wheels (default: DEST/site)")
    show = sub.add_parser("status", help="what has arrived in DEST")
    show.add_argument("--dest", required=True)
    args = parser.parse_args(argv)
    if args.command == "wheels":
        wheels = download(args.lock, args.dest, args.python_version, args.platform, index(args))
        print(f"airgap: {len(wheels)} wheel(s) in {args.dest}")
    else:
        {"pack": pack, "unpack": unpack, "status": status}[args.command](args)


if __name__ == "__main__":
    main()
