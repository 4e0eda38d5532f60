"""`python -m doctor.pages` (`make docs`): the generated pages of docs/ and the generated blocks of other pages.

    python -m doctor.pages [--check]                    write them (--check: only say which are stale, exit 1)
    python -m doctor.pages --record-examples [NAME ...] run the example recipes docs/doctor.md shows, keep their runs

The tables come from analysis/docs.py (faults, rules, features, records) and the blocks of the doctor's example
reports from doctor/doc_examples.py. The two are composed here, above both, so that analysis/ never imports the
doctor (the one-way flow of docs/architecture.md): analysis/docs.py is handed what fills each kind of block.
"""

import argparse
import sys
from pathlib import Path

from analysis import docs
from doctor import doc_examples

# What fills each kind of generated block: the block's arguments -> its text.
MAKERS: docs.Makers = {doc_examples.KIND: doc_examples.block}


def stale(folder: Path = docs.DOCS) -> list[str]:
    """The pages whose generated tables or blocks are stale, or that are missing (analysis/docs.py: stale)."""
    return docs.stale(folder, MAKERS)


def write(folder: Path = docs.DOCS) -> list[str]:
    """Write every generated page and block that changed; returns the pages' names (analysis/docs.py: write)."""
    return docs.write(folder, MAKERS)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m doctor.pages", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page or block is stale")
    top.add_argument(
        "--record-examples",
        nargs="*",
        metavar="NAME",
        help="first run the example recipes examples/NAME.py under the doctor (default: every one the docs show)"
        " and keep their measurements in docs/examples/NAME.observed.json; takes minutes",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    """Record the shown examples if asked, then write the generated pages and blocks (or only check them)."""
    args = parser().parse_args(argv)
    try:
        if args.record_examples is not None:
            doc_examples.record(args.record_examples or docs.block_arguments(doc_examples.KIND))
        if args.check:
            behind = stale()
            for name in behind:
                print(f"stale: docs/{name} (run `make docs`)")
            return 1 if behind else 0
        for name in write():
            print(f"wrote docs/{name}")
    except (FileNotFoundError, ValueError) as error:  # a missing kept run or example, a block of unknown kind
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # an example's recording failed: its own error is printed above
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
