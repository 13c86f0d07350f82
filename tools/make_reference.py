#!/usr/bin/python3
"""make_reference.py — write the PyTorch reference tensors that test/test_layers.c and
test/test_model.c compare src/nn against.

Run with the Debian interpreter (it has python3-torch and python3-h5py; the pyenv `python3` on
PATH has no torch):

    /usr/bin/python3 tools/make_reference.py [outdir]      # default: test/data
    /usr/bin/python3 tools/make_reference.py --bf16-only [outdir]   # only the *_bf16 datasets

Files (float32 unless noted, tensors in PyTorch's layouts: activations (N, C, H, W), conv weights
(O, I, kh, kw), fc weight (out, in)):

  layers.h5          one group per layer case:
                     conv_*   x, w, y, dy, dx, dw and attributes k, stride, pad
                     bn*      x, gamma, beta, rm0, rv0 (running stats before), y, dy, dx, dgamma,
                              dbeta, rm1, rv1 (after one training-mode forward); attr relu
                     relu*    x, y, dy, dx;  add_relu*  a, b, y = relu(a + b), dy, dsum
                     (*_c4: 4 channels, padded in 8-channel blocks)
                     maxpool* x, y, dy, dx and attributes k, stride, pad
                     avgpool  x, y (N, C), dy (N, C), dx          (global average pooling)
                     fc       x, w, b, y, dy, dx, dw, db
                     xent     logits, labels (int32), loss (mean over the batch), dlogits
  model_cifar.h5,    a whole torchvision ResNet-18 (BasicBlock, [2, 2, 2, 2]) at width w = 4,
  model_imagenet.h5  1 input channel, 10 classes; CIFAR stem (3x3/1 conv, no max-pool), 12x12
                     input, batch 4, or ImageNet stem (7x7/2 conv + 3x3/2 max-pool), 24x24, batch 8:
                     names (S64), shapes (n_tensors, 5: ndim then dims), params (state_dict
                     order, trainable tensors concatenated), bn0 (running mean/var of every BN,
                     state_dict order), x, y (int32), loss, logits, grads (same layout as params),
                     bn1 (running stats after the step), x_eval, y_eval, eval_logits, eval_loss
                     (mean; model.eval() with bn1). The same step and evaluation with every
                     convolution in dsgd-run's CPU bf16 (src/nn/layers.h, conv_init): loss_bf16,
                     logits_bf16, grads_bf16, bn1_bf16, eval_logits_bf16, eval_loss_bf16 (Bf16Conv
                     below: input, weight and output gradient rounded to bf16, products summed in
                     fp32, fp32 outputs).

The network is torchvision's own ResNet class and BasicBlock (torchvision/models/resnet.py),
only with the stage widths w, 2w, 4w, 8w, the input channels and the stem made parameters, so
its state_dict names, order and shapes are torchvision's; at w = 64, 3 input channels, ImageNet
stem and 1000 classes the script asserts that it equals torchvision.models.resnet18() key by key
(11,689,512 parameters). BN weights/biases and running statistics are randomised so that the tests
do not pass by accident with γ = 1, β = 0.
"""
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, ResNet

SEED = 20160604


def bf16(t):
    """Round to bf16 (nearest even) and back to fp32, as oneDNN's f32 -> bf16 reorder does."""
    return t.to(torch.bfloat16).float()


class Bf16ConvFn(torch.autograd.Function):
    """conv2d on bf16-rounded input and weight; backward from the bf16-rounded output gradient."""

    @staticmethod
    def forward(ctx, x, w, stride, padding):
        xr, wr = bf16(x), bf16(w)
        ctx.save_for_backward(xr, wr)
        ctx.stride, ctx.padding = stride, padding
        return F.conv2d(xr, wr, None, stride, padding)

    @staticmethod
    def backward(ctx, g):
        xr, wr = ctx.saved_tensors
        gr = bf16(g)
        gx = torch.nn.grad.conv2d_input(xr.shape, wr, gr, ctx.stride, ctx.padding)
        gw = torch.nn.grad.conv2d_weight(xr, wr.shape, gr, ctx.stride, ctx.padding)
        return gx, gw, None, None


class Bf16Conv(nn.Conv2d):
    def forward(self, x):
        return Bf16ConvFn.apply(x, self.weight, self.stride, self.padding)


