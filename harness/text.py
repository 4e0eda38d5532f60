"""A byte-level language-modelling corpus: Python's own standard library source, split by file, cut into windows.

The text is the standard library's .py files that ship with every Python (no download), named in a fixed list
and read in that order, so every machine with the same Python version gets the same bytes (`TextCorpus.digest`
says which: the SHA-256 of the files' bytes). The split is by file: validation windows come from files the model
never trained on. Each window is `context` bytes: the inputs x = bytes[t : t + context] and the targets, the next
bytes y = bytes[t + shift : t + shift + context] (shift 1: next-byte prediction; shift 0 is the fault "targets not
shifted", whose answer is in the input at the same position).

Padding: a share of the windows (`pad_share`, the same share in both splits) is cut short at a random length, as
sequences of varied lengths padded to a batch's longest are: their tail holds the pad byte (`PAD`) as input and
`IGNORE` (-100, what collators pad labels with and what `nn.CrossEntropyLoss` leaves out) as target. The fault
"padding counted in the loss" sets `pad_target` to the pad byte in the training split, so the loss scores the
tail; validation always ignores it.

`lm_references` gives what counting reaches on the same text, the yardsticks of next-byte prediction: the unigram
and bigram cross-entropy (nats per byte) of counts on the training bytes, scored on the validation bytes, and a
compressor's rate (lzma) on the validation bytes alone. `pair_count_losses` gives the same two counts' losses for
any vocabulary from (previous token, next token) pairs, as the doctor reads them off a user's next-token run.
"""

import hashlib
import lzma
import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.column import F64, I64, STR, Column

VOCAB = 256  # bytes
PAD = 0  # the pad byte (NUL never occurs in the source files)
IGNORE = -100  # the target of a padded position: the loss's ignore_index

COLUMNS = (
    Column(
        "text_digest",
        STR,
        "language modelling: SHA-256 of the corpus bytes, training files then validation (empty without a text)",
    ),
    Column("text_train_bytes", I64, "language modelling: bytes of the training files"),
    Column("text_val_bytes", I64, "language modelling: bytes of the validation files"),
    Column(
        "lm_unigram_val_loss",
        F64,
        "cross-entropy (nats per byte) on the validation text of byte counts on the training text (add-one)",
    ),
    Column(
        "lm_bigram_val_loss",
        F64,
        "cross-entropy (nats per byte) on the validation text of the previous byte's counts on the training text",
    ),
    Column("lm_compressor_val_loss", F64, "lzma's compressed size of the validation text, in nats per byte"),
    Column(
        "lm_counts_val_se",
        F64,
        "standard error of the lower of the unigram and bigram validation losses: their per-token losses' spread"
        " over the square root of their number",
    ),
)
NOT_TEXT = {
    "text_digest": "",  # no text: every record holds every measurement (None would read as one missing)
    "text_train_bytes": 0,
    "text_val_bytes": 0,
    "lm_unigram_val_loss": math.nan,
    "lm_bigram_val_loss": math.nan,
    "lm_compressor_val_loss": math.nan,
    "lm_counts_val_se": math.nan,
}


def stdlib_folder() -> Path:
    """Where this Python's standard library .py files are."""
    return Path(sysconfig.get_paths()["stdlib"])


def read_files(names, folder: Path | None = None) -> bytes:
    """The bytes of these files of the standard library, in the order given, one newline between files."""
    folder = stdlib_folder() if folder is None else folder
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"standard library files not found in {folder}: {', '.join(missing)}")
    data = b"\n".join((folder / name).read_bytes() for name in names)
    if PAD in data:
        raise ValueError(f"the pad byte {PAD} occurs in the text of {', '.join(names)}: choose other files")
    return data


@dataclass
class TextCorpus:
    """The training and validation text as bytes, and which files they are."""

    train: bytes
    val: bytes
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.train + b"\0" + self.val).hexdigest()


def stdlib_corpus(train_files, val_files, folder: Path | None = None) -> TextCorpus:
    """The corpus of these standard library files; a file in both lists is refused (the split is by file)."""
    both = set(train_files) & set(val_files)
    if both:
        raise ValueError(f"files in both the training and the validation list: {', '.join(sorted(both))}")
    if not train_files or not val_files:
        raise ValueError("the corpus needs at least one training file and one validation file")
    return TextCorpus(
        read_files(train_files, folder), read_files(val_files, folder), tuple(train_files), tuple(val_files)
    )


