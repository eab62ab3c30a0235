"""Rain, as a dashcam sees it: a wet, dull day, the road a blurred mirror, and
water on the windscreen (issue 35). On rainy.mp4 in ../shared (a highway in
heavy rain, drops all over the glass) Intel's model covers a fifth of the
frame with road where the bundled model, trained on dry frames, found 0.7%
(2026-12-01, the frame at 12.3 s).

`draw(a, road, rng)` takes an H x W x 3 float image (0..255) and the road's
mask, and returns the rainy image. Labels do not change: the road seen
through a drop or through water on the lens is still road, which is what a
user wants painted. numpy + PIL only, like augment.py, which calls it.

Trained on (p59, p60) it was learnt (CamVid val with rain drawn: 0.769 ->
0.802) and did not carry over: on rainy.mp4 the road found fell. What the
real frames have that this lacks is not known yet; the teacher's road of
the rain clip (p61) did better.
"""
import numpy as np
from PIL import Image, ImageFilter


def _blur(a, radius):
    """Gaussian blur of a float H x W x 3 image (through 8-bit RGB: PIL blurs no float images)."""
    if radius <= 0:
        return a
    im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")
    return np.asarray(im.filter(ImageFilter.GaussianBlur(radius)), np.float32)


def _soft(mask, radius):
    """A 0..1 mask (bool or float, H x W) with its edge blurred, as floats."""
    im = Image.fromarray((mask * 255).astype(np.uint8))
    return np.asarray(im.filter(ImageFilter.GaussianBlur(radius)), np.float32) / 255.0


def _dull_light(a, rng):
    """Overcast rain light: colours washed out towards a cool grey, less contrast, darker."""
    grey = a.mean(axis=2, keepdims=True)
    a = grey + rng.uniform(0.2, 0.65) * (a - grey)
    mean = a.mean()
    a = mean + rng.uniform(0.55, 0.9) * (a - mean)
    cast = np.array([rng.uniform(0.82, 0.95), rng.uniform(0.9, 1.0), 1.0], np.float32)
    return a * cast * rng.uniform(0.55, 0.95)


def _wet_road(a, road, rng):
    """Wet asphalt: darker, and a blurred, upside-down image of what stands
    beyond it (the vehicles' lights, the sky at the horizon) smeared towards
    the camera, fading with distance from the road's far end."""
    h, w = road.shape
    rows = np.nonzero(road.sum(axis=1) > 2)[0]
    if len(rows) == 0:
        return a
    far = int(rows[0])
    src_rows = np.clip(2 * far - np.arange(h), 0, h - 1)
    mirror = a[src_rows]
    # Streaks: the reflection smeared down the road far more than across it.
    tall = max(3, h // 12)
    mirror = np.asarray(Image.fromarray(np.clip(mirror, 0, 255).astype(np.uint8)).resize(
        (max(1, w // 2), max(1, h // tall)), Image.BILINEAR).resize((w, h), Image.BILINEAR), np.float32)
    mirror = _blur(mirror, 1.5)
    fade = np.clip(1 - (np.arange(h) - far) / max(h - far, 1), 0, 1)[:, None, None]
    gloss = rng.uniform(0.15, 0.5) * (0.35 + 0.65 * fade)
    wet = a * rng.uniform(0.55, 0.85)
    wet = wet * (1 - gloss) + mirror * gloss
    m = _soft(road, 2)[..., None]
    return a * (1 - m) + wet * m


def _drops(a, rng, g):
    """Drops on the glass, each a small lens: the scene around it, minified
    and upside down (so the sky shows at a drop's bottom), a dark rim, a
    highlight. Sizes from a long tail: many specks, a few large drops."""
    h, w = a.shape[:2]
    out = a.copy()
    cover = np.zeros((h, w, 1), np.float32)
    scene = _blur(a, rng.uniform(1.0, 3.0))
    n = int(rng.uniform(100, 600) * (h * w) / (1280 * 720))
    for _ in range(max(n, 5)):
        r = w * min(0.03, 0.006 * (1 + g.pareto(2.5) * 1.5))
        rx, ry = r * rng.uniform(0.75, 1.25), r * rng.uniform(0.75, 1.3)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        x0, x1 = int(max(cx - rx - 1, 0)), int(min(cx + rx + 2, w))
        y0, y1 = int(max(cy - ry - 1, 0)), int(min(cy + ry + 2, h))
        if x1 <= x0 or y1 <= y0:
            continue
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
        ux, uy = (xx - cx) / rx, (yy - cy) / ry
        d = np.sqrt(ux ** 2 + uy ** 2)
        if not (d < 1).any():
            continue
        view = rng.uniform(3.0, 7.0)  # how much wider the drop sees than it covers
        sx = np.clip(cx - ux * rx * view, 0, w - 1).astype(np.int32)
        sy = np.clip(cy - uy * ry * view + ry * rng.uniform(-2, 2), 0, h - 1).astype(np.int32)
        lens = scene[sy, sx] * rng.uniform(0.9, 1.25)
        rim = np.clip((d - 0.7) / 0.3, 0, 1)[..., None]
        lens = lens * (1 - rng.uniform(0.3, 0.7) * rim)
        hx, hy = -0.35 * rx, -0.4 * ry
        shine = np.exp(-(((xx - cx - hx) / (0.2 * rx + 0.5)) ** 2 + ((yy - cy - hy) / (0.2 * ry + 0.5)) ** 2))
        lens = lens + rng.uniform(40, 140) * shine[..., None]
        alpha = np.clip((1 - d) * max(r, 1.0) / 1.5, 0, 1)[..., None] * rng.uniform(0.75, 1.0)
        out[y0:y1, x0:x1] = out[y0:y1, x0:x1] * (1 - alpha) + lens * alpha
        cover[y0:y1, x0:x1] = np.maximum(cover[y0:y1, x0:x1], alpha)
    if rng.random() < 0.6:  # focused on the street beyond: the drops soft
        cover = _soft(cover[..., 0], 1.0)[..., None]
        out = a * (1 - cover) + _blur(out, rng.uniform(0.8, 2.0)) * cover
    return out


def _lens_water(a, rng):
    """A film of water on the lens: a few large soft patches where the scene
    is heavily blurred and lightened, as in Road Obstacles' water-on-camera frame."""
    h, w = a.shape[:2]
    blurred = _blur(a, rng.uniform(6, 16)) * rng.uniform(1.0, 1.15) + rng.uniform(0, 20)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    m = np.zeros((h, w), np.float32)
    for _ in range(rng.randint(1, 4)):
        cx, cy = rng.uniform(0, w), rng.uniform(0.2 * h, h)
        rx, ry = w * rng.uniform(0.06, 0.22), h * rng.uniform(0.08, 0.3)
        m = np.maximum(m, np.exp(-(((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2) ** 1.5))
    m = (m * rng.uniform(0.6, 1.0))[..., None]
    return a * (1 - m) + blurred * m


def draw(a, road, rng):
    """`a`: H x W x 3 float (0..255), `road`: H x W bool, `rng`: random.Random.
    Returns the rainy image as float; the caller clips it."""
    g = np.random.default_rng(rng.randrange(1 << 30))
    a = _dull_light(a, rng)
    a = _wet_road(a, road, rng)
    if rng.random() < 0.5:  # focused on the glass: the street beyond it soft
        a = _blur(a, rng.uniform(0.8, 2.5))
    if rng.random() < 0.85:
        a = _drops(a, rng, g)
    if rng.random() < 0.3:
        a = _lens_water(a, rng)
    return a
