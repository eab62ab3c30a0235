//! Road-only ground truth drawn as polygons, for scoring the road mask on
//! frames that have no full label map (issue 20's unseen set,
//! `tools/eval/unseen-road.json`). Hand-drawn polygons are only accurate to a
//! few pixels, so a band along every drawn edge is left unscored; otherwise
//! those pixels would measure the annotator, not the model.

use std::path::Path;

use serde::Deserialize;

/// Truth values of a rasterised frame.
pub const TRUTH_NOT_ROAD: u8 = 0;
pub const TRUTH_ROAD: u8 = 1;
pub const TRUTH_IGNORE: u8 = 255;

#[derive(Debug, thiserror::Error)]
pub enum RoadPolygonError {
    #[error("cannot read road polygons {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a road polygon file ({source}); see tools/eval/unseen-road.json for the format"
    )]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: frame {name}: {what}")]
    Invalid {
        path: String,
        name: String,
        what: String,
    },
}

/// `x, y` in the frame's pixel coordinates (0,0 = top-left corner of the frame).
pub type Polygon = Vec<[f64; 2]>;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoadPolygonSet {
    /// Who drew it, when and how; not used.
    #[serde(default)]
    pub about: String,
    pub frames: Vec<PolygonFrame>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolygonFrame {
    /// File name of the frame in the images folder.
    pub name: String,
    /// Where the staging script finds the frame; not used here.
    #[serde(default)]
    pub source: serde_json::Value,
    /// The frame's width and height, which the polygons' coordinates are in.
    pub size: [usize; 2],
    #[serde(default)]
    pub what: String,
    pub road: Vec<Polygon>,
    /// Cut out of the road: vehicles and people on it.
    #[serde(default)]
    pub not_road: Vec<Polygon>,
    /// Not scored at all.
    #[serde(default)]
    pub ignore: Vec<Polygon>,
    /// The ego vehicle where it shows: bonnet, dashboard and their
    /// reflections on the windshield. Not used by the road score; the hood
    /// tests paste this part of the frame onto moving footage.
    #[serde(default)]
    pub hood: Vec<Polygon>,
}

impl RoadPolygonSet {
    pub fn load(path: &Path) -> Result<Self, RoadPolygonError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RoadPolygonError::Read {
            path: shown.clone(),
            source,
        })?;
        let set: RoadPolygonSet =
            serde_json::from_str(&text).map_err(|source| RoadPolygonError::Parse {
                path: shown.clone(),
                source,
            })?;
        for frame in &set.frames {
            let invalid = |what: String| RoadPolygonError::Invalid {
                path: shown.clone(),
                name: frame.name.clone(),
                what,
            };
            if frame.size[0] == 0 || frame.size[1] == 0 {
                return Err(invalid(format!("size {:?} is empty", frame.size)));
            }
            if frame.road.is_empty() {
                return Err(invalid("has no road polygon".into()));
            }
            for polygon in frame
                .road
                .iter()
                .chain(&frame.not_road)
                .chain(&frame.ignore)
                .chain(&frame.hood)
            {
                if polygon.len() < 3 {
                    return Err(invalid(format!(
                        "a polygon has {} points (at least 3)",
                        polygon.len()
                    )));
                }
            }
        }
        Ok(set)
    }

    pub fn frame(&self, name: &str) -> Option<&PolygonFrame> {
        self.frames.iter().find(|f| f.name == name)
    }
}

impl PolygonFrame {
    /// Unscored band each side of a drawn edge: width/160 px (8 px at 1280).
    pub fn band(&self) -> f64 {
        (self.size[0] as f64 / 160.0).max(1.0)
    }

    /// Row-major truth of `size`: road polygons, then not-road cut out, then
    /// ignore areas and the band along every road and not-road edge.
    pub fn rasterise(&self) -> Vec<u8> {
        let [w, h] = self.size;
        let mut truth = vec![TRUTH_NOT_ROAD; w * h];
        for polygon in &self.road {
            fill(&mut truth, w, h, polygon, TRUTH_ROAD);
        }
        for polygon in &self.not_road {
            fill(&mut truth, w, h, polygon, TRUTH_NOT_ROAD);
        }
        for polygon in &self.ignore {
            fill(&mut truth, w, h, polygon, TRUTH_IGNORE);
        }
        let band = self.band();
        for polygon in self.road.iter().chain(&self.not_road) {
            for i in 0..polygon.len() {
                mark_near_segment(
                    &mut truth,
                    w,
                    h,
                    polygon[i],
                    polygon[(i + 1) % polygon.len()],
                    band,
                );
            }
        }
        truth
    }
}

