"""The TrainCheck silent errors (OrderLab/TrainCheck-Evaluation-Workloads) as buggy and fixed doctor recipes."""
