"""The model families of the grid; every constructor carries the model-side fault knobs.

Faults that live in the model (too narrow, dead ReLU units, frozen layers, a deep stack with a bad
initialization, saturating activations, a softmax before the loss, dropout) are arguments here, so a fault
config only overrides `model.*` values and no fault needs code of its own. `MLP` is the family the rules are
tuned on; the other families put their own encoder in front of the same MLP head, so every knob means the
same thing in every family.
"""

import itertools
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
# What the head hands to the loss: its logits, or an activation applied after it (the output-activation faults).
OUTPUTS = {
    "logits": None,
    "softmax": lambda z: z.softmax(dim=1),
    "log_softmax": lambda z: z.log_softmax(dim=1),  # for NLLLoss, which takes log-probabilities
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}
# How every Linear layer's weights start: PyTorch's default (uniform in +-1/sqrt(fan_in)), or Keras's default
# (glorot-uniform, in +-sqrt(6 / (fan_in + fan_out))), which programs ported from Keras use with zero biases.
WEIGHT_INITS = {
    "default": None,
    "glorot_uniform": nn.init.xavier_uniform_,
}


class MLP(nn.Module):
    """Linear-activation blocks followed by a linear head.

    hidden: widths of the hidden layers (a long list makes a deep stack).
    activation: relu, tanh or sigmoid, after every hidden layer.
    weight_init: "default" (PyTorch's) or "glorot_uniform" (Keras's), for the hidden layers and the head.
    init_gain: multiplies the initial hidden weights; far above 1 in a deep ReLU stack the
        signal grows layer after layer (exploding), with tanh the units start saturated.
    bias_init: if set, every hidden bias starts at this constant (a large negative value leaves the ReLU
        units inactive for every input, so no gradient reaches them).
    frozen_layers: indices of hidden Linear layers whose parameters get requires_grad=False, as when a
        fine-tuning script freezes a backbone and never unfreezes it.
    dropout: probability of the Dropout after every hidden activation (0: none).
    output: "logits", or an activation after the head: "softmax" for a model that ends in a softmax although its
        loss, `cross_entropy`, applies one itself (the double softmax); "relu", "sigmoid" or "tanh" for an
        activation on the output layer, whose range the targets must lie in.
    output_bias: if set, the head's biases start at this constant (with output "relu", a negative value leaves
        every output at 0 for every input: the output can no longer depend on the input).
    width_per_class: if set, replaces `hidden` by one layer of max(1, round(width_per_class x n_classes))
        units: a bottleneck sized against the task (0.4 gives 4 units for 10 classes).
    ignore_inputs: forward replaces its inputs by zeros before the first layer (a placeholder left from testing
        the shapes, a mask that zeros every feature): the model can learn only the class prior. The other families
        take it too and replace their own inputs, before their encoder.
    """

    def __init__(
        self,
        n_inputs: int,
        n_classes: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "relu",
        init_gain: float = 1.0,
        bias_init: float | None = None,
        frozen_layers: Sequence[int] = (),
        dropout: float = 0.0,
        output: str = "logits",
        width_per_class: float | None = None,
        output_bias: float | None = None,
        weight_init: str = "default",
        ignore_inputs: bool = False,
    ):
        super().__init__()
        self.ignore_inputs = ignore_inputs
        if width_per_class is not None:
            hidden = [max(1, round(width_per_class * n_classes))]
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}: choose {', '.join(ACTIVATIONS)}")
        if output not in OUTPUTS:
            raise ValueError(f"unknown output {output!r}: choose {', '.join(OUTPUTS)}")
        if weight_init not in WEIGHT_INITS:
            raise ValueError(f"unknown weight_init {weight_init!r}: choose {', '.join(WEIGHT_INITS)}")
        init = WEIGHT_INITS[weight_init]
        unknown = set(frozen_layers) - set(range(len(hidden)))
        if unknown:
            raise ValueError(f"frozen_layers {sorted(unknown)} name no hidden layer (0..{len(hidden) - 1})")
        widths = [n_inputs, *hidden]
        blocks: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
            linear = nn.Linear(fan_in, fan_out)
            if init is not None:
                init(linear.weight)
            with torch.no_grad():
                linear.weight.mul_(init_gain)
            if bias_init is not None:
                nn.init.constant_(linear.bias, bias_init)
            if i in frozen_layers:
                linear.requires_grad_(False)
            blocks += [linear, ACTIVATIONS[activation]()]
            if dropout > 0:
                blocks.append(nn.Dropout(dropout))
        head = nn.Linear(widths[-1], n_classes)
        if init is not None:
            init(head.weight)
        if output_bias is not None:
            nn.init.constant_(head.bias, output_bias)
        blocks.append(head)
        self.net = nn.Sequential(*blocks)
        self.output = output
        self._activation = OUTPUTS[output]

    def forward(self, x):
        if self.ignore_inputs:
            x = torch.zeros_like(x)
        logits = self.net(x)
        return logits if self._activation is None else self._activation(logits)


