"""Pinned wheels for a target Python and platform, from a lock list, downloaded on a machine with network.

A lock line is `name==version`, optionally followed by the sha256 of the file PyPI serves (the wheel, or the sdist
for a package published only as one); `#` starts a comment. Either every line has a sha256 or none has: pip checks
all of them or none. A package with no wheel for the target is built from its sdist, which must give a pure-Python
(`none-any`) wheel, since it is built here, not on the target.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile


NO_MATCH = re.compile(r"No matching distribution found for (\S+)")


def fail(message: str) -> None:
    """One line on stderr, exit 1: the tools' errors name what is wrong and what to do."""
    print(f"airgap: {message}", file=sys.stderr)
    raise SystemExit(1)


def read_lock(path: str) -> list[tuple[str, str, str | None]]:
    """(name, version, sha256 or None) per line of the lock list."""
    pins = []
    for number, raw in enumerate(open(path), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if "==" not in words[0] or len(words) > 2:
            fail(f"{path}:{number}: {raw.strip()!r} is not 'name==version [sha256]'")
        name, version = words[0].split("==", 1)
        sha = words[1] if len(words) == 2 else None
        if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
            fail(f"{path}:{number}: {sha!r} is not a sha256 (64 hex digits)")
        pins.append((name, version, sha))
    if len({sha is None for _, _, sha in pins}) > 1:
        fail(f"{path}: some lines have a sha256 and some not; pin all of them or none")
    return pins


def normal(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427/503): lower case, runs of -_. as one _."""
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(folder: str, name: str, version: str) -> str | None:
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        words = entry[: -len(".whl")].split("-")
        if entry.endswith(".whl") and len(words) >= 5 and normal(words[0]) == normal(name) and words[1] == version:
            return os.path.join(folder, entry)
    return None


def pip(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-deps", "-q"]
    return subprocess.run(command, capture_output=True, text=True)


def requirement_file(pins: list[tuple[str, str, str | None]], folder: str) -> str:
    path = os.path.join(folder, "requirements.txt")
    with open(path, "w") as out:
        for name, version, sha in pins:
            out.write(f"{name}=={version}" + (f" --hash=sha256:{sha}" if sha else "") + "\n")
    return path


def download(lock: str, dest: str, python_version: str | None, platforms: list[str], index: list[str]) -> list[str]:
    """The lock's wheels in dest (those already there are kept): binary wheels for the target where PyPI has them,
    else a wheel built here from the sdist. index: extra pip options (--find-links, --no-index, --index-url)."""
    pins = read_lock(lock)
    os.makedirs(dest, exist_ok=True)
    target = ["--only-binary=:all:"]
    if python_version:
        target += ["--python-version", python_version, "--implementation", "cp"]
    for platform in platforms:
        target += ["--platform", platform]
    missing = [pin for pin in pins if not find_wheel(dest, pin[0], pin[1])]
    with tempfile.TemporaryDirectory() as tmp:
        batch = list(missing)
        while batch:  # one pip call for all (a lock of 50 resolves in seconds, not minutes), less each pin it lacks
            hashes = ["--require-hashes"] if batch[0][2] else []
            got = pip("download", *target, *index, *hashes, "-r", requirement_file(batch, tmp), "-d", dest)
            lacking = {normal(re.split("[=<>!~ ]", found)[0]) for found in NO_MATCH.findall(got.stderr)}
            if got.returncode == 0 or not lacking:
                break  # done, or a failure the one-by-one pass below words for its pin
            batch = [pin for pin in batch if normal(pin[0]) not in lacking and not find_wheel(dest, pin[0], pin[1])]
        for name, version, sha in [pin for pin in missing if not find_wheel(dest, pin[0], pin[1])]:
            one = os.path.join(tmp, normal(name))
            os.makedirs(one)
            hashes = ["--require-hashes"] if sha else []
            req = requirement_file([(name, version, sha)], one)
            binary = pip("download", *target, *index, *hashes, "-r", req, "-d", dest)
            if binary.returncode == 0 and find_wheel(dest, name, version):
                continue
            got = pip("download", "--no-binary=:all:", *index, *hashes, "-r", req, "-d", one)
            sdists = [f for f in os.listdir(one) if f.endswith((".tar.gz", ".zip"))]
            if got.returncode != 0 or not sdists:
                reason = (binary.stderr or got.stderr).strip().splitlines()
                fail(f"{name}=={version}: no wheel for the target and no sdist ({reason[-1] if reason else '?'})")
            built = pip("wheel", "-w", one, os.path.join(one, sdists[0]))
            wheel = find_wheel(one, name, version)
            if built.returncode != 0 or wheel is None:
                fail(f"{name}=={version}: its sdist did not build into a wheel here: {built.stderr.strip()[-200:]}")
            if not wheel.endswith("-none-any.whl"):
                fail(f"{name}=={version}: only an sdist, and it builds a platform wheel ({os.path.basename(wheel)})")
            os.replace(wheel, os.path.join(dest, os.path.basename(wheel)))
    wheels = [find_wheel(dest, name, version) for name, version, _ in pins]
    absent = [f"{name}=={version}" for (name, version, _), wheel in zip(pins, wheels) if wheel is None]
    if absent:
        fail(f"{lock}: no wheel for {', '.join(absent)} in {dest} (pip download said nothing usable)")
    return wheels