impl PolygonFrame {
    /// 1 inside the drawn hood, 0 elsewhere; `None` when no hood is drawn.
    pub fn hood_mask(&self) -> Option<Vec<u8>> {
        if self.hood.is_empty() {
            return None;
        }
        let [w, h] = self.size;
        let mut mask = vec![0; w * h];
        for polygon in &self.hood {
            fill(&mut mask, w, h, polygon, 1);
        }
        Some(mask)
    }
}

/// Even-odd fill of the pixels whose centres lie inside `polygon`.
fn fill(truth: &mut [u8], w: usize, h: usize, polygon: &Polygon, value: u8) {
    let mut crossings = Vec::new();
    for y in 0..h {
        let cy = y as f64 + 0.5;
        crossings.clear();
        for i in 0..polygon.len() {
            let [x0, y0] = polygon[i];
            let [x1, y1] = polygon[(i + 1) % polygon.len()];
            // Half-open in y so a vertex on the scanline is counted once.
            if (y0 <= cy) != (y1 <= cy) {
                crossings.push(x0 + (cy - y0) / (y1 - y0) * (x1 - x0));
            }
        }
        crossings.sort_by(f64::total_cmp);
        for pair in crossings.chunks_exact(2) {
            // Pixel x is inside when its centre x + 0.5 lies in [pair[0], pair[1]).
            let from = (pair[0] - 0.5).ceil().max(0.0) as usize;
            let to = ((pair[1] - 0.5).ceil().max(0.0) as usize).min(w);
            for x in from..to {
                truth[y * w + x] = value;
            }
        }
    }
}

fn mark_near_segment(truth: &mut [u8], w: usize, h: usize, a: [f64; 2], b: [f64; 2], band: f64) {
    let lo = |v: f64| (v - band).floor().max(0.0) as usize;
    let hi = |v: f64, n: usize| ((v + band).ceil().max(0.0) as usize).min(n);
    let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
    let len2 = dx * dx + dy * dy;
    for y in lo(a[1].min(b[1]))..hi(a[1].max(b[1]), h) {
        for x in lo(a[0].min(b[0]))..hi(a[0].max(b[0]), w) {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let t = if len2 > 0.0 {
                (((px - a[0]) * dx + (py - a[1]) * dy) / len2).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let (ex, ey) = (a[0] + t * dx - px, a[1] + t * dy - py);
            if ex * ex + ey * ey < band * band {
                truth[y * w + x] = TRUTH_IGNORE;
            }
        }
    }
}

/// Road-vs-rest counts over scored pixels.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoadScore {
    pub true_road: u64,
    /// Not road in truth, road in the prediction.
    pub false_road: u64,
    /// Road in truth, not road in the prediction.
    pub missed_road: u64,
    pub true_rest: u64,
}

impl RoadScore {
    /// `predicted_road[i]` says whether the model called pixel i road.
    pub fn of(truth: &[u8], predicted_road: impl IntoIterator<Item = bool>) -> Self {
        let mut s = RoadScore::default();
        for (&t, road) in truth.iter().zip(predicted_road) {
            match (t, road) {
                (TRUTH_ROAD, true) => s.true_road += 1,
                (TRUTH_ROAD, false) => s.missed_road += 1,
                (TRUTH_NOT_ROAD, true) => s.false_road += 1,
                (TRUTH_NOT_ROAD, false) => s.true_rest += 1,
                _ => {}
            }
        }
        s
    }

    pub fn add(&mut self, other: RoadScore) {
        self.true_road += other.true_road;
        self.false_road += other.false_road;
        self.missed_road += other.missed_road;
        self.true_rest += other.true_rest;
    }

    /// Pixels that are road in the truth, the prediction or both.
    pub fn union(&self) -> u64 {
        self.true_road + self.false_road + self.missed_road
    }

