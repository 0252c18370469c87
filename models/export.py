#!/usr/bin/python3
"""Export onnxtrain's test models from PyTorch to ONNX, with golden outputs.

Run from anywhere with the Debian PyTorch (1.13) interpreter:

    /usr/bin/python3 models/export.py            # every model
    /usr/bin/python3 models/export.py mlp vit_tiny  # only these

For every model <name> it writes, next to this script:

    <name>/<name>_eval.onnx   exported with TrainingMode.EVAL (constant folding on)
    <name>/<name>_train.onnx  exported with TrainingMode.TRAINING, do_constant_folding=False
    <name>/golden.npz         inputs, eval-mode outputs and training-mode outputs

Everything is deterministic: each model is built right after torch.manual_seed(0),
inputs come from a fixed seed, computation is single-threaded float32, and the
.npz is written with fixed zip timestamps, so rerunning the script reproduces
the committed files byte for byte.
"""

import copy
import io
import os
import sys
import warnings
import zipfile

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, conv1x1
from torchvision.models.vision_transformer import VisionTransformer

OPSET = 17
HERE = os.path.dirname(os.path.abspath(__file__))

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
# The exporter warns about every BatchNorm buffer it drops and every prim::Constant
# it cannot shape-infer; none of it matters for these models.
warnings.filterwarnings("ignore", category=UserWarning)


# ---------------------------------------------------------------------------
# Models