class ResNetW(ResNet):
    """torchvision's ResNet with BasicBlock [2, 2, 2, 2] (ResNet-18), width w, in_c channels."""

    def __init__(self, width, in_c, num_classes, stem):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = width
        self.dilation = 1
        self.groups = 1
        self.base_width = 64
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_c, width, kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(in_c, width, kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(BasicBlock, width, 2)
        self.layer2 = self._make_layer(BasicBlock, 2 * width, 2, stride=2)
        self.layer3 = self._make_layer(BasicBlock, 4 * width, 2, stride=2)
        self.layer4 = self._make_layer(BasicBlock, 8 * width, 2, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width, num_classes)


def f32(t):
    return t.detach().cpu().numpy().astype(np.float32)


def put(g, **kw):
    for k, v in kw.items():
        if isinstance(v, torch.Tensor):
            v = f32(v)
        g.create_dataset(k, data=v)


def conv_case(f, name, n, ic, h, w, oc, k, s, p):
    x = torch.randn(n, ic, h, w, requires_grad=True)
    wt = (torch.randn(oc, ic, k, k) * (2.0 / (ic * k * k)) ** 0.5).requires_grad_()
    y = F.conv2d(x, wt, stride=s, padding=p)
    dy = torch.randn_like(y)
    y.backward(dy)
    g = f.create_group(name)
    g.attrs.update(k=k, stride=s, pad=p)
    put(g, x=x, w=wt, y=y, dy=dy, dx=x.grad, dw=wt.grad)


def bn_case(f, name, n, c, h, w, relu):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0, 0.3)
        bn.running_mean.normal_(0, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
    rm0, rv0 = bn.running_mean.clone(), bn.running_var.clone()
    x = (torch.randn(n, c, h, w) * 2 + 0.5).requires_grad_()
    y = bn(x)
    if relu:
        y = F.relu(y)
    dy = torch.randn_like(y)
    y.backward(dy)
    g = f.create_group(name)
    g.attrs.update(relu=int(relu))
    put(g, x=x, gamma=bn.weight, beta=bn.bias, rm0=rm0, rv0=rv0, y=y, dy=dy, dx=x.grad,
        dgamma=bn.weight.grad, dbeta=bn.bias.grad, rm1=bn.running_mean, rv1=bn.running_var)


def maxpool_case(f, name, n, c, h, w):
    x = torch.randn(n, c, h, w, requires_grad=True)
    y = F.max_pool2d(x, 3, 2, 1)
    dy = torch.randn_like(y)
    y.backward(dy)
    g = f.create_group(name)
    g.attrs.update(k=3, stride=2, pad=1)
    put(g, x=x, y=y, dy=dy, dx=x.grad)


def layer_cases(path):
    torch.manual_seed(SEED)
    with h5py.File(path, "w") as f:
        f.attrs["torch"] = str(torch.__version__)
        conv_case(f, "conv_3x3s1", 2, 8, 10, 10, 16, 3, 1, 1)
        conv_case(f, "conv_3x3s2", 2, 8, 10, 10, 16, 3, 2, 1)
        conv_case(f, "conv_1x1s2", 2, 8, 10, 10, 16, 1, 2, 0)
        conv_case(f, "conv_7x7s2", 2, 3, 16, 16, 8, 7, 2, 3)
        conv_case(f, "conv_3x3s1_c4", 2, 4, 6, 6, 4, 3, 1, 1)  # channels not a multiple of 8
        conv_case(f, "conv_1x1s2_c4", 4, 4, 12, 12, 8, 1, 2, 0)
        conv_case(f, "conv_3x3s1_c1", 4, 1, 12, 12, 16, 3, 1, 1)  # the CIFAR stem on 1-channel images
        bn_case(f, "bn", 4, 16, 5, 5, False)
        bn_case(f, "bnrelu", 4, 16, 5, 5, True)
        bn_case(f, "bn_c4", 3, 4, 3, 3, False)

        for name, c in (("relu", 8), ("relu_c4", 4)):
            x = torch.randn(2, c, 5, 5, requires_grad=True)
            y = F.relu(x)
            dy = torch.randn_like(y)
            y.backward(dy)
            put(f.create_group(name), x=x, y=y, dy=dy, dx=x.grad)

        for name, c in (("add_relu", 16), ("add_relu_c4", 4)):
            a = torch.randn(2, c, 4, 4)
            b = torch.randn(2, c, 4, 4)
            s = (a + b).requires_grad_()
            y = F.relu(s)
            dy = torch.randn_like(y)
            y.backward(dy)
            put(f.create_group(name), a=a, b=b, y=y, dy=dy, dsum=s.grad)

        maxpool_case(f, "maxpool_9", 2, 8, 9, 9)    # symmetric padding
        maxpool_case(f, "maxpool_12", 2, 8, 12, 12)  # right padding 0 (floor mode)
        maxpool_case(f, "maxpool_c4", 2, 4, 6, 6)

        x = torch.randn(2, 16, 3, 3, requires_grad=True)
        y = F.adaptive_avg_pool2d(x, 1).flatten(1)
        dy = torch.randn_like(y)
        y.backward(dy)
        put(f.create_group("avgpool"), x=x, y=y, dy=dy, dx=x.grad)

        fc = nn.Linear(32, 10)
        x = torch.randn(4, 32, requires_grad=True)
        y = fc(x)
        dy = torch.randn_like(y)
        y.backward(dy)
        put(f.create_group("fc"), x=x, w=fc.weight, b=fc.bias, y=y, dy=dy, dx=x.grad,
            dw=fc.weight.grad, db=fc.bias.grad)

        logits = (torch.randn(6, 10) * 10)
        logits[2, 3] = 120.0  # exp() overflows float32 unless the max is subtracted
        logits[4, :] = -100.0
        logits = logits.requires_grad_()
        labels = torch.tensor([0, 9, 3, 5, 1, 7])
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        put(f.create_group("xent"), logits=logits, labels=labels.numpy().astype(np.int32),
            loss=np.array([loss.item()], np.float32), dlogits=logits.grad)


def check_torchvision_equal():
    """At the paper's size, ResNetW must be torchvision's resnet18, name for name."""
    ours = ResNetW(64, 3, 1000, "imagenet").state_dict()
    tv = torchvision.models.resnet18().state_dict()
    assert list(ours.keys()) == list(tv.keys())
    for k in tv:
        assert ours[k].shape == tv[k].shape, k
    n = sum(p.numel() for p in torchvision.models.resnet18().parameters())
    assert n == 11689512, n


def step_and_eval(net, x, y, x_eval, y_eval, bn_names):
    """One training-mode forward/backward on (x, y), then an evaluation on (x_eval, y_eval) with
    the running statistics it left: logits, loss, grads (named_parameters order), bn1 (running
    statistics of bn_names after the step), eval_logits, eval_loss."""
    net.train()
    logits = net(x)
    loss = F.cross_entropy(logits, y)
    net.zero_grad()
    loss.backward()
    grads = np.concatenate([f32(p.grad).ravel() for _, p in net.named_parameters()])
    sd1 = net.state_dict()
    bn1 = np.concatenate([f32(sd1[k]).ravel() for k in bn_names])
    net.eval()
    with torch.no_grad():
        eval_logits = net(x_eval)
        eval_loss = F.cross_entropy(eval_logits, y_eval)
    return logits, loss, grads, bn1, eval_logits, eval_loss


def model_case(path, stem, width=4, in_c=1, classes=10, hw=12, batch=4):
    torch.manual_seed(SEED + (1 if stem == "imagenet" else 0))
    net = ResNetW(width, in_c, classes, stem)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    sd = net.state_dict()
    train_names = [k for k, _ in net.named_parameters()]
    assert train_names == [k for k in sd if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    bn_names = [k for k in sd if k.endswith(("running_mean", "running_var"))]
    params = np.concatenate([f32(sd[k]).ravel() for k in train_names])
    bn0 = np.concatenate([f32(sd[k]).ravel() for k in bn_names])
    shapes = np.zeros((len(train_names), 5), np.int32)
    for i, k in enumerate(train_names):
        shapes[i, 0] = sd[k].dim()
        shapes[i, 1:1 + sd[k].dim()] = list(sd[k].shape)

    x = torch.randn(batch, in_c, hw, hw)
    y = torch.randint(0, classes, (batch,))
    x_eval = torch.randn(batch, in_c, hw, hw)  # (the training step draws no random numbers)
    y_eval = torch.randint(0, classes, (batch,))
    logits, loss, grads, bn1, eval_logits, eval_loss = step_and_eval(net, x, y, x_eval, y_eval, bn_names)

    with h5py.File(path, "w") as f:
        f.attrs.update(torch=str(torch.__version__), torchvision=str(torchvision.__version__), width=width,
                       in_c=in_c, classes=classes, hw=hw, batch=batch, stem=stem)
        f.create_dataset("names", data=np.array([k.encode() for k in train_names], dtype="S64"))
        f.create_dataset("bn_names", data=np.array([k.encode() for k in bn_names], dtype="S64"))
        put(f, shapes=shapes, params=params, bn0=bn0, x=x, y=y.numpy().astype(np.int32),
            loss=np.array([loss.item()], np.float32), logits=logits, grads=grads, bn1=bn1,
            x_eval=x_eval, y_eval=y_eval.numpy().astype(np.int32), eval_logits=eval_logits,
            eval_loss=np.array([eval_loss.item()], np.float32))
    print(f"{path}: {len(train_names)} tensors, {params.size} params, {bn0.size} bn, loss {loss.item():.6f}")
    model_case_bf16(path)


def model_case_bf16(path):
    """Add the *_bf16 datasets to a model_*.h5 file: its network (params, bn0), training step on
    x, y and evaluation on x_eval, y_eval again with every convolution a Bf16Conv."""
    with h5py.File(path, "r+") as f:
        a = f.attrs
        net = ResNetW(int(a["width"]), int(a["in_c"]), int(a["classes"]), str(a["stem"]))
        names = [n.decode() for n in f["names"][()]]
        bn_names = [n.decode() for n in f["bn_names"][()]]
        sd = net.state_dict()
        for key, flat in ((names, f["params"][()]), (bn_names, f["bn0"][()])):
            off = 0
            for k in key:
                n = sd[k].numel()
                sd[k] = torch.from_numpy(flat[off:off + n].copy()).reshape(sd[k].shape)
                off += n
            assert off == flat.size
        net.load_state_dict(sd)
        for m in net.modules():
            if isinstance(m, nn.Conv2d):
                m.__class__ = Bf16Conv
        x, y = torch.from_numpy(f["x"][()]), torch.from_numpy(f["y"][()]).long()
        x_eval, y_eval = torch.from_numpy(f["x_eval"][()]), torch.from_numpy(f["y_eval"][()]).long()
        logits, loss, grads, bn1, eval_logits, eval_loss = step_and_eval(net, x, y, x_eval, y_eval, bn_names)
        for k in ("loss_bf16", "logits_bf16", "grads_bf16", "bn1_bf16", "eval_logits_bf16", "eval_loss_bf16"):
            if k in f:
                del f[k]
        put(f, loss_bf16=np.array([loss.item()], np.float32), logits_bf16=logits, grads_bf16=grads, bn1_bf16=bn1,
            eval_logits_bf16=eval_logits, eval_loss_bf16=np.array([eval_loss.item()], np.float32))
    print(f"{path}: bf16 convolutions: loss {loss.item():.6f}")


def main():
    args = [a for a in sys.argv[1:] if a != "--bf16-only"]
    out = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "test", "data")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    if "--bf16-only" in sys.argv:  # add the bf16 datasets to the existing model files only
        model_case_bf16(os.path.join(out, "model_cifar.h5"))
        model_case_bf16(os.path.join(out, "model_imagenet.h5"))
        return
    check_torchvision_equal()
    layer_cases(os.path.join(out, "layers.h5"))
    model_case(os.path.join(out, "model_cifar.h5"), "cifar")
    # ImageNet stem: 24x24 and batch 8 (not 12x12, batch 4): stages 3-4 are then 2x2 and 1x1, and
    # BN over 4 values made early-layer gradients so ill-conditioned that fp32 PyTorch itself was
    # 5e-5 away from float64 (and ours, with other summation orders, up to 2.6e-4).
    model_case(os.path.join(out, "model_imagenet.h5"), "imagenet", hw=24, batch=8)


if __name__ == "__main__":
    main()