    pub fn iou(&self) -> f64 {
        let union = self.union();
        if union == 0 {
            1.0
        } else {
            self.true_road as f64 / union as f64
        }
    }

    /// Share of the true road that was found.
    pub fn recall(&self) -> f64 {
        let truth = self.true_road + self.missed_road;
        if truth == 0 {
            1.0
        } else {
            self.true_road as f64 / truth as f64
        }
    }

    /// Share of the not-road pixels painted as road.
    pub fn false_road_rate(&self) -> f64 {
        let rest = self.false_road + self.true_rest;
        if rest == 0 {
            0.0
        } else {
            self.false_road as f64 / rest as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(
        road: Vec<Polygon>,
        not_road: Vec<Polygon>,
        ignore: Vec<Polygon>,
        size: [usize; 2],
    ) -> PolygonFrame {
        PolygonFrame {
            name: "f".into(),
            source: serde_json::Value::Null,
            size,
            what: String::new(),
            road,
            not_road,
            ignore,
            hood: vec![],
        }
    }

    #[test]
    fn a_square_fills_the_pixels_whose_centres_it_covers() {
        // 160 wide: a band of 1 px. Road square [4,12) x [4,12) with a 2x2 car cut out.
        let f = frame(
            vec![vec![[4.0, 4.0], [12.0, 4.0], [12.0, 12.0], [4.0, 12.0]]],
            vec![vec![[7.0, 7.0], [9.0, 7.0], [9.0, 9.0], [7.0, 9.0]]],
            vec![],
            [160, 16],
        );
        let t = f.rasterise();
        let at = |x: usize, y: usize| t[y * 160 + x];
        assert_eq!(at(5, 5), TRUTH_ROAD);
        assert_eq!(at(10, 10), TRUTH_ROAD);
        // Inside the band of the road's edge and of the car's edges.
        assert_eq!(at(4, 8), TRUTH_IGNORE);
        assert_eq!(at(7, 8), TRUTH_IGNORE);
        assert_eq!(at(11, 5), TRUTH_IGNORE);
        // Outside everything.
        assert_eq!(at(1, 1), TRUTH_NOT_ROAD);
        assert_eq!(at(14, 8), TRUTH_NOT_ROAD);
        let road = t.iter().filter(|&&v| v == TRUTH_ROAD).count();
        // 6x6 interior (the band takes the outer ring) minus the car and its band (4x4).
        assert_eq!(road, 36 - 16);
    }

    #[test]
    fn ignore_areas_are_not_scored_and_the_score_counts_the_rest() {
        let f = frame(
            vec![vec![[0.0, 0.0], [160.0, 0.0], [160.0, 4.0], [0.0, 4.0]]],
            vec![],
            vec![vec![[0.0, 0.0], [80.0, 0.0], [80.0, 8.0], [0.0, 8.0]]],
            [160, 8],
        );
        let t = f.rasterise();
        assert_eq!(t[2 * 160 + 10], TRUTH_IGNORE);
        assert_eq!(t[2 * 160 + 120], TRUTH_ROAD);
        // Predict road on the top half: rows 0..4.
        let pred = (0..t.len()).map(|i| i / 160 < 4);
        let s = RoadScore::of(&t, pred);
        assert_eq!(s.missed_road, 0);
        assert!(s.true_road > 0 && s.false_road == 0);
        assert_eq!(s.iou(), 1.0);
        let none = RoadScore::of(&t, std::iter::repeat(false));
        assert_eq!(none.iou(), 0.0);
        assert_eq!(none.recall(), 0.0);
    }

    #[test]
    fn the_bundled_unseen_set_parses_and_covers_road_in_every_frame() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/eval/unseen-road.json");
        let set = RoadPolygonSet::load(&path).unwrap();
        assert!(set.frames.len() >= 10);
        for f in &set.frames {
            let t = f.rasterise();
            let road = t.iter().filter(|&&v| v == TRUTH_ROAD).count() as f64 / t.len() as f64;
            assert!(
                (0.04..0.7).contains(&road),
                "{}: road covers {road:.3} of the frame",
                f.name
            );
        }
    }
}
