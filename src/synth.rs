//! Deterministic synthetic dashcam drive: RGB frames plus ground-truth road masks,
//! so demos and end-to-end tests can run without real footage or labels.
//!
//! The scene is a flat world seen by a pinhole camera: each image row below the
//! horizon maps to one ground distance, which keeps the road renderer a cheap
//! per-row affine walk. Everything is derived from the seed and the frame time, so
//! any frame can be rendered on its own, in any order, with identical bytes.

const CAM_H: f32 = 1.35; // camera height above the road, metres
const LANE_W: f32 = 3.5;
const EDGE_IN: f32 = LANE_W;
const EDGE_OUT: f32 = LANE_W + 0.15;
const ROAD_HALF: f32 = LANE_W + 0.45; // asphalt shoulder past the edge line
const CENTRE_HALF: f32 = 0.07;
const DASH_PERIOD: f32 = 9.0;
const DASH_LEN: f32 = 3.0;
const SPEED: f64 = 16.0; // m/s, about 58 km/h
// Curvature only acts on the first BEND_Z metres; past that the road runs straight,
// so the vanishing point stays on screen however far the horizon is.
const BEND_Z: f32 = 60.0;
const POLE_SPACING: f32 = 30.0;
const Z_FAR: f32 = 180.0; // objects past this are a pixel or two; not worth drawing
const TEX: usize = 256;

const ZENITH: [f32; 3] = [92.0, 140.0, 200.0];
const HAZE: [f32; 3] = [196.0, 210.0, 222.0];
const ASPHALT: [f32; 3] = [98.0, 98.0, 102.0];
const PAINT: [f32; 3] = [222.0, 222.0, 214.0];
const DIRT: [f32; 3] = [128.0, 112.0, 88.0];
const GRASS: [f32; 3] = [76.0, 104.0, 50.0];
const DRY_GRASS: [f32; 3] = [122.0, 122.0, 72.0];
const CAR_PAINT: [[f32; 3]; 6] =
    [[172.0, 174.0, 178.0], [212.0, 212.0, 206.0], [38.0, 52.0, 96.0], [146.0, 32.0, 30.0], [32.0; 3], [72.0, 74.0, 78.0]];

/// What to render. `Default` is a 6 s, 720p, 25 fps clip seen from behind a hood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSpec {
    pub width: u32,
    pub height: u32,
    pub frames: u32,
    pub seed: u64,
    pub fps: u32,
    /// Draw the ego car's bonnet across the bottom of the frame (never road).
    pub hood: bool,
}

