//! Thin, bounds-checked wrapper over the `gemm` crate for row-major f32 matrices.

use gemm::Parallelism;

/// A row-major matrix view: `rows x cols` elements, `row_stride` apart.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    /// Distance between neighbouring columns (1 for plain row-major; the
    /// transposed view of a row-major matrix has `row_stride` 1 instead).
    pub col_stride: usize,
}

impl MatRef<'_> {
    fn last_index(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return 0;
        }
        (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
    }
}

/// `c[m, n] = a[m, k] . b[k, n]` (or `+=` when `accumulate`). `c` is row-major
/// with `ldc` elements between rows.
pub fn matmul(a: MatRef<'_>, b: MatRef<'_>, c: &mut [f32], ldc: usize, accumulate: bool, threaded: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions differ");
    if m == 0 || n == 0 {
        return;
    }
    assert!(a.last_index() < a.data.len().max(1) && b.last_index() < b.data.len().max(1));
    assert!((m - 1) * ldc + n <= c.len(), "output too small");
    if k == 0 {
        if !accumulate {
            for row in c.chunks_mut(ldc).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let parallelism = if threaded { Parallelism::Rayon(0) } else { Parallelism::None };
    // SAFETY: the asserts above keep every index the strides reach inside the
    // three slices, and `c` is borrowed mutably so nothing else aliases it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_product_with_strides() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        // b viewed transposed: bt[n, k]
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let mut c = vec![1.0f32; m * n];
        let bview = MatRef { data: &bt, rows: k, cols: n, row_stride: 1, col_stride: k };
        matmul(MatRef { data: &a, rows: m, cols: k, row_stride: k, col_stride: 1 }, bview, &mut c, n, true, false);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum::<f32>();
                assert!((c[i * n + j] - want).abs() < 1e-5);
            }
        }
    }
}
