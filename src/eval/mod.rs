//! Scoring masks against ground truth: per-class IoU and mIoU from a
//! confusion matrix, and road-only scores against drawn polygons.

pub mod road_polygons;

#[derive(Clone, Debug)]
pub struct Confusion {
    classes: usize,
    /// `counts[truth * classes + predicted]`
    counts: Vec<u64>,
    /// Truth pixels per class predicted as no class at all (e.g. "unknown").
    missed: Vec<u64>,
}

impl Confusion {
    pub fn new(classes: usize) -> Self {
        Confusion {
            classes,
            counts: vec![0; classes * classes],
            missed: vec![0; classes],
        }
    }

    /// Adds one image. Truth pixels equal to `ignore` (or outside the class
    /// range) are skipped; predictions outside the range count as wrong.
    pub fn add(&mut self, truth: &[u8], predicted: &[u8], ignore: Option<u8>) {
        for (&t, &p) in truth.iter().zip(predicted) {
            if Some(t) == ignore || t as usize >= self.classes {
                continue;
            }
            if (p as usize) < self.classes {
                self.counts[t as usize * self.classes + p as usize] += 1;
            } else {
                self.missed[t as usize] += 1;
            }
        }
    }

    /// IoU per class; `None` for classes absent from both truth and prediction.
    pub fn iou(&self) -> Vec<Option<f64>> {
        let n = self.classes;
        (0..n)
            .map(|c| {
                let tp = self.counts[c * n + c];
                let truth: u64 =
                    (0..n).map(|p| self.counts[c * n + p]).sum::<u64>() + self.missed[c];
                let pred: u64 = (0..n).map(|t| self.counts[t * n + c]).sum();
                let union = truth + pred - tp;
                (union > 0).then(|| tp as f64 / union as f64)
            })
            .collect()
    }

    pub fn mean_iou(&self) -> f64 {
        let present: Vec<f64> = self.iou().into_iter().flatten().collect();
        if present.is_empty() {
            0.0
        } else {
            present.iter().sum::<f64>() / present.len() as f64
        }
    }

    pub fn pixel_accuracy(&self) -> f64 {
        let n = self.classes;
        let correct: u64 = (0..n).map(|c| self.counts[c * n + c]).sum();
        let total: u64 = self.counts.iter().sum::<u64>() + self.missed.iter().sum::<u64>();
        if total == 0 {
            0.0
        } else {
            correct as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iou_of_a_small_case() {
        let mut c = Confusion::new(3);
        // truth: 0 0 1 1 2 ; pred: 0 1 1 1 2 ; one ignored pixel.
        c.add(&[0, 0, 1, 1, 2, 9], &[0, 1, 1, 1, 2, 0], Some(9));
        let iou = c.iou();
        assert_eq!(iou[0], Some(0.5));
        assert_eq!(iou[1], Some(2.0 / 3.0));
        assert_eq!(iou[2], Some(1.0));
        assert!((c.mean_iou() - (0.5 + 2.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12);
    }
}