impl Default for SynthSpec {
    fn default() -> Self {
        Self { width: 1280, height: 720, frames: 150, seed: 1, fps: 25, hood: true }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("frame size {width}x{height} must be even and between 64x64 and 16384x16384")]
    BadSize { width: u32, height: u32 },
    #[error("a clip needs at least one frame")]
    NoFrames,
    #[error("fps must be at least 1")]
    BadFps,
    #[error("frame {index} is past the end of a {frames}-frame clip")]
    FrameOutOfRange { index: u32, frames: u32 },
    #[error("{which} buffer holds {got} bytes, frame needs {expected}")]
    BufferSize { which: &'static str, expected: usize, got: usize },
}

/// A seeded scene, ready to render any of its frames.
pub struct SynthDrive {
    spec: SynthSpec,
    f: f32, // focal length, pixels
    horizon: f32,
    // Smooth drifts of road curvature, camera heading, lane position and pitch.
    bend: [Wave; 2],
    heading: Wave,
    sway: Wave,
    bob: [Wave; 2],
    cars: Vec<Car>,
    tex: Vec<f32>,
    // Sky, clouds and the skyline live at infinity, so they are painted once into a
    // panorama a little wider than the frame and only shifted per frame.
    pano: Vec<u8>,
    pano_w: usize,
    pano_h: usize,
    margin: usize,
}

#[derive(Clone, Copy)]
struct Wave { amp: f32, omega: f32, phase: f32 }

impl Wave {
    // f64 time: over a long clip f32 seconds would quantise the phase visibly.
    fn at(&self, t: f64) -> f32 {
        self.amp * (self.omega as f64 * t + self.phase as f64).sin() as f32
    }
}

struct Car { lane_x: f32, base: f32, swing: Wave, paint: [f32; 3] }

/// Camera pose for one frame.
struct View { f: f32, cx: f32, horizon: f32, heading: f32, curve: f32, cam_x: f32, travel: f64 }

impl View {
    /// Lateral position of the road centre line, camera-relative, `z` metres ahead.
    fn centre(&self, z: f32) -> f32 {
        let zc = z.min(BEND_Z);
        self.heading * z + 0.5 * self.curve * zc * zc + self.curve * BEND_Z * (z - zc) - self.cam_x
    }
    fn sx(&self, x: f32, z: f32) -> f32 { self.cx + self.f * (x + self.centre(z)) / z }
    fn sy(&self, h: f32, z: f32) -> f32 { self.horizon + self.f * (CAM_H - h) / z }
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    fn unit(&mut self) -> f32 { (self.next() >> 40) as f32 / (1u64 << 24) as f32 }
    fn range(&mut self, lo: f32, hi: f32) -> f32 { lo + (hi - lo) * self.unit() }
    fn wave(&mut self, amp: f32, period_lo: f32, period_hi: f32) -> Wave {
        let omega = std::f32::consts::TAU / self.range(period_lo, period_hi);
        Wave { amp, omega, phase: self.range(0.0, std::f32::consts::TAU) }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Per-pixel sensor grain in [-1, 1), different every frame like a real sensor's.
fn grain(x: usize, y: usize, salt: u64) -> f32 {
    (mix(salt ^ ((y as u64) << 32 | x as u64)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

fn lerp3(a: [f32; 3], b: [f32; 3], t: f32) -> [f32; 3] { std::array::from_fn(|i| a[i] + (b[i] - a[i]) * t) }
fn shade(c: [f32; 3], k: f32) -> [f32; 3] { c.map(|v| v * k) }

fn put(dst: &mut [u8], c: [f32; 3]) {
    dst.iter_mut().zip(c).for_each(|(d, v)| *d = v.clamp(0.0, 255.0) as u8);
}

/// Overlap length of [a0, a1] and [b0, b1].
fn overlap(a0: f32, a1: f32, b0: f32, b1: f32) -> f32 { (a1.min(b1) - a0.max(b0)).max(0.0) }

/// Share of the forward span [w0, w1] (metres) covered by centre-line dashes.
/// Integrating instead of point-sampling keeps the far dashes from shimmering.
fn dash_cover(w0: f32, w1: f32) -> f32 {
    let prim = |w: f32| {
        let cycles = (w / DASH_PERIOD).floor();
        cycles * DASH_LEN + (w - cycles * DASH_PERIOD).min(DASH_LEN)
    };
    if w1 - w0 < 1e-4 { 0.0 } else { (prim(w1) - prim(w0)) / (w1 - w0) }
}

/// Tileable multi-octave value noise in [-1, 1], TEX x TEX.
fn noise_texture(rng: &mut SplitMix) -> Vec<f32> {
    let mut tex = vec![0.0f32; TEX * TEX];
    let mut amp = 0.5;
    for cell in [32usize, 16, 8, 4, 2] {
        let n = TEX / cell;
        let lattice: Vec<f32> = (0..n * n).map(|_| rng.unit() * 2.0 - 1.0).collect();
        let at = |i: usize, j: usize| lattice[(j % n) * n + i % n];
        for y in 0..TEX {
            let (j, fy) = (y / cell, (y % cell) as f32 / cell as f32);
            let sy = fy * fy * (3.0 - 2.0 * fy);
            for x in 0..TEX {
                let (i, fx) = (x / cell, (x % cell) as f32 / cell as f32);
                let sx = fx * fx * (3.0 - 2.0 * fx);
                let top = at(i, j) + (at(i + 1, j) - at(i, j)) * sx;
                let bot = at(i, j + 1) + (at(i + 1, j + 1) - at(i, j + 1)) * sx;
                tex[y * TEX + x] += amp * (top + (bot - top) * sy);
            }
        }
        amp *= 0.6;
    }
    tex
}

impl SynthDrive {
    /// Validates the spec and lays out the seeded scene (sky, skyline, cars, motion).
    pub fn new(spec: SynthSpec) -> Result<Self, SynthError> {
        let (w, h) = (spec.width, spec.height);
        if !(64..=16384).contains(&w) || !(64..=16384).contains(&h) || w % 2 != 0 || h % 2 != 0 {
            return Err(SynthError::BadSize { width: w, height: h });
        }
        if spec.frames == 0 {
            return Err(SynthError::NoFrames);
        } else if spec.fps == 0 {
            return Err(SynthError::BadFps);
        }
        let mut rng = SplitMix(spec.seed ^ 0x5EED_D417_CA11_0000);
        let (f, horizon) = (0.72 * w as f32, 0.45 * h as f32); // vanishing point a bit above mid-frame
        let bend = [rng.wave(0.0017, 14.0, 22.0), rng.wave(0.0007, 6.0, 10.0)];
        let heading = rng.wave(0.02, 9.0, 15.0);
        let sway = rng.wave(0.2, 5.0, 9.0);
        // Suspension bob: a slow pitch plus road-surface jitter, in pixels.
        let bob = [rng.wave(0.004 * h as f32, 2.5, 4.0), rng.wave(0.0015 * h as f32, 0.4, 0.7)];
        // The lead car sits in our lane; a second one, if any, further up the other lane.
        let lanes = [(-LANE_W / 2.0, 20.0, 4.0), (LANE_W / 2.0, 45.0, 8.0)];
        let n_cars = if rng.unit() < 0.35 { 1 } else { 2 };
        let mut cars = Vec::new();
        for &(lane_x, near, swing) in &lanes[..n_cars] {
            let (base, amp) = (rng.range(near, 1.5 * near), rng.range(swing, 2.5 * swing));
            let swing = rng.wave(amp, 9.0, 18.0);
            cars.push(Car { lane_x, base, swing, paint: CAR_PAINT[(rng.next() % CAR_PAINT.len() as u64) as usize] });
        }
        let tex = noise_texture(&mut rng);
        let margin = (0.04 * w as f32) as usize + 4;
        let pano_h = (horizon + bob[0].amp + bob[1].amp) as usize + 2;
        let (pano_w, pano) = (w as usize + 2 * margin, Vec::new());
        let mut drive = Self { spec, f, horizon, bend, heading, sway, bob, cars, tex, pano, pano_w, pano_h, margin };
        drive.paint_panorama(&mut rng);
        Ok(drive)
    }

    pub fn spec(&self) -> &SynthSpec { &self.spec }

    /// Renders frame `index` as tightly packed RGB8 (width*height*3) into `rgb`, and
    /// its ground-truth road mask (1 = road surface incl. lane markings, 0 = everything
    /// else, width*height bytes) into `mask`. Same (spec, index) → same bytes, always.
    pub fn render(&self, index: u32, rgb: &mut [u8], mask: &mut [u8]) -> Result<(), SynthError> {
        let (w, h) = (self.spec.width as usize, self.spec.height as usize);
        if index >= self.spec.frames {
            return Err(SynthError::FrameOutOfRange { index, frames: self.spec.frames });
        }
        for (which, buf, expected) in [("rgb", &*rgb, w * h * 3), ("mask", &*mask, w * h)] {
            if buf.len() != expected {
                return Err(SynthError::BufferSize { which, expected, got: buf.len() });
            }
        }
        let t = index as f64 / self.spec.fps as f64;
        let (f, cx, heading, travel) = (self.f, w as f32 / 2.0, self.heading.at(t), SPEED * t);
        let horizon = self.horizon + self.bob[0].at(t) + self.bob[1].at(t);
        let (curve, cam_x) = (self.bend[0].at(t) + self.bend[1].at(t), -LANE_W / 2.0 + self.sway.at(t));
        let view = View { f, cx, horizon, heading, curve, cam_x, travel };
        let mut canvas = Canvas { rgb, mask, w, h };
        let ground_top = self.draw_background(&view, &mut canvas);
        self.draw_ground(&view, index, ground_top, &mut canvas);
        self.draw_objects(&view, t, &mut canvas);
        if self.spec.hood {
            draw_hood(&mut canvas);
        }
        Ok(())
    }

    fn tex(&self, u: f32, v: f32) -> f32 {
        let (fu, fv) = (u.floor(), v.floor());
        let (tu, tv) = (u - fu, v - fv);
        let (i0, j0) = ((fu as i32 & 255) as usize, (fv as i32 & 255) as usize);
        let (i1, j1) = ((i0 + 1) & 255, (j0 + 1) & 255);
        let (a, b) = (self.tex[j0 * TEX + i0], self.tex[j0 * TEX + i1]);
        let (c, d) = (self.tex[j1 * TEX + i0], self.tex[j1 * TEX + i1]);
        let top = a + (b - a) * tu;
        top + (c + (d - c) * tu - top) * tv
    }

    fn paint_panorama(&mut self, rng: &mut SplitMix) {
        let (pw, ph) = (self.pano_w, self.pano_h);
        let (w, h) = (self.spec.width as f32, self.spec.height as f32);
        let mut density = vec![0.0f32; pw * ph];
        for _ in 0..rng.range(3.0, 6.0) as usize {
            let (cx, cy) = (rng.range(0.0, pw as f32), rng.range(0.25, 0.8) * ph as f32);
            let size = rng.range(0.04, 0.09) * w;
            for _ in 0..rng.range(5.0, 10.0) as usize {
                let bx = cx + rng.range(-1.5, 1.5) * size;
                let by = cy + rng.range(-0.25, 0.25) * size;
                let r = size * rng.range(0.4, 0.9);
                let (x0, x1) = ((bx - r).max(0.0) as usize, ((bx + r) as usize).min(pw));
                let (y0, y1) = ((by - r).max(0.0) as usize, ((by + r) as usize).min(ph));
                for y in y0..y1 {
                    for x in x0..x1 {
                        // Flattened blobs: clouds near the horizon look squashed.
                        let (dx, dy) = ((x as f32 - bx) / r, (y as f32 - by) / (0.45 * r));
                        density[y * pw + x] += 0.9 * (1.0 - (dx * dx + dy * dy)).max(0.0).powi(2);
                    }
                }
            }
        }
        let mut pano = vec![0u8; pw * ph * 3];
        for y in 0..ph {
            let elev = (ph as f32 - y as f32 - 0.5) / self.horizon;
            let sky = lerp3(HAZE, ZENITH, elev.clamp(0.0, 1.0).powf(0.6));
            for x in 0..pw {
                let d = density[y * pw + x];
                let puff = (d + 0.25 * self.tex(x as f32 * 0.15, y as f32 * 0.3) * d.min(1.0)).clamp(0.0, 1.0);
                let cloud = lerp3([150.0, 155.0, 165.0], [246.0, 246.0, 248.0], d.min(1.0).sqrt());
                put(&mut pano[(y * pw + x) * 3..][..3], lerp3(sky, cloud, puff));
            }
        }
        // Skyline, painted back to front: hazy hills, buildings, then tree crowns.
        let ground = ph as f32; // pano row index of the horizon
        let fill = |pano: &mut Vec<u8>, x: usize, top: f32, c: &dyn Fn(usize, usize) -> [f32; 3]| {
            for y in (top.max(0.0) as usize)..ph {
                put(&mut pano[(y * pw + x) * 3..][..3], c(x, y));
            }
        };
        let hill_c = lerp3([70.0, 96.0, 84.0], HAZE, 0.55);
        for x in 0..pw {
            let top = ground - h * (0.035 + 0.025 * self.tex(x as f32 * 40.0 / w, 7.0));
            fill(&mut pano, x, top, &|_, _| hill_c);
        }
        let mut x = 0.0;
        while x < pw as f32 {
            let bw = rng.range(0.03, 0.11) * w;
            let bh = rng.range(0.03, 0.11) * h;
            if rng.unit() < 0.7 {
                let walls = [[150.0, 86.0, 66.0], [196.0, 182.0, 156.0], [138.0, 138.0, 136.0], [214.0, 210.0, 200.0]];
                let wall = lerp3(walls[(rng.next() % 4) as usize], HAZE, 0.2);
                let (win, floor) = (rng.range(0.008, 0.014) * w, rng.range(0.018, 0.026) * h);
                let (x0, x1) = (x as usize, ((x + bw) as usize).min(pw));
                let top = ground - bh;
                for px in x0..x1 {
                    fill(&mut pano, px, top, &|px, py| {
                        let (u, v) = ((px - x0) as f32, py as f32 - top);
                        let window = u > win && u < bw - win && u % (2.0 * win) > 0.6 * win && v % floor > 0.4 * floor;
                        if v < 0.08 * floor { shade(wall, 0.7) } else if window { lerp3(wall, [50.0, 60.0, 72.0], 0.75) } else { wall }
                    });
                }
            }
            x += bw + rng.range(0.0, 0.04) * w;
        }
        let mut x = 0.0;
        while x < pw as f32 {
            let r = rng.range(0.015, 0.045) * h;
            let cy = ground - rng.range(0.3, 1.2) * r - 0.01 * h;
            let leaf = lerp3([[42.0, 70.0, 36.0], [60.0, 86.0, 44.0], [34.0, 56.0, 34.0]][(rng.next() % 3) as usize], HAZE, 0.15);
            let (x0, x1) = ((x - r).max(0.0) as usize, ((x + r) as usize).min(pw));
            for px in x0..x1 {
                let dx = (px as f32 - x) / r;
                let top = cy - r * (1.0 - dx * dx).max(0.0).sqrt();
                let tex = &self.tex;
                fill(&mut pano, px, top, &|px, py| {
                    let n = tex[(py % TEX) * TEX + (px * 3) % TEX];
                    let lit = 1.0 + 0.35 * n + 0.25 * (cy - py as f32) / r;
                    shade(leaf, lit.max(0.5))
                });
            }
            x += rng.range(0.4, 2.2) * r;
            if rng.unit() < 0.15 {
                x += rng.range(0.02, 0.08) * w; // a gap lets buildings show through
            }
        }
        self.pano = pano;
    }

    /// Copies sky and skyline for the rows above the horizon; returns the first ground row.
    fn draw_background(&self, v: &View, c: &mut Canvas) -> usize {
        let ground_top = (v.horizon.ceil().max(0.0) as usize).min(c.h);
        let shift = (v.f * v.heading).round() as isize;
        let x0 = (self.margin as isize - shift).clamp(0, (self.pano_w - c.w) as isize) as usize;
        for y in 0..ground_top {
            let py = y + self.pano_h - ground_top;
            c.rgb[y * c.w * 3..(y + 1) * c.w * 3].copy_from_slice(&self.pano[(py * self.pano_w + x0) * 3..][..c.w * 3]);
            c.mask[y * c.w..(y + 1) * c.w].fill(0);
        }
        ground_top
    }

    fn draw_ground(&self, v: &View, index: u32, ground_top: usize, c: &mut Canvas) {
        let salt = mix(self.spec.seed ^ mix(index as u64));
        // Texture coordinates wrap every TEX texels, so the travelled distance only
        // matters modulo the wrap length; reducing it in f64 keeps f32 coords small.
        let offset = |scale: f32| (v.travel % (TEX as f64 / scale as f64)) as f32 * scale;
        let (fine, patch, grass, dry) = (offset(40.0), offset(1.5), offset(12.0), offset(0.6));
        let blades = offset(70.0);
        let dash_travel = (v.travel % DASH_PERIOD as f64) as f32;
        for y in ground_top..c.h {
            let d = y as f32 + 0.5 - v.horizon;
            let z = v.f * CAM_H / d;
            let z_near = v.f * CAM_H / (d + 0.5);
            let z_far = if d > 0.75 { v.f * CAM_H / (d - 0.5) } else { 4.0 * z };
            let dash = dash_cover(z_near + dash_travel, z_far + dash_travel);
            let mpp = z / v.f; // metres per pixel across the row
            let x_first = (0.5 - v.cx) * mpp - v.centre(z);
            let haze = 0.8 * (1.0 - (-z / 350.0).exp());
            // Detail finer than a pixel would only alias into noise; fade it out.
            let detail = (0.05 / mpp).min(1.0);
            let far_detail = (0.8 / mpp).min(1.0);
            let (zf, zp, zg, zd) = (z * 40.0 + fine, z * 1.5 + patch, z * 12.0 + grass, z * 0.6 + dry);
            let (zb, blade_detail) = (z * 70.0 + blades, (0.03 / mpp).min(1.0));
            let row = &mut c.rgb[y * c.w * 3..(y + 1) * c.w * 3];
            let mrow = &mut c.mask[y * c.w..(y + 1) * c.w];
            for x in 0..c.w {
                let xr = x_first + x as f32 * mpp;
                let ax = xr.abs();
                let on_road = ((ROAD_HALF - ax) / mpp + 0.5).clamp(0.0, 1.0);
                let mut col = [0.0; 3];
                if on_road > 0.0 {
                    let lane = ax - LANE_W / 2.0;
                    let q = (lane.abs() - 0.85) / 0.35;
                    let track = if q.abs() < 1.0 { (1.0 - q * q) * (1.0 - q * q) } else { 0.0 };
                    let speckle = detail * self.tex(xr * 40.0 + 91.0, zf);
                    let tone = 1.0 + 0.08 * far_detail * self.tex(xr * 1.5, zp) + 0.1 * speckle - 0.07 * track;
                    col = shade(ASPHALT, tone);
                    let paint = overlap(ax - 0.5 * mpp, ax + 0.5 * mpp, EDGE_IN, EDGE_OUT)
                        + dash * overlap(xr - 0.5 * mpp, xr + 0.5 * mpp, -CENTRE_HALF, CENTRE_HALF);
                    if paint > 0.0 {
                        col = lerp3(col, shade(PAINT, 0.94 + 0.12 * speckle), (paint / mpp).min(1.0));
                    }
                }
                if on_road < 1.0 {
                    let verge = ax - ROAD_HALF;
                    let side = if xr < 0.0 { 0.0 } else { 128.0 };
                    let dirt_w = 0.5 + 0.5 * self.tex(side + 3.0, zd);
                    let blade = detail.max(0.3) * self.tex(xr * 12.0 + side, zg)
                        + 0.7 * blade_detail * self.tex(xr * 70.0 + side, zb);
                    let soil = if verge < dirt_w { 1.0 } else { ((dirt_w + 0.3 - verge) / 0.3).clamp(0.0, 1.0) };
                    let green = lerp3(GRASS, DRY_GRASS, (0.5 + 1.2 * self.tex(xr * 0.6 + side, zd)).clamp(0.0, 1.0));
                    let ground = lerp3(green, DIRT, soil);
                    col = lerp3(shade(ground, 1.0 + 0.3 * blade), col, on_road);
                }
                col = lerp3(col, HAZE, haze);
                let n = 3.0 * grain(x, y, salt);
                put(&mut row[x * 3..x * 3 + 3], [col[0] + n, col[1] + n, col[2] + n]);
                mrow[x] = (ax < ROAD_HALF) as u8;
            }
        }
    }

    fn draw_objects(&self, v: &View, t: f64, c: &mut Canvas) {
        enum Obj {
            Pole { x: f32, sign: Option<[f32; 3]>, wood: bool },
            Car(usize),
        }
        let mut objs: Vec<(f32, Obj)> = Vec::new();
        let first = ((v.travel + 1.0) / POLE_SPACING as f64).floor() as i64;
        let last = ((v.travel + Z_FAR as f64) / POLE_SPACING as f64).ceil() as i64;
        for slot in first..=last {
            for side in [-1.0f32, 1.0] {
                // Seeded by slot, not by frame, so each pole keeps its place as we drive past.
                let mut rng = SplitMix(mix(self.spec.seed ^ mix(slot as u64)) ^ (side > 0.0) as u64);
                let present = rng.unit() < 0.75;
                let z = (slot as f64 * POLE_SPACING as f64 + rng.range(0.0, 0.5 * POLE_SPACING) as f64 - v.travel) as f32;
                if !present || !(2.0..Z_FAR).contains(&z) {
                    continue;
                }
                let x = side * (ROAD_HALF + rng.range(1.0, 2.5));
                let sign = match rng.unit() {
                    r if r < 0.25 => Some([32.0, 74.0, 150.0]),
                    r if r < 0.45 => Some([226.0, 226.0, 222.0]),
                    _ => None,
                };
                objs.push((z, Obj::Pole { x, sign, wood: sign.is_none() && rng.unit() < 0.6 }));
            }
        }
        for (i, car) in self.cars.iter().enumerate() {
            objs.push((car.base + car.swing.at(t), Obj::Car(i)));
        }
        // Painter's order: far first, so nearer things overwrite them.
        objs.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (z, obj) in objs {
            match obj {
                Obj::Pole { x, sign, wood } => {
                    let (height, colour) = if wood { (7.0, [92.0, 78.0, 60.0]) } else { (3.2, [138.0, 140.0, 138.0]) };
                    let r = if wood { 0.12 } else { 0.05 };
                    c.quad(v, z, x, r, r, 0.0, height, shade(colour, 0.8), colour);
                    if wood {
                        c.quad(v, z, x, 0.7, 0.7, height - 0.6, height - 0.45, colour, colour);
                    }
                    if let Some(face) = sign {
                        let sx = x - x.signum() * 0.2;
                        c.quad(v, z, sx, 0.45, 0.45, 2.1, 3.0, [200.0, 40.0, 36.0], [200.0, 40.0, 36.0]);
                        c.quad(v, z, sx, 0.38, 0.38, 2.17, 2.93, face, shade(face, 1.08));
                    }
                }
                Obj::Car(i) => self.draw_car(v, z, &self.cars[i], c),
            }
        }
    }

    fn draw_car(&self, v: &View, z: f32, car: &Car, c: &mut Canvas) {
        let x = car.lane_x;
        // Contact shadow on the road just behind the car; it stays road in the mask.
        let (y0, y1) = (v.sy(0.0, z), v.sy(0.0, z - 0.9));
        let (l, r) = (v.sx(x - 1.0, z), v.sx(x + 1.0, z));
        for y in (y0.round().max(0.0) as usize)..(y1.round().max(0.0) as usize).min(c.h) {
            let k = 0.55 + 0.4 * ((y as f32 + 0.5 - y0) / (y1 - y0)).clamp(0.0, 1.0);
            for x in (l.round().max(0.0) as usize)..(r.round().max(0.0) as usize).min(c.w) {
                c.rgb[(y * c.w + x) * 3..][..3].iter_mut().for_each(|ch| *ch = (*ch as f32 * k) as u8);
            }
        }
        let p = car.paint;
        let dark = [18.0, 18.0, 20.0];
        c.quad(v, z, x, 0.8, 0.8, 0.02, 0.32, dark, dark);
        for s in [-0.75, 0.75] {
            c.quad(v, z, x + s, 0.15, 0.15, 0.0, 0.38, [12.0; 3], [12.0; 3]);
        }
        c.quad(v, z, x, 0.92, 0.92, 0.3, 0.5, shade(p, 0.6), shade(p, 0.75));
        c.quad(v, z, x, 0.9, 0.9, 0.5, 0.96, shade(p, 0.85), shade(p, 1.05));
        for s in [-0.7, 0.7] {
            c.quad(v, z, x + s, 0.15, 0.15, 0.72, 0.88, [176.0, 22.0, 24.0], [214.0, 40.0, 36.0]);
        }
        c.quad(v, z, x, 0.26, 0.26, 0.52, 0.64, [228.0, 196.0, 54.0], [228.0, 196.0, 54.0]);
        c.quad(v, z, x, 0.84, 0.62, 0.96, 1.46, shade(p, 0.9), shade(p, 1.0));
        c.quad(v, z, x, 0.72, 0.55, 1.02, 1.38, [30.0, 34.0, 42.0], [78.0, 88.0, 102.0]);
    }
}

struct Canvas<'a> { rgb: &'a mut [u8], mask: &'a mut [u8], w: usize, h: usize }

impl Canvas<'_> {
    /// Fills an upright trapezoid facing the camera at distance `z`: centred `x`
    /// metres off the road centre, from height `h0` to `h1`, half-widths at each.
    /// It occludes whatever is behind it, so its pixels leave the road mask.
    #[allow(clippy::too_many_arguments)]
    fn quad(&mut self, v: &View, z: f32, x: f32, half0: f32, half1: f32, h0: f32, h1: f32, c0: [f32; 3], c1: [f32; 3]) {
        let (top, bottom) = (v.sy(h1, z), v.sy(h0, z));
        let (cx, scale) = (v.sx(x, z), v.f / z);
        // At least a pixel tall and wide, so distant poles do not blink in and out.
        let (top, bottom) = if bottom - top < 1.0 { (top, top + 1.0) } else { (top, bottom) };
        let (y0, y1) = (top.round().max(0.0), bottom.round().min(self.h as f32));
        for y in (y0 as usize)..(y1.max(y0) as usize) {
            let k = ((bottom - (y as f32 + 0.5)) / (bottom - top)).clamp(0.0, 1.0);
            let half = ((half0 + (half1 - half0) * k) * scale).max(0.5);
            let (x0, x1) = ((cx - half).round().max(0.0), (cx + half).round().min(self.w as f32));
            let col = lerp3(c0, c1, k);
            for x in (x0 as usize)..(x1.max(x0) as usize) {
                put(&mut self.rgb[(y * self.w + x) * 3..][..3], col);
                self.mask[y * self.w + x] = 0;
            }
        }
    }
}

/// The ego car's bonnet: a dark arc whose top edge picks up a sky reflection.
fn draw_hood(c: &mut Canvas) {
    let (w, h) = (c.w as f32, c.h as f32);
    let depth = HOOD_DEPTH * h;
    for x in 0..c.w {
        let u = (x as f32 + 0.5 - w / 2.0) / (w / 2.0);
        let edge = hood_edge(x, c.w, c.h);
        for y in (edge.floor().max(0.0) as usize)..c.h {
            let below = y as f32 + 1.0 - edge; // pixel coverage of the first row
            let k = ((y as f32 + 0.5 - edge) / depth).clamp(0.0, 1.0);
            let gleam = (1.0 - k * 6.0).max(0.0) * (1.0 - 0.5 * u.abs());
            let col = lerp3(lerp3([34.0, 36.0, 42.0], [14.0, 14.0, 16.0], k), [110.0, 120.0, 134.0], gleam);
            let px = &mut c.rgb[(y * c.w + x) * 3..][..3];
            let old = [px[0] as f32, px[1] as f32, px[2] as f32];
            put(px, lerp3(old, col, below.min(1.0)));
            c.mask[y * c.w + x] &= (below < 0.5) as u8;
        }
    }
}

/// The bonnet's depth at the centre column, as a share of the frame height.
const HOOD_DEPTH: f32 = 0.12;

/// Where the bonnet starts in column `x` (a row, fractional).
fn hood_edge(x: usize, width: usize, height: usize) -> f32 {
    let (w, h) = (width as f32, height as f32);
    let u = (x as f32 + 0.5 - w / 2.0) / (w / 2.0);
    h - HOOD_DEPTH * h * (1.0 - 0.45 * u * u)
}

/// Ground truth of the bonnet that `SynthSpec { hood: true, .. }` draws: 1 where
/// the bonnet covers at least half the pixel (the rule the road mask uses),
/// row-major `width * height`.
pub fn hood_mask(width: usize, height: usize) -> Vec<u8> {
    let mut mask = vec![0u8; width * height];
    for x in 0..width {
        let edge = hood_edge(x, width, height);
        for y in (edge.floor().max(0.0) as usize)..height {
            mask[y * width + x] = u8::from(y as f32 + 1.0 - edge >= 0.5);
        }
    }
    mask
}

/// Intersection over union of the road class (any non-zero byte) between two masks
/// of equal length; `None` when neither has any road.
///
/// # Panics
/// If the masks differ in length: that is a caller bug, not a bad prediction.
pub fn road_iou(pred: &[u8], truth: &[u8]) -> Option<f64> {
    assert_eq!(pred.len(), truth.len(), "road_iou: masks differ in length");
    let (mut inter, mut union) = (0u64, 0u64);
    for (&p, &t) in pred.iter().zip(truth) {
        inter += (p != 0 && t != 0) as u64;
        union += (p != 0 || t != 0) as u64;
    }
    (union > 0).then(|| inter as f64 / union as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64, hood: bool) -> SynthSpec {
        SynthSpec { width: 320, height: 180, frames: 40, seed, fps: 25, hood }
    }

    fn frame(drive: &SynthDrive, index: u32) -> (Vec<u8>, Vec<u8>) {
        let (w, h) = (drive.spec().width as usize, drive.spec().height as usize);
        let (mut rgb, mut mask) = (vec![0; w * h * 3], vec![0; w * h]);
        drive.render(index, &mut rgb, &mut mask).unwrap();
        (rgb, mask)
    }

    #[test]
    fn rendering_is_deterministic_in_any_order() {
        let (a, b) = (SynthDrive::new(small(7, true)).unwrap(), SynthDrive::new(small(7, true)).unwrap());
        let forward: Vec<_> = [0, 13, 39].map(|i| frame(&a, i)).into();
        let backward: Vec<_> = [39, 13, 0].map(|i| frame(&b, i)).into_iter().rev().collect();
        assert_eq!(forward, backward);
    }

    #[test]
    fn seeds_and_frames_differ() {
        let (a, b) = (SynthDrive::new(small(1, true)).unwrap(), SynthDrive::new(small(2, true)).unwrap());
        assert_ne!(frame(&a, 0).0, frame(&b, 0).0);
        assert_ne!(frame(&a, 0).0, frame(&a, 1).0);
    }

    #[test]
    fn mask_is_plausible() {
        let (w, h) = (320, 180);
        for seed in 0..6 {
            for hood in [false, true] {
                let drive = SynthDrive::new(small(seed, hood)).unwrap();
                for i in [0, 20, 39] {
                    let (_, mask) = frame(&drive, i);
                    assert!(mask.iter().all(|&m| m <= 1));
                    let share = mask.iter().map(|&m| m as f64).sum::<f64>() / mask.len() as f64;
                    assert!((0.15..=0.6).contains(&share), "seed {seed} frame {i}: road share {share}");
                    assert!(mask[..w].iter().all(|&m| m == 0), "top row is never road");
                    // Without a hood the camera looks straight down its lane; with one, the hood is not road.
                    assert_eq!(mask[(h - 1) * w + w / 2], !hood as u8, "seed {seed} frame {i} hood {hood}");
                }
            }
        }
    }

    #[test]
    fn default_spec_renders_last_frame() {
        let (rgb, mask) = frame(&SynthDrive::new(SynthSpec::default()).unwrap(), 149);
        assert_eq!((rgb.len(), mask.len()), (1280 * 720 * 3, 1280 * 720));
    }

    #[test]
    fn bad_specs_and_buffers_are_rejected() {
        let ok = small(1, true);
        for (width, height) in [(62, 64), (64, 62), (65, 64), (64, 0), (20000, 64)] {
            let spec = SynthSpec { width, height, ..ok.clone() };
            assert!(matches!(SynthDrive::new(spec), Err(SynthError::BadSize { .. })));
        }
        assert!(matches!(SynthDrive::new(SynthSpec { frames: 0, ..ok.clone() }), Err(SynthError::NoFrames)));
        assert!(matches!(SynthDrive::new(SynthSpec { fps: 0, ..ok.clone() }), Err(SynthError::BadFps)));
        let drive = SynthDrive::new(SynthSpec { width: 64, height: 64, ..ok }).unwrap();
        let (mut rgb, mut mask) = (vec![0; 64 * 64 * 3], vec![0; 64 * 64]);
        assert!(drive.render(39, &mut rgb, &mut mask).is_ok());
        assert!(matches!(drive.render(40, &mut rgb, &mut mask), Err(SynthError::FrameOutOfRange { .. })));
        assert!(matches!(drive.render(0, &mut rgb[1..], &mut mask), Err(SynthError::BufferSize { which: "rgb", .. })));
        assert!(matches!(drive.render(0, &mut rgb, &mut mask[1..]), Err(SynthError::BufferSize { which: "mask", .. })));
    }

    #[test]
    fn iou_basics() {
        assert_eq!(road_iou(&[0, 0], &[0, 0]), None);
        assert_eq!(road_iou(&[1, 1, 0], &[1, 1, 0]), Some(1.0));
        assert_eq!(road_iou(&[1, 0, 0], &[0, 1, 0]), Some(0.0));
        assert_eq!(road_iou(&[1, 1, 0, 0], &[1, 0, 1, 0]), Some(1.0 / 3.0));
        assert_eq!(road_iou(&[255, 0], &[1, 0]), Some(1.0));
    }
}