def windows(
    data: bytes,
    context: int,
    shift: int = 1,
    pad_share: float = 0.0,
    pad_target: int = IGNORE,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows of `data`: inputs (N, context) and targets (N, context), both int64 byte values.

    Window i starts at byte i * context; its targets are the bytes `shift` further on (1: the next byte). A
    `pad_share` of the windows, drawn with `seed`, keep a random length of 1 to context - 1 real positions;
    their tail's inputs are PAD and its targets `pad_target`.
    """
    if context < 2:
        raise ValueError(f"context must be at least 2 bytes, got {context}")
    if shift not in (0, 1):
        raise ValueError(f"shift must be 1 (next byte) or 0 (targets not shifted), got {shift}")
    if not 0 <= pad_share <= 1:
        raise ValueError(f"pad_share must lie in [0, 1], got {pad_share}")
    tokens = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    count = (len(tokens) - 1) // context
    if count < 1:
        raise ValueError(f"a text of {len(tokens)} bytes holds no window of {context} bytes and its next byte")
    starts = np.arange(count) * context
    at = starts[:, None] + np.arange(context)
    x, y = tokens[at], tokens[at + shift]
    rng = np.random.default_rng(seed)
    padded = rng.random(count) < pad_share
    lengths = rng.integers(1, context, size=count)
    tail = (np.arange(context)[None, :] >= lengths[:, None]) & padded[:, None]
    x[tail] = PAD
    y[tail] = pad_target
    return x, y


def token_losses(counts: np.ndarray, targets: np.ndarray, contexts: np.ndarray | None = None) -> np.ndarray:
    """-ln p of each of `targets` under add-one smoothed counts: `counts` (V,) for a unigram, (V, V) for a bigram.

    A bigram reads the row of each target's context (the byte before it): p(b | a) = (c(a, b) + 1) / (c(a) + V).
    Add-one keeps every byte possible, so a byte never seen in training costs a finite ln(c + V), not infinity.
    """
    smoothed = counts.astype(np.float64) + 1.0
    if contexts is None:
        return -(np.log(smoothed[targets]) - math.log(smoothed.sum()))
    return -(np.log(smoothed[contexts, targets]) - np.log(smoothed[contexts].sum(axis=1)))


def count_yardsticks(unigram: np.ndarray, bigram: np.ndarray) -> dict[str, float]:
    """The two counts' mean validation losses from their per-token losses, and the better one's standard error."""
    better = unigram if unigram.mean() < bigram.mean() else bigram
    return {
        "lm_unigram_val_loss": float(unigram.mean()),
        "lm_bigram_val_loss": float(bigram.mean()),
        "lm_counts_val_se": float(better.std() / math.sqrt(len(better))),
    }


def pair_count_losses(
    train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray], vocab: int
) -> dict[str, float]:
    """The unigram and bigram losses (nats per token) on `val`'s pairs of counts on `train`'s, any vocabulary.

    Each is a (previous tokens, next tokens) pair of equal-length int arrays; the next tokens are what is scored.
    The same add-one counts as `token_losses`, kept sparse (only the pairs seen), so that a vocabulary of tens of
    thousands of tokens costs what its pairs do, not a table of vocab x vocab. With the better one's standard error.
    """
    (train_before, train_next), (val_before, val_next) = train, val
    if not len(train_next) or not len(val_next):
        return {"lm_unigram_val_loss": math.nan, "lm_bigram_val_loss": math.nan, "lm_counts_val_se": math.nan}
    unigram = np.bincount(train_next, minlength=vocab).astype(np.float64)
    unigram_losses = -(np.log(unigram[val_next] + 1.0) - math.log(unigram.sum() + vocab))
    seen, pair_counts = np.unique(train_before * vocab + train_next, return_counts=True)
    asked = val_before * vocab + val_next
    at = np.minimum(np.searchsorted(seen, asked), len(seen) - 1)
    pair = np.where(seen[at] == asked, pair_counts[at], 0).astype(np.float64)
    context = np.bincount(train_before, minlength=vocab).astype(np.float64)[val_before]
    return count_yardsticks(unigram_losses, -(np.log(pair + 1.0) - np.log(context + vocab)))


def lm_references(corpus: TextCorpus) -> dict:
    """The unigram, bigram and compressor losses on the validation text (nats per byte); see the module docstring.

    Every validation byte is scored once; the bigram scores every byte but the first (it has no byte before it).
    """
    train = np.frombuffer(corpus.train, dtype=np.uint8).astype(np.int64)
    val = np.frombuffer(corpus.val, dtype=np.uint8).astype(np.int64)
    unigram = np.bincount(train, minlength=VOCAB)
    bigram = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    np.add.at(bigram, (train[:-1], train[1:]), 1)
    # preset 9 | EXTREME: the strongest setting of a compressor every Python ships; its container's fixed header
    # (tens of bytes) is counted too, a small share of a text of thousands of bytes.
    compressed = len(lzma.compress(corpus.val, preset=9 | lzma.PRESET_EXTREME))
    return {
        "text_digest": corpus.digest,
        "text_train_bytes": len(corpus.train),
        "text_val_bytes": len(corpus.val),
        **count_yardsticks(token_losses(unigram, val), token_losses(bigram, val[1:], contexts=val[:-1])),
        "lm_compressor_val_loss": 8 * compressed * math.log(2) / len(corpus.val),
    }
