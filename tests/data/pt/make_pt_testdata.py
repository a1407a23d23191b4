#!/usr/bin/python3
"""Writes the small torch.save files of tests/io/torch_pt_test.cpp (run with Debian's python3-torch:
/usr/bin/python3 tests/data/pt/make_pt_testdata.py tests/data/pt). Values are arange-based so the
test knows them without a side file. Nothing here is needed at build or test time."""
import collections
import os
import sys

import torch
import torch.nn as nn

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def save(obj, name):
    torch.save(obj, os.path.join(out, name))


# 1. tensors of every supported dtype, views, 0-d and empty
base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
save({
    'f32': torch.arange(6, dtype=torch.float32).reshape(2, 3),
    'f16': torch.arange(6, dtype=torch.float16).reshape(2, 3) / 4,
    'bf16': torch.arange(4, dtype=torch.bfloat16),
    'f64': torch.arange(3, dtype=torch.float64) - 1.5,
    'i64': torch.tensor([-(2**40), 0, 7], dtype=torch.int64),
    'i32': torch.tensor([-5, 9], dtype=torch.int32),
    'u8': torch.tensor([0, 255], dtype=torch.uint8),
    'bool': torch.tensor([True, False, True]),
    'transposed': base.t(),                  # size (4, 3), stride (1, 4)
    'slice': base[1:, 2:],                   # storage offset 6, size (2, 2), stride (4, 1)
    'base': base,                            # shares the storage of the two views above
    'scalar': torch.tensor(3.5),
    'empty': torch.zeros(0, 5),
}, 'tensors.pt')

# 2. plain Python values
save({
    'int': 7, 'neg': -300, 'big': 2**40, 'huge_neg': -(2**62), 'float': 0.25, 'str': 'nearest',
    'unicode': 'héllo ✓', 'none': None, 't': True, 'f': False, 'list': [1, [2, 3], 'a'],
    'tuple': (1, 2.5), 'nested': {'a': {'b': [None]}},
    'od': collections.OrderedDict([('x', 1), ('y', 2)]), 'bytes': b'\x00\xffab', 'set': {3},
}, 'values.pt')


# 3. a YOLO-like checkpoint: a module tree of a class the reader does not know, FP16, with the
# attributes the official DetectionModel carries
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.yaml = {'nc': 2, 'depth_multiple': 1.0, 'width_multiple': 0.25, 'anchors': 3,
                     'backbone': [[-1, 1, 'Conv', [16, 3, 2]]],
                     'head': [[-1, 1, 'nn.Upsample', ['None', 2, 'nearest']], [[-1, 0], 1, 'DDetect', ['nc']]]}
        self.yaml_file = 'tiny.yaml'
        self.names = ['cat', 'dog']
        self.model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))
        self.register_buffer('stride', torch.tensor([8., 16.]))
        self.register_buffer('tmp', torch.zeros(1), persistent=False)


torch.manual_seed(0)
m = Tiny()
with torch.no_grad():
    for i, p in enumerate(m.parameters()):
        p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) / 8 + i)
    m.model[1].running_mean.copy_(torch.tensor([0.5, 1.0, 1.5, 2.0]))
    m.model[1].num_batches_tracked.fill_(5)
ema = Tiny()
with torch.no_grad():
    for p in ema.parameters():
        p.fill_(0.5)
save({'model': m.half(), 'ema': None, 'updates': None, 'optimizer': None, 'epoch': -1, 'best_fitness': None,
      'date': '2024-01-01'}, 'tiny_stripped.pt')
save({'model': Tiny(), 'ema': ema, 'updates': 3, 'epoch': 4, 'date': None}, 'tiny_ema.pt')
save(collections.OrderedDict(m.float().state_dict()), 'state_dict.pt')
save({'foo': 1}, 'not_yolo.pt')

