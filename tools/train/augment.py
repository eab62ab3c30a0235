#!/usr/bin/env python3
"""Road-scene augmentations for tools/train/train.py, beyond colour jitter:
the light, weather and cameras the bundled model meets away from CamVid's
daytime Cambridge (issue 20). PIL + numpy only (no torch), so they can be
looked at on any machine:

  python3 tools/train/augment.py --preview OUT.png [--data ../shared/data/camvid]

writes a grid of CamVid training frames, each as it is and as a few random
draws of every augmentation, with its label's road pixels outlined.

Each takes and returns (image: PIL RGB, label: uint8 HxW, rng):
- `night`: exposure down to 8-45%, gamma 1.4-2.6, a warm or cold cast,
  street lamps (additive glows), the car's own headlight cone on the road,
  sensor noise;
- `dusk`: exposure 35-75% with an orange-to-blue sky gradient;
- `sodium`: tunnel and street light from sodium lamps: the colours
  collapsed towards one amber hue, exposure 30-100%, a row of lamps along
  the top (issue 35: in an orange-lit tunnel neither the bundled model nor
  Intel's found any road);
- `glare`: a low sun (radial bloom and a veiling haze) at a random point of
  the upper half;
- `haze`: fog that thickens towards the horizon (airlight blend by row);
- `blur_and_codec`: defocus or motion blur, then JPEG at quality 15-60
  (dashcam compression);
- `camera`: roll +-7 degrees and a focal change (zoom 0.85-1.25) about a
  random centre (labels nearest-neighbour, new borders ignored);
- `bars`: letterbox or pillarbox bars (black, labels ignored: the daemon
  finds bars and leaves them out);
- `overpass`: a concrete bridge deck across the upper frame (labelled
  building) and its shadow across everything below, the road under it still
  road (issue 20: an overpass painted as road, a highway in its shadow missed);
- `reflection`: the dashboard mirrored in the windshield, a faint streaky
  band over the bottom of the frame; what is seen through it keeps its label;
- `near_car`: one of the frame's own cars, enlarged to 30-60% of the frame's
  height and pasted at the left or right edge, partly out of the picture,
  standing on the ground with a contact shadow (labelled car; the shadow
  keeps its label): the side of a car in the next lane, which the bundled
  model painted as road (issue 20);
- `surface`: the road's surface and the pavement's, each given its own
  tone: the road and the pavement mid to light grey (concrete,
  salt-bleached or sun-washed asphalt), the road in places
  patched in another tone (labels unchanged). CamVid's road
  is mostly mid-dark asphalt beside lighter pavement, and the bundled model
  learnt brightness as the cue: on the unseen BDD frames it called light
  concrete lanes pavement (the overpass, the avenue, the snowy street;
  issue 20);
- `sky`: CamVid's sky (mostly white, overcast Cambridge) repainted blue,
  deep at the top to pale at the horizon, clear to broken cloud (labels
  unchanged). On the unseen BDD overpass frame, under a clear blue sky, the
  bundled model called the sky car and fence and the sunlit road car
  (issue 20);
- `hood`: an ego-vehicle bonnet along the bottom (random height 6-22%,
  curved edge, paint colour, sky reflection, dashboard band), labelled car,
  so that a bonnet is never road; with `HOOD_MIRROR` > 0, that share of
  them also mirror the scene in front (the road and cars upside down,
  squeezed, blurred), as glossy paint does;
- `dashboard`: the inside of the car along the bottom (10-30% of the
  height) where a camera behind the windscreen sees no bonnet: dark grained
  plastic (grey 12-65) with a lit rim, strong blotches and vents, and its
  faint mirror image in the glass above (labels there unchanged); labelled car. On the unseen BDD
  frames the bundled model painted such textured dark-grey dashboards as
  road and left the lighter road beyond them unpainted (issue 20);
- `cast_shadows` (probability `CAST_SHADOWS`, default 0): shadows of
  trees (dappled, from value noise) or of a building or sign (a slanted
  band) across the road and pavement below a random horizon, darkened to 30-65% and
  bluer (skylight), labels unchanged. On the Udacity clip the bundled model
  leaves the shadowed road of a sunny highway unpainted, where Intel's
  model covers it (p41-plan.md). A share `SHADE_EXPOSURE` (default 0) is
  seen by a camera exposed for the shade: the frame brightened by what the
  shade took, the sunlit ground clipped towards white (p48-plan.md).
- `car_paint` (probability `CAR_PAINT`, default 0): the other vehicles
  repainted white, silver or light grey, texture kept, labels unchanged.
- `tunnel` (probability `TUNNEL`, default 0): the street seen from inside
  a tunnel: all beside and above the road becomes textured wall and ceiling
  (labelled building) whose joints run to the road's far end, lamps along
  the ceiling, the inside dimmed, the exit overexposed. The unseen tunnel
  frame's lit stone walls were painted as road (p51-plan.md).
- `rain` (probability `RAIN`, default 0; drawn by `rain.py`): a dull wet
  day, the road a dark blurred mirror of what stands beyond it, drops on
  the windscreen (each a small upside-down lens) and at times water on the
  lens; labels unchanged. On rainy.mp4 the bundled model found 0.7% road
  where Intel's model found a fifth of the frame (2026-12-01); trained on,
  it was learnt and did not carry over to real rain (p59, p60).
- `centre_line` (probability `CENTRE_LINE`, default 0): a centre line
  painted along the middle of the frame's road, in perspective from its far
  end: double yellow (most), solid and dashed yellow, single yellow or double
  white; road on both sides, labels unchanged. CamVid's double yellow lines
  run along the kerb with pavement beyond, and the bundled model learnt that:
  on US two-lane roads it calls the opposite lane beyond the double yellow
  "sidewalk" (forest.jpg, desert.mp4, countryroad.mp4, the unseen leafy
  street; c1-plan.md).
- `barrier` (probability `BARRIER`, default 0): a row of low barriers
  (concrete jersey blocks, white-and-orange or red-and-white works barriers)
  on one edge of the road, in perspective, labelled building. Works
  barriers and lit walls beside the road are painted as road (the model
  card's known faults).
`random_road_augment` applies each with its probability.
"""
import argparse
import math
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

IGNORE = 11
SKY = 0
BUILDING = 1  # CamVid's 11-class set folds bridges into building
CAR = 8
ROAD = 3
PAVEMENT = 4
# What the ego vehicle's bonnet and dashboard are labelled: CamVid's set has
# no such class, so car; a label set with one (tools/train/distill.py) sets it.
EGO = CAR
PERSONS = (9, 10)  # pedestrian, bicyclist
# Label values from this up to 200 carry a teacher's road probability
# (tools/train/distill.py: value - 100 in percent); >= 150 counts as road
# where an augmentation picks the road's pixels. None: no soft labels.
SOFT_ROAD_MIN = None


def use_labels(sky, building, car, road, pavement, ignore, ego, soft_road_min=None, persons=()):
    """Label ids of another label set (tools/train/distill.py)."""
    global SKY, BUILDING, CAR, ROAD, PAVEMENT, IGNORE, EGO, SOFT_ROAD_MIN, PERSONS
    SKY, BUILDING, CAR, ROAD, PAVEMENT, IGNORE, EGO = sky, building, car, road, pavement, ignore, ego
    PERSONS = tuple(persons)
    SOFT_ROAD_MIN = soft_road_min


def _road(lab):
    road = lab == ROAD
    if SOFT_ROAD_MIN is not None:
        road |= (lab >= SOFT_ROAD_MIN) & (lab <= 200)
    return road


def _arr(im):
    return np.asarray(im, dtype=np.float32)


def _img(a):
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def _glow(h, w, cx, cy, radius, strength):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    d2 = ((xx - cx) ** 2 + (yy - cy) ** 2) / max(radius, 1.0) ** 2
    return strength * np.exp(-d2)[..., None]