class MLP(nn.Module):
    """784-64-32-10 multilayer perceptron with ReLU."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CifarResNet(nn.Module):
    """ResNet-8 for CIFAR: a 3x3 stem and three stages of one BasicBlock
    (widths 8/16/32, stride 1/2/2), global average pooling, a linear head."""

    def __init__(self, widths=(8, 16, 32), num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        layers = []
        inplanes = widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            downsample = None
            if stride != 1 or inplanes != w:
                downsample = nn.Sequential(conv1x1(inplanes, w, stride), nn.BatchNorm2d(w))
            layers.append(BasicBlock(inplanes, w, stride, downsample))
            inplanes = w
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


class SmallResNet18(nn.Module):
    """torchvision's ResNet-18 topology (7x7/2 stem, 3x3/2 max pool, four
    stages of two BasicBlocks, global average pooling, linear head) with the
    widths cut from 64/128/256/512 to 8/16/32/64. Built from torchvision's own
    BasicBlock; the module and parameter names follow torchvision's ResNet."""

    def __init__(self, widths=(8, 16, 32, 64), blocks=(2, 2, 2, 2), num_classes=10):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], blocks[0], 1)
        self.layer2 = self._make_layer(widths[1], blocks[1], 2)
        self.layer3 = self._make_layer(widths[2], blocks[2], 2)
        self.layer4 = self._make_layer(widths[3], blocks[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3], num_classes)
        # torchvision's initialisation.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes, stride), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class Attention(nn.Module):
    """Multi-head self-attention written out (fused qkv projection), the way
    timm's ViT does it; exports as MatMul/Transpose/Softmax with the usual
    Shape->Gather->Concat->Reshape subgraphs for the batch dimension."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), x + mlp(ln(x)); exact GELU."""

    def __init__(self, dim, heads, mlp_ratio=2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class ViTTiny(nn.Module):
    """A small Vision Transformer: 8x8 patches of a 3x32x32 image embedded by
    a strided Conv2d (16 patches), a class token, learned position embedding,
    two pre-norm blocks (dim 32, 2 heads, MLP 64, exact GELU), final LayerNorm,
    linear head on the class token."""

    def __init__(self, image=32, patch=8, dim=32, depth=2, heads=2, num_classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # B, N, C
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        x = self.blocks(x)
        x = self.norm(x)
        return self.head(x[:, 0])


def vit_torchvision():
    """torchvision's VisionTransformer at a small size: 8x8 patches of a
    3x32x32 image, two blocks of width 32 with 2 heads (nn.MultiheadAttention,
    batch second inside: its out-projection is a Gemm over (T*B, E) rows),
    MLP 64, class-token head. torchvision zero-initialises the head and the
    class token; both get small random values here so that every gradient
    is non-zero."""
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                              num_classes=10)
    with torch.no_grad():
        model.heads.head.weight.normal_(0, 0.2)
        model.heads.head.bias.normal_(0, 0.2)
        model.class_token.normal_(0, 0.02)
    return model


class FashionCNN(nn.Module):
    """Fashion-MNIST CNN: (conv5x5 pad 2 - ReLU - maxpool 2) x2, linear.
    1x28x28 -> 8x14x14 -> 16x7x7 -> 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


class ConvTransposeResize(nn.Module):
    """Upsampling fixture: Conv2d, ConvTranspose2d (stride 2, output_padding 1),
    nearest 2x Resize, a conv, bilinear (align_corners=False) resize to 1.5x.
    3x8x8 -> 4x8x8 -> 4x16x16 -> 4x32x32 -> 2x32x32 -> 2x48x48."""

    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 4, kernel_size=3, stride=2, padding=1, output_padding=1)
        self.conv_out = nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.conv_in(x))
        x = F.relu(self.up(x))
        x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        x = self.conv_out(x)
        return F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=False)


class TransformerLoss(nn.Module):
    """A tiny causal-free language-model-style transformer that computes its own
    loss: token embedding (vocab 16, dim 16) + learned positions (8), one
    pre-norm block (2 heads, exact GELU), LayerNorm, linear to the vocabulary,
    then F.cross_entropy(logits, labels) averaged over every token. Exports a
    SoftmaxCrossEntropyLoss node."""

    def __init__(self, vocab=16, seq=8, dim=16, heads=2):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, seq, dim) * 0.1)
        self.block = Block(dim, heads)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x, labels):
        h = self.embed(x) + self.pos
        h = self.norm(self.block(h))
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, self.vocab), labels.reshape(-1))


class RecurrentClassifier(nn.Module):
    """A sequence classifier with both recurrent layers PyTorch exports: a
    bidirectional LSTM (input 5, hidden 8, batch first) feeding a GRU
    (hidden 8), whose last time step goes through a linear layer to 10
    classes. Input [batch, 6, 5]."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 8, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(16, 8, batch_first=True)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        return self.head(h[:, -1])


class SpatialTransformer(nn.Module):
    """A spatial transformer (Jaderberg et al.): a conv, a localisation head
    (average pool, linear to the 6 numbers of an affine map, started at the
    identity) whose map warps the conv's features with F.grid_sample
    (bilinear, zeros padding, align_corners=False), then a strided conv and
    a linear classifier. The sampling grid is the map applied to a constant
    base grid (a MatMul: affine_grid has no ONNX export at opset 17), so the
    gradient reaches the localisation head through GridSample's grid.
    1x12x12 -> 4x12x12 -> warped 4x12x12 -> 8x6x6 -> 10."""

    def __init__(self, size=12):
        super().__init__()
        self.size = size
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.loc = nn.Linear(4 * 3 * 3, 6)
        with torch.no_grad():
            self.loc.weight.mul_(0.1)
            self.loc.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))
        self.conv2 = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        theta = self.loc(torch.flatten(F.avg_pool2d(h, 4), 1)).reshape(-1, 2, 3)
        n = self.size
        # Pixel centres in [-1, 1] (align_corners=False), rows (x, y, 1).
        c = (torch.arange(n, dtype=torch.float32) * 2 + 1) / n - 1
        base = torch.stack([c.repeat(n), c.repeat_interleave(n), torch.ones(n * n)], 1)
        grid = torch.matmul(base, theta.transpose(1, 2)).reshape(-1, n, n, 2)
        h = F.grid_sample(h, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        h = F.relu(self.conv2(h))
        return self.fc(torch.flatten(h, 1))


# ---------------------------------------------------------------------------
# Export machinery


def randomize_batchnorm(model, gen):
    """Give every BatchNorm non-trivial affine parameters and running
    statistics, so that eval-mode and training-mode outputs differ and both
    exercise the normalisation (fresh BN has mean 0, var 1, weight 1, bias 0)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.weight.copy_(1 + 0.2 * torch.randn(c, generator=gen))
                m.bias.copy_(0.2 * torch.randn(c, generator=gen))
                m.running_mean.copy_(0.2 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))


def forward(model, inputs, train):
    """Run a copy of model (so running statistics are left alone)."""
    m = copy.deepcopy(model)
    m.train(train)
    with torch.no_grad():
        out = m(*inputs)
    if not isinstance(out, tuple):
        out = (out,)
    return [o.detach().to(torch.float32).numpy() if o.is_floating_point() else o.detach().numpy() for o in out]


def export(model, inputs, path, mode, input_names, output_names, dynamic_axes):
    m = copy.deepcopy(model)
    kwargs = dict(
        export_params=True,
        opset_version=OPSET,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=dynamic_axes,
        training=mode,
    )
    if mode == torch.onnx.TrainingMode.TRAINING:
        kwargs["do_constant_folding"] = False
        m.train()
    else:
        kwargs["do_constant_folding"] = True
        m.eval()
    torch.onnx.export(m, tuple(inputs), path, **kwargs)
    proto = onnx.load(path)
    if mode == torch.onnx.TrainingMode.TRAINING:
        # Tracing in train mode runs one forward pass, which moves every
        # BatchNorm's running statistics a step towards the example batch
        # before they are written out. Put the model's own values back, so
        # that the eval and train exports hold the same starting state.
        state = model.state_dict()
        changed = False
        for init in proto.graph.initializer:
            if init.name in state:
                want = state[init.name].detach().numpy()
                got = numpy_helper.to_array(init)
                if not np.array_equal(got, want):
                    assert init.name.endswith(("running_mean", "running_var")), init.name
                    init.CopyFrom(numpy_helper.from_array(want.astype(got.dtype), init.name))
                    changed = True
        if changed:
            onnx.save(proto, path)
    onnx.checker.check_model(proto)
    got_in = [i.name for i in proto.graph.input]
    got_out = [o.name for o in proto.graph.output]
    assert got_in == input_names, (path, got_in)
    assert got_out == output_names, (path, got_out)


def save_npz(path, arrays):
    """np.savez, but with fixed zip timestamps so the bytes are reproducible."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.array(arrays[name], order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def build(name, ctor, make_inputs, input_names, output_names, modes=("eval", "train"), batchnorm=False):
    torch.manual_seed(0)
    model = ctor()
    gen = torch.Generator().manual_seed(1)
    if batchnorm:
        randomize_batchnorm(model, gen)
    inputs = make_inputs(gen)
    model.eval()

    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    dyn = {n: {0: "batch"} for n in input_names}
    for n in output_names:
        # A scalar loss has no batch axis.
        if name != "transformer_loss":
            dyn[n] = {0: "batch"}

    golden = {}
    for n, t in zip(input_names, inputs):
        golden[n] = t.numpy()
    # Golden outputs are computed from the untouched model before exporting
    # (a TRAINING export runs the model in train mode, which would update
    # BatchNorm running statistics in place if it were not given a copy).
    for n, o in zip(output_names, forward(model, inputs, train=False)):
        golden[n] = o
    if "train" in modes:
        for n, o in zip(output_names, forward(model, inputs, train=True)):
            golden[n + "__train"] = o

    if "eval" in modes:
        export(model, inputs, os.path.join(out_dir, name + "_eval.onnx"),
               torch.onnx.TrainingMode.EVAL, input_names, output_names, dyn)
    if "train" in modes:
        export(model, inputs, os.path.join(out_dir, name + "_train.onnx"),
               torch.onnx.TrainingMode.TRAINING, input_names, output_names, dyn)
    save_npz(os.path.join(out_dir, "golden.npz"), golden)

    sizes = ", ".join(
        "%s %d B" % (f, os.path.getsize(os.path.join(out_dir, f))) for f in sorted(os.listdir(out_dir))
    )
    print("%-22s %s" % (name, sizes))


def randn(*shape):
    return lambda gen: [torch.randn(*shape, generator=gen)]


MODELS = {
    "mlp": dict(ctor=MLP, make_inputs=randn(4, 784), input_names=["input"], output_names=["output"]),
    "cifar_resnet": dict(ctor=CifarResNet, make_inputs=randn(4, 3, 32, 32), input_names=["input"],
                         output_names=["output"], batchnorm=True),
    "resnet18_small": dict(ctor=SmallResNet18, make_inputs=randn(2, 3, 64, 64), input_names=["input"],
                           output_names=["output"], batchnorm=True),
    "vit_tiny": dict(ctor=ViTTiny, make_inputs=randn(2, 3, 32, 32), input_names=["input"], output_names=["output"]),
    "vit_tv": dict(ctor=vit_torchvision, make_inputs=randn(2, 3, 32, 32), input_names=["input"],
                   output_names=["output"], modes=("train",)),
    "fmnist_cnn": dict(ctor=FashionCNN, make_inputs=randn(4, 1, 28, 28), input_names=["input"],
                       output_names=["output"]),
    "convtranspose_resize": dict(ctor=ConvTransposeResize, make_inputs=randn(2, 3, 8, 8), input_names=["input"],
                                 output_names=["output"]),
    "rnn_seq": dict(ctor=RecurrentClassifier, make_inputs=randn(4, 6, 5), input_names=["input"],
                    output_names=["output"]),
    "stn": dict(ctor=SpatialTransformer, make_inputs=randn(4, 1, 12, 12), input_names=["input"],
                output_names=["output"]),
    "transformer_loss": dict(
        ctor=TransformerLoss,
        make_inputs=lambda gen: [torch.randint(0, 16, (3, 8), generator=gen),
                                 torch.randint(0, 16, (3, 8), generator=gen)],
        input_names=["x", "labels"],
        output_names=["loss"],
        modes=("train",),
    ),
}


def main(argv):
    names = argv or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit("export.py: unknown model %r (have %s)" % (n, ", ".join(MODELS)))
    for n in names:
        build(n, **MODELS[n])


if __name__ == "__main__":
    main(sys.argv[1:])