# 4. a real (tiny) official YOLO checkpoint, only with YOLOV9_OFFICIAL=<checkout of
# WongKinYiu/yolov9>: models.yolo.DetectionModel of a 4-layer YAML with a DDetect head (nc 2), saved
# as train_dual.py saves last.pt (model + EMA in FP16, an SGD state_dict (no momentum: size), opt,
# a numpy best_fitness), for tests/apps/torch_pt_e2e_test.cpp (export, detect, train --weights).
official = os.environ.get('YOLOV9_OFFICIAL')
if official:
    import argparse
    from copy import deepcopy

    import numpy as np
    sys.path.insert(0, official)
    import models.yolo as yolo
    cfg = {'nc': 2, 'depth_multiple': 1.0, 'width_multiple': 1.0, 'anchors': 3,
           'backbone': [[-1, 1, 'Conv', [8, 3, 2]], [-1, 1, 'Conv', [16, 3, 2]], [-1, 1, 'AConv', [16]]],
           'head': [[-1, 1, 'nn.Upsample', ['None', 2, 'nearest']], [-1, 1, 'Conv', [16, 3, 2]],
                    [[4], 1, 'DDetect', ['nc']]]}
    torch.manual_seed(0)
    model = yolo.Model(cfg, ch=3, nc=2)
    model.nc, model.names = 2, ['a', 'b']
    with torch.no_grad():
        model.model[-1].cv3[0][-1].bias.copy_(torch.tensor([1.0, -1.0]))  # something to detect
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model(torch.rand(1, 3, 32, 32))[0].sum().backward()
    opt.step()
    model.eval()
    ns = argparse.Namespace(epochs=1, img=32)
    save({'epoch': 0, 'best_fitness': np.array([0.25]), 'model': deepcopy(model).half(),
          'ema': deepcopy(model).half(), 'updates': 1, 'optimizer': opt.state_dict(), 'opt': vars(ns),
          'ns': ns, 'git': {}, 'date': '2024-06-01T00:00:00'}, 'tiny_yolo.pt')

    # 5. tiny_resume.pt (tests/training/pt_resume_test.cpp): the last.pt of a run to resume, with an
    # SGD state_dict of the official smart_optimizer whose every momentum buffer is its parameter's
    # value + 0.5 (the test finds which parameter each buffer landed on), distinct lr / initial_lr /
    # momentum per group (group 0 as NumPy float64, as the warm-up's np.interp leaves them), the
    # options dict of train_dual.py, best_fitness a NumPy array. No EMA (smart_resume skips it).
    from utils.torch_utils import smart_optimizer
    torch.manual_seed(1)
    model = yolo.Model(cfg, ch=3, nc=2)
    model.nc, model.names = 2, ['a', 'b']
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())  # the FP16 checkpoint keeps them exactly
    opt = smart_optimizer(model, 'SGD', 0.01, 0.937, 0.0005)
    for g, (lr, ilr, mom) in enumerate([(np.float64(0.011), 0.021, np.float64(0.81)), (0.012, 0.022, 0.82),
                                        (0.013, 0.023, 0.83)]):
        grp = opt.param_groups[g]
        grp['lr'], grp['initial_lr'], grp['momentum'] = lr, ilr, mom
        for p in grp['params']:
            if p.requires_grad:  # the DFL conv weight never gets a gradient, so it has no state
                opt.state[p]['momentum_buffer'] = p.detach().clone() + 0.5
    hyp = {'lr0': 0.01, 'lrf': 0.01, 'momentum': 0.937, 'weight_decay': 0.0005, 'warmup_epochs': 3.0,
           'warmup_momentum': 0.8, 'warmup_bias_lr': 0.1, 'anchor_t': 5.0}
    run_opt = {'weights': '', 'cfg': 'tiny.yaml', 'data': 'data/tiny.yaml', 'hyp': hyp, 'epochs': 3,
               'batch_size': 2, 'imgsz': 32, 'resume': False, 'evolve': None, 'cache': None, 'optimizer': 'SGD',
               'upload_dataset': False, 'freeze': [0], 'save_dir': 'runs/train/exp'}
    save({'epoch': 1, 'best_fitness': np.array([0.125]), 'model': deepcopy(model).half(), 'ema': None,
          'updates': None, 'optimizer': opt.state_dict(), 'opt': run_opt, 'git': None,
          'date': '2024-06-02T00:00:00'}, 'tiny_resume.pt')
