"""Stack Overflow 47352366 (https://stackoverflow.com/questions/47352366), buggy: a ReLU on the class outputs.

A TensorFlow-tutorial CNN for MNIST, rewritten in Keras, ends in Dense(10, activation='relu') under
categorical_crossentropy. Keras rescales the ten ReLU outputs to sum to 1 and clips them at 1e-7: a class whose
ReLU is 0 gets probability 1e-7 and no gradient, and a row whose ten ReLUs are all 0 gives 0/0. The network
trains slowly and badly (the post: far slower to reach the tutorial's accuracy).
Fix (fixed.py, the benchmark's correct code): Dense(10, activation='softmax'). The post's answer is about the
kernel size, the softmax is in a comment (HowRealAreThey audit); the benchmark follows the comment, and so does
this port. Ground truth (DeepFD): act epoch (the correct code keeps the 600 steps, so does fixed.py).

Porting: task = multi-class, 10 digits. A ReLU does not pair with categorical_crossentropy, so nn.ReLU stays as
the model's last module, the loss is Keras's categorical_crossentropy on its outputs (kerasport; a NaN where all
ten are 0, as in Keras), and the targets are float one-hot rows (B, 10), as Keras had them. MNIST is replaced by
scikit-learn's digits (8x8 in [0, 1]: the convolutions and pools run on 8x8, the 1024-unit Dense sees 2*2*64),
and the 600 train_on_batch steps of 50 by 17 epochs of 1797 digits in batches of 50 (612 steps), so the number
of optimizer steps is kept (see s47352366_data.py). Keras inits and Constant(0.1) biases are in the data module.
Adam at Keras's defaults. The program only prints accuracy on training batches: no validation(). It has no fixed
seed; the runner seeds every run.
"""

from s47352366_data import BATCH_SIZE, EPOCHS, ONE_HOT, Net, X
from torch import nn

from benchmarks.realbugs.kerasport import adam, categorical_crossentropy, epoch_batches, fit

loss = categorical_crossentropy


def model():
    return Net(head=nn.ReLU())  # the bug: a ReLU on the outputs of categorical_crossentropy


def batches():
    return epoch_batches(X, ONE_HOT, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, ONE_HOT, EPOCHS, BATCH_SIZE)
