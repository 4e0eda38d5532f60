"""The device study's analysis: when does the GPU beat the CPU, and by how much.

Reads the records of `make gpu-study` (conf/sweep/devices.yaml): the healthy recipe's time per step over model
width x batch size x device. The crossover table gives, for each batch size, the smallest width at which the
GPU's step is faster than the CPU's, and by how much. Without CUDA records it says that no GPU figures exist yet.
"""

import pandas as pd
from omegaconf import OmegaConf


def study_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: device, width (of the first hidden layer), batch size, status and the timings."""
    recipes = [OmegaConf.create(text) for text in records.config_yaml]
    return pd.DataFrame(
        {
            "device": records.device.to_numpy(),
            "width": [int(r.model.hidden[0]) if r.model.hidden else 0 for r in recipes],
            "batch_size": [int(r.data.batch_size) for r in recipes],
            "status": records.status.to_numpy(),
            "error": records.error.to_numpy(),
            "device_name": records.device_name.to_numpy(),
            "threads": records.threads.to_numpy(),
            "step_ms": records.step_time_s.to_numpy() * 1000,
            "copy_share": records.copy_share.to_numpy(),
            "data_wait_share": records.data_wait_share.to_numpy(),
            "gpu_busy_share": records.gpu_busy_share.to_numpy(),
            "peak_mib": records.peak_memory_bytes.to_numpy(dtype=float) / 2**20,
            "val_acc": records.final_val_acc.to_numpy(),
        }
    ).sort_values(["batch_size", "width", "device"], ignore_index=True)


def crossover(table: pd.DataFrame) -> pd.DataFrame | None:
    """Per batch size: the smallest width where CUDA's step beats the CPU's, with the speed-ups.

    The speed-up is given there and at the largest width. None when no CUDA cell ran.
    """
    ok = table[table.status == "ok"]
    if not (ok.device == "cuda").any():
        return None
    times = ok.pivot_table(index=["batch_size", "width"], columns="device", values="step_ms")
    rows = []
    for batch, group in times.groupby(level="batch_size"):
        group = group.droplevel("batch_size").dropna()
        faster = group[group.cuda < group.cpu]
        widest = group.index.max() if len(group) else None
        rows.append(
            {
                "batch_size": batch,
                "GPU wins from width": int(faster.index.min()) if len(faster) else "never",
                "speed-up there": f"{group.cpu[faster.index.min()] / group.cuda[faster.index.min()]:.1f}x"
                if len(faster)
                else "-",
                "speed-up at widest": f"{group.cpu[widest] / group.cuda[widest]:.1f}x (width {widest})"
                if widest
                else "-",
            }
        )
    return pd.DataFrame(rows).set_index("batch_size")


def summary(table: pd.DataFrame) -> str:
    """The study as text: the timings, then the crossover table (or why there is none) last."""
    shown = table[
        [
            "device",
            "width",
            "batch_size",
            "status",
            "threads",
            "step_ms",
            "copy_share",
            "data_wait_share",
            "gpu_busy_share",
            "peak_mib",
            "val_acc",
        ]
    ]
    lines = [shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"), ""]
    names = sorted({n for n in table.device_name.dropna() if n})
    lines.append(f"machine: {', '.join(names) or 'unknown'}")
    table_cross = crossover(table)
    if table_cross is None:
        reasons = sorted(set(table.error[(table.device == "cuda") & (table.status != "ok")].dropna()))
        lines.append(
            "no GPU figures exist yet: "
            + (reasons[0] if reasons else "the study has no CUDA cells")
            + "; run `make gpu-study` on a machine with a GPU"
        )
    else:
        ok = table[table.status == "ok"].pivot_table(index=["batch_size", "width"], columns="device", values="val_acc")
        drift = (ok.cpu - ok.cuda).abs().max() if {"cpu", "cuda"} <= set(ok.columns) else float("nan")
        lines += [
            f"largest CPU-GPU difference in final validation accuracy: {drift:.3f}",
            "crossover:",
            table_cross.to_string(),
        ]
    return "\n".join(lines)
