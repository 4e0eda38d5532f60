"""The fault grid of the training-run doctor: cells with a planted fault, instruments, parquet records.

Entry points: `python -m harness` (see `make help`), `harness.cell.run_cell(cfg) -> record`, and
`harness.instruments.Instruments` for any PyTorch training loop.
"""