class SmallCNN(nn.Module):
    """A small convolutional encoder for square single-channel images, then the MLP head.

    Each row of `n_inputs` features is read as one s x s image (s = sqrt(n_inputs), scikit-learn's digits
    give 8 x 8). The encoder is 3x3 convolutions (padding 1), each followed by an `nn.ReLU` module, and one
    2x2 max pooling; its flattened output feeds an `MLP` head built from the remaining arguments, which mean
    exactly what they mean for `MLP` and apply to the head only (so `frozen_layers=[0, 1]` freezes the
    head's first two hidden layers, `bias_init` sets the head's hidden biases).

    channels: output channels of the convolutions, one per convolution. The default, one convolution of 8
        channels, keeps the encoder small for two faults: the head holds most of the parameters (frozen
        layers 0 and 1 are 94% of them), and a narrow head still limits the model (with two convolutions of
        16 and 32 channels, some seeds reached 99% training accuracy on digits with hidden=[4]).
    """

    def __init__(
        self, n_inputs: int, n_classes: int, channels: Sequence[int] = (8,), ignore_inputs: bool = False, **head
    ):
        super().__init__()
        self.ignore_inputs = ignore_inputs
        side = math.isqrt(n_inputs)
        if side * side != n_inputs:
            raise ValueError(
                f"SmallCNN reads each row as a square image, but n_inputs={n_inputs} is not a perfect square "
                "(8x8 digits give 64)"
            )
        if not channels:
            raise ValueError("SmallCNN needs at least one convolution: channels is empty")
        layers: list[nn.Module] = []
        fan_in = 1
        for width in channels:
            conv = nn.Conv2d(fan_in, width, kernel_size=3, padding=1)
            # He initialization keeps the signal at about unit scale through the ReLUs, so the head sees inputs
            # on the scale of standardized features, as the MLP does, and each knob's magnitude (bias -3,
            # init_gain) has the effect it has in the MLP. PyTorch's default would shrink it at every layer.
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            nn.init.zeros_(conv.bias)
            layers += [conv, nn.ReLU()]
            fan_in = width
        # ceil_mode: any side, odd or 1, pools to ceil(side / 2) instead of dropping the last row and column.
        layers += [nn.MaxPool2d(2, ceil_mode=True), nn.Flatten()]
        self.side = side
        self.encoder = nn.Sequential(*layers)
        encoded = channels[-1] * math.ceil(side / 2) ** 2
        self.head = MLP(encoded, n_classes, **head)

    def forward(self, x):
        x = torch.zeros_like(x) if self.ignore_inputs else x
        return self.head(self.encoder(x.reshape(-1, 1, self.side, self.side)))


