//! Host-side weight re-layouts done once at load: PyTorch stores linear
//! weights `[out, in]` and convs `[out, in, kh, kw]`; the backends want the
//! row-major right-hand side `[in, out]` and `[kh, kw, in, out]`.

/// `[out, in]` -> `[in, out]`.
pub fn transpose(w: &[f32], out: usize, inp: usize) -> Vec<f32> {
    let mut t = vec![0.0; w.len()];
    for o in 0..out {
        for i in 0..inp {
            t[i * out + o] = w[o * inp + i];
        }
    }
    t
}

/// `[c_out, c_in, k, k]` -> `[k, k, c_in, c_out]`.
pub fn conv_to_hwio(w: &[f32], c_out: usize, c_in: usize, k: usize) -> Vec<f32> {
    let mut t = vec![0.0; w.len()];
    for o in 0..c_out {
        for i in 0..c_in {
            for ky in 0..k {
                for kx in 0..k {
                    t[((ky * k + kx) * c_in + i) * c_out + o] = w[((o * c_in + i) * k + ky) * k + kx];
                }
            }
        }
    }
    t
}

/// `[a | b]` column-wise: rows of `a` `[rows, ca]` followed by rows of `b` `[rows, cb]`.
pub fn concat_columns(a: &[f32], ca: usize, b: &[f32], cb: usize) -> Vec<f32> {
    let rows = a.len() / ca;
    let mut out = Vec::with_capacity(rows * (ca + cb));
    for r in 0..rows {
        out.extend_from_slice(&a[r * ca..(r + 1) * ca]);
        out.extend_from_slice(&b[r * cb..(r + 1) * cb]);
    }
    out
}

/// Plain `[m, k] . [k, n]` for load-time folding (not on any hot path).
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            let av = a[i * k + p];
            if av == 0.0 {
                continue;
            }
            for (cv, bv) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *cv += av * bv;
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // The indices spell out each layout's formula, zero terms included.
    #[allow(clippy::erasing_op, clippy::identity_op)]
    fn conv_relayout_round_trips_one_element() {
        let (co, ci, k) = (2, 3, 3);
        let w: Vec<f32> = (0..co * ci * k * k).map(|v| v as f32).collect();
        let t = conv_to_hwio(&w, co, ci, k);
        // element [o=1, i=2, ky=0, kx=1]
        assert_eq!(t[((0 * k + 1) * ci + 2) * co + 1], w[((1 * ci + 2) * k + 0) * k + 1]);
    }
}
