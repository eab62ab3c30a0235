//! Output path templates: `{stream}` and `{start}` placeholders, and the
//! printf-style pattern splitmuxsink wants for numbered segments.

use std::time::SystemTime;

pub const PLACEHOLDERS: [&str; 2] = ["{stream}", "{start}"];

/// `start` in UTC as `20261121T075800Z` (see [`crate::clock::compact`]).
pub fn format_start(start: SystemTime) -> String {
    crate::clock::compact(start)
}

/// The first `{...}` that is not a known placeholder, if any.
pub fn unknown_placeholder(template: &str) -> Option<String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let tail = &rest[open..];
        match PLACEHOLDERS.iter().find(|p| tail.starts_with(**p)) {
            Some(p) => rest = &tail[p.len()..],
            None => {
                let end = tail.find('}').map_or(tail.len(), |i| i + 1);
                return Some(tail[..end].to_string());
            }
        }
    }
    None
}

/// Expands the placeholders; anything else is left as written (validation
/// has already rejected unknown ones).
pub fn expand_lossy(template: &str, stream: &str, start: SystemTime) -> String {
    let mut out = template.replace("{stream}", stream);
    if out.contains("{start}") {
        out = out.replace("{start}", &format_start(start));
    }
    out
}

/// Splits `path` into (everything before the extension, the extension with
/// its dot). Only the last path component can hold the extension.
fn split_extension(path: &str) -> (&str, &str) {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    match path[name_start..].rfind('.') {
        Some(dot) if dot > 0 => path.split_at(name_start + dot),
        _ => (path, ""),
    }
}

pub fn segment_pattern(path: &str) -> String {
    let (stem, ext) = split_extension(path);
    format!("{}-%05d{}", stem.replace('%', "%%"), ext.replace('%', "%%"))
}

/// How segment names look, for people: `rec/front-{start}-NNNNN.mp4`.
pub fn segment_name_pattern(path: &str) -> String {
    let (stem, ext) = split_extension(path);
    format!("{stem}-NNNNN{ext}")
}

pub fn segment_name(path: &str, index: u32) -> String {
    let (stem, ext) = split_extension(path);
    format!("{stem}-{index:05}{ext}")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn start_is_compact_utc() {
        // Rule: {start} is the UTC start time as YYYYMMDDTHHMMSSZ.
        let t = UNIX_EPOCH + Duration::from_secs(1_795_247_880); // 2026-11-21 07:58:00 UTC
        assert_eq!(format_start(t), "20261121T075800Z");
        assert_eq!(format_start(UNIX_EPOCH), "19700101T000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400 + 86_399); // 2000-02-29 23:59:59
        assert_eq!(format_start(leap), "20000229T235959Z");
    }

    #[test]
    fn segment_index_goes_before_the_extension() {
        // Rule: segments are numbered before the extension, and % is escaped for printf.
        assert_eq!(segment_pattern("/rec/front-1.mp4"), "/rec/front-1-%05d.mp4");
        assert_eq!(segment_pattern("rec.d/front"), "rec.d/front-%05d");
        assert_eq!(segment_pattern("/rec/100%.mp4"), "/rec/100%%-%05d.mp4");
        assert_eq!(segment_pattern(".hidden"), ".hidden-%05d");
        assert_eq!(segment_name("/rec/front.mp4", 3), "/rec/front-00003.mp4");
    }

    #[test]
    fn unknown_placeholders_are_found() {
        // Rule: only {stream} and {start} are placeholders.
        assert_eq!(unknown_placeholder("/r/{stream}-{start}.mp4"), None);
        assert_eq!(unknown_placeholder("/r/{camera}.mp4").as_deref(), Some("{camera}"));
        assert_eq!(unknown_placeholder("/r/{stream.mp4").as_deref(), Some("{stream.mp4"));
    }
}
