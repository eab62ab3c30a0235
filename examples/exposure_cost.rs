//! Host cost of the exposure step per frame (docs/benchmarks.md "Exposure"):
//! the mean luma, the curve for a dark frame, and CPU preprocessing with the
//! curve against without it, for a 1920x1080 frame into a 1024x576 input.
//!
//!   cargo run --release --example exposure_cost

use std::time::Instant;

use roadseg::backend::cpu::{preprocess, preprocess_toned};
use roadseg::exposure::{Exposure, ToneCurve, mean_luma};
use roadseg::frame::{FrameRef, PixelFormat};

fn median_ms(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn time(n: usize, mut f: impl FnMut()) -> f64 {
    median_ms((0..n).map(|_| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1e3
    }).collect())
}

fn main() {
    let (w, h) = (1920, 1080);
    for (name, format, bytes) in [("NV12", PixelFormat::Nv12, w * h * 3 / 2), ("RGB", PixelFormat::Rgb, w * h * 3)] {
        // A dark frame with texture: values 0..60.
        let data: Vec<u8> = (0..bytes).map(|i| ((i * 37 + i / w * 11) % 60) as u8).collect();
        let frame = FrameRef::packed(&data, w, h, format);
        let mut luma = 0.0;
        let mean = time(200, || luma = mean_luma(&frame));
        let mut curve = ToneCurve::IDENTITY;
        let curve_ms = time(200, || curve = Exposure::DEFAULT.curve_for(&frame));
        let mut out = vec![0.0f32; 1024 * 576 * 3];
        let plain = time(30, || preprocess(&frame, 1024, 576, &mut out).unwrap());
        let toned = time(30, || preprocess_toned(&frame, &curve, 1024, 576, &mut out).unwrap());
        println!(
            "{name} {w}x{h}: mean luma {luma:.3} in {mean:.3} ms; curve (mean + table, gamma {:.3}) {curve_ms:.3} ms; \
             preprocess to 1024x576 {plain:.2} ms plain, {toned:.2} ms through the curve",
            curve.gamma_value()
        );
    }
}
