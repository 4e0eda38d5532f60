"""The data of Stack Overflow 48251943: Book1.csv, 17 rows, the file the benchmark ships beside the program.

Copied from the DeepLocalize repository (Wardat-ISU/DeepLocalize), Benchmark/StackOverflow/48251943/Buggy Code/
Book1.csv (the same file as in Correct Code/). As in the program: inputs are columns 2 and 3, the target is
column 1 (values -1.05 to 2.71: one of the 17 is negative, seven are above 1). The file starts with a byte-order
mark, which makes column 0 of the first row unreadable; column 0 is not used.
"""

from pathlib import Path

import numpy
import torch

_dataset = numpy.genfromtxt(Path(__file__).with_name("Book1.csv"), delimiter=",")
X = torch.tensor(_dataset[:, 2:4], dtype=torch.float32)
Y = torch.tensor(_dataset[:, 1:2], dtype=torch.float32)  # (17, 1): Keras reshapes its (17,) targets to the output