class GRUClassifier(nn.Module):
    """A GRU that reads each row as a sequence of scalar steps, then the MLP head on its last hidden state.

    A row of `n_inputs` features is T = n_inputs steps of one value each. The GRU's final hidden state,
    normalized to zero mean and unit variance over its features (a LayerNorm without learned parameters),
    feeds an `MLP` head built from the remaining arguments, which mean exactly what they mean for `MLP` and
    apply to the head only. The GRU's own gates are not activation modules, so the activation instruments
    (dead ReLU units, saturation, growth) see the head alone.

    size: width of the GRU's hidden state. The default, 16, keeps the encoder small so that the head holds
        most of the parameters (frozen layers 0 and 1 are 77% of them, 62% with a state of 32).
    """

    def __init__(self, n_inputs: int, n_classes: int, size: int = 16, ignore_inputs: bool = False, **head):
        super().__init__()
        self.ignore_inputs = ignore_inputs
        self.encoder = nn.GRU(1, size, batch_first=True)
        # At initialization the GRU's state is small (RMS 0.13 to 0.16) and much the same for every input, so
        # without this the head would start with about 40% of its ReLU units never active on a probe batch
        # (20 to 33% with it; about 1% in the MLP) and its knobs would act on inputs several times smaller
        # than the standardized features the MLP reads (tanh at init_gain 4 would not saturate). Normalizing
        # the state gives the head unit-scale inputs.
        self.norm = nn.LayerNorm(size, elementwise_affine=False)
        self.head = MLP(size, n_classes, **head)

    def forward(self, x):
        x = torch.zeros_like(x) if self.ignore_inputs else x
        _, last = self.encoder(x.unsqueeze(-1))  # last: (layers, N, size); the top layer's state after step T
        return self.head(self.norm(last[-1]))


class TransformerClassifier(nn.Module):
    """A transformer encoder that reads each row as a sequence of scalar steps, then the MLP head on its mean.

    A row of `n_inputs` features is T = n_inputs steps of one value each. Each step's value is embedded by a
    Linear(1, size) and a learned embedding of its position is added; `layers` pre-LN `nn.TransformerEncoderLayer`s
    (self-attention with `heads` heads, a feed-forward block of 2 x size GELU units, no dropout) read the steps;
    their outputs, averaged over the steps and normalized to zero mean and unit variance over their features (a
    LayerNorm without learned parameters), feed an `MLP` head built from the remaining arguments, which mean
    exactly what they mean for `MLP` and apply to the head only. The encoder's activations are functions, not
    activation modules, so the activation instruments (dead ReLU units, saturation, growth) see the head alone.

    size: width of the encoder (the embedding, attention and residual width).
    layers: how many encoder layers.
    heads: attention heads per layer; size must be a multiple of it.
    The defaults, width 8 and 2 layers of 2 heads, keep the encoder small so that the head holds most of the
    parameters, as the frozen-parameter fault needs: frozen layers 0 and 1 are 70% of them on the 18 steps of the
    sequence task and 67% on 64 steps, where the position embedding is larger (width 16 in 2 layers of 4 heads:
    49% and 46%). They keep a step cheap too: a training step on a batch of 64 takes about 5 ms on one thread
    (width 32: 10 ms), and the model still learns the sequence task (validation accuracy 1.0 in seed 0's healthy cell).
    """

    def __init__(
        self,
        n_inputs: int,
        n_classes: int,
        size: int = 8,
        layers: int = 2,
        heads: int = 2,
        ignore_inputs: bool = False,
        **head,
    ):
        super().__init__()
        self.ignore_inputs = ignore_inputs
        if layers < 1:
            raise ValueError(f"TransformerClassifier needs at least one encoder layer, got layers={layers}")
        if heads < 1 or size % heads:
            raise ValueError(f"size={size} must be a multiple of heads={heads} (each head reads size / heads features)")
        self.embed = nn.Linear(1, size)
        # Small at the start (0.02, as BERT and GPT-2 start theirs), so each step starts as its value; the
        # positions matter once training makes them (counting the ones needs none).
        self.position = nn.Parameter(0.02 * torch.randn(n_inputs, size))
        stack = []
        for _ in range(layers):
            layer = nn.TransformerEncoderLayer(
                size, heads, dim_feedforward=2 * size, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            )
            stack.append(layer)
        self.encoder = nn.Sequential(*stack)
        # At initialization the steps' mean is on a smaller scale than standardized features (RMS 0.49 to 0.67
        # over seeds 0 to 2, on 256 rows of the sequence task), so the head's knobs would act on smaller inputs
        # than the MLP's do: tanh at init_gain 4 saturates 11 to 21% of the head's outputs without this, 29 to
        # 31% with it, 27 to 28% in the MLP. Normalizing the mean gives the head unit-scale inputs. It does not
        # make the head's start like the MLP's in every way: the mean is much the same for every input (its
        # spread over the rows, 0.16 to 0.23, is a third of its RMS), so 28 to 31% of the head's ReLU units are
        # never active on that batch at the start (29 to 36% without the norm; none in the MLP).
        self.norm = nn.LayerNorm(size, elementwise_affine=False)
        self.head = MLP(size, n_classes, **head)

    def forward(self, x):
        x = torch.zeros_like(x) if self.ignore_inputs else x
        steps = self.embed(x.unsqueeze(-1)) + self.position  # (N, T, size)
        return self.head(self.norm(self.encoder(steps).mean(dim=1)))


