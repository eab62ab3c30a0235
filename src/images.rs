//! Still images: loading as RGB, listing a folder, writing class maps and
//! overlays.

use std::path::{Path, PathBuf};

use image::{ImageBuffer, Luma, Rgb, RgbImage};

use crate::engine::Segmentation;
use crate::frame::FrameOverlay;
use crate::temporal::{Bars, HoodMask};

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot read image {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("cannot write image {path}: {reason}")]
    Write { path: String, reason: String },
    #[error("cannot list {path}: {err}")]
    List { path: String, err: std::io::Error },
    #[error("no images (png, jpg, jpeg, bmp) in {0}")]
    Empty(String),
}

pub fn load_rgb(path: &Path) -> Result<RgbImage, ImageError> {
    decode(path).map(|i| i.to_rgb8())
}

/// Label maps: one class index per pixel (8-bit grey or palette PNG).
pub fn load_labels(path: &Path) -> Result<ImageBuffer<Luma<u8>, Vec<u8>>, ImageError> {
    decode(path).map(|i| i.to_luma8())
}

/// Decodes by the file's content, the name only where the content says
/// nothing: images passed around get renamed, and three stills in
/// ../shared/data/clips are PNGs named `.jpg`, which decoding by extension
/// refused as a broken JPEG ("Illegal start bytes:8950").
fn decode(path: &Path) -> Result<image::DynamicImage, ImageError> {
    let read = |reason: String| ImageError::Read { path: path.display().to_string(), reason };
    image::ImageReader::open(path)
        .map_err(|e| read(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| read(e.to_string()))?
        .decode()
        .map_err(|e| read(e.to_string()))
}

fn is_image(p: &Path) -> bool {
    let ext = p.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    matches!(ext.as_deref(), Some("png" | "jpg" | "jpeg" | "bmp"))
}

/// `path` itself when it is a file, else the images in it, sorted by name.
pub fn list_images(path: &Path) -> Result<Vec<PathBuf>, ImageError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|err| ImageError::List { path: path.display().to_string(), err })?;
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file() && is_image(p)).collect();
    files.sort();
    if files.is_empty() {
        return Err(ImageError::Empty(path.display().to_string()));
    }
    Ok(files)
}

pub fn save_classes(seg: &Segmentation, path: &Path) -> Result<(), ImageError> {
    let img: ImageBuffer<Luma<u8>, Vec<u8>> =
        ImageBuffer::from_raw(seg.width as u32, seg.height as u32, seg.classes.clone()).expect("class map matches its size");
    img.save(path).map_err(|e| ImageError::Write { path: path.display().to_string(), reason: e.to_string() })
}

/// Colours per class: CamVid's and Cityscapes' conventional palettes for those
/// label counts, evenly spread hues otherwise.
pub fn palette(labels: &[String]) -> Vec<[u8; 3]> {
    const CITYSCAPES: [[u8; 3]; 19] = [
        [128, 64, 128], [244, 35, 232], [70, 70, 70], [102, 102, 156], [190, 153, 153], [153, 153, 153],
        [250, 170, 30], [220, 220, 0], [107, 142, 35], [152, 251, 152], [70, 130, 180], [220, 20, 60],
        [255, 0, 0], [0, 0, 142], [0, 0, 70], [0, 60, 100], [0, 80, 100], [0, 0, 230], [119, 11, 32],
    ];
    const CAMVID: [[u8; 3]; 11] = [
        [128, 128, 128], [128, 0, 0], [192, 192, 128], [128, 64, 128], [60, 40, 222], [128, 128, 0],
        [192, 128, 128], [64, 64, 128], [64, 0, 128], [64, 64, 0], [0, 128, 192],
    ];
    match labels.len() {
        19 => CITYSCAPES.to_vec(),
        11 => CAMVID.to_vec(),
        n => (0..n)
            .map(|i| {
                let h = i as f32 / n.max(1) as f32 * 6.0;
                let x = (1.0 - (h % 2.0 - 1.0).abs()) * 200.0;
                let (r, g, b) = match h as u32 {
                    0 => (200.0, x, 0.0),
                    1 => (x, 200.0, 0.0),
                    2 => (0.0, 200.0, x),
                    3 => (0.0, x, 200.0),
                    4 => (x, 0.0, 200.0),
                    _ => (200.0, 0.0, x),
                };
                [r as u8 + 40, g as u8 + 40, b as u8 + 40]
            })
            .collect(),
    }
}

/// How an overlay draws a segmentation over its frame.
#[derive(Clone, Debug)]
pub struct OverlayStyle {
    pub road_classes: Vec<usize>,
    pub road_colour: [u8; 3],
    /// Opacity of the road tint, 0..=1.
    pub road_alpha: f32,
    /// Tint every class with the palette (at half the road alpha), not just road.
    pub full_palette: Option<Vec<[u8; 3]>>,
    /// Colour for low-confidence pixels, drawn as a sparse checker so the
    /// frame stays visible beneath (off by default: it covers skies).
    pub unknown_colour: [u8; 3],
    pub show_unknown: bool,
    /// Tint the road's uncertain edge faintly: low-confidence pixels next to
    /// road (`frame::EDGE_REACH`), in the road colour at `EDGE_ALPHA`.
    pub road_edge: bool,
    /// Tint of the ego vehicle's hood (never counted as road).
    pub hood_colour: [u8; 3],
}

