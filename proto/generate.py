"""Generate the Python gRPC stubs from proto/nextpara/v1/*.proto with grpcio-tools.

    python proto/generate.py            # (re)write the stubs next to the .proto files
    python proto/generate.py --check    # exit 1 if the committed stubs differ from fresh ones

The proto path mirrors the Python package (proto/nextpara/v1/x.proto -> nextpara.v1.x_pb2),
so the generated imports work unedited. The output is committed and excluded from lint. The contract
imports google/rpc/status.proto, read from the googleapis-common-protos package (which the generated
code imports as google.rpc.status_pb2 at run time).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def googleapis_root() -> Path:
    """The folder holding google/rpc/status.proto (installed with googleapis-common-protos)."""
    from google.rpc import status_pb2

    return Path(status_pb2.__file__).resolve().parents[2]


def generate(out_root: Path) -> list[Path]:
    from grpc_tools import protoc

    protos = sorted(PROTO_ROOT.glob("nextpara/v1/*.proto"))
    well_known = Path(protoc.__file__).resolve().parent / "_proto"  # google/protobuf/*.proto
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"-I{googleapis_root()}", f"--python_out={out_root}",
            f"--grpc_python_out={out_root}", f"--pyi_out={out_root}", *map(str, protos)]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(p.name for p in protos)}")
    return [out_root / p.relative_to(PROTO_ROOT).parent / (p.stem + s) for p in protos for s in SUFFIXES]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed stubs instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        differ = []
        for path in fresh:
            committed = PROTO_ROOT / path.relative_to(tmp)
            if args.check:
                if not committed.exists() or not filecmp.cmp(path, committed, shallow=False):
                    differ.append(str(committed.relative_to(PROTO_ROOT.parent)))
            else:
                shutil.copyfile(path, committed)
                print(f"wrote {committed.relative_to(PROTO_ROOT.parent)}")
    if differ:
        print("generated stubs are stale; run `python proto/generate.py`:\n  " + "\n  ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