NORMS = ("pre", "post")  # where a transformer block's LayerNorms sit: before each sublayer, or after its residual sum


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention over a sequence, each position reading only those before it where `causal`."""

    def __init__(self, size: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(size, 3 * size)
        self.out = nn.Linear(size, size)

    def forward(self, x):
        batch, steps, size = x.shape
        q, k, v = self.qkv(x).view(batch, steps, 3, self.heads, size // self.heads).permute(2, 0, 3, 1, 4)
        mixed = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(mixed.transpose(1, 2).reshape(batch, steps, size))


class DecoderBlock(nn.Module):
    """Self-attention then a feed-forward block of 4 x size GELU units, each around a residual sum.

    norm "pre": x + sublayer(LayerNorm(x)) (GPT-2's order: the residual stream itself is never normalized);
    "post": LayerNorm(x + sublayer(x)) (the original transformer's order, which at depth needs a warmup).
    """

    def __init__(self, size: int, heads: int, causal: bool, norm: str, dropout: float = 0.0):
        super().__init__()
        self.pre = norm == "pre"
        self.norm1, self.norm2 = nn.LayerNorm(size), nn.LayerNorm(size)
        self.attention = CausalSelfAttention(size, heads, causal)
        self.grow, self.shrink = nn.Linear(size, 4 * size), nn.Linear(4 * size, size)
        # GPT-2's residual dropout: on each sublayer's output before it joins the stream. Modules, not functions,
        # so the mode instrument sees them (and a p of 0 adds none: nothing to see).
        self.drop1 = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.drop2 = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def feed_forward(self, x):
        return self.shrink(nn.functional.gelu(self.grow(x)))

    def forward(self, x):
        if self.pre:
            x = x + self.drop1(self.attention(self.norm1(x)))
            return x + self.drop2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attention(x)))
        return self.norm2(x + self.drop2(self.feed_forward(x)))


class CausalLM(nn.Module):
    """A small GPT-style decoder: next-token logits (N, T, V) for each of the row's T tokens.

    A row of `n_inputs` values is T = n_inputs token ids (bytes for the text datasets; any float input is cast to
    integers); `n_classes` is the vocabulary V. Token embeddings plus learned position embeddings, `layers`
    decoder blocks (`DecoderBlock`), a final LayerNorm, and a linear map to the vocabulary whose weight is the
    token embedding's (tied, as GPT-2 ties them). Weights start as GPT-2's do: normal with standard deviation
    0.02, the residual projections' shrunk by sqrt(2 x layers), biases at 0. The activations are functions, not
    activation modules, so the activation instruments see nothing to read; the mode instrument reads the dropout
    modules where `dropout` adds them.

    size: the width (embedding, attention and residual width); heads: attention heads per layer (size must be a
        multiple); layers: decoder blocks.
    The knobs of this family's faults:
    causal: each position attends only to itself and the positions before it (False: to the whole window, so
        position t reads token t + 1, the byte it has to predict: the answer leaks into the input).
    norm: "pre" or "post" (see `DecoderBlock`); final_norm: the LayerNorm after the last block (pre-LN only:
        a post-LN block ends in one already).
    tied: the output map shares the token embedding's weight (False: a weight of its own).
    The knobs of the faults it shares with the other families:
    dropout: probability of GPT-2's residual dropout in every block (0: none, and no Dropout module); the mode
        faults set it so that train and eval mode differ.
    frozen_layers: indices of decoder blocks whose parameters get requires_grad=False (the embeddings and the
        final LayerNorm still learn), as when a script freezes layers of a model it meant to fine-tune whole.
    """

    def __init__(
        self,
        n_inputs: int,
        n_classes: int,
        size: int = 64,
        layers: int = 2,
        heads: int = 4,
        causal: bool = True,
        norm: str = "pre",
        final_norm: bool = True,
        tied: bool = True,
        dropout: float = 0.0,
        frozen_layers: Sequence[int] = (),
    ):
        super().__init__()
        if layers < 1:
            raise ValueError(f"CausalLM needs at least one decoder block, got layers={layers}")
        if heads < 1 or size % heads:
            raise ValueError(f"size={size} must be a multiple of heads={heads} (each head reads size / heads features)")
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}: choose {', '.join(NORMS)}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        unknown = set(frozen_layers) - set(range(layers))
        if unknown:
            raise ValueError(f"frozen_layers {sorted(unknown)} name no decoder block (0..{layers - 1})")
        self.embed = nn.Embedding(n_classes, size)
        self.position = nn.Parameter(torch.zeros(n_inputs, size))
        self.blocks = nn.Sequential(*(DecoderBlock(size, heads, causal, norm, dropout) for _ in range(layers)))
        self.norm = nn.LayerNorm(size) if final_norm and norm == "pre" else nn.Identity()
        self.head = nn.Linear(size, n_classes, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.position, std=0.02)
        for block in self.blocks:  # each residual sum adds two projections per block: keep the stream's scale
            for projection in (block.attention.out, block.shrink):
                nn.init.normal_(projection.weight, std=0.02 / math.sqrt(2 * layers))
        self.tied = tied
        if tied:
            self.head.weight = self.embed.weight
        for i in frozen_layers:
            self.blocks[i].requires_grad_(False)

    def forward(self, x):
        tokens = x.long()
        hidden = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.norm(self.blocks(hidden)))

    def copy_head(self) -> None:
        """Give the output map a copy of its weight as a parameter of its own (the fault "tied weights broken").

        Called after the optimizer was built (as when a script re-ties or re-wraps the head after making the
        optimizer), the copy is a parameter the optimizer does not hold: backward fills its .grad, no step moves
        it, and only the input embedding learns.
        """
        self.head.weight = nn.Parameter(self.head.weight.detach().clone())
        self.tied = False


def build_model(spec: Mapping, n_inputs: int, n_classes: int) -> nn.Module:
    """The model a `model` config describes (a conf/model/ option: its `_target_` class and knobs), for this task.

    `spec` is the composed `cfg.model` or a plain dict of it; its `name` (the option's own name) is no argument.
    """
    from hydra.utils import instantiate  # only here: the doctor imports this module and never composes a config
    from omegaconf import DictConfig, OmegaConf

    values = OmegaConf.to_container(spec, resolve=True) if isinstance(spec, DictConfig) else dict(spec)
    values.pop("name", None)
    return instantiate(values, n_inputs=n_inputs, n_classes=n_classes)
