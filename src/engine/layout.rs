//! Channel-first (PyTorch) <-> channels-last layouts, for fixtures and tools
//! that speak PyTorch's `[c, h, w]`.

/// `[3, h, w]` (PyTorch pixel_values) -> `[h, w, 3]`.
pub fn chw_to_hwc(chw: &[f32], h: usize, w: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0; h * w * c];
    for ch in 0..c {
        for i in 0..h * w {
            out[i * c + ch] = chw[ch * h * w + i];
        }
    }
    out
}

/// `[h, w, c]` -> `[c, h, w]`.
pub fn hwc_to_chw(hwc: &[f32], h: usize, w: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0; h * w * c];
    for i in 0..h * w {
        for ch in 0..c {
            out[ch * h * w + i] = hwc[i * c + ch];
        }
    }
    out
}