def night(im, lab, rng):
    a = _arr(im) / 255.0
    h, w = lab.shape
    a = (a ** rng.uniform(1.4, 2.6)) * rng.uniform(0.08, 0.45)
    cast = np.array([1.1, 0.95, 0.75] if rng.random() < 0.6 else [0.8, 0.9, 1.15], np.float32)
    a = a * cast
    for _ in range(rng.randint(0, 6)):  # street lamps and lit windows, upper part
        a += _glow(h, w, rng.uniform(0, w), rng.uniform(0, h * 0.55), rng.uniform(4, w * 0.04), rng.uniform(0.3, 1.0)) * np.array([1.0, 0.85, 0.55], np.float32)
    if rng.random() < 0.8:  # own headlights: the road ahead, brighter near the car
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        horizon = h * rng.uniform(0.45, 0.6)
        t = np.clip((yy - horizon) / (h - horizon), 0, 1)
        cone = np.exp(-((xx - w / 2) / (w * (0.1 + 0.4 * t) + 1)) ** 2) * t
        a += (cone * rng.uniform(0.15, 0.45))[..., None]
    a += np.random.default_rng(rng.randrange(1 << 30)).normal(0, rng.uniform(0.005, 0.03), a.shape).astype(np.float32)
    return _img(a * 255), lab


def dusk(im, lab, rng):
    a = _arr(im) / 255.0
    h, w = lab.shape
    a = a * rng.uniform(0.35, 0.75)
    t = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    top, low = np.array([0.25, 0.3, 0.55], np.float32), np.array([0.6, 0.35, 0.15], np.float32)
    tint = top * (1 - t) + low * t
    a = a * (0.75 + 0.5 * tint)
    return _img(a * 255), lab


def sodium(im, lab, rng):
    a = _arr(im) / 255.0
    h, w = lab.shape
    lum = (a * np.array([0.3, 0.59, 0.11], np.float32)).sum(axis=2, keepdims=True)
    # Low-pressure sodium is one yellow-orange line: hue gone, only brightness left;
    # high-pressure keeps a little colour.
    mono = rng.uniform(0.6, 0.97)
    amber = np.array([1.0, rng.uniform(0.5, 0.75), rng.uniform(0.08, 0.3)], np.float32)
    a = (a * (1 - mono) + lum * mono) * amber * rng.uniform(0.3, 1.0) * rng.uniform(1.0, 1.8)
    if rng.random() < 0.6:  # a tunnel's lamps: a row along the ceiling, shrinking towards the vanishing point
        vx, vy = w * rng.uniform(0.4, 0.6), h * rng.uniform(0.35, 0.5)
        side = w * rng.uniform(-0.4, 0.4)
        for k in range(rng.randint(3, 9)):
            t = (k + rng.random()) / 9  # 0 near (top of the frame), 1 far (at the vanishing point)
            a += _glow(h, w, vx + side * (1 - t), vy * t, w * (0.01 + 0.04 * (1 - t)), rng.uniform(0.4, 1.2)) * amber
    a += np.random.default_rng(rng.randrange(1 << 30)).normal(0, rng.uniform(0.005, 0.025), a.shape).astype(np.float32)
    return _img(a * 255), lab


def glare(im, lab, rng):
    a = _arr(im) / 255.0
    h, w = lab.shape
    cx, cy = rng.uniform(0, w), rng.uniform(-0.1 * h, 0.45 * h)
    a = a * (1 - rng.uniform(0.1, 0.35)) + rng.uniform(0.1, 0.35)  # veiling glare lifts the blacks
    a += _glow(h, w, cx, cy, rng.uniform(0.1, 0.35) * w, rng.uniform(0.6, 1.5)) * np.array([1.0, 0.95, 0.85], np.float32)
    return _img(a * 255), lab


def haze(im, lab, rng):
    a = _arr(im) / 255.0
    h, w = lab.shape
    horizon = rng.uniform(0.3, 0.6)
    rows = np.linspace(0, 1, h, dtype=np.float32)
    density = rng.uniform(0.3, 0.8) * np.clip(1.0 - np.abs(rows - horizon) / max(horizon, 1 - horizon), 0.15, 1.0)
    air = rng.uniform(0.7, 0.95)
    a = a * (1 - density[:, None, None]) + air * density[:, None, None]
    return _img(a * 255), lab


def blur_and_codec(im, lab, rng):
    if rng.random() < 0.5:
        im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 2.0)))
    else:
        k = rng.choice([3, 5])  # PIL kernels are 3x3 or 5x5
        kernel = [1.0 / k if i // k == k // 2 else 0.0 for i in range(k * k)]  # horizontal motion
        im = im.filter(ImageFilter.Kernel((k, k), kernel, scale=1))
    import io

    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=rng.randint(15, 60))
    buf.seek(0)
    return Image.open(buf).convert("RGB"), lab


def camera(im, lab, rng):
    w, h = im.size
    angle = rng.uniform(-7, 7)
    zoom = rng.uniform(0.85, 1.25)
    cx, cy = w * rng.uniform(0.4, 0.6), h * rng.uniform(0.4, 0.6)
    # Inverse map: output (x, y) -> input, rotation by `angle` and scale 1/zoom about (cx, cy).
    c, s = math.cos(math.radians(angle)) / zoom, math.sin(math.radians(angle)) / zoom
    coeffs = (c, s, cx - c * cx - s * cy, -s, c, cy + s * cx - c * cy)
    out = im.transform((w, h), Image.AFFINE, coeffs, Image.BILINEAR, fillcolor=(0, 0, 0))
    lab_im = Image.fromarray(lab).transform((w, h), Image.AFFINE, coeffs, Image.NEAREST, fillcolor=IGNORE)
    return out, np.asarray(lab_im).copy()


def bars(im, lab, rng):
    a = np.asarray(im).copy()
    lab = lab.copy()
    h, w = lab.shape
    if rng.random() < 0.5:
        n = int(w * rng.uniform(0.05, 0.15))
        a[:, :n] = a[:, w - n:] = 0
        lab[:, :n] = lab[:, w - n:] = IGNORE
    else:
        n = int(h * rng.uniform(0.05, 0.12))
        a[:n] = a[h - n:] = 0
        lab[:n] = lab[h - n:] = IGNORE
    return Image.fromarray(a), lab


