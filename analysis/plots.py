"""The one place that picks matplotlib's backend: files only, no display on these machines."""


def pyplot():
    """matplotlib.pyplot with the Agg backend (imported on first use: the doctor and the sweeps never need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
