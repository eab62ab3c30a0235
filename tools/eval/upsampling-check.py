#!/usr/bin/env python3
"""Is CamVid val's road border lost in upsampling or in the model's decision?

  python3 tools/eval/upsampling-check.py MODEL_DIR

Scores the model's road on CamVid val (480x360 labels, the daemon's
preprocessing at 1024 wide, PyTorch) four ways: bilinear upsampling of the
1/4-resolution logits (what the daemon does), an edge-aware guided filter
(He et al.) of the class probabilities with the frame as guide, at two radii
and two epsilons, and the labels brought down to the logits' own grid (no
upsampling at all). If the guided filter or the logit grid scored well above
bilinear, the border would be an upsampling problem a cheap filter could fix.
Prints running figures every 20 frames. A diagnostic (issue 35), not a
selection measure. Needs torch, transformers and ../shared.
"""
import sys, os, numpy as np, torch, torch.nn.functional as F
ROOT=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
sys.path.insert(0, ROOT+'/tools/train'); sys.path.insert(0, ROOT+'/tools/teacher')
import distill as D, train as base
from transformers import SegformerForSemanticSegmentation
torch.set_num_threads(1)
model = SegformerForSemanticSegmentation.from_pretrained(sys.argv[1]).float().eval()
frames = D.load_camvid(os.path.join(D.SHARED,'data','camvid'), 'val')
def box(x, r):
    # mean over (2r+1)^2 window, x [B,C,H,W]
    k = 2*r+1
    return F.avg_pool2d(F.pad(x, (r,r,r,r), mode='replicate'), k, stride=1)
def guided(I, p, r, eps):
    # I [1,1,H,W] gray guide, p [1,C,H,W]
    mI = box(I,r); mp = box(p,r); cIp = box(I*p,r)-mI*mp; vI = box(I*I,r)-mI*mI
    a = cIp/(vI+eps); b = mp - a*mI
    return box(a,r)*I + box(b,r)
res = {}
def acc(name, pred, gt, valid):
    road = (gt==D.ROAD)&valid; ours=(pred==D.ROAD)&valid
    a = res.setdefault(name,[0,0]); a[0]+=int((ours&road).sum()); a[1]+=int((ours|road).sum())
print('label shape', frames[0][1].shape, flush=True)
with torch.no_grad():
    for i,(im,lab) in enumerate(frames):
        gt = torch.from_numpy(lab.astype(np.int64)); valid = gt < D.N
        logits = model(pixel_values=base.preprocess_like_daemon(im,1024,'cpu')).logits.float()
        up = F.interpolate(logits, size=lab.shape, mode='bilinear', align_corners=False)
        acc('bilinear', up.argmax(1)[0], gt, valid)
        prob = up.softmax(1)
        I = torch.from_numpy(np.asarray(im.resize((lab.shape[1], lab.shape[0])) if hasattr(im,'resize') else im, dtype=np.float32)).mean(-1)[None,None]/255
        for r,eps in ((4,1e-3),(8,1e-3),(4,1e-2),(8,1e-2)):
            acc(f'guided r{r} e{eps}', guided(I, prob, r, eps).argmax(1)[0], gt, valid)
        # resolution oracle: labels at the logits' grid
        lh, lw = logits.shape[-2:]
        gsmall = F.interpolate(gt[None,None].float(), size=(lh,lw), mode='nearest')[0,0].long()
        acc('at logit grid', logits.argmax(1)[0], gsmall, gsmall < D.N)
        if i % 20 == 0: print(i, {k: round(v[0]/v[1],4) for k,v in res.items()}, flush=True)
for k,v in res.items(): print(f'{k}: {v[0]/v[1]:.4f}')
