"""The digits ResNet of examples/digits_resnet: a small residual network for scikit-learn's 8x8
digits, in PyTorch, and the data it trains on.

    DigitsResNet   stem (conv 3x3, 1 -> 16, BatchNorm, ReLU), a residual block at 16 channels,
                   max pooling 8x8 -> 4x4, a residual block 16 -> 32 (its shortcut a 1x1 conv +
                   BatchNorm), global average pooling, a linear layer to the 10 classes: 6 convs,
                   6 BatchNorms, 19.7k parameters.
    load_splits    the 1797 digits as float32 images [N, 1, 8, 8] (pixels / 16) and int64 labels,
                   split 80/20 (stratified, fixed seed) into train (1437) and test (360).
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 10


class BasicBlock(nn.Module):
    """He et al. 2016's basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the
    shortcut the identity, or a 1x1 conv + BatchNorm when the channel count changes."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity() if cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class DigitsResNet(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block1 = BasicBlock(width, width)
        self.pool = nn.MaxPool2d(2)
        self.block2 = BasicBlock(width, 2 * width)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, NUM_CLASSES)

    def forward(self, image):
        x = self.block2(self.pool(self.block1(self.stem(image))))
        return self.fc(self.gap(x).flatten(1))


def batch_norms(model):
    """The model's BatchNorm2d modules by their state_dict prefix (bn.running_mean's `bn`)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}


def load_splits(test_fraction=0.2, seed=0):
    """(train_images, train_labels, test_images, test_labels); raises ImportError without scikit-learn."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    images = (d.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(images, labels, test_size=test_fraction, random_state=seed,
                                          stratify=labels)
    return xtr, ytr, xte, yte


def export_training_onnx(model, path, batch):
    """torch.onnx.export in training mode (BatchNormalization keeps training_mode = 1: batch
    statistics, running statistics updated), opset 17, input `image` [batch, 1, 8, 8] with a dynamic
    batch dim, output `logits` [batch, 10]. Note that the exporter runs the model once in training
    mode, so the module's running statistics afterwards are those of one forward pass on zeros: a
    PyTorch replay starts from the module's state after this call."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(batch, 1, 8, 8),), path, input_names=["image"],
                          output_names=["logits"], opset_version=17,
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING)