/// Opacity of the hood tint: strong enough to read as "not the scene".
const HOOD_ALPHA: f32 = 0.55;
/// Opacity of the road's uncertain edge: a hint beside the road's tint.
pub const EDGE_ALPHA: f32 = 0.2;

impl Default for OverlayStyle {
    fn default() -> Self {
        OverlayStyle {
            road_classes: vec![0],
            road_colour: [255, 0, 200],
            road_alpha: 0.45,
            full_palette: None,
            unknown_colour: [255, 220, 0],
            show_unknown: false,
            road_edge: true,
            hood_colour: [0, 150, 255],
        }
    }
}

/// Blends `seg` into packed RGB (or RGBA with `channels` 4) pixels in place;
/// pixels of the ego vehicle's `hood` get the hood colour whatever their class.
pub fn draw_overlay(pixels: &mut [u8], channels: usize, seg: &Segmentation, style: &OverlayStyle, hood: Option<&HoodMask>) {
    let tint = overlay_tint(seg, style, hood);
    for (i, px) in pixels.chunks_exact_mut(channels).take(seg.width * seg.height).enumerate() {
        let Some((colour, alpha)) = tint(i) else { continue };
        for c in 0..3 {
            px[c] = (px[c] as f32 * (1.0 - alpha) + colour[c] as f32 * alpha).round() as u8;
        }
    }
}

/// The tint (colour, opacity) of pixel `i` (row-major at the segmentation's
/// size), or None where the frame shows through untouched: what every
/// overlay draws, whatever its pixel format.
pub fn overlay_tint<'a>(seg: &'a Segmentation, style: &'a OverlayStyle, hood: Option<&'a HoodMask>) -> impl Fn(usize) -> Option<([u8; 3], f32)> + 'a {
    let overlay = frame_overlay(style, hood, seg.width, seg.height);
    move |i| overlay.tint(&seg.classes, seg.width, i % seg.width, i / seg.width)
}

/// The overlay `style` draws over a `width` x `height` frame with `hood`, as
/// data (what the CPU draws here and a GPU backend draws in its frame path).
pub fn frame_overlay(style: &OverlayStyle, hood: Option<&HoodMask>, width: usize, height: usize) -> FrameOverlay {
    let mut class_tints = vec![([0u8; 3], 0.0f32); 256];
    if let Some(palette) = style.full_palette.as_ref().filter(|p| !p.is_empty()) {
        for (class, tint) in class_tints.iter_mut().enumerate() {
            *tint = (palette[class % palette.len()], style.road_alpha * 0.5);
        }
    }
    let mut road = vec![false; 256];
    for &c in &style.road_classes {
        class_tints[c.min(255)] = (style.road_colour, style.road_alpha);
        road[c.min(255)] = true;
    }
    // UNKNOWN is never road, even where a road class id collides with it.
    road[255] = false;
    let hood = hood.filter(|h| h.width == width && h.height == height);
    let hood_tops = hood.filter(|h| !h.is_empty()).map(|h| h.top.clone()).unwrap_or_default();
    let (x0, y0, x1, y1) = hood.map_or(Bars::NONE, |h| h.bars).picture(width, height);
    FrameOverlay {
        class_tints,
        road,
        edge: style.road_edge.then_some((style.road_colour, EDGE_ALPHA)),
        unknown: style.show_unknown.then_some((style.unknown_colour, 0.35)),
        hood: (style.hood_colour, HOOD_ALPHA),
        hood_tops,
        picture: [x0, y0, x1, y1].map(|v| v as u32),
    }
}

pub fn save_rgb(pixels: Vec<u8>, width: usize, height: usize, path: &Path) -> Result<(), ImageError> {
    let img: RgbImage = ImageBuffer::<Rgb<u8>, _>::from_raw(width as u32, height as u32, pixels).expect("pixels match size");
    img.save(path).map_err(|e| ImageError::Write { path: path.display().to_string(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_read_by_its_content_whatever_its_name() {
        // Rule: a PNG named .jpg and a JPEG named .png load as what they are; a file that is no image names itself.
        let dir = tempfile::tempdir().unwrap();
        let img = RgbImage::from_fn(8, 6, |x, y| Rgb([(x * 30) as u8, (y * 40) as u8, 7]));
        let png_named_jpg = dir.path().join("png.jpg");
        img.save_with_format(&png_named_jpg, image::ImageFormat::Png).unwrap();
        assert_eq!(load_rgb(&png_named_jpg).unwrap(), img, "a PNG decodes losslessly");
        let jpeg_named_png = dir.path().join("jpeg.png");
        img.save_with_format(&jpeg_named_png, image::ImageFormat::Jpeg).unwrap();
        assert_eq!(load_rgb(&jpeg_named_png).unwrap().dimensions(), (8, 6));
        let bmp = dir.path().join("still.bmp");
        img.save_with_format(&bmp, image::ImageFormat::Bmp).unwrap();
        assert_eq!(load_rgb(&bmp).unwrap(), img, "bmp is listed as an image, so it must load");
        let text = dir.path().join("notes.jpg");
        std::fs::write(&text, "not a picture").unwrap();
        let err = load_rgb(&text).unwrap_err().to_string();
        assert!(err.contains("notes.jpg"), "{err}");
    }
}
