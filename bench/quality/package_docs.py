"""A corpus of a genre none of the models saw: the descriptions (their READMEs) of the Python packages installed
beside nextpara, one document per package, written as a folder of text files for ``nextpara build --corpus``.

    python -m bench.quality.package_docs OUT_DIR

Then, as a user with text of their own would (the commands of the README, nothing else):

    nextpara build --corpus OUT_DIR --data-dir STORE
    nextpara eval --data-dir STORE                    # the general model, before any training
    nextpara train --data-dir STORE                   # the guard's line: what serves now
    nextpara eval --data-dir STORE                    # what serves after training

The general models were trained on PEPs, novels and the Python docs (attention_core/general.py); software READMEs
(installation steps, feature lists, badges, changelogs, licence text) are none of those, and nothing here is
tuned to them: each description is written as its package declares it (a ``.md`` file for Markdown, ``.txt`` for
anything else), and the product's folder reader splits it into paragraphs as it splits any user's folder. What
is installed decides the corpus (pyproject.toml pins what nextpara needs, not everything pip brings), so the
script prints the number of documents and a fingerprint of their names and texts, for the record.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from importlib import metadata
from pathlib import Path


def descriptions() -> dict[str, tuple[str, str]]:
    """{normalised package name: (file suffix, description)} for every installed distribution with one, but nextpara."""
    out: dict[str, tuple[str, str]] = {}
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata.get("Name") or "").lower())
        text = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        if not name or name in out or name == "nextpara" or not text.strip():  # not our own README, which every
            # commit changes
            continue
        markdown = "markdown" in (dist.metadata.get("Description-Content-Type") or "")
        out[name] = (".md" if markdown else ".txt", text.replace("\r\n", "\n"))
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="the folder to write (created; must be empty if it exists)")
    args = ap.parse_args(argv)
    if args.out_dir.exists() and any(args.out_dir.iterdir()):
        ap.error(f"{args.out_dir} is not empty: give a new folder")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    found = descriptions()
    h = hashlib.sha256()
    for name, (suffix, text) in found.items():
        (args.out_dir / f"{name}{suffix}").write_text(text)
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    print(f"{len(found)} package descriptions written to {args.out_dir} ({sum(len(t) for _, t in found.values()):,} "
          f"characters, fingerprint {h.hexdigest()[:16]}; Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