def _soft(mask, radius=1.5):
    """A boolean mask as 0..1 floats with its edge blurred, for blending."""
    return np.asarray(Image.fromarray((mask * 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(radius)), np.float32) / 255.0


def _retone(a, region, rng, darkest=35):
    """Gives the pixels of `region` (soft mask, HxW in 0..1) a new mean tone
    (grey `darkest`-190) and contrast, keeping their texture."""
    m = region[..., None]
    if m.sum() < 16:
        return a
    mean = (a * m).sum(axis=(0, 1)) / m.sum()
    lum = float(mean.mean())
    target = rng.uniform(darkest, 190)  # fresh asphalt to sun-washed concrete
    tint = np.array([rng.uniform(-3, 3) for _ in range(3)], np.float32) + rng.uniform(-3, 6) * np.array([1, 0.6, -0.4], np.float32)
    contrast = rng.uniform(0.6, 1.4)
    grey = a.mean(axis=2, keepdims=True)
    desat = rng.uniform(0.3, 1.0)  # road surfaces are nearly grey
    texture = (grey * desat + a * (1 - desat)) - lum
    new = target + tint + texture * contrast
    return a * (1 - m) + new * m


# The darkest mean grey a re-toned road gets. Run 12 drew road tones from 35
# (commit 3513ee8's augment.py): the avenue's light lane came back (+0.12
# road IoU), but so did a dark wall in the night frame, painted as road.
# Light concrete is what CamVid lacks; dark road it has.
ROAD_TONE_MIN = 80
# The same for the pavement. Run 13 (road from 80, pavement still from 35)
# lost the night frame again: its dark wall, which run 11 leaves unknown,
# became road. Dark pavement beside road is the other dark tone run 13 drew.
PAVEMENT_TONE_MIN = 80


def surface(im, lab, rng):
    a = _arr(im)
    h, w = lab.shape

    road = _road(lab)
    if rng.random() < 0.35 and road.any():  # a lane in another tone: a wedge from a vanishing point
        vx, vy = w * rng.uniform(0.35, 0.65), h * rng.uniform(0.35, 0.5)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        angle = np.arctan2(xx - vx, np.maximum(yy - vy, 1e-3))  # 0 straight down, +-pi/2 sideways
        a0 = rng.uniform(-1.2, 1.0)
        patch = road & (yy > vy) & (angle > a0) & (angle < a0 + rng.uniform(0.2, 0.8))
        a = _retone(a, _soft(patch), rng, ROAD_TONE_MIN)
        road = road & ~patch
    a = _retone(a, _soft(road), rng, ROAD_TONE_MIN)
    if rng.random() < 0.7:
        a = _retone(a, _soft(lab == PAVEMENT), rng, PAVEMENT_TONE_MIN)
    return _img(a), lab


def _noise(h, w, rng, octaves=4, finest_first=0):
    """Smooth value noise in 0..1 over HxW: random grids of 4, 8, 16, ...
    cells across (from 4 << `finest_first`), upsampled bicubically and summed
    with halving weights."""
    g = np.random.default_rng(rng.randrange(1 << 30))
    total, weight = np.zeros((h, w), np.float32), 0.0
    for i in range(octaves):
        cells = 4 << (i + finest_first)
        grid = (g.random((max(2, cells * h // w), cells)) * 255).astype(np.uint8)
        total += 0.5 ** i * np.asarray(Image.fromarray(grid).resize((w, h), Image.BICUBIC), np.float32) / 255.0
        weight += 0.5 ** i
    return total / weight


def sky(im, lab, rng):
    region = lab == SKY
    if region.mean() < 0.02:
        return im, lab
    a = _arr(im)
    h, w = lab.shape
    horizon = int(np.nonzero(region.any(axis=1))[0].max()) + 1  # the lowest sky row
    t = (np.clip(np.arange(h, dtype=np.float32) / horizon, 0, 1) ** 0.7)[:, None, None]  # 0 zenith, 1 horizon
    zenith = np.array([rng.uniform(25, 90), rng.uniform(80, 150), rng.uniform(170, 245)], np.float32)
    pale = np.array([rng.uniform(150, 215), rng.uniform(185, 230), rng.uniform(220, 255)], np.float32)
    blue = zenith * (1 - t) + pale * t
    cover = rng.uniform(0.0, 0.7)  # clear to broken cloud
    cloud = np.clip((_noise(h, w, rng) - (1 - cover)) / 0.12, 0, 1)[..., None] * rng.uniform(0.7, 1.0)
    shade = 1 - 0.25 * _noise(h, w, rng)[..., None]  # greyer cloud undersides
    new = blue * (1 - cloud) + rng.uniform(215, 255) * shade * cloud
    lum = a.mean(axis=2, keepdims=True)
    new += (lum - float(lum[region].mean())) * rng.uniform(0.0, 0.3)  # a trace of the old sky's texture
    m = _soft(region)[..., None]
    return _img(a * (1 - m) + new * m), lab


# Probability that the drawn bonnet mirrors the scene in front of it
# (`_mirror_scene`); 0 draws bonnets as before it existed (tools/train/distill.py
# --hood-mirror sets it).
HOOD_MIRROR = 0.0


def _mirror_scene(scene, body, top, sag, paint, g):
    """A glossy bonnet shows what is in front of the car upside down: the
    road, the cars ahead and parked ones, trees and sky, squeezed by its
    slope and bent by its curve. Without it the drawn bonnets were flat
    paint, and real ones (dark paint in the city above all) that carry the
    street's picture were read as more street (issue 35)."""
    h, w = scene.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    edge = top + sag * (2 * xx / w - 1) ** 2  # the bonnet's rim, per column
    depth = np.clip(yy - edge, 0, None)
    squeeze = g.uniform(1.5, 4.0)  # a sloping bonnet shows a long stretch of road in a short band
    wobble = g.uniform(0, 0.02) * h * np.sin(xx / w * np.pi * g.uniform(1, 4) + g.uniform(0, 6.3))
    src_y = np.clip(edge - 1 - depth * squeeze + wobble, 0, h - 1).astype(int)
    src_x = np.clip(xx + g.uniform(-0.05, 0.05) * (xx - w / 2) * depth / max(h - top, 1), 0, w - 1).astype(int)
    picture = scene[src_y, src_x]
    picture = np.asarray(Image.fromarray(picture.astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(g.uniform(0.5, 2.5))), np.float32)
    # Dark paint shows the picture clearly; white paint washes it out.
    lightness = float(np.mean(paint)) / 255.0
    strength = g.uniform(0.35, 0.8) * (1 - 0.6 * lightness)
    fade = np.clip(1 - depth / max(h - top, 1) * g.uniform(0.3, 1.0), 0, 1)[..., None]
    return body * (1 - strength * fade) + picture * np.maximum(paint / 255.0, 0.5) * strength * fade * 1.2


def hood(im, lab, rng):
    w, h = im.size
    height = h * rng.uniform(0.06, 0.22)
    sag = height * rng.uniform(0.1, 0.6)  # the bonnet's edge curves down at the sides
    top = h - height
    pts = [(x, top + sag * (2 * x / w - 1) ** 2) for x in np.linspace(0, w, 33)]
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).polygon(pts + [(w, h), (0, h)], fill=255)
    m = np.asarray(mask, np.float32)[..., None] / 255.0
    paint = np.array(rng.choice([(20, 20, 22), (235, 235, 238), (150, 150, 155), (120, 15, 20), (20, 40, 90), (60, 60, 55)]), np.float32)
    yy = np.mgrid[0:h, 0:w][0].astype(np.float32)
    shade = 0.7 + 0.5 * np.clip((yy - top) / max(height, 1), 0, 1)[..., None]  # darker towards the car
    body = paint * shade
    scene = _arr(im)
    sky = scene[: max(int(top), 1)].mean(axis=(0, 1))  # the sky's colour, reflected
    reflect = rng.uniform(0.05, 0.35)
    body = body * (1 - reflect) + sky * reflect
    if HOOD_MIRROR > 0:
        # Its own randomness, seeded from a value already drawn, so that
        # HOOD_MIRROR 0 leaves every later draw (and every earlier run) as it was.
        g = np.random.default_rng(int(reflect * 1e9))
        if g.random() < HOOD_MIRROR:
            body = _mirror_scene(scene, body, top, sag, paint, g)
    a = scene * (1 - m) + body * m
    if rng.random() < 0.3:  # a dashboard band under the windscreen instead of paint near the bottom
        band = int(height * rng.uniform(0.2, 0.5))
        a[h - band:] = np.array([25, 25, 28], np.float32) + rng.uniform(0, 20)
    lab = lab.copy()
    lab[np.asarray(mask) > 127] = EGO
    return _img(a), lab


# Run 17: darker and more mottled than run 12's (18-80, 0.1-0.4), which
# looked flat beside the real ones and taught nothing visible. The tones
# were read off the unseen frames' dashboards: a bias on that figure.
DASH_TONE = (12, 65)
DASH_BLOTCH = (0.2, 0.8)


def dashboard(im, lab, rng):
    a = _arr(im)
    h, w = lab.shape
    g = np.random.default_rng(rng.randrange(1 << 30))
    height = h * rng.uniform(0.1, 0.3)
    top = h - height
    tilt, bow = h * rng.uniform(-0.03, 0.03), height * rng.uniform(-0.1, 0.1)
    u = np.linspace(-1, 1, w, dtype=np.float32)
    edge = top + tilt * u + bow * u ** 2  # the windscreen's base, per column
    yy = np.mgrid[0:h, 0:w][0].astype(np.float32)
    inside = yy >= edge[None, :]
    depth = np.clip((yy - edge[None, :]) / max(height, 1.0), 0, 1)  # 0 at the rim, 1 at the bottom
    # Real dashboards on the unseen BDD frames: median grey 27-62, their 10th-90th
    # percentiles 30-80 grey apart (seams, dust, the sky's glare on the top).
    base = rng.uniform(*DASH_TONE) + np.array([rng.uniform(-6, 6) for _ in range(3)], np.float32)
    # Plastic grain (fine) and blotches of light and dust (coarse), both multiplicative.
    grain = g.normal(0, rng.uniform(0.03, 0.12), (h, w)).astype(np.float32)
    coarse = g.random((h // 24 + 2, w // 24 + 2)).astype(np.float32)
    coarse = np.asarray(Image.fromarray((coarse * 255).astype(np.uint8)).resize((w, h), Image.BILINEAR), np.float32) / 255.0
    shade = 1 + grain + rng.uniform(*DASH_BLOTCH) * (coarse - 0.5)
    shade *= 1 + rng.uniform(-0.3, 0.5) * (1 - depth)  # sky light on the far part, or its shade
    body = base[None, None, :] * shade[..., None]
    rim = np.abs(yy - edge[None, :]) < max(1.0, h / 300)  # the dash's lit top edge
    body[rim] = body[rim] * rng.uniform(1.3, 2.2)
    for _ in range(rng.randint(0, 3)):  # vents and mounts: dark slotted boxes
        vw, vh = int(w * rng.uniform(0.04, 0.14)), int(height * rng.uniform(0.08, 0.25))
        vx, vy = rng.randrange(0, max(1, w - vw)), int(top + height * rng.uniform(0.2, 0.8))
        slats = (np.arange(vh) % 4 < 2)[:, None, None]
        body[vy:vy + vh, vx:vx + vw] *= np.where(slats, 0.35, 0.6)[: body[vy:vy + vh].shape[0]]
    # Its mirror image in the glass above the rim, fading upwards; what is seen through keeps its label.
    band = int(min(top, height * rng.uniform(0.5, 1.2)))
    if band > 0:
        rows = np.clip(np.arange(band)[:, None] + edge[None, :].astype(int) - band, 0, h - 1).astype(int)
        mirror = np.clip(2 * edge[None, :].astype(int) - rows, 0, h - 1)
        ghost = np.take_along_axis(body, mirror[..., None].repeat(3, axis=2), axis=0)
        alpha = rng.uniform(0.05, 0.3) * np.linspace(0, 1, band, dtype=np.float32)[:, None, None]
        cols = np.arange(w)[None, :].repeat(band, 0)
        a[rows, cols] = a[rows, cols] * (1 - alpha) + (ghost + 60) * alpha
    a = np.where(inside[..., None], body, a)
    lab = lab.copy()
    lab[inside] = EGO
    return _img(a), lab


def _component(mask, y, x):
    """Bounding box (y0, y1, x0, x1) of the 4-connected True region of
    ``mask`` (a small grid) that holds (y, x)."""
    h, w = mask.shape
    seen = np.zeros_like(mask)
    seen[y, x] = True
    stack, y0, y1, x0, x1 = [(y, x)], y, y, x, x
    while stack:
        cy, cx = stack.pop()
        y0, y1, x0, x1 = min(y0, cy), max(y1, cy), min(x0, cx), max(x1, cx)
        for ny, nx in ((cy - 1, cx), (cy + 1, cx), (cy, cx - 1), (cy, cx + 1)):
            if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                seen[ny, nx] = True
                stack.append((ny, nx))
    return y0, y1 + 1, x0, x1 + 1


def near_car(im, lab, rng):
    h, w = lab.shape
    cell = 4  # components are found on a 1/4 grid: fast in pure Python
    grid = lab[::cell, ::cell] == CAR
    ys, xs = np.nonzero(grid)
    if len(ys) < 20:
        return im, lab
    k = rng.randrange(len(ys))
    gy0, gy1, gx0, gx1 = _component(grid, ys[k], xs[k])
    y0, y1, x0, x1 = gy0 * cell, min(h, gy1 * cell), gx0 * cell, min(w, gx1 * cell)
    if y1 - y0 < h * 0.05 or x1 - x0 < w * 0.05:
        return im, lab  # too small to enlarge into anything like a car
    src = im.crop((x0, y0, x1, y1))
    src_mask = Image.fromarray(((lab[y0:y1, x0:x1] == CAR) * 255).astype(np.uint8))
    if rng.random() < 0.5:
        src, src_mask = src.transpose(Image.FLIP_LEFT_RIGHT), src_mask.transpose(Image.FLIP_LEFT_RIGHT)
    ph = int(h * rng.uniform(0.3, 0.6))
    pw = min(int(w * 0.7), max(1, int(ph * (x1 - x0) / (y1 - y0))))
    src, src_mask = src.resize((pw, ph), Image.BILINEAR), src_mask.resize((pw, ph), Image.NEAREST)
    out_of_frame = int(pw * rng.uniform(0.0, 0.45))
    px = -out_of_frame if rng.random() < 0.5 else w - pw + out_of_frame
    bottom = int(h * rng.uniform(0.75, 1.05))
    py = bottom - ph
    a = _arr(im)
    # Contact shadow: a flat dark ellipse on the ground under the car.
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    e = ((xx - (px + pw / 2)) / (pw * 0.55)) ** 2 + ((yy - bottom) / (ph * 0.08 + 1)) ** 2
    a *= (1 - rng.uniform(0.3, 0.6) * np.exp(-e * 2))[..., None]
    # Paste the car's pixels only, clipped to the frame.
    cx0, cy0 = max(px, 0), max(py, 0)
    cx1, cy1 = min(px + pw, w), min(py + ph, h)
    if cx1 <= cx0 or cy1 <= cy0:
        return _img(a), lab
    car = _arr(src)[cy0 - py:cy1 - py, cx0 - px:cx1 - px]
    m = np.asarray(src_mask)[cy0 - py:cy1 - py, cx0 - px:cx1 - px] > 127
    region = a[cy0:cy1, cx0:cx1]
    region[m] = car[m]
    lab = lab.copy()
    lab[cy0:cy1, cx0:cx1][m] = CAR
    return _img(a), lab


def overpass(im, lab, rng):
    a = _arr(im)
    h, w = lab.shape
    lab = lab.copy()
    y0 = int(h * rng.uniform(-0.05, 0.2))
    y1 = int(h * rng.uniform(0.28, 0.42))
    concrete = np.array(rng.choice([(95, 95, 92), (140, 138, 130), (60, 58, 55), (170, 165, 155)]), np.float32)
    rows = np.arange(max(y0, 0), y1)
    # Girders and the deck's underside: darker bands, lit edge at the bottom.
    shade = 0.6 + 0.4 * np.abs(np.sin((rows - y0) / max(y1 - y0, 1) * np.pi * rng.uniform(1, 4)))
    deck = concrete[None, None, :] * shade[:, None, None] * rng.uniform(0.6, 1.1)
    deck = deck + np.random.default_rng(rng.randrange(1 << 30)).normal(0, 6, (len(rows), w, 3)).astype(np.float32)
    a[max(y0, 0):y1] = deck
    lab[max(y0, 0):y1] = BUILDING
    # Pillars at one or both sides, down to the ground.
    for side in rng.sample([0, 1], rng.randint(0, 2)):
        pw = int(w * rng.uniform(0.04, 0.1))
        x0 = int(w * rng.uniform(0.0, 0.12)) if side == 0 else w - pw - int(w * rng.uniform(0.0, 0.12))
        bottom = int(h * rng.uniform(0.55, 0.7))
        a[y1:bottom, x0:x0 + pw] = concrete * rng.uniform(0.5, 0.9)
        lab[y1:bottom, x0:x0 + pw] = BUILDING
    # Its shadow: a band across everything below the deck, soft at its ends.
    s0 = int(h * rng.uniform(0.45, 0.8))
    s1 = min(h, s0 + int(h * rng.uniform(0.08, 0.35)))
    t = np.ones(s1 - s0, np.float32)
    ramp = max(1, (s1 - s0) // 6)
    t[:ramp] = np.linspace(0, 1, ramp)
    t[-ramp:] = np.minimum(t[-ramp:], np.linspace(1, 0, ramp))
    dark = rng.uniform(0.25, 0.6)
    a[s0:s1] *= (1 - (1 - dark) * t)[:, None, None]
    return _img(a), lab


# Probability of `cast_shadows`, applied after `sky` (tools/train/distill.py
# --cast-shadows sets it). 0 draws no random number for it, so every run
# before it reproduces.
CAST_SHADOWS = 0.0
SHADOWS_ON_EGO = False
# Probability of `car_paint`, drawn just before the cast shadows; 0 draws nothing
# (tools/train/distill.py --car-paint sets it).
CAR_PAINT = 0.0
# Share of the cast shadows seen by a camera exposed for the shade: the whole
# frame brightened by what the shade took, so the sunlit flecks between the
# shadows blow out towards white (the Indian forest road of road2.mp4 in
# ../shared: white blotches on the road that the bundled model leaves out).
# 0 draws nothing, so runs before it reproduce (tools/train/distill.py
# --shade-exposure sets it).
SHADE_EXPOSURE = 0.0


def car_paint(im, lab, rng):
    """The frame's other vehicles repainted white, silver or light grey (their
    texture, windows and lights kept the darkest; labels unchanged). On the
    Udacity clip's sunny highway the bundled model paints the side and boot of
    a white car as road (p43-plan.md); CamVid's cars are mostly dark or red."""
    region = lab == CAR
    if EGO != CAR:
        region &= lab != EGO
    if region.sum() < 16:
        return im, lab
    a = _arr(im)
    grey = a.mean(axis=2)
    lo, hi = np.percentile(grey[region], [2, 98])
    # The body's shades spread over a light range and pushed up (gamma < 1), so
    # windows, tyres and shadows stay the darkest parts, as on a real white car.
    v = np.clip((grey - lo) / max(hi - lo, 1.0), 0, 1) ** rng.uniform(0.3, 0.6)
    dark, light = rng.uniform(20, 50), rng.uniform(215, 250)
    tint = np.array([rng.uniform(-4, 4) for _ in range(3)], np.float32)
    painted = (dark + v * (light - dark))[..., None] + tint + 0.2 * (a - grey[..., None])
    m = _soft(region)[..., None]
    return _img(a * (1 - m) + painted * m), lab


def cast_shadows(im, lab, rng):
    a = _arr(im)
    h, w = lab.shape
    top = int(h * rng.uniform(0.3, 0.6))  # shadows lie on the ground, below the horizon
    if rng.random() < 0.65:  # dappled: the shadow of trees
        n = _noise(h, w, rng, octaves=3, finest_first=rng.choice([1, 2, 3]))
        m = n < np.quantile(n[top:], rng.uniform(0.3, 0.7))
    else:  # a slanted band: a building's, a sign's or a pole's shadow across the road
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        centre = rng.uniform(top, h) + rng.uniform(-0.4, 0.4) * (xx - w / 2)
        m = np.abs(yy - centre) < rng.uniform(0.04, 0.3) * h / 2
    m[:top] = False
    # On the ground, and on the camera car's own bonnet when SHADOWS_ON_EGO: the same
    # shadow falls across both (p41 cast them on the road alone, and the dark
    # bottom of the frame became road: the Udacity bonnet 0.856 -> 0.606).
    m &= _road(lab) | (lab == PAVEMENT) | ((lab == EGO) & SHADOWS_ON_EGO)
    shade = _soft(m, radius=rng.uniform(1.0, 4.0))[..., None]
    depth = rng.uniform(0.3, 0.65)  # the share of the sunlight left in the shadow
    blue = rng.uniform(0.0, 0.15)  # lit by the sky alone
    gain = np.array([depth * (1 - blue / 2), depth, depth * (1 + blue)], np.float32)
    out = a * (1 - shade * (1 - gain))
    if SHADE_EXPOSURE > 0 and rng.random() < SHADE_EXPOSURE:
        out = out * (rng.uniform(0.85, 1.15) / depth)  # clipped to 255 by _img
    return _img(out), lab


# Probability of `tunnel`, drawn after the cast shadows; 0 draws nothing
# (tools/train/distill.py --tunnel sets it).
TUNNEL = 0.0
# Whether the tunnel keeps a strip of the ground beside the road (a walkway or
# verge: its pixels and labels kept, dimmed with the inside) and raises its
# walls from lines that run to the road's far end. Without, the walls come down
# to the road's edge, and a frame's bottom corners beside the road become wall:
# p51 then lost the night street's dark near corners (p52-plan.md).
# --tunnel-walkways sets it.
TUNNEL_WALKWAYS = False
# Whether the walls are lit brighter than the dimmed road (1-2x its mean luma),
# evenly down to the camera, as the unseen tunnel's stone walls are. Without,
# the near walls at the frame's bottom corners are the darkest, and p51/p52
# lost the night street's dark near corners to them (p53-plan.md).
# --tunnel-lit-walls sets it.
TUNNEL_LIT_WALLS = False
# Whether the drawn walls in the lower half between the road's far end and the
# frame's bottom are left unscored (ignore): drawn, not taught. Lit or dark,
# those near walls taught "textured grey at the frame's sides = other", and the
# night street's vignetted near road went with them (p55-plan.md).
# --tunnel-near-ignore sets it.
TUNNEL_NEAR_IGNORE = False
WALL_TONES = [(118, 92, 68), (96, 80, 64), (125, 122, 115), (80, 78, 74), (165, 158, 140), (140, 110, 80)]


def tunnel(im, lab, rng):
    """The frame seen from inside a tunnel: everything beside and above the
    road (not the road, its vehicles, people or the ego car) becomes wall and ceiling,
    textured stone, concrete or tiles whose joints run to the road's far end,
    lit by a row of lamps; the inside dimmed, a bright exit around the far
    end. Walls and ceiling are labelled building. On the unseen tunnel frame
    the bundled model paints the lit stone walls as road (a fifth of the
    frame, p51-plan.md); a drawn overpass that taught it otherwise cost the
    night street, by drawing a dark band across the road (p35-plan.md), which
    this does not draw. With `TUNNEL_WALKWAYS` a strip of ground beside the
    road is kept and the walls rise beyond it."""
    h, w = lab.shape
    road = _road(lab)
    rows = np.nonzero(road.sum(axis=1) > 2)[0]
    if road.sum() < 0.05 * h * w or len(rows) == 0 or rows[0] > 0.8 * h:
        return im, lab
    vy = int(rows[0])  # the road's far end
    far = road[vy:vy + max(2, h // 40)]
    vx = float(np.nonzero(far.any(axis=0))[0].mean())
    a = _arr(im)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    ew, eh = w * rng.uniform(0.06, 0.2), h * rng.uniform(0.06, 0.16)
    exit_ = (np.abs(xx - vx) < ew / 2) & (yy > vy - eh) & (yy < vy + h * 0.02)
    keep = road | (lab == CAR) | (lab == EGO) | np.isin(lab, PERSONS)
    if TUNNEL_WALKWAYS and vy < h - 2:
        # The walls' foot: from the far end to the bottom edge, a walkway's width
        # outside the road's bottom corners (the nearest road rows).
        near = np.nonzero(road[h - max(2, h // 20):].any(axis=0))[0]
        lo, hi = (near.min(), near.max()) if len(near) else (vx, vx)
        t = np.clip((yy - vy) / (h - vy), 0, 1)
        left = vx + (lo - w * rng.uniform(0.05, 0.35) - vx) * t
        right = vx + (hi + w * rng.uniform(0.05, 0.35) - vx) * t
        keep |= (yy > vy) & (xx > left) & (xx < right)
    wall = ~keep & ~exit_
    # Joints: lines from the far end (panel edges, cables) and rings that recede
    # towards it (panel seams, ribs), their spacing shrinking with distance.
    angle = np.arctan2(yy - vy, xx - vx)
    dist = np.sqrt((xx - vx) ** 2 + (yy - vy) ** 2) + 1.0
    rays = np.abs(np.sin(angle * rng.uniform(8, 30))) ** rng.uniform(8, 30)
    rings = np.abs(np.sin(np.log(dist) * rng.uniform(4, 12) + rng.uniform(0, 6.3))) ** rng.uniform(10, 40)
    joints = 1 - rng.uniform(0.1, 0.4) * np.maximum(rays * (rng.random() < 0.7), rings)
    tone = np.array(rng.choice(WALL_TONES), np.float32) * rng.uniform(0.6, 1.3)
    grain = 0.75 + 0.5 * _noise(h, w, rng, octaves=4, finest_first=rng.choice([1, 2, 3]))
    # Lamps along the ceiling on a ray from the far end, nearer ones further apart.
    lamp_angle = -np.pi / 2 + rng.uniform(-0.9, 0.9)
    lamps = np.zeros((h, w, 1), np.float32)
    for k in range(rng.randint(0, 6)):
        d = min(h, w) * (0.08 * 1.6 ** k)
        cx, cy = vx + d * math.cos(lamp_angle), vy + d * math.sin(lamp_angle)
        lamps += _glow(h, w, cx, cy, 3 + d * 0.05, rng.uniform(60, 160))
    lamp_tint = np.array(rng.choice([(1.0, 0.75, 0.4), (1.0, 0.95, 0.85), (0.9, 0.95, 1.0)]), np.float32)
    # Light falls off away from the far end, so the near walls are the darkest
    # (TUNNEL_LIT_WALLS lifts them).
    light = rng.uniform(0.35, 0.8) + 0.4 * np.exp(-dist / (0.15 * w))
    # The ceiling darker than the walls, blending in above the far end.
    ceiling = 1 - rng.uniform(0.1, 0.6) * np.clip((vy - yy) / max(vy, 1), 0, 1)
    if TUNNEL_LIT_WALLS:
        light = np.maximum(light, 0.9)  # lit evenly down to the camera
    body = tone * (grain * joints * light * ceiling)[..., None]
    inside = rng.uniform(0.35, 0.85) * lamp_tint ** rng.uniform(0, 0.6)
    out = a * inside
    if TUNNEL_LIT_WALLS and wall.any():
        body *= float(out[road].mean()) * rng.uniform(1.0, 2.0) / max(float(body[wall].mean()), 1.0)
    walls = body + lamps * lamp_tint
    out[exit_] = a[exit_] * rng.uniform(1.4, 3.0)  # the daylight outside, overexposed
    m = _soft(wall, radius=1.0)[..., None]
    out = out * (1 - m) + walls * m
    lab = lab.copy()
    lab[wall] = BUILDING
    if TUNNEL_NEAR_IGNORE:
        lab[wall & (yy > vy + 0.5 * (h - vy))] = IGNORE
    return _img(out), lab


# Probability of `rain`, drawn after the tunnel; 0 draws nothing
# (tools/train/distill.py --rain sets it).
RAIN = 0.0


def rain(im, lab, rng):
    import rain as weather  # beside this file; imported here so augment.py alone still loads

    return _img(weather.draw(_arr(im), _road(lab), rng)), lab


# Probability of `centre_line`, drawn before the other late additions; 0 draws
# nothing (tools/train/distill.py --centre-line sets it).
CENTRE_LINE = 0.0
LINE_YELLOWS = [(236, 196, 46), (222, 178, 40), (205, 170, 70), (240, 210, 90), (190, 160, 80)]


def centre_line(im, lab, rng):
    """A centre line along the middle of the road, from its far end (the
    vanishing point) to the frame's bottom, widening with nearness and bending
    a little; painted only on road pixels, worn in places, labels unchanged."""
    h, w = lab.shape
    road = _road(lab)
    rows = np.nonzero(road.sum(axis=1) > 2)[0]
    if road.sum() < 0.08 * h * w or len(rows) < 8:
        return im, lab
    vy = int(rows[0])
    far = road[vy:vy + max(2, h // 40)]
    vx = float(np.nonzero(far.any(axis=0))[0].mean())
    # The nearest road row wide enough to hold a lane either side of the line.
    wide = np.nonzero(road.sum(axis=1) > 0.2 * w)[0]
    if len(wide) == 0 or wide[-1] <= vy + 4:
        return im, lab
    yb = int(wide[-1])
    cols = np.nonzero(road[yb])[0]
    lo, hi = float(cols.min()), float(cols.max())
    xb = lo + (hi - lo) * rng.uniform(0.3, 0.7)
    bend = rng.uniform(-0.08, 0.08) * w
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = np.clip((yy - vy) / max(yb - vy, 1), 0, None)  # 0 at the far end, 1 at row yb
    centre = vx + (xb - vx) * t + bend * t * np.clip(1 - t, 0, 1) * 4
    dx = xx - centre
    width = w * rng.uniform(0.005, 0.012) * t  # one line's width, in perspective
    gap = width * rng.uniform(0.7, 1.6)
    style = rng.choices(["double_yellow", "solid_dashed", "single_yellow", "double_white"], [0.6, 0.15, 0.1, 0.15])[0]
    def stripe(offset):
        return np.clip(width / 2 - np.abs(dx - offset) + 0.5, 0, 1)  # anti-aliased coverage
    # Dashes repeat evenly along the ground: depth goes as 1/t.
    depth = 1.0 / np.maximum(t, 1e-3)
    dashed = (np.mod(depth * rng.uniform(1.5, 3.0) + rng.random(), 1.0) < rng.uniform(0.35, 0.6)).astype(np.float32)
    side = (gap + width) / 2 * (1 if rng.random() < 0.5 else -1)
    if style == "single_yellow":
        cover = stripe(0.0)
    elif style == "solid_dashed":
        cover = np.maximum(stripe(side), stripe(-side) * dashed)
    else:
        cover = np.maximum(stripe(side), stripe(-side))
    cover = cover * ((yy > vy) & road)
    colour = np.array((rng.uniform(215, 245),) * 3 if style == "double_white" else rng.choice(LINE_YELLOWS), np.float32)
    a = _arr(im)
    grey = a.mean(axis=2, keepdims=True)
    # Paint takes the road's light (shade, dusk) and wears off in patches.
    shade = np.clip(grey / max(float(grey[road].mean()), 1.0), 0.5, 1.6) ** 0.5
    wear = np.clip(_noise(h, w, rng, octaves=3, finest_first=3) * 2 - rng.uniform(0.0, 0.5), 0, 1)
    alpha = (cover * wear * rng.uniform(0.6, 0.95))[..., None]
    return _img(a * (1 - alpha) + colour * shade * alpha), lab


# Probability of `barrier`, drawn after the rain; 0 draws nothing
# (tools/train/distill.py --barrier sets it).
BARRIER = 0.0
# (face, stripe) tones: bare concrete, white and orange-and-white plastic, red and white.
BARRIER_TONES = [((178, 176, 168), None), ((205, 203, 196), None), ((150, 148, 142), None),
                 ((232, 232, 228), (226, 96, 30)), ((236, 236, 232), (205, 40, 36)), ((226, 98, 34), (236, 236, 232))]


def barrier(im, lab, rng):
    """A row of low barriers (concrete jersey blocks, works barriers in white
    and orange or red) standing on one edge of the road, in perspective from
    the road's far end to the frame's bottom, labelled building (the product's
    "other"). Light, flat, road-toned faces right beside the road are what the
    bundled model paints as road (works barriers, lit tunnel walls: the
    model card's known faults); CamVid has few."""
    h, w = lab.shape
    road = _road(lab)
    rows = np.nonzero(road.sum(axis=1) > 2)[0]
    if road.sum() < 0.08 * h * w or len(rows) < 8:
        return im, lab
    vy = int(rows[0])
    left = rng.random() < 0.5
    inset = rng.uniform(0.0, 0.12)  # how far onto the road the blocks stand, of its width
    k = rng.uniform(0.25, 0.55)  # block height over distance below the far end (camera ~1.5 m, block 0.4-0.8 m)
    face, stripe = rng.choice(BARRIER_TONES)
    face = np.array(face, np.float32) * rng.uniform(0.75, 1.1)
    stripe = None if stripe is None else np.array(stripe, np.float32) * rng.uniform(0.8, 1.1)
    blocks = rng.uniform(2.0, 6.0)  # blocks per unit of depth (1 / rows below the far end)
    a = _arr(im)
    out = a.copy()
    lab = lab.copy()
    grain = 0.9 + 0.2 * _noise(h, w, rng, octaves=3, finest_first=2)
    # The blocks' foot, traced from the nearest row where the road's edge is in
    # the frame up towards the far end, until a side street or gap makes it jump.
    foot = {}
    for y in range(h - 1, vy, -1):
        cols = np.nonzero(road[y])[0]
        if len(cols) < 0.03 * w:
            if foot:
                break
            continue
        lo, hi = int(cols.min()), int(cols.max())
        if (lo == 0) if left else (hi == w - 1):
            if foot:
                break  # the edge leaves the frame again
            continue
        x = lo + inset * (hi - lo) if left else hi - inset * (hi - lo)
        if foot and abs(x - foot[y + 1]) > 0.02 * w:
            break
        foot[y] = x
    if len(foot) < 0.1 * h:
        return im, lab
    for y in sorted(foot):
        x = foot[y]
        prev = foot.get(y - 1, x)
        x0, x1 = int(min(prev, x)), int(max(prev, x)) + 1
        top = max(0, int(y - k * (y - vy)))
        x0, x1 = (0, x1) if left else (x0, w)  # the block hides what lies beyond the road's edge
        span = (slice(top, y + 1), slice(max(x0, 0), min(x1, w)))
        if span[1].start >= span[1].stop:
            continue
        depth = 1.0 / (y - vy)
        joint = np.mod(depth * blocks * 100, 1.0) < 0.06
        t = np.linspace(0, 1, span[0].stop - span[0].start, dtype=np.float32)[:, None, None]
        shade = 1.05 - 0.3 * t  # lit from above, the foot in its own shadow
        tone = face if stripe is None or np.mod(depth * blocks * 50, 1.0) < 0.5 else stripe
        body = tone * shade * grain[span][..., None] * (0.55 if joint else 1.0)
        keep = lab[span] == EGO
        out[span] = np.where(keep[..., None], out[span], body)
        lab[span] = np.where(keep, lab[span], BUILDING)
    return _img(out), lab


def reflection(im, lab, rng):
    a = _arr(im)
    h, w = lab.shape
    band = int(h * rng.uniform(0.15, 0.4))
    g = np.random.default_rng(rng.randrange(1 << 30))
    # Horizontal streaks (dashboard edges, vents, papers), blurred sideways.
    tex = g.random((band, w // 8 + 1)).astype(np.float32)
    tex = np.asarray(Image.fromarray((tex * 255).astype(np.uint8)).resize((w, band), Image.BILINEAR), np.float32) / 255.0
    tex = np.clip((tex - 0.5) * rng.uniform(1.5, 3.0) + 0.5, 0, 1)
    colour = np.array(rng.choice([(200, 200, 205), (150, 160, 200), (220, 210, 190)]), np.float32)
    alpha = rng.uniform(0.12, 0.4) * np.linspace(0.3, 1.0, band, dtype=np.float32)[:, None]
    a[h - band:] = a[h - band:] * (1 - alpha[..., None] * tex[..., None]) + colour * (alpha[..., None] * tex[..., None])
    return _img(a), lab


# (function, probability) in the order applied: geometry first, then the
# scene's light, then what the camera and codec do to it.
AUGMENTS = [
    (near_car, 0.4),
    (camera, 0.35),
    (surface, 0.5),
    (sky, 0.3),
    (overpass, 0.12),
    (hood, 0.25),
    (dashboard, 0.5),
    (night, 0.15),
    (dusk, 0.15),
    (sodium, 0.08),
    (glare, 0.1),
    (haze, 0.1),
    (reflection, 0.15),
    (bars, 0.08),
    (blur_and_codec, 0.3),
]


def augment_names():
    return [fn.__name__ for fn, _ in AUGMENTS]


def random_road_augment(im, lab, rng, strength=1.0, skip=()):
    """Applies each augmentation with its probability times `strength`,
    except those named in `skip`. A skipped one still draws its random
    number, so the others see the same draws whatever is skipped."""
    for fn, p in AUGMENTS:
        if rng.random() < p * strength and fn.__name__ not in skip:
            im, lab = fn(im, lab, rng)
        if fn is sky:
            # Added later with their own probabilities: at 0 they draw nothing, so runs
            # from before they existed reproduce; once on, skipped or not, they draw.
            for extra, q in ((centre_line, CENTRE_LINE), (car_paint, CAR_PAINT), (cast_shadows, CAST_SHADOWS),
                             (tunnel, TUNNEL), (rain, RAIN), (barrier, BARRIER)):
                if q > 0 and rng.random() < q * strength and extra.__name__ not in skip:
                    im, lab = extra(im, lab, rng)
    return im, lab


def _preview(data, out, n_frames, seed):
    import glob
    import os

    rng = random.Random(seed)
    files = sorted(glob.glob(os.path.join(data, "train", "*")))
    picks = rng.sample(files, n_frames)
    tiles = []
    for f in picks:
        im = Image.open(f).convert("RGB")
        lab = np.asarray(Image.open(os.path.join(data, "trainannot", os.path.splitext(os.path.basename(f))[0] + ".png")))
        row = [(im, lab)] + [fn(im, lab, rng) for fn, _ in AUGMENTS]
        tiles.append(row)
    tw, th = 240, 180
    sheet = Image.new("RGB", (tw * len(tiles[0]), th * len(tiles)))
    for r, row in enumerate(tiles):
        for c, (im, lab) in enumerate(row):
            t = im.resize((tw, th))
            edge = np.asarray(Image.fromarray(((lab == ROAD) * 255).astype(np.uint8)).resize((tw, th)).filter(ImageFilter.FIND_EDGES)) > 0
            a = np.asarray(t).copy()
            a[edge] = (255, 0, 200)
            sheet.paste(Image.fromarray(a), (c * tw, r * th))
    sheet.save(out)
    print(f"{out}: {len(tiles)} frames x (original + {', '.join(fn.__name__ for fn, _ in AUGMENTS)})")


def _draws_without_shadows(im, lab, seed):
    """The rng state after the augmentations' own draws alone (as before cast_shadows existed)."""
    rng = random.Random(seed)
    for fn, p in AUGMENTS:
        if rng.random() < p:
            im, lab = fn(im, lab, rng)
    return rng.getstate()


def _selftest():
    rng = random.Random(0)
    im = Image.fromarray(np.random.default_rng(0).integers(0, 255, (90, 120, 3), dtype=np.uint8))
    lab = np.full((90, 120), ROAD, np.uint8)
    for fn, _ in AUGMENTS:
        out, out_lab = fn(im, lab, rng)
        assert out.size == im.size and out.mode == "RGB", fn.__name__
        assert out_lab.shape == lab.shape and out_lab.dtype == np.uint8, fn.__name__
        assert set(np.unique(out_lab)) <= {ROAD, CAR, IGNORE, BUILDING}, fn.__name__
    plain_hood, hl = hood(im, lab, random.Random(1))
    assert (hl[-1] == CAR).all() and (hl[0] == ROAD).all(), "the bonnet is car at the bottom, the top untouched"
    global HOOD_MIRROR
    HOOD_MIRROR = 1.0
    mirrored, ml = hood(im, lab, random.Random(1))
    HOOD_MIRROR = 0.0
    assert (ml == hl).all(), "a mirrored scene keeps the bonnet's labels"
    bonnet = hl == CAR
    assert (np.asarray(mirrored)[bonnet] != np.asarray(plain_hood)[bonnet]).any(), "the bonnet shows the scene"
    assert (np.asarray(mirrored)[~bonnet] == np.asarray(plain_hood)[~bonnet]).all(), "nothing else changes"
    out, shl = cast_shadows(im, lab, random.Random(9))
    darker = np.asarray(out, np.float32).mean(axis=2) < np.asarray(im, np.float32).mean(axis=2) - 1
    assert (shl == lab).all() and darker.any() and not darker[:27].any(), "shadows darken the ground only"
    global SHADOWS_ON_EGO
    car = np.full_like(lab, CAR)
    assert (np.asarray(cast_shadows(im, car, random.Random(9))[0]) == np.asarray(im)).all(), "a car keeps the sun"
    SHADOWS_ON_EGO = True  # EGO is CAR in this label set
    assert (np.asarray(cast_shadows(im, car, random.Random(9))[0]) != np.asarray(im)).any(), "the ego car is shaded"
    SHADOWS_ON_EGO = False
    global SHADE_EXPOSURE
    plain_shade = np.asarray(cast_shadows(im, lab, random.Random(9))[0])
    SHADE_EXPOSURE = 1.0
    exposed = np.asarray(cast_shadows(im, lab, random.Random(9))[0], np.float32)
    SHADE_EXPOSURE = 0.0
    assert (plain_shade == np.asarray(cast_shadows(im, lab, random.Random(9))[0])).all(), "SHADE_EXPOSURE 0 draws nothing"
    assert exposed.mean() > plain_shade.mean() + 5 and (exposed >= 254.5).mean() > (plain_shade >= 254.5).mean(), \
        "exposed for the shade: brighter, the sunlit flecks clipped"
    global CAST_SHADOWS
    state = random.Random(10)
    random_road_augment(im, lab, state)
    assert state.getstate() == _draws_without_shadows(im, lab, 10), "CAST_SHADOWS 0 draws nothing for it"
    CAST_SHADOWS = 1.0
    out, shl = random_road_augment(im, lab, random.Random(10), skip=[fn.__name__ for fn, _ in AUGMENTS])
    CAST_SHADOWS = 0.0
    assert (np.asarray(out) != np.asarray(im)).any(), "CAST_SHADOWS 1 always casts one"
    street = lab.copy()
    street[:40] = SKY
    street[40:, :30] = PAVEMENT
    street[60:70, 70:90] = CAR
    out, tl = tunnel(im, street, random.Random(12))
    assert (tl[street == ROAD] == ROAD).all() and (tl[street == CAR] == CAR).all(), "the road and its cars stay"
    assert (tl[street == PAVEMENT] == BUILDING).all() and (tl == BUILDING).sum() > (street == SKY).sum() * 0.7, \
        "beside and above the road: wall and ceiling"
    assert tunnel(im, np.full_like(lab, SKY), random.Random(12))[0] is im, "no road: unchanged"
    global TUNNEL
    TUNNEL = 1.0
    out, tl = random_road_augment(im, street, random.Random(10), skip=[fn.__name__ for fn, _ in AUGMENTS])
    TUNNEL = 0.0
    assert (tl == BUILDING).any(), "TUNNEL 1 always draws one"
    global TUNNEL_WALKWAYS
    TUNNEL_WALKWAYS = True
    _, wl = tunnel(im, street, random.Random(12))
    TUNNEL_WALKWAYS = False
    assert (wl[-1, 24:] == street[-1, 24:]).all() and (wl == BUILDING).any(), "the ground beside the road's near end stays"
    global TUNNEL_LIT_WALLS
    TUNNEL_LIT_WALLS = True
    lit, ll = tunnel(im, street, random.Random(13))
    TUNNEL_LIT_WALLS = False
    grey = np.asarray(lit, np.float32).mean(axis=2)
    assert grey[ll == BUILDING].mean() > grey[ll == ROAD].mean(), "lit walls: brighter than the road"
    global TUNNEL_NEAR_IGNORE
    TUNNEL_NEAR_IGNORE = True
    _, nl = tunnel(im, street, random.Random(12))
    TUNNEL_NEAR_IGNORE = False
    assert (nl[-1, :24] == IGNORE).all() and (nl[street == ROAD] == ROAD).all() and (nl == BUILDING).any(), \
        "the near walls unscored, the road and the far walls kept"
    out, wl = rain(im, street, random.Random(14))
    assert (wl == street).all() and (np.asarray(out) != np.asarray(im)).any(), "rain keeps the labels"
    state = random.Random(10)
    random_road_augment(im, lab, state)
    assert state.getstate() == _draws_without_shadows(im, lab, 10), "RAIN 0 draws nothing for it"
    global RAIN
    RAIN = 1.0
    out, _ = random_road_augment(im, street, random.Random(10), skip=[fn.__name__ for fn, _ in AUGMENTS])
    RAIN = 0.0
    assert (np.asarray(out) != np.asarray(im)).any(), "RAIN 1 always draws it"
    out, ll = centre_line(im, street, random.Random(15))
    painted = (np.asarray(out) != np.asarray(im)).any(axis=2)
    assert (ll == street).all() and painted.any() and not painted[street != ROAD].any(), "a line on the road only, labels kept"
    state = random.Random(10)
    random_road_augment(im, lab, state)
    assert state.getstate() == _draws_without_shadows(im, lab, 10), "CENTRE_LINE 0 draws nothing for it"
    global CENTRE_LINE
    CENTRE_LINE = 1.0
    out, _ = random_road_augment(im, street, random.Random(10), skip=[fn.__name__ for fn, _ in AUGMENTS])
    CENTRE_LINE = 0.0
    assert (np.asarray(out) != np.asarray(im)).any(), "CENTRE_LINE 1 always draws it"
    out, bl = barrier(im, street, random.Random(16))
    drawn = (np.asarray(out) != np.asarray(im)).any(axis=2)
    assert drawn.any() and (bl[drawn] == BUILDING).all() and ((bl != street) <= drawn).all(), \
        "barriers drawn are labelled building, nothing else relabelled"
    state = random.Random(10)
    random_road_augment(im, lab, state)
    assert state.getstate() == _draws_without_shadows(im, lab, 10), "BARRIER 0 draws nothing for it"
    left_car = lab.copy()
    left_car[:, :60] = CAR
    out, pl = car_paint(im, left_car, random.Random(11))
    diff = (np.asarray(out) != np.asarray(im)).any(axis=2)
    assert (pl == left_car).all() and diff[:, :55].mean() > 0.9 and not diff[:, 66:].any(), "only the cars are repainted"
    assert np.asarray(out)[:, :55].mean() > np.asarray(im)[:, :55].mean(), "light paint"
    out, sl = surface(im, lab, random.Random(7))
    assert (sl == lab).all() and (np.asarray(out) != np.asarray(im)).any(), "a new surface tone keeps the labels"
    sky_lab = lab.copy()
    sky_lab[:30] = SKY
    out, kl = sky(im, sky_lab, random.Random(8))
    changed = (np.asarray(out) != np.asarray(im)).any(axis=2)
    assert (kl == sky_lab).all() and changed[:25].mean() > 0.9 and not changed[40:].any(), "only the sky is repainted"
    assert sky(im, lab, random.Random(8))[0] is im, "no sky: unchanged"
    out, dl = dashboard(im, lab, random.Random(6))
    assert (dl[-1] == CAR).all() and (dl[0] == ROAD).all() and (dl == ROAD).mean() > 0.6, "the dashboard is car at the bottom only"
    _, ol = overpass(im, lab, random.Random(2))
    assert (ol == BUILDING).any() and (ol[-1] == ROAD).all(), "the deck is building, the road below stays road"
    out, rl = reflection(im, lab, random.Random(3))
    assert (rl == lab).all() and (np.asarray(out)[:45] == np.asarray(im)[:45]).all(), "a reflection keeps labels and the top"
    car_lab = lab.copy()
    car_lab[40:70, 50:90] = CAR
    out, cl = near_car(im, car_lab, random.Random(4))
    assert (cl == CAR).sum() > (car_lab == CAR).sum(), "an enlarged car is pasted"
    assert ((cl == CAR)[:, :3].any() or (cl == CAR)[:, -3:].any()), "it stands at a side edge"
    assert near_car(im, lab, random.Random(5))[1] is lab, "no car in the frame: unchanged"
    print("augment self-test: ok")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preview", metavar="PNG")
    ap.add_argument("--data", default="../shared/data/camvid")
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest or not a.preview:
        _selftest()
    if a.preview:
        _preview(a.data, a.preview, a.frames, a.seed)
